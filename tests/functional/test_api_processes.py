"""`acceld serve` with `[api] processes = 3`: two worker processes beside the serve
process, each listening on the one port (SO_REUSEPORT) so that they share the connections,
that reach its conductor and agent over their links, are restarted when they die, stop
gracefully with it and never outlive it."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests import helpers
from tests.integration.procs import free_port
from tests.stack import wait_for

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"
ADMIN = {"X-Auth-Token": "admin", "Content-Type": "application/json"}


def _workers(parent: int) -> set[int]:
    """The API worker processes whose parent is ``parent``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue            # gone meanwhile
        if ppid == parent and b"acceld.cmd.api_worker" in cmdline:
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ask(url: str, method: str = "GET", body: object = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=ADMIN)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.fixture
def served(tmp_path):
    port = free_port()
    conf = tmp_path / "acceld.conf"
    conf.write_text(f"[DEFAULT]\nhost = multi-host\nstate_path = {tmp_path / 'state'}\n"
                    f"[api]\nport = {port}\nprocesses = 3\nworkers = 4\n"
                    f"[fake_driver]\ndevice_count = 4\n")
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf)], stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        # logged once every worker listens
        wait_for(lambda: proc.poll() is not None or "acceld serve listening" in log.read_text(),
                 timeout=90, interval=0.2)
        assert len(_workers(proc.pid)) == 2
        assert proc.poll() is None, log.read_text()
        wait_for(lambda: len(_ask(url + "/v1/accelerators")[1].get("accelerator", [])) == 4,
                 timeout=60, interval=0.2)
        yield url, proc, log
    finally:
        helpers.stop_process(proc)


def test_workers_reach_the_conductor_and_carry_its_errors(served):
    url, proc, _log = served
    assert len(_workers(proc.pid)) == 2
    # a write the conductor does (v1 declare), through whichever worker
    status, _ = _ask(url + "/v1/accelerators", "POST", {"name": "declared-one"})
    assert status == 201
    (declared,) = [a for a in _ask(url + "/v1/accelerators")[1]["accelerator"]
                   if a["name"] == "declared-one"]
    # domain errors raised in the conductor come back as the same class: 409, 404
    status, body = _ask(url + "/v1/accelerators", "POST", {"name": "declared-one"})
    assert status == 409, body
    status, body = _ask(url + f"/v1/accelerators/{declared['uuid']}", "PUT",
                        {"host": "multi-host"})
    assert status == 409, body          # declared, not ready
    status, body = _ask(url + "/v1/accelerators/" + "0" * 32, "PUT", {"host": "multi-host"})
    assert status == 404, body
    # many requests, each on a new connection: every one answered, by either worker
    for _ in range(40):
        status, body = _ask(url + "/v1/accelerators")
        assert status == 200 and len(body["accelerator"]) == 5


def test_new_connections_are_spread_over_every_process(served):
    url, proc, log = served
    for _ in range(90):                 # each on a new connection
        assert _ask(url + "/v2/devices")[0] == 200
    answered = collections.Counter(
        int(m.group(1)) for m in re.finditer(r"^\S+ \S+ (\d+) INFO acceld\.api\.access .*"
                                             r"GET /v2/devices", log.read_text(), re.M))
    assert set(answered) == {proc.pid, *_workers(proc.pid)}, answered
    # the kernel hashes each connection to a socket: none is left with a trickle
    assert min(answered.values()) >= 10, answered


def test_a_dead_worker_is_replaced_and_the_api_keeps_answering(served):
    url, proc, log = served
    first, second = sorted(_workers(proc.pid))
    os.kill(first, signal.SIGKILL)
    # its socket goes with it once it is gone, reaped by the serve process (what the kernel
    # had queued there is reset, as with any SO_REUSEPORT server); the others answer
    # meanwhile
    wait_for(lambda: not os.path.exists(f"/proc/{first}"), timeout=10, interval=0.05)
    for _ in range(20):
        assert _ask(url + "/v2/devices")[0] == 200
    wait_for(lambda: len(_workers(proc.pid) - {first}) == 2, timeout=60, interval=0.2)
    replacement = (_workers(proc.pid) - {second}).pop()
    os.kill(second, signal.SIGKILL)     # now the replacement serves beside the parent
    wait_for(lambda: not os.path.exists(f"/proc/{second}"), timeout=10, interval=0.05)
    for _ in range(20):
        assert _ask(url + "/v2/devices")[0] == 200
    assert replacement in _workers(proc.pid)
    assert f"API worker process {first} exited" in log.read_text()


def test_sigterm_stops_every_process(served):
    url, proc, _log = served
    workers = _workers(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not any(_alive(pid) for pid in workers)


def test_workers_do_not_outlive_a_killed_serve(served):
    _url, proc, _log = served
    workers = _workers(proc.pid)
    proc.kill()
    proc.wait(10)
    wait_for(lambda: not any(_alive(pid) for pid in workers), timeout=60, interval=0.2)
