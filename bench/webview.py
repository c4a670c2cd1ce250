#!/usr/bin/env python3
"""How long the fleet web view (``GET /ui``) takes to render a fleet in headless Chromium.

It starts ``acceld conductor`` and ``acceld api`` on a new SQLite database and RabbitMQ
(a vhost of its own when ``rabbitmqctl`` can make one), and a simulated fleet
(``acceld.sim.fleet.Fleet``: ``--hosts`` hosts of 8 devices, the default mix, so 125
hosts are 1,000 devices) that reports to that conductor, with faults that give the
view something to show: ECC storms (health failed), XID storms (degraded) and agents
that crash and stay down (dead hosts). When the API lists every device, it runs
Chromium (``--headless``, driven over the DevTools protocol with websocket-client) and
loads the page ``--runs`` times, each in a new browser context (no cache, no cookies),
with the token in the URL's fragment. The page marks itself on ``<html>`` (ms since the
navigation began): ``data-fetched`` when the three API answers are in, ``data-built``
when the DOM is built, ``data-rendered`` after the next frame. It prints each run (with the
browser's timing of each API request and the renderer's script, style, layout and task
seconds from ``Performance.getMetrics``) and the medians (the target: rendered in under
2,000 ms with 1,000 devices), and writes a screenshot of the last run.

    .venv/bin/python bench/webview.py                      # 125 hosts, 1,000 devices
    .venv/bin/python bench/webview.py --hosts 250 --runs 7 --screenshot /tmp/fleet.png

Needs the ``bench`` extra (websocket-client) and a Chromium (Debian: ``apt-get install
chromium``). Only loopback is used.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from acceld import conf as config  # noqa: E402
from acceld import rpc  # noqa: E402
from acceld.sim import scenario  # noqa: E402
from acceld.sim.fleet import Fleet, FleetConfig  # noqa: E402
from tests.chromium import DevTools  # noqa: E402
from tests.conftest import RABBIT_URL  # noqa: E402
from tests.integration import procs as p  # noqa: E402

DEVICES_PER_HOST = 8          # the simulator's default mix
MARKS = ("fetched", "built", "rendered")
# faults started at once, for good: the view shows failed, degraded and dead hosts
FAULTS = {"seed": 24, "faults": [
    {"at": 1, "kind": "ecc_storm", "fraction": 0.04, "duration": 86400},
    {"at": 1, "kind": "xid_storm", "fraction": 0.08, "duration": 86400},
    {"at": 1, "kind": "agent_crash", "count": 3, "down": 86400},
]}


def _vhost(url: str) -> tuple[str, Any]:
    """(transport url, cleanup): ``url`` on a new vhost when rabbitmqctl can make one."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        return url, lambda: None
    name = f"webview-{uuid.uuid4().hex[:8]}"
    parts = urllib.parse.urlsplit(url)
    made = subprocess.run([ctl, "add_vhost", name], capture_output=True, timeout=60)
    if made.returncode != 0:
        return url, lambda: None
    subprocess.run([ctl, "set_permissions", "-p", name, parts.username or "guest",
                    ".*", ".*", ".*"], capture_output=True, timeout=60, check=True)
    return (urllib.parse.urlunsplit(parts._replace(path="/" + name)),
            lambda: subprocess.run([ctl, "delete_vhost", name], capture_output=True,
                                   timeout=60))


def load_once(tools: DevTools, url: str, width: int, height: int,
              screenshot: Path | None, timeout: float = 60.0) -> dict[str, Any]:
    """Load ``url`` in a new browser context; the page's marks, what it shows, and the
    API requests' durations as the browser timed them."""
    context = tools.call("Target.createBrowserContext")["browserContextId"]
    target = tools.call("Target.createTarget", url="about:blank",
                        browserContextId=context)["targetId"]
    session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    try:
        tools.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                   deviceScaleFactor=1, mobile=False)
        tools.call("Performance.enable", session)
        tools.call("Page.navigate", session, url=url)
        deadline = time.monotonic() + timeout
        marks = None
        while marks is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not rendered after {timeout} s: " + str(tools.evaluate(
                    session, "document.getElementById('status').textContent")))
            time.sleep(0.02)
            marks = tools.evaluate(session, "document.documentElement.dataset.rendered "
                                            "&& Object.assign({}, document.documentElement"
                                            ".dataset)")
        shown = tools.evaluate(session, "({devices: document.querySelectorAll('tr.device')"
                                        ".length, hosts: document.querySelectorAll('tr.host')"
                                        ".length, title: document.title})")
        api = tools.evaluate(session, "performance.getEntriesByType('resource')"
                                      ".filter(e => e.initiatorType === 'fetch')"
                                      ".map(e => [new URL(e.name).pathname, e.duration])")
        # the renderer's own accounting (seconds of its main thread, wall time)
        metrics = {m["name"]: m["value"] for m in
                   tools.call("Performance.getMetrics", session)["metrics"]}
        if screenshot is not None:
            shot = tools.call("Page.captureScreenshot", session, format="png")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        out = {name: float(marks[name]) for name in MARKS}
        out.update(shown, api={path: round(ms, 1) for path, ms in api},
                   renderer_ms={name.removesuffix("Duration").lower(): round(
                       metrics[name] * 1000, 1) for name in (
                       "ScriptDuration", "RecalcStyleDuration", "LayoutDuration",
                       "TaskDuration")})
        return out
    finally:
        tools.call("Target.closeTarget", targetId=target)
        tools.call("Target.disposeBrowserContext", browserContextId=context)


def _fleet(args: argparse.Namespace, work: Path, transport_url: str,
           procs: p.Processes) -> tuple[p.Api, Fleet, rpc.MessagingTransport]:
    port = p.free_port()
    groups = p.three_process_groups(
        work, host="webview-conductor", db_url=f"sqlite:///{work / 'acceld.sqlite'}",
        transport_url=transport_url, port=port,
        conductor={"service_down_time": 30, "save_interval": 0.5, "periodic_interval": 1.0})
    conf_file = p.write_config(work / "acceld.conf", groups)
    p.db_upgrade(conf_file, work)
    conductor = procs.start("conductor", "conductor", conf_file)
    assert conductor.wait_for_log("running", 30), conductor.log_tail()
    procs.start("api", "api", conf_file)
    api = p.Api(port)
    p.wait_until(api.up, p.STARTUP_TIMEOUT, "the API")
    transport = rpc.MessagingTransport(config.load([], config_files=[str(conf_file)]))
    fleet = Fleet(transport, FleetConfig(hosts=args.hosts, host_prefix="rack",
                                         report_interval=60.0, heartbeat_interval=10.0,
                                         workers=8),
                  scenario.parse(FAULTS))
    fleet.start()
    want = args.hosts * DEVICES_PER_HOST
    p.wait_until(lambda: len(api.accelerators()) == want, 300, f"{want} devices listed",
                 interval=1.0)
    p.wait_until(lambda: sum(not s["alive"] for s in api.services()) >= 3, 120,
                 "the crashed agents' hosts dead")
    return api, fleet, transport


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--transport-url", default=RABBIT_URL)
    parser.add_argument("--screenshot", type=Path, default=ROOT / "docs/img/fleet-view.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="acceld-webview-") as tmp:
        work = Path(tmp)
        transport_url, drop_vhost = _vhost(args.transport_url)
        procs = p.Processes(types.SimpleNamespace(), work)
        fleet = transport = tools = None
        try:
            api, fleet, transport = _fleet(args, work, transport_url, procs)
            tools = DevTools(args.chromium, work)
            url = f"{api.base}/ui/#token=admin"
            runs = []
            for n in range(args.runs):
                last = n == args.runs - 1
                run = load_once(tools, url, args.width, args.height,
                                args.screenshot if last else None)
                runs.append(run)
                print(json.dumps(run), flush=True)
            summary = {"hosts": args.hosts, "devices_listed": len(api.accelerators()),
                       "devices_shown": runs[-1]["devices"], "runs": len(runs),
                       "chromium": subprocess.run([args.chromium, "--version"],
                                                  capture_output=True, text=True).stdout.strip(),
                       **{f"median_{m}_ms": round(statistics.median(r[m] for r in runs), 1)
                          for m in MARKS}}
            print(json.dumps(summary))
            return 0 if summary["devices_shown"] == summary["devices_listed"] else 1
        finally:
            if tools is not None:
                tools.close()
            if fleet is not None:
                fleet.stop()
            if transport is not None:
                transport.close()
            procs.close()
            drop_vhost()


if __name__ == "__main__":
    sys.exit(main())
