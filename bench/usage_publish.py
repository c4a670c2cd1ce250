"""The agent's CPU cost of the usage broadcast (acceld.device.usage), on a real RabbitMQ.

An agent (the real AgentManager, its fake driver with ``--devices`` GPUs) publishes its
usage through the real Notifier (oslo.messaging, messagingv2) to RabbitMQ; a
notification listener in a child process counts what arrives. Two figures, in CPU
seconds of the agent's process (all its threads):

* per cycle: ``--cycles`` publications back to back (every driver's stats, the payload,
  the queue, the send), divided by their count;
* idle: the notifier's connection kept open (heartbeats) for ``--idle`` seconds with
  nothing sent, scaled to one ``--period``.

The cost at the period is (per cycle + idle per period) / period, as % of one core.

    PYTHONPATH=$PWD .venv/bin/python bench/usage_publish.py \\
        [--url rabbit://guest:guest@127.0.0.1:5672/] [--devices 8] [--period 10]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import tempfile
import time
import uuid
from typing import Any

from acceld import AGENT_BINARY, notify, rpc
from acceld import conf as config
from acceld.agent.manager import AgentManager


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _listen(url: str, topic: str, want: int, ready: Any, done: Any) -> None:
    """The child process: counts notifications on ``topic`` until ``want`` arrived."""
    import threading

    import oslo_messaging

    conf = config.load([], config_files=[], overrides={"DEFAULT": {"transport_url": url}})
    got, finished = [0], threading.Event()

    class Endpoint:
        def info(self, ctxt: Any, publisher_id: str, event_type: str, payload: Any,
                 metadata: Any) -> None:
            got[0] += 1
            if got[0] >= want:
                finished.set()

    transport = oslo_messaging.get_notification_transport(conf)
    server = oslo_messaging.get_notification_listener(
        transport, [oslo_messaging.Target(topic=topic)], [Endpoint()], executor="threading")
    server.start()
    ready.set()
    finished.wait(300)
    done.put(got[0])
    server.stop()
    server.wait()
    transport.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="rabbit://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--idle", type=float, default=20.0)
    args = parser.parse_args()

    host = f"bench-{uuid.uuid4().hex[:8]}"
    topic = f"bench-usage-{uuid.uuid4().hex[:8]}"
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_listen, args=(args.url, topic, args.cycles + 1, ready, done))
    child.start()
    ready.wait(60)
    conf = config.load([], config_files=[], overrides={
        "DEFAULT": {"transport_url": args.url, "host": host,
                    "state_path": tempfile.mkdtemp(prefix="acceld-bench-")},
        "fake_driver": {"device_count": args.devices, "device_types": ["GPU"]},
        "oslo_messaging_notifications": {"driver": ["messagingv2"], "topics": [topic]},
        "notifications": {"max_queued": args.cycles + 10}})
    notifier = notify.make_notifier(conf, AGENT_BINARY, host)
    agent = AgentManager(conf, rpc.ConductorClient(rpc.LocalTransport()), notifier=notifier)
    agent.build_report()                      # what discovery found: the usage's devices
    sample = agent.usage(args.period)
    assert len(sample.devices) == args.devices, sample

    notifier.emit("acceld.device.usage", sample)       # connect, declare: not counted
    notifier.flush(60)
    before = _cpu()
    time.sleep(args.idle)                              # idle: the connection open
    idle_per_period = (_cpu() - before) / args.idle * args.period

    wall0, before = time.perf_counter(), _cpu()
    for _ in range(args.cycles):
        notifier.emit("acceld.device.usage", agent.usage(args.period))
    notifier.flush(300)
    per_cycle = (_cpu() - before) / args.cycles
    wall = time.perf_counter() - wall0
    received = done.get(timeout=300)
    child.join(30)
    notifier.close()
    print(json.dumps({
        "devices": args.devices, "period_s": args.period, "cycles": args.cycles,
        "received": received,
        "payload_bytes": len(json.dumps(sample.to_primitive())),
        "cpu_per_cycle_ms": round(per_cycle * 1000, 3),
        "idle_cpu_per_period_ms": round(idle_per_period * 1000, 3),
        "percent_of_one_core": round((per_cycle + idle_per_period) / args.period * 100, 4),
        "cycles_wall_s": round(wall, 2)}, indent=2))


if __name__ == "__main__":
    main()
