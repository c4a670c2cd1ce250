"""Every fault ``acceld-sim`` plays, on a fleet shared by two ``acceld conductor``
processes (real RabbitMQ, Redis, PostgreSQL and Placement), one of them killed by the
scenario: at the end the database, Placement and the simulated hosts agree (no device
lost, none duplicated) and Placement holds no allocation (none leaked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acceld.sim import scenario as scen
from tests.integration.cluster import Cluster
from tests.integration.procs import wait_until
from tests.placement_server import PlacementServer
from tests.simulated import mismatches, placement_mismatches

#: The fleet's size: 30 in the suite; ``ACCELD_FAULT_HOSTS=1000`` runs the issue's full
#: scale by hand (each fault then strikes HOSTS // 30 times as many hosts).
HOSTS = int(os.environ.get("ACCELD_FAULT_HOSTS", "30"))
SCALE = max(1, HOSTS // 30)
CONDUCTORS = ("fault-a", "fault-b")
MEMBERSHIP_TIMEOUT = 3
TIMEOUT = max(240.0, 1.2 * HOSTS)
#: Seconds between a host's reports (and heartbeats): 1 s at 30 hosts, 10 s at 1,000 (a
#: thousand hosts beating every second keep one conductor's RPC queue longer than the
#: report calls' timeout: each report would then time out behind the heartbeats).
REPORT_INTERVAL = max(1, HOSTS // 100)


def needs_services(test):
    """PostgreSQL and RabbitMQ (skipped without them, failed under CI=true); Redis is
    required by its fixture the same way."""
    return pytest.mark.rabbitmq(pytest.mark.postgresql(test))


def scenario(victim_pid: int) -> dict:
    """Each fault kind once, on hosts picked by the seed; the kill halfway through."""
    return {"seed": 7, "faults": [
        {"at": 2, "kind": scen.AGENT_CRASH, "count": 3 * SCALE, "down": 2},
        {"at": 2, "kind": scen.REBOOT, "count": 2 * SCALE, "down": 3},
        # after the reboots are back (a power cycle brings an unplugged device back)
        {"at": 6, "kind": scen.UNPLUG, "count": 3 * SCALE, "device_kind": "gpu_mig"},
        {"at": 3, "kind": scen.UNPLUG, "count": 2 * SCALE, "device_kind": "nic_vf",
         "back_after": 3},
        {"at": 4, "kind": scen.XID_STORM, "count": 3 * SCALE, "duration": 3},
        {"at": 4, "kind": scen.ECC_STORM, "count": 2 * SCALE, "duration": 3},
        {"at": 5, "kind": scen.FAILED_RESET, "count": 1 * SCALE, "device_kind": "vgpu"},
        {"at": 5, "kind": scen.SLOW_BUS, "count": 4 * SCALE, "delay": 1.5, "duration": 4},
        {"at": 6, "kind": scen.LOST_BUS, "count": 4 * SCALE, "duration": 4},
        {"at": 6, "kind": scen.KILL_CONDUCTOR, "pid": victim_pid},
    ]}


@pytest.fixture
def placement():
    with PlacementServer() as server:
        yield server


@needs_services
def test_every_fault_ends_with_database_placement_and_hosts_in_agreement(
        acceld_procs, make_db_url, isolated_rabbit_url, redis_url, placement, receiver,
        tmp_path):
    cluster = Cluster(acceld_procs, conductors=CONDUCTORS, hosts=HOSTS,
                      db_url=make_db_url("postgresql"), transport_url=isolated_rabbit_url,
                      redis_url=redis_url, placement=placement, nova=receiver,
                      membership_timeout=MEMBERSHIP_TIMEOUT)
    try:
        victim = cluster.procs[CONDUCTORS[1]]
        plan = tmp_path / "scenario.json"
        plan.write_text(json.dumps(scenario(victim.popen.pid)))
        out = tmp_path / "results.json"
        run = subprocess.run(
            [sys.executable, "-m", "acceld.sim.cli", "--config-file", cluster.config,
             "--hosts", str(HOSTS), "--host-prefix", cluster.prefix,
             "--report-interval", str(REPORT_INTERVAL),
             "--retry-interval", str(REPORT_INTERVAL / 2), "--workers", "8",
             "--scenario", str(plan), "--timeout", str(TIMEOUT), "--json-out", str(out)],
            capture_output=True, text=True, timeout=TIMEOUT + 60, cwd=Path.cwd())
        assert run.returncode == 0, run.stderr[-3000:]
        results = json.loads(out.read_text())
        assert results["converged"] is True
        faults = results["stats"]["faults"]
        assert {f["kind"] for f in faults} == set(scen.KIND_FIELDS)      # each kind played
        assert [f for f in faults if f.get("error")] == []
        assert not victim.alive

        expected = results["expected_inventory"]
        assert mismatches(cluster.db, expected) == []                 # none lost or extra
        lost_for_good = sum(8 - len(devices) for devices in expected.values())
        assert lost_for_good == 3 * SCALE                            # the unplugged MIG GPUs

        def agreed() -> bool:      # what still differs is the failure's "last"
            unsynced = cluster.unsynced()
            assert not unsynced, f"{len(unsynced)} host(s) not in sync, e.g. {unsynced[:3]}"
            wrong = placement_mismatches(placement, cluster.computes, expected)
            assert not wrong, f"{len(wrong)} provider(s) differ, e.g. {wrong[:3]}"
            return True
        # one comparison reads each provider's inventory: ~30 s for 8,000 providers
        wait_until(agreed, max(60.0, 0.3 * HOSTS),
                   "Placement in agreement with the simulated hosts", interval=1.0)
        assert cluster.usages() == {}                                 # nothing leaked
        assert set(cluster.owners().values()) == {CONDUCTORS[0]}      # the survivor owns all
    finally:
        cluster.db.dispose()
