"""The agent's live attach/detach endpoints (issue 22) through ``rpc.AgentClient``, on the
in-process bus of ``acceld serve`` and on a real RabbitMQ: guests, attach, detach and
their errors arriving as the same acceld exceptions; the attach journaled while it runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from acceld import exception, rpc
from acceld.agent import journal as jmod
from acceld.agent.manager import AgentManager
from acceld.hw import pci
from acceld.virt import devicexml
from acceld.virt.fake import FakeHypervisor
from tests import helpers
from tests.stack import wait_for

VM = "6f1c1a52-3f0e-4a53-9a0f-2d7f0c1b1e01"
STUBBORN = "6f1c1a52-3f0e-4a53-9a0f-2d7f0c1b1e02"
NOWHERE = "6f1c1a52-3f0e-4a53-9a0f-2d7f0c1b1eff"
MDEV = "c2b4a3f0-1e5d-4c6b-8a7f-9e0d1c2b3a4f"
PCI_INFO = pci.to_attach_info("0000:3b:00.0")


@dataclass
class Rig:
    agent: AgentManager
    client: rpc.AgentClient
    host: str
    transport: rpc.Transport


class Bus:
    def __init__(self, url: str | None) -> None:
        self.url = url
        self.closers: list[Any] = []

    def rig(self, tmp_path, hypervisor: object | None = None,
            **hypervisor_opts: Any) -> Rig:
        host = f"itest-guests-{uuid.uuid4().hex[:10]}"
        default: dict[str, Any] = {"rpc_timeout": 10}
        if self.url:
            default["transport_url"] = self.url
        conf = helpers.make_conf(DEFAULT=default, hypervisor=hypervisor_opts)
        t = rpc.MessagingTransport(conf) if self.url else rpc.LocalTransport()
        extra = {} if hypervisor is None else {"hypervisor": hypervisor}
        agent = AgentManager(conf, rpc.ConductorClient(t), host=host,
                             journal_dir=str(tmp_path / host), **extra)
        server = t.serve(rpc.AGENT_TOPIC, host, agent)
        server.start()
        self.closers += [t.close, server.stop, agent.stop]
        return Rig(agent, rpc.AgentClient(t, timeout=10), host, t)

    def close(self) -> None:
        for fn in reversed(self.closers):
            fn()


@pytest.fixture(params=[pytest.param("local", id="local"),
                        pytest.param("rabbit", id="rabbit", marks=pytest.mark.rabbitmq)])
def bus(request: pytest.FixtureRequest) -> Iterator[Bus]:
    url = request.getfixturevalue("isolated_rabbit_url") if request.param == "rabbit" \
        else None
    b = Bus(url)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def fake() -> FakeHypervisor:
    return FakeHypervisor([(VM, "vm-1"), (STUBBORN, "stubborn")], ignore_unplug=[STUBBORN])


def _arq() -> str:
    return str(uuid.uuid4())


def test_attach_shows_in_guests_and_detach_removes_it(bus, fake, tmp_path):
    r = bus.rig(tmp_path, fake)
    arq, mdev_arq = _arq(), _arq()
    guest = r.client.attach_to_guest(r.host, VM, arq, "PCI", PCI_INFO, str(uuid.uuid4()))
    assert guest == {"uuid": VM, "name": "vm-1", "running": True,
                     "aliases": [devicexml.alias(arq)], "arqs": [arq]}
    guest = r.client.attach_to_guest(r.host, VM, mdev_arq, "MDEV", PCI_INFO, MDEV)
    assert guest["aliases"] == [devicexml.alias(arq), devicexml.alias(mdev_arq)]
    # a re-sent attach changes nothing
    assert r.client.attach_to_guest(r.host, VM, arq, "PCI", PCI_INFO, "x") == guest
    listed = {g["uuid"]: g for g in r.client.guests(r.host)}
    assert listed[VM] == guest
    assert listed[STUBBORN] == {"uuid": STUBBORN, "name": "stubborn", "running": True,
                                "aliases": [], "arqs": []}

    assert r.client.detach_from_guest(r.host, VM, arq) == "removed"
    assert fake.guest(VM).aliases == (devicexml.alias(mdev_arq),)
    assert r.client.detach_from_guest(r.host, VM, arq) == "absent"
    assert r.agent.journal.inflight() == []


def test_a_guest_that_ignores_the_unplug_leaves_the_detach_pending(bus, fake, tmp_path):
    r = bus.rig(tmp_path, fake)
    arq = _arq()
    r.client.attach_to_guest(r.host, STUBBORN, arq, "PCI", PCI_INFO, "h")
    assert r.client.detach_from_guest(r.host, STUBBORN, arq) == "pending"
    assert fake.guest(STUBBORN).aliases == (devicexml.alias(arq),)
    fake.set_ignores_unplug(STUBBORN, False)
    assert r.client.detach_from_guest(r.host, STUBBORN, arq) == "removed"


def test_an_unknown_instance_is_guest_not_found(bus, fake, tmp_path):
    r = bus.rig(tmp_path, fake)
    with pytest.raises(exception.GuestNotFound) as info:
        r.client.attach_to_guest(r.host, NOWHERE, _arq(), "PCI", PCI_INFO, "h")
    assert type(info.value) is exception.GuestNotFound
    assert NOWHERE in str(info.value)
    with pytest.raises(exception.GuestNotFound):
        r.client.detach_from_guest(r.host, NOWHERE, _arq())
    assert r.agent.journal.inflight() == []


@pytest.mark.parametrize("attach_type", ["MIG", "TEST_PCI"])
def test_a_handle_no_guest_takes_is_invalid_input(bus, fake, tmp_path, attach_type):
    r = bus.rig(tmp_path, fake)
    with pytest.raises(exception.InvalidInput, match=attach_type) as info:
        r.client.attach_to_guest(r.host, VM, _arq(), attach_type, PCI_INFO, "h")
    assert type(info.value) is exception.InvalidInput
    with pytest.raises(exception.InvalidInput, match="not a PCI attach_info"):
        r.client.attach_to_guest(r.host, VM, _arq(), "PCI", {"bus": "3b"}, "h")
    with pytest.raises(exception.InvalidInput, match="not an ARQ UUID"):
        r.client.detach_from_guest(r.host, VM, "arq-1")
    assert fake.guest(VM).aliases == ()


def test_a_hypervisor_refusal_arrives_as_hypervisor_error(bus, fake, tmp_path):
    r = bus.rig(tmp_path, fake)
    r.client.attach_to_guest(r.host, VM, _arq(), "PCI", PCI_INFO, "h")
    with pytest.raises(exception.HypervisorError, match="conflicts") as info:
        r.client.attach_to_guest(r.host, STUBBORN, _arq(), "PCI", PCI_INFO, "h")
    assert type(info.value) is exception.HypervisorError


def test_without_a_hypervisor_every_call_says_so(bus, tmp_path):
    r = bus.rig(tmp_path, driver="none")
    expected = f"no hypervisor configured on {r.host} ([hypervisor] driver = none)"
    for call in (lambda: r.client.guests(r.host),
                 lambda: r.client.attach_to_guest(r.host, VM, _arq(), "PCI", PCI_INFO, "h"),
                 lambda: r.client.detach_from_guest(r.host, VM, _arq())):
        with pytest.raises(exception.HypervisorError) as info:
            call()
        assert str(info.value) == expected


def test_the_configured_fake_serves_its_demo_guests(bus, tmp_path):
    r = bus.rig(tmp_path, driver="fake")
    guests = r.client.guests(r.host)
    assert [g["name"] for g in guests] == ["demo-1", "demo-2", "demo-3"]
    arq = _arq()
    after = r.client.attach_to_guest(r.host, guests[1]["uuid"], arq, "PCI", PCI_INFO, "h")
    assert after["aliases"] == [devicexml.alias(arq)]
    assert r.client.detach_from_guest(r.host, guests[1]["uuid"], arq) == "removed"


# -- the journal: an attach is recorded while the hypervisor works --------------------------

class Watching(FakeHypervisor):
    """Records the agent journal's in-flight operations when attach is called."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.journal: jmod.Journal | None = None
        self.seen: list[list[dict[str, Any]]] = []

    def attach(self, instance_uuid: str, device_xml: str) -> None:
        self.seen.append(self.journal.inflight())
        super().attach(instance_uuid, device_xml)


def _watched(tmp_path) -> tuple[Rig, Watching]:
    hv = Watching([(VM, "vm-1"), (STUBBORN, "stubborn")])
    r = Bus(None).rig(tmp_path, hv)
    hv.journal = r.agent.journal
    return r, hv


def test_attach_is_journaled_while_it_runs_and_cleared_after(tmp_path):
    r, hv = _watched(tmp_path)
    arq, handle = _arq(), str(uuid.uuid4())
    r.client.attach_to_guest(r.host, VM, arq, "PCI", PCI_INFO, handle)
    [during] = hv.seen
    assert [(op["kind"], op["instance_uuid"], op["arq_uuid"], op["alias"], op["attach_type"],
             op["attach_info"], op["handle_uuid"]) for op in during] == [
        (jmod.KIND_GUEST_ATTACH, VM, arq, devicexml.alias(arq), "PCI", PCI_INFO, handle)]
    assert r.agent.journal.inflight() == []
    # a failed attach clears its record too
    with pytest.raises(exception.HypervisorError):
        r.client.attach_to_guest(r.host, STUBBORN, _arq(), "PCI", PCI_INFO, handle)
    assert len(hv.seen[1]) == 1 and r.agent.journal.inflight() == []


def test_a_restart_hands_an_interrupted_attach_to_the_conductor(tmp_path):
    """The agent's start drops the record of an attach a crash interrupted, and tells
    the conductor it restarted (which settles the ARQ from what the guest holds); the
    boot id is kept in the journal, and a new one is a host reboot (logged)."""
    r, hv = _watched(tmp_path)
    told: list[str] = []

    class Conductor:
        def agent_restarted(self, host: str) -> None:
            told.append(host)

    server = r.transport.serve(rpc.CONDUCTOR_TOPIC, None, Conductor())
    server.start()
    try:
        arq = _arq()
        left = {"op_id": f"{jmod.KIND_GUEST_ATTACH}-{arq}", "kind": jmod.KIND_GUEST_ATTACH,
                "instance_uuid": STUBBORN, "arq_uuid": arq, "alias": devicexml.alias(arq),
                "attach_type": "PCI", "attach_info": PCI_INFO, "handle_uuid": "h"}
        r.agent.journal.begin(left)          # as a crash mid-attach leaves it
        r.agent.recover()
        assert r.agent.journal.inflight() == []
        assert jmod.Journal(str(tmp_path / r.host)).inflight() == []   # on disk
        wait_for(lambda: told == [r.host])
    finally:
        server.stop()


def test_the_boot_id_is_kept_and_a_new_one_is_a_reboot(tmp_path, caplog):
    boots = iter(["boot-a", "boot-a", "boot-b"])
    conf = helpers.make_conf()
    for expected_warning in (False, False, True):
        agent = AgentManager(conf, rpc.ConductorClient(rpc.LocalTransport()), host="h",
                             journal_dir=str(tmp_path / "h"), boot_id=lambda: next(boots))
        caplog.clear()
        agent.recover()          # no conductor serves: the cast is logged, not raised
        assert ("the host rebooted" in caplog.text) is expected_warning
    assert jmod.Journal(str(tmp_path / "h")).note_boot("boot-b") == "boot-b"
