"""`acceld placement status` (the real console script) against the in-process stack's API
served on loopback, with Placement not configured, unreachable, and up (the real one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from acceld.db import migration
from acceld.db.api import Database
from tests.integration.procs import free_port
from tests.placement_server import LoopbackWSGIServer, PlacementServer, QuietHandler
from tests.stack import Stack

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"
# No retry fires during a test: what status shows stays put.
SLOW_RETRY = {"sync_interval": 3600.0, "retry_initial_delay": 600.0,
              "retry_max_delay": 600.0, "connect_retry_delay": 0.01}


@pytest.fixture
def serve(tmp_path) -> Iterator[Any]:
    """serve(**stack kwargs) -> (stack, url): a stack whose API listens on loopback."""
    started: list[tuple[Stack, LoopbackWSGIServer, threading.Thread]] = []

    def start(**kwargs: Any) -> tuple[Stack, str]:
        db = Database(f"sqlite:///{tmp_path / f'acceld-{len(started)}.sqlite'}")
        migration.upgrade(db)
        stack = Stack(db, **kwargs)
        server = LoopbackWSGIServer(("127.0.0.1", 0), QuietHandler)
        server.set_app(stack.app)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((stack, server, thread))
        return stack, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for stack, server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(10)
        stack.stop()


def _status(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ACCELD, "--url", url, "placement", "status", *args],
                          capture_output=True, text=True, timeout=60)


def _table(stdout: str) -> list[dict[str, str]]:
    """The rows of a table the CLI printed (``| a | b |`` lines between borders)."""
    lines = [[cell.strip() for cell in line.strip("|").split("|")]
             for line in stdout.splitlines() if line.startswith("|")]
    return [dict(zip(lines[0], cells, strict=True)) for cells in lines[1:]]


def test_not_configured_is_one_plain_line(serve):
    _stack, url = serve()
    out = _status(url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "Placement is not configured ([placement] auth_type is unset): acceld publishes no "
        "devices to Placement."]


def test_unreachable_exits_1_and_shows_each_host_s_error_and_next_retry(serve):
    config = {"auth_type": "admin_token", "token": "admin",
              "endpoint": f"http://127.0.0.1:{free_port()}", **SLOW_RETRY}
    stack, url = serve(hosts=("cn-a", "cn-b"), placement=config)
    stack.report_all()
    assert stack.conductor.placement.wait_idle(60)
    out = _status(url)
    assert out.returncode == 1
    (reason,) = out.stderr.splitlines()
    assert reason.startswith("ERROR: Placement unreachable: ") and "Connection refused" in reason
    rows = _table(out.stdout)
    assert [r["host"] for r in rows] == ["cn-a", "cn-b"]
    for row in rows:
        assert row["in_sync"] == "False" and "Connection refused" in row["last_error"]
        assert row["last_error_at"] and row["next_retry_at"]

    out = _status(url, "-f", "json")
    assert out.returncode == 1
    body = json.loads(out.stdout)
    assert body["placement"]["reachable"] is False
    for host in body["hosts"]:
        assert host["last_error_at"] == host["last_attempt_at"] and host["next_retry_at"]


def test_up_with_no_host_synced_says_so_then_shows_the_hosts(serve):
    with PlacementServer() as placement:
        host = f"cn-{uuid.uuid4().hex[:6]}"
        placement.create_compute_node(host)
        stack, url = serve(hosts=(host,), placement=dict(placement.acceld_config(),
                                                         **SLOW_RETRY))
        out = _status(url)
        assert (out.returncode, out.stdout) == (0, "Placement answers; no host has been "
                                                   "synced yet.\n")
        stack.report_all()
        assert stack.conductor.placement.wait_idle(60)
        out = _status(url)
        assert out.returncode == 0, out.stderr
        (row,) = _table(out.stdout)
        assert (row["host"], row["in_sync"], row["last_error"], row["next_retry_at"]) == (
            host, "True", "", "")
