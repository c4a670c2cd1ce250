"""Real acceld processes for integration tests: config files, start/stop, HTTP polling.

Every wait here is bounded; every process is registered with the test so that it is
terminated (SIGTERM, then SIGKILL) in a finalizer and its log is attached to a failure.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

ACCELD = [sys.executable, "-m", "acceld.cmd.main"]
HTTP_TIMEOUT = 30.0          # one HTTP request (a state change may wait for the agent)
STARTUP_TIMEOUT = 30.0       # a deployment becoming ready
TERM_GRACE = 10.0            # SIGTERM -> SIGKILL


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique_host() -> str:
    return f"itest-{uuid.uuid4().hex[:10]}"


class ProcessDied(AssertionError):
    """A process of the deployment exited: waiting longer cannot help."""


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns something truthy; bounded by ``timeout``.

    Exceptions raised by the predicate count as "not yet" (a server still starting);
    the last value or exception is part of the failure message.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except ProcessDied:
            raise
        except Exception as exc:  # noqa: BLE001 - reported below
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                 f"last: {last!r}")
        time.sleep(interval)


def write_config(path: Path, groups: dict[str, dict[str, Any]]) -> Path:
    lines = []
    for group, values in groups.items():
        lines.append(f"[{group}]")
        for key, value in values.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            lines.append(f"{key} = {value}")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_control(path: Path, **values: Any) -> None:
    """Rewrite the fake driver's control file atomically (the agent reads it any time)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(values), encoding="utf-8")
    os.replace(tmp, path)


class Proc:
    """One acceld process with its log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, cwd: Path) -> None:
        self.name, self.argv, self.log_path, self.cwd = name, argv, log_path, cwd
        self.popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            log.write(f"==== start {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=self.cwd, env=env)
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive:
            self.popen.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL and reap (a crash)."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=TERM_GRACE)

    def wait_for_log(self, text: str, timeout: float) -> bool:
        """Wait (bounded) for ``text`` in the log; False when it did not appear in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive:
            if text in self.log_path.read_text(encoding="utf-8", errors="replace"):
                return True
            time.sleep(0.1)
        return False

    def log_tail(self, lines: int = 150) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"<no log: {exc}>"
        return "\n".join(text.splitlines()[-lines:])


class Processes:
    """The processes one test started; all terminated by :meth:`close` (a finalizer)."""

    def __init__(self, item: Any, workdir: Path) -> None:
        self._item, self.workdir = item, workdir
        self.started: list[Proc] = []
        item.acceld_processes = self.started

    def start(self, name: str, command: str, config: Path) -> Proc:
        proc = Proc(name, [*ACCELD, command, "--config-file", str(config)],
                    self.workdir / f"{name}.log", self.workdir)
        self.started.append(proc)
        return proc.start()

    def close(self) -> None:
        """SIGTERM to every process at once, then SIGKILL to those still running after
        ``TERM_GRACE`` seconds."""
        running = [proc for proc in self.started if proc.alive]
        for proc in running:
            proc.signal(signal.SIGCONT)          # in case a test froze it
            proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE
        for proc in running:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in running:
            proc.kill()


def db_upgrade(config: Path, workdir: Path) -> None:
    res = subprocess.run([*ACCELD, "db", "upgrade", "--config-file", str(config)],
                         capture_output=True, text=True, timeout=120, cwd=workdir)
    assert res.returncode == 0, f"acceld db upgrade failed:\n{res.stdout}\n{res.stderr}"


class Api:
    """A thin HTTP client of one acceld API (noauth: no token acts as admin)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.session = requests.Session()

    def get(self, path: str, **params: Any) -> requests.Response:
        return self.session.get(self.base + path, params=params, timeout=HTTP_TIMEOUT)

    def put(self, path: str, body: dict[str, Any]) -> requests.Response:
        return self.session.put(self.base + path, json=body, timeout=HTTP_TIMEOUT)

    def send(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> requests.Response:
        """Any request, with a JSON ``body`` when one is given."""
        return self.session.request(method, self.base + path, json=body, headers=headers,
                                    timeout=HTTP_TIMEOUT)

    def ok_json(self, path: str, **params: Any) -> Any:
        resp = self.get(path, **params)
        assert resp.status_code == 200, f"GET {path}: {resp.status_code} {resp.text}"
        return resp.json()

    def accelerators(self, **params: Any) -> list[dict[str, Any]]:
        return self.ok_json("/v1/accelerators", **params)["accelerator"]

    def accelerator(self, uuid: str) -> dict[str, Any]:
        return self.ok_json(f"/v1/accelerators/{uuid}")

    def set_state(self, uuid: str, state: str) -> requests.Response:
        return self.put(f"/v1/accelerators/{uuid}/state", {"state": state})

    def services(self) -> list[dict[str, Any]]:
        return self.ok_json("/v1/services")["services"]

    def drivers(self, **params: Any) -> list[dict[str, Any]]:
        return self.ok_json("/v1/drivers", **params)["drivers"]

    def up(self) -> bool:
        try:
            return self.session.get(self.base + "/", timeout=2).status_code == 200
        except requests.RequestException:
            return False


def inventory_key(records: list[dict[str, Any]]) -> list[tuple]:
    return sorted((r["name"], r["device_type"], r["vendor_id"], r["product_id"], r["host"],
                   r["uuid"]) for r in records)


class Deployment:
    """Config, files and API of one acceld deployment (3 processes or ``serve``)."""

    def __init__(self, procs: Processes, name: str, groups: dict[str, dict[str, Any]],
                 port: int) -> None:
        self.procs, self.name, self.port = procs, name, port
        self.config = write_config(procs.workdir / f"{name}.conf", groups)
        self.host = groups["DEFAULT"]["host"]
        self.journal_dir = Path(groups.get("agent", {}).get("journal_dir", ""))
        self.control_file = Path(groups["fake_driver"]["control_file"])
        self.api = Api(port)
        self.running: dict[str, Proc] = {}

    def start(self, role: str) -> Proc:
        proc = self.procs.start(f"{self.name}-{role}", role, self.config)
        self.running[role] = proc
        return proc

    def wait_api(self) -> None:
        def up() -> bool:
            for role, proc in self.running.items():
                if not proc.alive:
                    raise ProcessDied(f"{self.name} {role} exited with status "
                                      f"{proc.popen.returncode} (full log in the report):\n"
                                      f"{proc.log_tail(3)}")
            return self.api.up()
        wait_until(up, STARTUP_TIMEOUT, f"the {self.name} API on port {self.port}")

    def journal(self) -> dict[str, Any]:
        return json.loads((self.journal_dir / "journal.json").read_text(encoding="utf-8"))


def three_process_groups(tmp: Path, *, host: str, db_url: str, transport_url: str,
                         port: int, device_count: int = 4,
                         **overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    state = tmp / "state-3p"
    state.mkdir(exist_ok=True)
    groups: dict[str, dict[str, Any]] = {
        "DEFAULT": {"host": host, "state_path": state, "transport_url": transport_url,
                    "rpc_timeout": 5},
        "api": {"host_ip": "127.0.0.1", "port": port},
        "agent": {"report_interval": 1.0, "retry_interval": 0.5,
                  "journal_dir": state / "journal"},
        "conductor": {"save_interval": 0.5, "periodic_interval": 1.0, "operation_wait": 3.0,
                      "operation_timeout": 5.0},
        "fake_driver": {"device_count": device_count,
                        "control_file": tmp / "fake-control-3p.json"},
        "database": {"connection": db_url},
    }
    for group, values in overrides.items():
        groups.setdefault(group, {}).update(values)
    return groups


def serve_groups(tmp: Path, *, host: str, port: int, device_count: int = 4,
                 db_url: str | None = None) -> dict[str, dict[str, Any]]:
    state = tmp / "state-serve"
    state.mkdir(exist_ok=True)
    groups: dict[str, dict[str, Any]] = {
        "DEFAULT": {"host": host, "state_path": state, "rpc_timeout": 5},
        "api": {"host_ip": "127.0.0.1", "port": port},
        "agent": {"report_interval": 1.0, "retry_interval": 0.5},
        "conductor": {"save_interval": 0.5, "periodic_interval": 1.0, "operation_wait": 3.0},
        "fake_driver": {"device_count": device_count,
                        "control_file": tmp / "fake-control-serve.json"},
    }
    if db_url is not None:
        groups["database"] = {"connection": db_url}
    return groups


def start_three_process(procs: Processes, *, db_url: str, transport_url: str, host: str,
                        device_count: int = 4,
                        **overrides: dict[str, Any]) -> Deployment:
    """``acceld conductor`` + ``acceld agent`` + ``acceld api`` on PostgreSQL + RabbitMQ."""
    groups = three_process_groups(procs.workdir, host=host, db_url=db_url,
                                  transport_url=transport_url, port=free_port(),
                                  device_count=device_count, **overrides)
    dep = Deployment(procs, "3p", groups, groups["api"]["port"])
    _start_conductor_and_agent(procs, dep, device_count)
    dep.start("api")
    dep.wait_api()
    return dep


def _start_conductor_and_agent(procs: Processes, dep: Deployment, device_count: int) -> None:
    """The schema, then ``acceld conductor`` and ``acceld agent`` of ``dep``."""
    write_control(dep.control_file, device_count=device_count)
    db_upgrade(dep.config, procs.workdir)
    conductor = dep.start("conductor")
    # Not required for correctness (the agent retries), but on a fresh vhost a report sent
    # before the conductor's queue exists is lost and costs an rpc_timeout.
    conductor.wait_for_log("running", 15)
    dep.start("agent")


def start_two_apis(procs: Processes, *, db_url: str, transport_url: str, host: str,
                   device_count: int = 4) -> tuple[Deployment, Deployment]:
    """``acceld conductor`` + ``acceld agent`` + two ``acceld api`` processes, A and B,
    each on a port of its own with caches of its own (``[api] processes = 1``: every
    request to a port reaches the one process behind it), on one database and bus. The
    conductor and the agent belong to A's deployment."""
    groups = three_process_groups(procs.workdir, host=host, db_url=db_url,
                                  transport_url=transport_url, port=free_port(),
                                  device_count=device_count, api={"processes": 1})
    a = Deployment(procs, "a", groups, groups["api"]["port"])
    b_groups = {**groups, "api": {**groups["api"], "port": free_port()}}
    b = Deployment(procs, "b", b_groups, b_groups["api"]["port"])
    _start_conductor_and_agent(procs, a, device_count)
    a.start("api")
    b.start("api")
    a.wait_api()
    b.wait_api()
    return a, b


def start_serve(procs: Processes, *, host: str, device_count: int = 4,
                wait: bool = True, db_url: str | None = None) -> Deployment:
    """``acceld serve``: everything in one process, on SQLite in a temporary state_path
    unless ``db_url`` names a database (``wait=False``: call ``wait_api()`` later, to
    start other processes meanwhile)."""
    groups = serve_groups(procs.workdir, host=host, port=free_port(),
                          device_count=device_count, db_url=db_url)
    dep = Deployment(procs, "serve", groups, groups["api"]["port"])
    write_control(dep.control_file, device_count=device_count)
    dep.start("serve")
    if wait:
        dep.wait_api()
    return dep


def wait_inventory(dep: Deployment, count: int, timeout: float = STARTUP_TIMEOUT,
                   **params: Any) -> list[dict[str, Any]]:
    """Poll the API until the deployment's host shows exactly ``count`` accelerators."""
    def check() -> list[dict[str, Any]] | None:
        records = dep.api.accelerators(host=dep.host, **params)
        return records if len(records) == count else None
    return wait_until(check, timeout, f"{count} accelerators on {dep.host} ({dep.name})")
