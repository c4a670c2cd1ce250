#!/usr/bin/env python3
"""Latency of small lists through the API's WSGI app, for one or more source trees.

It writes ``--arqs`` accelerator requests (``tests.seed``) and ``--devices`` reported
devices into one SQLite file, then, for each tree given (a checkout of acceld: this one,
and e.g. ``git worktree add /tmp/before <commit>``), runs the same measurement in a child
process whose ``PYTHONPATH`` is that tree: ``--requests`` GETs of
``/v2/accelerator_requests`` and of ``/v2/devices`` through ``deploy.make_app`` (no server,
no sockets), timed one by one. Runs alternate between the trees ``--runs`` times; it
prints each tree's median per-request time of each list over the runs, and the ratio to
the first tree.

    git worktree add /tmp/acceld-before <commit before the change>
    .venv/bin/python bench/list_latency.py --tree /tmp/acceld-before --tree .
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ("/v2/accelerator_requests", "/v2/devices")

# Run in the child, with the tree's acceld first on sys.path.
_CHILD = r"""
import json, sys, time
import webob
from acceld import rpc
from acceld.api import deploy
from acceld.db.api import Database
from tests import helpers
url, count, paths = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
db = Database(url)
app = deploy.make_app(helpers.make_conf(), db, rpc.ConductorClient(rpc.LocalTransport()))
out = {}
for path in paths:
    times = []
    for i in range(count + 20):
        req = webob.Request.blank(path, headers={"X-Auth-Token": "admin",
                                                 "OpenStack-API-Version": "accelerator 2.3"})
        start = time.perf_counter()
        resp = req.get_response(app)
        body = resp.body
        elapsed = time.perf_counter() - start
        assert resp.status_int == 200, (path, resp.status, body[:200])
        if i >= 20:                     # the first ones warm imports and pools
            times.append(elapsed)
    times.sort()
    out[path] = {"median_us": times[len(times) // 2] * 1e6, "bytes": len(body)}
print(json.dumps(out))
"""


def _seed(url: str, arqs: int, devices: int) -> None:
    sys.path.insert(0, HERE)
    from acceld.db import migration
    from acceld.db.api import Database
    from tests.seed import seed_arqs, seed_devices

    db = Database(url)
    migration.upgrade(db)
    seed_arqs(db, arqs)
    seed_devices(db, devices)
    db.dispose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True,
                    help="a source tree of acceld (repeat; the first is the baseline)")
    ap.add_argument("--arqs", type=int, default=300)
    ap.add_argument("--devices", type=int, default=300)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()

    url = f"sqlite:///{tempfile.mkdtemp(prefix='acceld-list-latency-')}/acceld.sqlite"
    _seed(url, a.arqs, a.devices)
    trees = [os.path.abspath(t) for t in a.tree]
    runs: dict[str, dict[str, list[float]]] = {t: {p: [] for p in PATHS} for t in trees}
    sizes: dict[str, dict[str, int]] = {}
    for _ in range(a.runs):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=tree)
            out = subprocess.run([sys.executable, "-c", _CHILD, url, str(a.requests),
                                  json.dumps(PATHS)], env=env, cwd=tree, check=True,
                                 capture_output=True, text=True).stdout
            result = json.loads(out)
            for path in PATHS:
                runs[tree][path].append(result[path]["median_us"])
            sizes[tree] = {p: result[p]["bytes"] for p in PATHS}
    base = trees[0]
    for tree in trees:
        for path in PATHS:
            median = statistics.median(runs[tree][path])
            ratio = median / statistics.median(runs[base][path])
            print(f"{tree}: GET {path} ({sizes[tree][path]:,} bytes): median "
                  f"{median:.0f} us over {a.runs} runs of {a.requests}; "
                  f"{ratio:.2f}x the first tree's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
