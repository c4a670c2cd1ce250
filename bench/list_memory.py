#!/usr/bin/env python3
"""How much memory ``acceld serve`` takes to list a million accelerator requests.

It writes ``--count`` ARQs of one device profile straight into a new database
(``tests.seed``: SQLAlchemy Core executemany, 20,000 rows a transaction), starts
``acceld serve`` (``[api] processes = 1``: the process sampled is the one that answers)
on that database as a child process, warms it up with small lists, and
then GETs ``/v2/accelerator_requests`` whole (no ``limit``: the answer is streamed, see
acceld.api.listing) while sampling the process's resident memory every 10 ms. It
prints the RSS before the request, the peak during it (the larger of the samples and
the kernel's ``VmHWM``, reset before the request through ``/proc/<pid>/clear_refs``),
their difference (the target is under 100 MB), the body's size, the items counted in
it and the time it took.

    .venv/bin/python bench/list_memory.py                       # SQLite, 1,000,000
    .venv/bin/python bench/list_memory.py --db postgresql --count 1000000
    .venv/bin/python bench/list_memory.py --db mysql --count 200000

PostgreSQL and MariaDB are the local servers the tests use (a throwaway database is
created and dropped). Only loopback is used.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from acceld.db import migration  # noqa: E402
from acceld.db.api import Database  # noqa: E402
from tests import databases, helpers  # noqa: E402
from tests.integration import procs  # noqa: E402
from tests.seed import seed_arqs  # noqa: E402

ITEM = b'"device_profile_group_id": '       # once in every ARQ of the body


def _database(kind: str, work: Path) -> tuple[str, Any]:
    """(url, drop) of a new empty database of ``kind``."""
    if kind == "sqlite":
        return f"sqlite:///{work / 'acceld.sqlite'}", lambda: None
    return databases.create_postgresql() if kind == "postgresql" else databases.create_mysql()


def _get(port: int, path: str, sink: Any = None) -> tuple[int, int, int]:
    """(status, body bytes, items counted) of ``GET path``, read in 1 MiB chunks."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("GET", path, headers={"X-Auth-Token": "admin"})
        resp = conn.getresponse()
        size = items = 0
        tail = b""
        while chunk := resp.read(1 << 20):
            size += len(chunk)
            window = tail + chunk
            items += window.count(ITEM)
            tail = window[-(len(ITEM) - 1):]     # a marker split across chunks counts once
            if sink is not None:
                sink(chunk)
        return resp.status, size, items
    finally:
        conn.close()


class Sampler(threading.Thread):
    """The process's RSS every 10 ms until stopped; ``peak`` is the largest seen."""

    def __init__(self, proc: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.proc, self.peak, self._done = proc, 0, threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._done.wait(0.01)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def _vm(pid: int, field: str) -> int:
    """``field`` (VmHWM, VmRSS) of /proc/<pid>/status, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgresql", "mysql"), default="sqlite")
    ap.add_argument("--count", type=int, default=1_000_000)
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="acceld-list-memory-"))
    url, drop = _database(a.db, work)
    try:
        db = Database(url)
        migration.upgrade(db)
        started = time.monotonic()
        seed_arqs(db, a.count, progress=lambda n: print(f"\rseeded {n:,}", end="",
                                                         file=sys.stderr))
        print(f"\nseeded {a.count:,} ARQs in {time.monotonic() - started:.1f} s",
              file=sys.stderr)
        db.dispose()

        port = procs.free_port()
        groups = procs.serve_groups(work, host="bench-host", port=port, db_url=url)
        # one process serves, so the RSS sampled is that of the process answering the list
        groups["api"]["processes"] = 1
        config = procs.write_config(work / "acceld.conf", groups)
        procs.write_control(work / "fake-control-serve.json", device_count=4)
        with open(work / "serve.log", "wb") as log:
            server = subprocess.Popen([*procs.ACCELD, "serve", "--config-file", str(config)],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
        try:
            return _measure(server, port, a)
        finally:
            helpers.stop_process(server)
    finally:
        drop()


def _measure(server: subprocess.Popen, port: int, a: argparse.Namespace) -> int:
    procs.wait_until(lambda: _up(port), 60, "acceld serve answering")
    for _ in range(3):                              # warm: imports, pools, caches
        _get(port, "/v2/accelerator_requests?limit=1000")
        _get(port, "/v2/devices")
    time.sleep(1.0)
    proc = psutil.Process(server.pid)
    before = proc.memory_info().rss
    try:
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")   # reset VmHWM
        hwm_reset = True
    except OSError:
        hwm_reset = False
    sampler = Sampler(proc)
    sampler.start()
    started = time.monotonic()
    status, size, items = _get(port, "/v2/accelerator_requests")
    seconds = time.monotonic() - started
    peak = sampler.stop()
    if hwm_reset:
        peak = max(peak, _vm(server.pid, "VmHWM"))
    growth = peak - before
    result = {"db": a.db, "count": a.count, "status": status, "items": items,
              "body_bytes": size, "seconds": round(seconds, 2),
              "rss_before_mb": round(before / 2**20, 1), "rss_peak_mb": round(peak / 2**20, 1),
              "rss_growth_mb": round(growth / 2**20, 1), "vmhwm_reset": hwm_reset}
    print(f"GET /v2/accelerator_requests ({a.db}, {a.count:,} ARQs): {status}, "
          f"{items:,} items, {size / 2**20:.0f} MiB in {seconds:.1f} s; RSS "
          f"{before / 2**20:.0f} MiB before, {peak / 2**20:.0f} MiB at peak: "
          f"+{growth / 2**20:.1f} MiB (target < 100 MB: "
          f"{'met' if growth < 100e6 else 'NOT met'})")
    print(json.dumps(result))
    return 0 if status == 200 and items == a.count and growth < 100e6 else 1


def _up(port: int) -> bool:
    try:
        return _get(port, "/v2/accelerator_requests?limit=1")[0] == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
