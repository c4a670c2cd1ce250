"""Boot storm: N hosts x M devices report at once into the conductor, synced to Placement.

Measures, against the real Placement (``tests.placement_server`` in its own process, so
its CPU is not in the measured one), in the same run:

* acceld: time from the first report until every host's providers are in Placement and
  recorded in sync, and Placement requests per host;
* the floor: the fewest requests that tree needs (per provider: create, inventories,
  traits; custom names once), issued directly with the same concurrency;
* a second storm of unchanged reports: Placement requests (target: zero).

Usage: python bench/boot_storm.py --hosts 100 --devices 8 --runs 3
Prints one JSON line per run and a summary with medians.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent import futures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from acceld import clients, reports  # noqa: E402
from acceld.agent.drivers.base import DriverContext  # noqa: E402
from acceld.agent.drivers.fake import FakeDriver  # noqa: E402
from acceld.clients import placement as pc  # noqa: E402
from acceld.conductor import placement_plan as pp  # noqa: E402
from acceld.conductor.manager import ConductorManager  # noqa: E402
from acceld.conductor.placement_syncer import PlacementSyncer  # noqa: E402
from acceld.db import migration  # noqa: E402
from acceld.db.api import Database  # noqa: E402
from acceld.objects import identity  # noqa: E402
from acceld.objects import placement as po  # noqa: E402
from tests import helpers  # noqa: E402


class CountingClient(pc.PlacementClient):
    """The real client, counting the requests it sends (bench instrumentation)."""

    def __init__(self, adapter):
        super().__init__(adapter)
        self.count = 0
        self._lock = threading.Lock()

    def _request(self, *args, **kwargs):
        with self._lock:
            self.count += 1
        return super()._request(*args, **kwargs)


def start_placement(workdir: str) -> tuple[subprocess.Popen, str]:
    log = open(os.path.join(workdir, "placement.log"), "w+")
    proc = subprocess.Popen([sys.executable, "-m", "tests.placement_server"], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log.seek(0)
        for line in log.read().splitlines():
            if line.startswith("PLACEMENT_URL="):
                return proc, line.split("=", 1)[1]
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("Placement did not start")


def make_conf(url: str, workers: int):
    return helpers.make_conf(placement={"auth_type": "admin_token", "endpoint": url,
                                        "token": "admin", "sync_workers": workers,
                                        "sync_interval": 3600.0},
                             conductor={"save_interval": 3600.0, "periodic_interval": 3600.0})


def host_reports(hosts: list[str], devices: int, seq: int) -> list[reports.InventoryReport]:
    conf = helpers.make_conf(fake_driver={"device_count": devices})
    out = []
    for host in hosts:
        devs = FakeDriver(DriverContext(conf, host, tempfile.mkdtemp())).discover()
        out.append(reports.InventoryReport(host=host, epoch="bench", seq=seq, drivers=(
            reports.DriverReport(name="fake", version="1.0.0", devices=tuple(devs)),)))
    return out


def create_compute_nodes(client: pc.PlacementClient, names: list[str], workers: int,
                         uuid_of: Callable[[str], str] = lambda _name: str(uuid.uuid4()),
                         ) -> dict[str, str]:
    """Root providers named as the hosts (what Nova makes), each with ``uuid_of(name)``
    as its uuid; name -> uuid."""
    made = {name: uuid_of(name) for name in names}

    def one(name):
        client._request("POST", "/resource_providers", pc.WRITE_VERSION,
                        {"name": name, "uuid": made[name]})
    with futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))
    return made


def floor_tree(report: reports.InventoryReport) -> list[pp.DesiredProvider]:
    """The providers acceld would publish for this report (same names, same shape): new
    devices are inactive, so not schedulable (inventory reserved = total)."""
    rows = []
    for driver in report.drivers:
        for dev in driver.devices:
            dev_uuid = identity.device_uuid(report.host, driver.name, dev.identity)
            for dep in dev.deployables:
                rows.append(pp.DeployableRow(
                    rp_uuid=identity.rp_uuid(identity.deployable_uuid(dev_uuid, dep.name)),
                    name=dep.name, num_accelerators=dep.num_accelerators,
                    attributes=dep.attributes, vendor=dev.vendor, model=dev.model,
                    schedulable=False))
    return list(pp.desired_tree(rows).values())


def ensure_names(client: pc.PlacementClient,
                 trees: dict[str, list[pp.DesiredProvider]]) -> None:
    """The custom resource classes and traits of ``trees``, each once."""
    names = pp.plan({p.uuid: p for t in trees.values() for p in t}, {})
    for rc in sorted(names.custom_classes):
        client.ensure_resource_class(rc)
    for trait in sorted(names.custom_traits):
        client.ensure_trait(trait)


def create_hosts(client: pc.PlacementClient, trees: dict[str, list[pp.DesiredProvider]],
                 computes: dict[str, str], workers: int) -> None:
    """Each host's providers under its compute node with the fewest requests (per
    provider: create, inventories, traits), ``workers`` hosts at a time."""
    def host(name):
        for p in trees[name]:
            gen = client.create_provider(p.uuid, p.name, computes[name]).generation
            gen = client.set_inventories(p.uuid, gen, dict(p.inventories))
            client.set_traits(p.uuid, gen, set(p.traits))
    with futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(host, trees))


def create_trees(client: pc.PlacementClient, trees: dict[str, list[pp.DesiredProvider]],
                 computes: dict[str, str], workers: int) -> float:
    """The floor: ``trees`` (host -> providers) made with the fewest requests; returns
    the seconds taken."""
    started = time.perf_counter()
    ensure_names(client, trees)
    create_hosts(client, trees, computes, workers)
    return time.perf_counter() - started


def run_floor(client: CountingClient, storm: list[reports.InventoryReport],
              computes: dict[str, str], workers: int) -> tuple[float, int]:
    trees = {r.host: floor_tree(r) for r in storm}
    client.count = 0
    return create_trees(client, trees, computes, workers), client.count


def run_acceld(url: str, storm: list[reports.InventoryReport], workers: int,
               workdir: str) -> dict[str, float]:
    conf = make_conf(url, workers)
    db = Database(f"sqlite:///{workdir}/acceld-{uuid.uuid4().hex[:6]}.sqlite")
    migration.upgrade(db)
    client = CountingClient(clients.make_adapter(conf, "placement"))
    syncer = PlacementSyncer(conf, db, client)
    manager = ConductorManager(conf, db, agents=None, placement=syncer)

    def send(r):
        manager.report_inventory(r.to_dict())

    started = time.perf_counter()
    with futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(send, storm))
    assert syncer.wait_idle(3600)
    elapsed = time.perf_counter() - started
    states = po.list_states(db)
    in_sync = sum(1 for s in states if s["in_sync"])
    requests = client.count

    again = [reports.InventoryReport(host=r.host, epoch=r.epoch, seq=r.seq + 1,
                                     drivers=r.drivers) for r in storm]
    client.count = 0
    started = time.perf_counter()
    with futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(send, again))
    assert syncer.wait_idle(3600)
    second = time.perf_counter() - started
    syncer.close()
    return {"seconds": elapsed, "requests": requests, "in_sync": in_sync,
            "second_storm_requests": client.count, "second_storm_seconds": second}


def one_run(n: int, devices: int, workers: int, acceld_first: bool) -> dict[str, float]:
    workdir = tempfile.mkdtemp(prefix="boot-storm-")
    proc, url = start_placement(workdir)
    try:
        conf = make_conf(url, workers)
        admin = CountingClient(clients.make_adapter(conf, "placement"))
        acceld_hosts = [f"storm-{i:04d}" for i in range(n)]
        floor_hosts = [f"floor-{i:04d}" for i in range(n)]
        made = create_compute_nodes(admin, acceld_hosts + floor_hosts, workers)
        computes = {h: made[h] for h in floor_hosts}
        floor_storm = host_reports(floor_hosts, devices, 1)
        storm = host_reports(acceld_hosts, devices, 1)
        # Alternate which side goes first: the machine is shared and its load drifts.
        if acceld_first:
            result = run_acceld(url, storm, workers, workdir)
        floor_s, floor_requests = run_floor(admin, floor_storm, computes, workers)
        if not acceld_first:
            result = run_acceld(url, storm, workers, workdir)
        assert result["in_sync"] == n, result
        return {"hosts": n, "devices": devices, "floor_seconds": floor_s,
                "floor_requests_per_host": floor_requests / n,
                "acceld_seconds": result["seconds"],
                "acceld_requests_per_host": result["requests"] / n,
                "time_ratio": result["seconds"] / floor_s,
                "second_storm_requests": result["second_storm_requests"],
                "second_storm_seconds": result["second_storm_seconds"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        run = one_run(args.hosts, args.devices, args.workers, acceld_first=bool(i % 2))
        print(json.dumps(run), flush=True)
        runs.append(run)
    summary = {key: statistics.median(r[key] for r in runs)
               for key in runs[0] if isinstance(runs[0][key], float | int)}
    summary["runs"] = len(runs)
    print("median", json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
