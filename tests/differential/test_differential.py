"""acceld answers every bad request with the status upstream Cyborg answers.

The Cyborg peer is the one ``shared/peers`` runs (``setup.sh``, then ``PEERS_DB=mariadb
start.sh --fresh``: see README.md);
its service root comes from ``$ACCELD_DIFF_CYBORG_URL`` (default
``http://127.0.0.1:6680/accelerator``), and the test is skipped when it does not answer.
acceld is ``$ACCELD_DIFF_ACCELD_URL`` when set, else an ``acceld serve`` this module
starts on a free port with a fresh database, the peer's fake host (upstream's fake
device) and the peer's policy defaults (the legacy ones). Run with ``-s`` to see the whole
table.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.differential import cases, runner
from tests.differential.sides import Side

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"
MIN_CASES = 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(side: Side, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Wait for a just started ``acceld serve`` to answer."""
    deadline = time.monotonic() + timeout
    while not side.reachable():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"acceld serve did not answer at {side.root} within {timeout:.0f} s")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cyborg() -> Side:
    """The upstream Cyborg peer, or a skip saying how to start it."""
    side = Side("cyborg", os.environ.get(runner.CYBORG_URL_ENV, runner.DEFAULT_CYBORG_URL))
    if not side.reachable():
        pytest.skip(f"upstream Cyborg is not reachable at {side.root} (set "
                    f"{runner.CYBORG_URL_ENV}, or start the peer: shared/peers/setup.sh, "
                    "then shared/peers/start.sh --fresh)")
    return side


@pytest.fixture(scope="module")
def acceld(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """acceld at ``$ACCELD_DIFF_ACCELD_URL``, else a fresh ``acceld serve``."""
    url = os.environ.get(runner.ACCELD_URL_ENV)
    if url:
        yield Side("acceld", url)
        return
    tmp: Path = tmp_path_factory.mktemp("acceld-diff")
    port = _free_port()
    conf = tmp / "acceld.conf"
    # like the peer: upstream's fake device, and the legacy policy defaults upstream
    # Cyborg forces (its project tokens read the inventory)
    conf.write_text(f"[DEFAULT]\nhost = diff-host-0\nstate_path = {tmp / 'state'}\n"
                    f"[api]\nport = {port}\n[fake_driver]\nprofile = cyborg\n"
                    "[oslo_policy]\nenforce_new_defaults = false\n")
    with open(tmp / "serve.log", "w") as log:
        proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf)], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        side = Side("acceld", f"http://127.0.0.1:{port}/accelerator")
        _wait_until_up(side, proc)
        yield side
    finally:
        _stop(proc)


def test_enough_cases_with_unique_ids() -> None:
    """The generator yields at least 200 cases (all_cases checks the ids)."""
    assert len(cases.all_cases()) >= MIN_CASES


def test_statuses_equal_upstream(cyborg: Side, acceld: Side) -> None:
    """Every case: the same status as Cyborg, or, where Cyborg answers a 5xx, not a 5xx;
    acceld never answers a 5xx."""
    results = runner.run_all(cyborg, acceld, cases.all_cases())
    print(runner.table(results))
    print(runner.summary(results))
    acceld_5xx = [r for r in results if r.acceld.status >= 500]
    assert not acceld_5xx, "acceld answered 5xx:\n" + "\n".join(map(runner.describe,
                                                                      acceld_5xx))
    failed = runner.failures(results)
    assert not failed, (f"{len(failed)} of {len(results)} cases differ from upstream:\n"
                        + "\n".join(map(runner.describe, failed)))

