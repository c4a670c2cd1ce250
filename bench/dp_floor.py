"""The device profile pair against the floor app alone: a minute, not vs_cyborg's ten.

Starts acceld's API (nothing else: a profile's create and delete need no conductor) and
``floor_app.py``, each under the peers' uWSGI with cyborg-api's ini like
``vs_cyborg.py --floor`` does, on one fresh database of the engine named, and runs the
peers' ``POST+DELETE /v2/device_profiles`` scenario against each in turn (order
alternated run by run) with the peers' load client. Prints each run's throughput and API
CPU per pair, then the medians and acceld's share of the floor's throughput: the figure
that says how much of a pair's time is acceld's own, for checking a change to the write
path before a whole ``vs_cyborg.py`` run.

    .venv/bin/python bench/dp_floor.py --peers /path/to/peers --db mysql --runs 6

Needs a copy of the peers set up (``./setup.sh``; nothing of theirs need be running) and,
for ``--db mysql`` or ``postgresql``, that server on 127.0.0.1 (as ``vs_cyborg.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import vs_cyborg as vc

SCENARIO = "POST+DELETE /v2/device_profiles"


class _Acceld(vc.Acceld):
    DB_NAME = "acceld_dp_floor"     # not vs_cyborg's, which may be running


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", required=True, help="a copy of the peers, set up")
    ap.add_argument("--db", choices=("sqlite", "postgresql", "mysql"), default="mysql")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--pairs", type=int, default=600, help="pairs per run")
    ap.add_argument("--concurrency", type=int, default=1)
    a = ap.parse_args()
    peers = os.path.abspath(a.peers)
    load = vc.load_peers_module(peers)
    workdir = tempfile.mkdtemp(prefix="acceld-dp-floor-")
    acceld = _Acceld(peers, a.db, "rabbit://guest:guest@127.0.0.1:5672/", workdir)
    floor = None
    try:
        acceld.start(api_only=True)
        floor = vc.Floor(peers, workdir, acceld.database_url)
        floor.start()
        groups = {**acceld.pgids(), **floor.pgids()}
        load.cpu_groups = lambda names=None: vc.cpu_by_pgid(load, groups)
        sides = {"acceld": load.Target(acceld.url), "floor": load.Target(floor.url)}
        ops = {}
        for name, target in sides.items():
            load.CYBORG = target
            ops[name] = {t: op for t, op, _ab in load.make_ops("x", None, ("h", "r"),
                                                               target)}[SCENARIO]
            for _ in range(50):         # warm-up
                ops[name]()
        results: dict[str, list[tuple[float, float]]] = {n: [] for n in sides}
        for run in range(a.runs):
            for name in (list(sides) if run % 2 == 0 else list(sides)[::-1]):
                load.CYBORG = sides[name]
                res = load.run_scenario(ops[name], a.concurrency, a.pairs, 120)
                cpu = sum(res["cpu"]["server_s"].values()) / max(res["ops"], 1) * 1000
                results[name].append((res["throughput"], cpu))
                print(f"{name:7s} {res['throughput']:8.1f} pairs/s  api {cpu:.3f} ms/pair  "
                      f"errors {res['errors']}", flush=True)
    finally:
        if floor is not None:
            floor.stop()
        acceld.stop()
    med = {n: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
           for n, rs in results.items()}
    for name, (ops_s, cpu) in med.items():
        print(f"median {name:7s} {ops_s:8.1f} pairs/s  api {cpu:.3f} ms/pair")
    print(f"acceld {med['acceld'][0] / med['floor'][0]:.3f} of the floor's throughput")
    return 0


if __name__ == "__main__":
    sys.exit(main())
