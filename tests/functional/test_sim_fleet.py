"""The simulator against a real conductor in this process (``wiring.start_conductor`` on
SQLite and the in-process bus ``acceld serve`` uses): the fleet converges to what it
expects in the database, scenario faults end with the database matching it, and served
hosts answer what the conductor asks of an agent. The same over RabbitMQ and PostgreSQL,
with ``acceld conductor`` in its own process: tests/integration/test_sim.py."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from acceld import exception, reports, rpc, states, wiring
from acceld.db import migration
from acceld.db.api import Database
from acceld.objects import identity, services, v2_inventory
from acceld.sim import scenario as scen
from acceld.sim.agent import guest_instances
from acceld.sim.fleet import Fleet, FleetConfig, host_names
from tests import helpers
from tests.simulated import mismatches

INTERVAL = 0.2
TIMEOUT = 60.0


class Conductor:
    """A real conductor on its own SQLite database and an in-process bus."""

    def __init__(self, tmp_path: Any) -> None:
        self.db = Database(f"sqlite:///{tmp_path / 'acceld.sqlite'}")
        migration.upgrade(self.db)
        conf = helpers.make_conf(DEFAULT={"rpc_timeout": 5},
                                 conductor={"save_interval": 0.2, "periodic_interval": 0.5,
                                            "operation_wait": 5.0})
        self.transport = rpc.LocalTransport(workers=8)
        self.manager, self._server = wiring.start_conductor(conf, self.db, self.transport)
        self.host = conf.host

    def stop(self) -> None:
        self._server.stop()
        self.manager.stop()
        self.transport.close()
        self.db.dispose()


@pytest.fixture
def conductor(tmp_path) -> Iterator[Conductor]:
    running = Conductor(tmp_path)
    yield running
    running.stop()


@pytest.fixture
def fleet_of(conductor) -> Iterator[Callable[..., Fleet]]:
    """``fleet_of(hosts, scenario=None, **config)``: a started fleet on the conductor's
    bus, stopped afterwards."""
    started: list[Fleet] = []

    def make(hosts: int, scenario: dict[str, Any] | None = None, **config: Any) -> Fleet:
        fleet = Fleet(conductor.transport,
                      FleetConfig(hosts=hosts, report_interval=INTERVAL, retry_interval=0.1,
                                  **config),
                      scen.parse(scenario) if scenario else None)
        started.append(fleet)
        fleet.start()
        return fleet
    yield make
    for fleet in started:
        fleet.stop()


def _matches(conductor: Conductor, fleet: Fleet) -> Callable[[], bool]:
    return lambda: not mismatches(conductor.db, fleet.expected_inventory())


def test_a_fleet_converges_to_its_inventory(conductor, fleet_of):
    fleet = fleet_of(8)
    assert fleet.wait_converged(TIMEOUT, _matches(conductor, fleet)), fleet.stats()
    assert mismatches(conductor.db, fleet.expected_inventory()) == []
    stats = fleet.stats()
    assert stats["first_reports_accepted_s"] is not None
    assert stats["converged_s"] >= stats["first_reports_accepted_s"]
    assert stats["reports"]["failed"] == stats["reports"]["stale"] == 0
    assert stats["reports"]["changed"] == 8            # the first of each; then unchanged
    assert stats["agent_restarted_sent"] == 8
    # the answers name the conductor that owns each host: this one, for all of them
    assert stats["reports_by_conductor"] == {conductor.host: stats["reports"]["accepted"]}
    assert stats["hosts"] == {"total": 8, "up": 8, "synced": 8, "served": 0}
    expected = fleet.expected_inventory()
    assert [len(devices) for devices in expected.values()] == [8] * 8
    counts = {(d["host"], d["name"]): d["device_count"]
              for d in services.list_driver_states(conductor.db)}
    assert counts == {(host, name): n for host in host_names("sim", 8)
                      for name, n in (("nvidia_gpu", 4), ("fpga", 1), ("sriov", 3))}
    fleet.wait_converged(TIMEOUT, lambda: fleet.stats()["heartbeats"]["sent"] >= 8)
    conductor.manager.flush_heartbeats()
    alive = {s["host"] for s in services.list_services(conductor.db, 60)
             if s["binary"] == "acceld-agent" and s["alive"]}
    assert alive == set(host_names("sim", 8))


def test_held_heartbeats_are_not_sent_until_let_go(conductor, fleet_of):
    fleet = fleet_of(2, heartbeat_interval=0.05)
    assert fleet.wait_converged(TIMEOUT, lambda: fleet.stats()["heartbeats"]["sent"] >= 2)
    assert fleet.hold_heartbeats(True)      # returns once the beats on their way are sent
    sent = fleet.stats()["heartbeats"]["sent"]
    assert fleet.wait_converged(TIMEOUT, lambda: fleet.stats()["heartbeats"]["held"] >= 4)
    assert fleet.wait_converged(TIMEOUT, lambda: fleet.stats()["heartbeats"]["held"] >= 10)
    assert fleet.stats()["heartbeats"]["sent"] == sent
    fleet.hold_heartbeats(False)
    assert fleet.wait_converged(TIMEOUT, lambda: fleet.stats()["heartbeats"]["sent"] > sent)


FAULTS = {"seed": 7, "faults": [
    {"at": 0.5, "kind": "agent_crash", "hosts": ["sim-00000"], "down": 0.6},
    {"at": 0.6, "kind": "unplug", "hosts": ["sim-00000"], "device_kind": "fpga"},
    {"at": 0.5, "kind": "agent_crash", "hosts": ["sim-00001"], "down": 0.3,
     "keep_journal": True},
    {"at": 0.5, "kind": "unplug", "hosts": ["sim-00002"], "device_kind": "qat_vf",
     "devices": 2},
    {"at": 0.5, "kind": "unplug", "hosts": ["sim-00003"], "device_kind": "nic_vf",
     "back_after": 0.8},
    # long enough that the unplug (0.5) and the replug (1.3) are both reported into it
    {"at": 0.2, "kind": "lost_bus", "hosts": ["sim-00003"], "duration": 1.5},
    {"at": 0.5, "kind": "xid_storm", "hosts": ["sim-00004"], "duration": 0.8},
    {"at": 0.3, "kind": "slow_bus", "hosts": ["sim-00004"], "delay": 0.3, "duration": 1.0},
    {"at": 0.5, "kind": "failed_reset", "hosts": ["sim-00005"], "device_kind": "gpu_mig"},
    {"at": 0.5, "kind": "ecc_storm", "hosts": ["sim-00005"], "device_kind": "vgpu",
     "status": "degraded", "duration": None},
    {"at": 0.5, "kind": "unplug", "hosts": ["sim-00006"], "device_kind": "gpu_mig",
     "devices": 2},
    {"at": 1.0, "kind": "reboot", "hosts": ["sim-00006"], "down": 0.5},
]}


def test_faults_end_with_the_database_matching_the_fleet(conductor, fleet_of):
    fleet = fleet_of(7, FAULTS)
    assert fleet.wait_converged(TIMEOUT, _matches(conductor, fleet)), (
        fleet.stats(), mismatches(conductor.db, fleet.expected_inventory()))
    expected = fleet.expected_inventory()
    kinds = {host: sorted(d["kind"] for d in devices) for host, devices in expected.items()}
    assert "fpga" not in kinds["sim-00000"]               # unplugged while it was down
    assert len(kinds["sim-00000"]) == 7
    assert kinds["sim-00002"].count("qat_vf") == 0
    assert len(kinds["sim-00003"]) == len(kinds["sim-00006"]) == 8   # came back
    health = {host: sorted({(d["kind"], d["health"]) for d in devices})
              for host, devices in expected.items()}
    assert ("gpu_mig", "ok") in health["sim-00004"] and ("gpu_mig", "failed") not in \
        health["sim-00004"]
    assert ("gpu_mig", "failed") in health["sim-00005"]      # the reset failed: it stays
    assert ("vgpu", "degraded") in health["sim-00005"]
    stats = fleet.stats()
    assert [f.get("error") for f in stats["faults"]] == [None] * len(FAULTS["faults"])
    assert stats["agent_restarted_sent"] == 7 + 3
    assert stats["reports"]["dropped"] >= 1                  # the lost bus
    assert stats["heartbeats"]["skipped"] >= 1     # held 0.3 s on the slow bus, due every 0.2
    assert stats["reports"]["stale"] == 0 and stats["reports"]["failed"] == 0


def _device_uuid(fleet: Fleet, host: str, kind: str) -> str:
    dev = next(d for d in fleet.hosts[host].devices if d.kind == kind)
    return identity.device_uuid(host, dev.driver, dev.identity)


def test_a_served_host_answers_the_conductor(conductor, fleet_of):
    fleet = fleet_of(2, serve_rpc=1)
    assert fleet.wait_converged(TIMEOUT, _matches(conductor, fleet))
    served, other = host_names("sim", 2)
    cond = conductor.manager
    gpu = _device_uuid(fleet, served, "vgpu")
    assert cond.set_state(gpu, states.READY)["state"] == states.READY
    stats = cond.device_stats(gpu)["stats"]
    assert stats["memory_total_bytes"] == 15360 * 2 ** 20
    assert 0 <= stats["utilization_gpu_percent"] <= 100
    guests = cond.guests(served)
    assert [(g["uuid"], g["name"]) for g in guests["guests"]] == guest_instances(served, 2)
    assert cond.guests(other) == {"guests": [], "unreachable": [other]}
    assert cond.discover(served) == [served]

    fpga = _device_uuid(fleet, served, "fpga")
    dep = next(d for d in fleet.hosts[served].devices if d.kind == "fpga").body[
        "deployables"][0]["name"]
    op = cond.program_deployable(identity.deployable_uuid(fpga, dep), "image-1", "")
    function = hashlib.sha256(b"image-1").hexdigest()[:32]

    def programmed() -> bool:
        attributes = next(d["attributes_list"] for d in v2_inventory.list_deployables(
            conductor.db) if d["uuid"] == identity.deployable_uuid(fpga, dep))
        return reports.function_trait(function) in attributes
    assert fleet.wait_converged(TIMEOUT, programmed), op
    assert fleet.stats()["rpc_served"]["run_program"] == 1

    results = cond.driver_action("sriov", "uninstall", served)
    assert results == [{"host": served, "driver": "sriov", "ok": True, "error": None}]
    assert fleet.wait_converged(TIMEOUT, _matches(conductor, fleet))
    assert {d["driver"] for d in fleet.expected_inventory()[served]} == {"nvidia_gpu", "fpga"}


def test_a_served_host_plugs_devices_into_its_guests(conductor, fleet_of):
    fleet = fleet_of(1, serve_rpc=1)
    assert fleet.wait_converged(TIMEOUT)
    host = host_names("sim", 1)[0]
    agents = rpc.AgentClient(conductor.transport)
    guest = guest_instances(host, 2)[1][0]
    nic = next(d for d in fleet.hosts[host].devices if d.kind == "nic_vf")
    handle = nic.body["deployables"][0]["attach_handles"][0]
    arq = "5d2f4c1e-8a3b-4c6d-9e7f-0a1b2c3d4e5f"
    after = agents.attach_to_guest(host, guest, arq, "PCI", handle["attach_info"], arq)
    assert after["arqs"] == [arq]
    assert [g["arqs"] for g in agents.guests(host)] == [[], [arq]]
    with pytest.raises(exception.HypervisorError):      # one device, one guest
        agents.attach_to_guest(host, guest_instances(host, 2)[0][0],
                               "6d2f4c1e-8a3b-4c6d-9e7f-0a1b2c3d4e5f", "PCI",
                               handle["attach_info"], arq)
    with pytest.raises(exception.InvalidInput, match="cannot be attached"):
        agents.attach_to_guest(host, guest, arq, "MIG", {"parent": "x"}, arq)
    assert agents.detach_from_guest(host, guest, arq) == "removed"
    assert agents.detach_from_guest(host, guest, arq) == "absent"
    with pytest.raises(exception.GuestNotFound):
        agents.detach_from_guest(host, "7d2f4c1e-8a3b-4c6d-9e7f-0a1b2c3d4e5f", arq)


@pytest.mark.parametrize("by", ["pid", "pid_file"])
def test_a_scenario_kills_a_conductor_process(conductor, fleet_of, tmp_path, by):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        pid_file = tmp_path / "conductor.pid"
        pid_file.write_text(f"{victim.pid}\n")
        where = {"pid": victim.pid} if by == "pid" else {"pid_file": str(pid_file)}
        fleet = fleet_of(1, {"faults": [{"at": 0.1, "kind": "kill_conductor", **where}]})
        assert fleet.wait_converged(TIMEOUT)
        assert victim.wait(10) == -9
        assert fleet.stats()["faults"][0]["pid"] == victim.pid
    finally:
        victim.kill()
        victim.wait()
