"""The ``acceld-sim`` command: a :class:`~acceld.sim.fleet.Fleet` on the conductor's
RabbitMQ (``[DEFAULT] transport_url`` of the configuration files given), run for
``--duration`` seconds or until it has converged, its results printed and, with
``--json-out``, written as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from typing import Any

from acceld import conf as config
from acceld import rpc, signals
from acceld.sim import devices as devmod
from acceld.sim import scenario as scen
from acceld.sim.fleet import Fleet, FleetConfig

LOG = logging.getLogger("acceld.sim")


def _mix(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return devmod.parse_mix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_fleet_options(p: argparse.ArgumentParser) -> None:
    """The options of :class:`FleetConfig`, each named as its field (see
    :func:`fleet_config`); ``bench/scale_sim.py`` takes them too."""
    kinds = "; ".join(f"{k.name}: {k.summary}" for k in devmod.KINDS.values())
    p.add_argument("--hosts", type=int, default=100, help="Simulated hosts (default 100).")
    p.add_argument("--host-prefix", default="sim",
                   help="Host names are PREFIX-00000, PREFIX-00001, ... (default sim).")
    p.add_argument("--mix", type=_mix, default=devmod.DEFAULT_MIX,
                   help="Devices per host by kind, KIND=COUNT,... (default "
                        f"{devmod.format_mix(devmod.DEFAULT_MIX)}). Kinds: {kinds}.")
    p.add_argument("--report-interval", type=float, default=30.0,
                   help="Seconds between two reports of a host (default 30, as agents).")
    p.add_argument("--heartbeat-interval", type=float,
                   help="Seconds between two heartbeats (default: the report interval).")
    p.add_argument("--retry-interval", type=float, default=2.0,
                   help="Seconds before a report that failed is sent again (default 2).")
    p.add_argument("--workers", type=int, default=16,
                   help="Sender threads shared by every host (default 16).")
    p.add_argument("--serve-rpc", type=int, default=0, metavar="K",
                   help="The first K hosts serve the agent RPC topic (default 0: one RPC "
                        "server per host is heavy).")
    p.add_argument("--work-delay", type=float, default=0.0,
                   help="Seconds each prepare or release of a handle takes on a served host "
                        "(a slow driver; default 0).")
    p.add_argument("--guests", type=int, default=2,
                   help="Simulated guests of each served host (default 2).")
    p.add_argument("--ramp", type=float, default=0.0,
                   help="Spread the hosts' first reports over this many seconds (default 0: "
                        "all at once).")
    p.add_argument("--compute-ids", action="store_true",
                   help="Each host reports its compute node's uuid, as an agent that finds "
                        "Nova's compute_id file does (acceld.sim.fleet.compute_node_uuid: "
                        "fixed per name); the providers must exist under those uuids.")


def fleet_config(args: argparse.Namespace) -> FleetConfig:
    """The :class:`FleetConfig` of :func:`add_fleet_options`' options; ValueError when
    they make no sense together."""
    return FleetConfig(**{f.name: getattr(args, f.name)
                          for f in dataclasses.fields(FleetConfig)})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="acceld-sim", description="Simulate a fleet of acceld agents against a real "
        "conductor over its RabbitMQ (docs/simulator.md).")
    p.add_argument("--config-file", action="append", default=[], metavar="PATH",
                   help="acceld configuration file(s) whose [DEFAULT] transport_url (and "
                        "rpc_timeout) the simulator uses; repeatable.")
    p.add_argument("--transport-url", help="Overrides [DEFAULT] transport_url.")
    add_fleet_options(p)
    p.add_argument("--scenario", metavar="FILE", help="JSON file of timed faults.")
    p.add_argument("--duration", type=float,
                   help="Run this many seconds; without it, run until converged.")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="Without --duration: give up after this many seconds (default 600).")
    p.add_argument("--progress", type=float, default=10.0,
                   help="Log progress every this many seconds (default 10).")
    p.add_argument("--json-out", metavar="FILE", help="Write the results here as JSON.")
    p.add_argument("-v", "--verbose", action="store_true", help="Debug logging.")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = fleet_config(args)
        scenario = scen.load(args.scenario) if args.scenario else None
    except (ValueError, OSError) as exc:
        print(f"acceld-sim: {exc}", file=sys.stderr)
        return 2
    overrides = {"DEFAULT": {"transport_url": args.transport_url}} if args.transport_url \
        else None
    conf = config.load([], config_files=args.config_file or None, overrides=overrides)
    if not conf.transport_url:
        print("acceld-sim: no transport_url: give --transport-url or a --config-file "
              "with [DEFAULT] transport_url (the conductor's)", file=sys.stderr)
        return 2
    transport = rpc.MessagingTransport(conf)
    try:
        fleet = Fleet(transport, settings, scenario)
    except ValueError as exc:
        transport.close()
        print(f"acceld-sim: {exc}", file=sys.stderr)
        return 2
    try:
        converged = _run(fleet, args)
    finally:
        fleet.stop()
        transport.close()
    results = {"config": _config(args), "converged": converged, "stats": fleet.stats(),
               "expected_inventory": fleet.expected_inventory()}
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    _print_summary(results)
    return 0 if converged or args.duration else 1


def _run(fleet: Fleet, args: argparse.Namespace) -> bool:
    """Until ``--duration`` is over (then: is it in sync?), until converged or timed
    out, or until SIGINT/SIGTERM."""
    stop = signals.stop_event()
    fleet.start()
    limit = args.duration if args.duration is not None else args.timeout
    next_progress = args.progress
    while not stop.is_set():
        left = limit - fleet.elapsed
        if left <= 0:
            break
        step = min(1.0, left)          # short steps: a signal is heard within a second
        if args.duration is not None:
            stop.wait(step)
        elif fleet.wait_converged(step):
            return True
        if fleet.elapsed >= next_progress:
            _log_progress(fleet)
            next_progress += args.progress
    return fleet.synced()


def _log_progress(fleet: Fleet) -> None:
    s = fleet.stats()
    LOG.info("%.0f s: %d/%d hosts synced, reports %d sent %d accepted %d failed, "
             "%.1f accepted/s, heartbeats %d", s["elapsed_s"], s["hosts"]["synced"],
             s["hosts"]["total"], s["reports"]["sent"], s["reports"]["accepted"],
             s["reports"]["failed"], s["accepted_reports_per_s"], s["heartbeats"]["sent"])


def _config(args: argparse.Namespace) -> dict[str, Any]:
    out = {k: v for k, v in vars(args).items() if k not in ("config_file", "transport_url")}
    out["mix"] = devmod.format_mix(args.mix)
    return out


def _print_summary(results: dict[str, Any]) -> None:
    s = results["stats"]
    print(json.dumps({"converged": results["converged"], "hosts": s["hosts"],
                      "first_reports_accepted_s": s["first_reports_accepted_s"],
                      "converged_s": s["converged_s"], "reports": s["reports"],
                      "accepted_reports_per_s": s["accepted_reports_per_s"],
                      "report_latency_ms": s["report_latency_ms"],
                      "heartbeats": s["heartbeats"], "faults": len(s["faults"])},
                     sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
