"""The simulator against a real ``acceld conductor`` process: RabbitMQ (a vhost of the
test's own), PostgreSQL and the real Placement (in this process, over HTTP).

Twenty simulated hosts report through ``Fleet`` (the Python API) and every device,
deployable and attach handle they expect ends up in the database, and every deployable
in Placement; two of them serve the agent topic and carry a state change. Then
``acceld-sim`` itself (the console script's module, in its own process) plays agent
crashes, a reboot, hot-unplugs and an XID storm, and the database ends up holding the
inventory its ``--json-out`` expects.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from acceld import conf as config
from acceld import rpc, states
from acceld.db.api import Database
from acceld.objects import identity
from acceld.sim.fleet import Fleet, FleetConfig, compute_node_uuid, host_names
from tests.integration import procs as p
from tests.placement_server import PlacementServer
from tests.simulated import expected_rows, mismatches, placement_mismatches

HOSTS = 20
CONVERGE_TIMEOUT = 120.0


def needs_services(test):
    """PostgreSQL and RabbitMQ (skipped without them, failed under CI=true)."""
    return pytest.mark.rabbitmq(pytest.mark.postgresql(test))


class Deployment:
    """``acceld conductor`` (its config file is what the simulator reads), its database
    and the Placement it syncs to, where the fleet's compute nodes exist."""

    def __init__(self, procs: p.Processes, db_url: str, transport_url: str,
                 placement: PlacementServer, prefix: str) -> None:
        self.prefix = prefix
        self.hosts = host_names(prefix, HOSTS)
        self.placement = placement
        # under the uuids the simulated Nova keeps (found by name unless reported)
        self.computes = {host: placement.create_compute_node(host, uuid=compute_node_uuid(host))
                         for host in self.hosts}
        state = procs.workdir / "state-conductor"
        state.mkdir()
        self.config = p.write_config(procs.workdir / "conductor.conf", {
            "DEFAULT": {"host": f"{prefix}-conductor", "state_path": state,
                        "transport_url": transport_url, "rpc_timeout": 10},
            "conductor": {"save_interval": 0.5, "periodic_interval": 1.0,
                          "operation_wait": 10.0},
            "placement": placement.acceld_config(),
            "database": {"connection": db_url}})
        p.db_upgrade(self.config, procs.workdir)
        self.conductor = procs.start("conductor", "conductor", self.config)
        # the conductor's queue must exist before the first report, else it is lost
        assert self.conductor.wait_for_log("running", 30), self.conductor.log_tail()
        self.db = Database(db_url)



@pytest.fixture
def placement():
    with PlacementServer() as server:
        yield server


@pytest.fixture
def deployment(acceld_procs, make_db_url, isolated_rabbit_url, placement):
    dep = Deployment(acceld_procs, make_db_url("postgresql"), isolated_rabbit_url, placement,
                     f"sim{uuid.uuid4().hex[:6]}")
    yield dep
    dep.db.dispose()


@needs_services
def test_twenty_hosts_reach_the_database_and_placement(deployment):
    conf = config.load([], config_files=[str(deployment.config)])
    transport = rpc.MessagingTransport(conf)
    fleet = Fleet(transport, FleetConfig(hosts=HOSTS, host_prefix=deployment.prefix,
                                         report_interval=1.0, retry_interval=0.5,
                                         serve_rpc=2, workers=8, compute_ids=True))
    started = time.monotonic()
    fleet.start()
    try:
        def in_database() -> bool:
            return not mismatches(deployment.db, fleet.expected_inventory())
        assert fleet.wait_converged(CONVERGE_TIMEOUT, in_database, interval=0.5), (
            fleet.stats(), mismatches(deployment.db, fleet.expected_inventory())[:5])
        in_database_s = time.monotonic() - started
        expected = fleet.expected_inventory()
        assert sorted(expected) == deployment.hosts
        assert {len(devices) for devices in expected.values()} == {8}
        devices, deployables = expected_rows(expected)
        assert (len(devices), len(deployables)) == (HOSTS * 8, HOSTS * 10)
        assert sum(handles for _size, handles in deployables.values()) == HOSTS * 59

        def in_placement() -> bool:
            return not placement_mismatches(deployment.placement, deployment.computes, expected)
        assert fleet.wait_converged(CONVERGE_TIMEOUT, in_placement, interval=1.0), \
            placement_mismatches(deployment.placement, deployment.computes, expected)[:5]
        # each agent reported its compute node's uuid: no node was looked up by name
        assert not [path for _method, path, _status in deployment.placement.requests()
                    if "?name=" in path]

        served = deployment.hosts[0]
        gpu = next(d for d in expected[served] if d["kind"] == "gpu_mig")
        gpu_uuid = identity.device_uuid(served, gpu["driver"], gpu["identity"])
        conductor = rpc.ConductorClient(transport)
        assert conductor.set_state(gpu_uuid, states.READY)["state"] == states.READY
        assert conductor.guests(served)["unreachable"] == []

        stats = fleet.stats()
        print(f"\n20 hosts: first reports accepted after {stats['first_reports_accepted_s']} s, "
              f"database matched after {in_database_s:.1f} s, Placement after "
              f"{stats['converged_s']} s; reports {stats['reports']}, "
              f"latency {stats['report_latency_ms']}")
        assert stats["reports"]["failed"] == 0 and stats["reports"]["stale"] == 0
        assert stats["rpc_served"]["run_operation"] == 1
    finally:
        fleet.stop()
        transport.close()


SCENARIO = {"seed": 11, "faults": [
    {"at": 3, "kind": "agent_crash", "count": 3, "down": 3},
    {"at": 3, "kind": "unplug", "count": 2, "device_kind": "gpu_mig"},
    {"at": 3, "kind": "unplug", "fraction": 0.1, "device_kind": "nic_vf", "back_after": 4},
    {"at": 4, "kind": "xid_storm", "count": 2, "duration": 3},
    {"at": 4, "kind": "failed_reset", "count": 1, "device_kind": "vgpu"},
    {"at": 7, "kind": "reboot", "count": 1, "down": 2},     # after the crashed are back
]}


@needs_services
def test_acceld_sim_plays_faults_and_the_database_matches(deployment, tmp_path):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    out = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-m", "acceld.sim.cli", "--config-file", str(deployment.config),
         "--hosts", str(HOSTS), "--host-prefix", deployment.prefix,
         "--report-interval", "1", "--retry-interval", "0.5", "--workers", "8",
         "--scenario", str(scenario), "--timeout", str(CONVERGE_TIMEOUT),
         "--json-out", str(out)],
        capture_output=True, text=True, timeout=CONVERGE_TIMEOUT + 60, cwd=Path.cwd())
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["converged"] is True
    expected = results["expected_inventory"]
    assert mismatches(deployment.db, expected) == []
    stats = results["stats"]
    assert [(f["kind"], f.get("error")) for f in stats["faults"]] == [
        (f["kind"], None) for f in sorted(SCENARIO["faults"], key=lambda f: f["at"])]
    assert stats["agent_restarted_sent"] == HOSTS + 3 + 1
    gone = sum(8 - len(devices) for devices in expected.values())
    assert gone == 2                                  # the MIG GPUs unplugged for good
    failed = [d for devices in expected.values() for d in devices if d["health"] != "ok"]
    assert [(d["kind"], d["health"]) for d in failed] == [("vgpu", "failed")]
