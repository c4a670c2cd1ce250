"""The simulator's process for ``bench/scale.py``: an acceld-sim fleet driven by lines on
stdin.

The ``acceld-sim`` command runs a fleet for a duration or until it has converged;
scale.py needs more from another process (so that the simulator's CPU is in neither the
conductors' nor Placement's): start the fleet at a moment of its choosing, read its
counters at the edges of a measured window, and have every host report at once. One
command a line, each answered by one line ``SIM <json>`` on stdout (the log goes to
stderr):

* ``start``: the fleet starts (every host's agent boots and reports at once);
* ``stats``: the fleet's ``stats()``;
* ``hold`` / ``beat``: the fleet's heartbeats stop / go on (``Fleet.hold_heartbeats``),
  so that the floor's side of the boot storm, measured after acceld's, has no fleet;
* ``rounds K TIMEOUT``: K rounds of one report from every host (each round starts when
  the previous one is all answered): the reports accepted, unchanged and by conductor
  in them, and each round's seconds;
* ``stop``, or the end of stdin (scale.py went away): the fleet stops, the process exits.

Usage: python bench/scale_sim.py --transport-url URL [acceld-sim's fleet options]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from acceld import conf as config  # noqa: E402
from acceld import rpc  # noqa: E402
from acceld.sim import cli  # noqa: E402
from acceld.sim.fleet import Fleet  # noqa: E402

PREFIX = "SIM "
POLL = 0.01          # seconds between two looks at the accepted counter during a round


def answer(value: dict[str, Any]) -> None:
    sys.stdout.write(PREFIX + json.dumps(value) + "\n")
    sys.stdout.flush()


def rounds(fleet: Fleet, count: int, timeout: float) -> dict[str, Any]:
    """``count`` rounds of one report per host; stops at ``timeout`` s in all."""
    hosts = len(fleet.hosts)
    before = fleet.stats()
    deadline = time.monotonic() + timeout
    seconds = []
    done = True
    for _ in range(count):
        target = fleet.count("reports_accepted") + hosts
        started = time.monotonic()
        for name in fleet.hosts:
            fleet.wake(name)
        while fleet.count("reports_accepted") < target:
            if time.monotonic() >= deadline:
                done = False
                break
            time.sleep(POLL)
        seconds.append(time.monotonic() - started)
        if not done:
            break
    after = fleet.stats()
    by = {c: n - before["reports_by_conductor"].get(c, 0)
          for c, n in after["reports_by_conductor"].items()}
    return {"done": done, "rounds": len(seconds), "seconds": seconds,
            "reports": {k: after["reports"][k] - before["reports"][k]
                        for k in after["reports"]},
            "reports_by_conductor": {c: n for c, n in by.items() if n},
            "heartbeats_sent": after["heartbeats"]["sent"] - before["heartbeats"]["sent"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport-url", required=True)
    cli.add_fleet_options(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # no configuration file: the bus is the run's own, the RPC timeout acceld's default
    conf = config.load([], config_files=[],
                       overrides={"DEFAULT": {"transport_url": args.transport_url}})
    transport = rpc.MessagingTransport(conf)
    fleet = Fleet(transport, cli.fleet_config(args))
    try:
        answer({"ready": True})
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "start":
                fleet.start()
                answer({"started": True})
            elif words[0] == "stats":
                answer(fleet.stats())
            elif words[0] in ("hold", "beat"):
                fleet.hold_heartbeats(words[0] == "hold")
                answer({"held": words[0] == "hold"})
            elif words[0] == "rounds":
                answer(rounds(fleet, int(words[1]), float(words[2])))
            elif words[0] == "stop":
                break
            else:
                answer({"error": f"unknown command {words[0]!r}"})
    finally:
        fleet.stop()                 # also when it never started
        transport.close()
    answer({"stopped": True})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
