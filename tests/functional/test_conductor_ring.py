"""Conductors sharing the hosts through a tooz group on the real Redis, in one process
over the in-process bus: one owner per host, reports taken (or forwarded) by the owner,
agents learning their owner, a dead conductor's hosts moving to the others."""

from __future__ import annotations

import os
import time

import pytest

from acceld import rpc, states, wiring
from acceld.conductor.manager import ConductorManager
from acceld.db.api import Database
from acceld.objects import accelerators, services
from tests import helpers
from tests.stack import wait_for

MEMBERSHIP_TIMEOUT = 2
HOSTS = tuple(f"compute-{i:02d}" for i in range(12))


class Fleet:
    """``names`` conductors and one fake-driver agent per host in :data:`HOSTS`."""

    def __init__(self, db: Database, redis_url: str, names: tuple[str, ...]) -> None:
        self.db = db
        self.transport = rpc.LocalTransport()
        self.conductors: dict[str, tuple[ConductorManager, rpc.Server]] = {}
        for name in names:
            conf = helpers.make_conf(
                DEFAULT={"host": name},
                conductor={"save_interval": 3600.0, "periodic_interval": 3600.0},
                coordination={"backend_url": redis_url,
                              "membership_timeout": MEMBERSHIP_TIMEOUT,
                              "refresh_interval": 0.1})
            self.conductors[name] = wiring.start_conductor(conf, db, self.transport)
        agent_conf = helpers.make_conf(agent={"report_interval": 3600.0},
                                       fake_driver={"device_count": 2})
        self.agents = {}
        for host in HOSTS:
            self.agents[host], _server = wiring.start_agent(
                agent_conf, self.transport, host=host,
                journal_dir=os.path.join(agent_conf.state_path, f"agent-{host}"))

    def manager(self, name: str) -> ConductorManager:
        return self.conductors[name][0]

    def owners(self, name: str) -> dict[str, str]:
        ring = self.manager(name).ring
        return {h: ring.owner(h) for h in HOSTS}

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        for manager, server in self.conductors.values():
            server.stop()
            manager.stop()
        self.transport.close()


@pytest.fixture
def fleet(sqlite_db, redis_url):
    fleet = Fleet(sqlite_db, redis_url, ("cond-a", "cond-b", "cond-c"))
    yield fleet
    fleet.stop()


def test_every_host_has_one_owner_that_takes_its_reports(fleet):
    names = set(fleet.conductors)
    wait_for(lambda: all(set(fleet.manager(n).ring.members()) == names for n in names))
    owners = fleet.owners("cond-a")
    assert all(fleet.owners(n) == owners for n in names)        # one view everywhere
    assert set(owners.values()) == names                          # each owns some
    for host, owner in owners.items():
        owning = [n for n in names if fleet.manager(n).ring.owns(host)]
        assert owning == [owner]

    beats = rpc.ConductorClient(fleet.transport)
    for host, agent in fleet.agents.items():
        assert agent.report_once()
        beats.heartbeat(host, "acceld-agent", "1")     # whichever conductor takes it

    def recorded() -> dict[str, str | None]:
        for manager, _server in fleet.conductors.values():
            manager.flush_heartbeats()
        rows = {r["host"]: r["conductor"] for r in services.list_services(fleet.db, 90)
                if r["binary"] == "acceld-agent"}
        return {h: rows.get(h) for h in HOSTS}
    wait_for(lambda: recorded() == owners)      # each row names the host's owner

    # every report reached its owner's memory, whichever conductor took it first: a
    # report replayed to any conductor is found stale there
    for host, agent in fleet.agents.items():
        replay = agent.build_report().to_dict()
        replay["seq"] = 1
        for name in names:
            answer = fleet.manager(name).report_inventory(replay)
            assert answer["stale"] and answer["conductor"] == owners[host], (host, name)


def test_an_agent_sends_to_its_owner_once_told(fleet):
    names = set(fleet.conductors)
    wait_for(lambda: all(set(fleet.manager(n).ring.members()) == names for n in names))
    host = HOSTS[0]
    owner = fleet.owners("cond-a")[host]
    client = rpc.ConductorClient(fleet.transport)
    report = fleet.agents[host].build_report().to_dict()
    assert client.report_inventory(report)["conductor"] == owner
    # the owner's own topic now: a conductor that is not the owner no longer sees it
    others = [n for n in names if n != owner]
    for name in others:
        fleet.conductors[name][1].stop()
    report = fleet.agents[host].build_report().to_dict()
    assert client.report_inventory(report) == {
        "seq": report["seq"], "changed": False, "stale": False, "conductor": owner}


def test_a_dead_conductor_s_hosts_move_to_the_others(fleet):
    names = set(fleet.conductors)
    wait_for(lambda: all(set(fleet.manager(n).ring.members()) == names for n in names))
    before = fleet.owners("cond-a")
    victim = "cond-b"
    # dead without a word: its ring stops reading the group and its tooz heart stops
    # beating, and it never leaves the group (what kill -9 does: tests/integration has
    # the real one)
    dying = fleet.manager(victim).ring
    dying._stop.set()
    dying._coordinator.heart.stop()
    dead_at = time.monotonic()
    survivors = names - {victim}
    wait_for(lambda: all(set(fleet.manager(n).ring.members()) == survivors
                         for n in survivors), timeout=4 * MEMBERSHIP_TIMEOUT)
    assert time.monotonic() - dead_at <= 2 * MEMBERSHIP_TIMEOUT + 1
    after = fleet.owners("cond-a")
    assert fleet.owners("cond-c") == after
    assert set(after.values()) == survivors
    moved = {h for h in HOSTS if before[h] != after[h]}
    assert moved == {h for h in HOSTS if before[h] == victim}      # only its hosts moved


def _a_device_cond_a_does_not_own(fleet: Fleet) -> tuple[str, str, dict]:
    """Every host reported; (a host cond-a does not own, its owner, a device of it)."""
    names = set(fleet.conductors)
    wait_for(lambda: all(set(fleet.manager(n).ring.members()) == names for n in names))
    for agent in fleet.agents.values():
        assert agent.report_once()
    owners = fleet.owners("cond-a")
    host = next(h for h in HOSTS if owners[h] != "cond-a")
    return host, owners[host], next(iter(accelerators.list_accelerators(fleet.db, host=host)))


def test_a_state_change_runs_on_the_owner_of_the_device_s_host(fleet):
    _host, _owner, device = _a_device_cond_a_does_not_own(fleet)
    # asked of a conductor that does not own the host: the owner runs it, and its agent's
    # answer reaches the owner's waiter (the change is done when the call returns)
    record = fleet.manager("cond-a").set_state(device["uuid"], states.READY)
    assert record["state"] == states.READY
    assert accelerators.get_accelerator(fleet.db, device["uuid"])["state"] == states.READY


def test_attach_and_detach_run_on_the_owner_of_the_device_s_host(fleet, monkeypatch):
    """Attach, detach (and a hot plug's detach) run where the host's hot-plug reconcile
    runs, so that one conductor's turns keep them apart."""
    host, owner, device = _a_device_cond_a_does_not_own(fleet)
    fleet.manager("cond-a").set_state(device["uuid"], states.READY)
    ran: list[tuple[str, str]] = []
    for name in fleet.conductors:
        manager = fleet.manager(name)
        for step in ("_attach", "_detach"):
            def spy(*args, _run=getattr(manager, step), _where=(name, step), **kwargs):
                ran.append(_where)
                return _run(*args, **kwargs)
            monkeypatch.setattr(manager, step, spy)
    record = fleet.manager("cond-a").attach(device["uuid"], "host", host)
    assert record["attached_to"] == {"type": "host", "id": host}
    fleet.manager("cond-a").detach(device["uuid"])
    assert accelerators.get_accelerator(fleet.db, device["uuid"])["attached_to"] is None
    assert ran == [(owner, "_attach"), (owner, "_detach")]
