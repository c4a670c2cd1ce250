#!/usr/bin/env python3
"""Where an ARQ life cycle spends its time: each step's latency at concurrency 1, acceld
alone (the one-sided companion of ``vs_cyborg.py``).

It starts acceld exactly as ``vs_cyborg.py`` does (the peers' uWSGI and RabbitMQ, the
fake FPGA with 16 handles, ``--db``) and runs the peers' own life-cycle and
device-profile operations one after another, printing the p50 of every step:
POST, PATCH bind, GET, PATCH unbind, DELETE, and device profile POST and DELETE.

    .venv/bin/python bench/arq_steps.py --peers /work/peers --db mysql --cycles 300

Only loopback is used; the loop is bounded by ``--cycles``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vs_cyborg  # noqa: E402 - the harness that starts acceld


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", required=True, help="a started, writable copy of the peers")
    ap.add_argument("--db", choices=("sqlite", "postgresql", "mysql"), default="sqlite")
    ap.add_argument("--cycles", type=int, default=300)
    a = ap.parse_args()

    peers = os.path.abspath(a.peers)
    load = vs_cyborg.load_peers_module(peers)
    base = vs_cyborg.read_state(peers)["TRANSPORT_URL"].rsplit("/", 1)[0]
    vhost = "acceld-steps"
    for args in (["delete_vhost", vhost], ["add_vhost", vhost],
                 ["set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"]):
        subprocess.run(["rabbitmqctl", "-q", *args], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    acceld = vs_cyborg.Acceld(peers, a.db, f"{base}/{vhost}",
                              tempfile.mkdtemp(prefix="acceld-steps-"))
    acceld.start()
    try:
        target = load.Target(acceld.url, "acceld")
        profile = f"steps-{uuid.uuid4().hex[:8]}"
        st, data = load.call(target, "POST", "/v2/device_profiles",
                             [{"name": profile, "groups": [{"resources:FPGA": "1"}]}])
        assert st == 201, (st, data)
        deps = json.loads(load.call(target, "GET", "/v2/deployables")[1])["deployables"]
        rp_uuid = next(d["rp_uuid"] for d in deps if d.get("rp_uuid"))
        ops = {title: op for title, op, _ab in
               load.make_ops(profile, None, (vs_cyborg.HOST, rp_uuid), target=target)}
        life = ops["ARQ create+bind+GET+unbind+delete"]
        profiles = ops["POST+DELETE /v2/device_profiles"]
        for _ in range(30):             # warm both API workers and the conductor
            life()
            profiles()
        steps: dict[str, list[float]] = {}
        started = time.monotonic()
        for _ in range(a.cycles):
            for name, seconds in life().items():
                steps.setdefault(name, []).append(seconds)
        cycles_per_s = a.cycles / (time.monotonic() - started)
        for _ in range(a.cycles):
            for name, seconds in profiles().items():
                steps.setdefault(name, []).append(seconds)
        print(f"acceld on {a.db}, {a.cycles} of each, one at a time")
        for name, values in steps.items():
            print(f"  {name:45s} p50 {statistics.median(values) * 1000:8.3f} ms")
        print(f"  life cycles per second: {cycles_per_s:.1f}")
    finally:
        acceld.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
