"""acceld.virt.libvirt_driver against a real libvirtd and a real QEMU guest (TCG), both
from tests/libvirt_host.py: one guest booted for the module.

Real passthrough cannot run here (no VFIO), so PCI and MDEV hostdevs from devicexml must
come back as libvirt's refusal; the whole life cycle runs with an emulated virtio-rng PCI
device standing in for the accelerator, seen from libvirt (both definitions, events) and
from inside the guest (its console lists its PCI devices every second).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from acceld import exception
from acceld.virt import devicexml, libvirt_driver
from acceld.virt.hypervisor import ABSENT, PENDING, REMOVED
from tests import libvirt_host
from tests.libvirt_host import libvirt_conn, libvirt_daemon, libvirt_guest  # noqa: F401
from tests.stack import wait_for

VIRTIO_RNG = "0x1af4:0x1005"     # the transitional virtio-rng of an i440fx guest


def rng_xml(arq: str) -> str:
    return (f'<rng model="virtio"><backend model="random">/dev/urandom</backend>'
            f'<alias name="{devicexml.alias(arq)}"/></rng>')


@pytest.fixture(scope="module")
def conn(libvirt_conn):  # noqa: F811
    return libvirt_conn


@pytest.fixture(scope="module")
def guest(libvirt_guest) -> libvirt_host.BootedGuest:  # noqa: F811
    return libvirt_guest


@pytest.fixture(scope="module")
def hv(libvirt_daemon) -> Iterator[libvirt_driver.LibvirtHypervisor]:  # noqa: F811
    h = libvirt_driver.LibvirtHypervisor(libvirt_daemon.uri)
    yield h
    h.close()


@pytest.fixture
def removed_events(conn) -> Iterator[list[str]]:
    """The aliases of the device-removed events the test's own connection receives."""
    import libvirt
    seen: list[str] = []
    cb = conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
                                     lambda _c, _d, alias, _o: seen.append(alias), None)
    yield seen
    conn.domainEventDeregisterAny(cb)


def definitions(conn, guest_uuid: str, alias: str) -> tuple[int, int]:
    """How often ``alias`` is in the live and in the persistent definition."""
    import libvirt
    dom = conn.lookupByUUIDString(guest_uuid)
    live = dom.XMLDesc(0).count(alias) if dom.isActive() else 0
    return live, dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).count(alias)


def rngs(devices: dict[str, str]) -> set[str]:
    return {slot for slot, ids in devices.items() if ids == VIRTIO_RNG}


def test_guests_lists_the_running_guest(hv, guest) -> None:
    listed = {g.uuid: g for g in hv.guests()}
    assert listed[guest.uuid].running and listed[guest.uuid].name == guest.name
    assert hv.guest(guest.uuid) == listed[guest.uuid]
    assert hv.guest(guest.uuid.upper()).uuid == guest.uuid


#: no guest has it (every test guest gets a random UUID)
UNKNOWN = "5d6c9b8e-61d4-4b43-9a2f-0c1e2d3f4a5b"


@pytest.mark.parametrize("instance", [UNKNOWN, "not-a-uuid"])
def test_an_unknown_instance_is_guest_not_found(hv, instance) -> None:
    arq = str(uuid.uuid4())
    with pytest.raises(exception.GuestNotFound):
        hv.guest(instance)
    with pytest.raises(exception.GuestNotFound):
        hv.attach(instance, rng_xml(arq))
    with pytest.raises(exception.GuestNotFound):
        hv.detach(instance, devicexml.alias(arq), 1)


@pytest.mark.parametrize("attach_type", ["PCI", "MDEV"])
def test_a_hostdev_reaches_libvirt_and_its_refusal_comes_back(hv, conn, guest,
                                                              attach_type) -> None:
    import libvirt
    arq = str(uuid.uuid4())
    xml = devicexml.device_xml(arq, attach_type,
                               {"domain": "0000", "bus": "3b", "device": "00", "function": "0"},
                               attach_handle_uuid=str(uuid.uuid4()))
    with pytest.raises(libvirt.libvirtError) as direct:   # what libvirt itself says
        conn.lookupByUUIDString(guest.uuid).attachDeviceFlags(
            xml, libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    with pytest.raises(exception.HypervisorError) as refused:
        hv.attach(guest.uuid, xml)
    assert refused.value.message == direct.value.get_error_message()
    assert "Traceback" not in refused.value.message
    assert definitions(conn, guest.uuid, devicexml.alias(arq)) == (0, 0)
    assert hv.guest(guest.uuid).aliases == ()


def test_attach_and_detach_on_a_running_guest(hv, conn, guest, removed_events) -> None:
    arq = str(uuid.uuid4())
    alias = devicexml.alias(arq)
    before = rngs(guest.wait_pci(bool))
    hv.attach(guest.uuid, rng_xml(arq))
    assert definitions(conn, guest.uuid, alias) == (1, 1)
    assert hv.guest(guest.uuid).aliases == (alias,)
    assert {g.uuid: g.aliases for g in hv.guests()}[guest.uuid] == (alias,)
    added = rngs(guest.wait_pci(lambda devs: len(rngs(devs)) == len(before) + 1)) - before

    hv.attach(guest.uuid, rng_xml(arq))                   # a re-send changes nothing
    assert definitions(conn, guest.uuid, alias) == (1, 1)

    assert hv.detach(guest.uuid, alias, timeout=60) == REMOVED
    wait_for(lambda: alias in removed_events, timeout=30)  # the test's own connection too
    assert definitions(conn, guest.uuid, alias) == (0, 0)
    assert hv.guest(guest.uuid).aliases == ()
    assert not rngs(guest.wait_pci(lambda devs: not rngs(devs) & added)) & added
    assert hv.detach(guest.uuid, alias, timeout=1) == ABSENT


def test_a_guest_that_does_not_answer_leaves_the_detach_pending(hv, conn, guest) -> None:
    arq = str(uuid.uuid4())
    alias = devicexml.alias(arq)
    before = rngs(guest.wait_pci(bool))
    hv.attach(guest.uuid, rng_xml(arq))
    guest.wait_pci(lambda devs: len(rngs(devs)) == len(before) + 1)
    dom = conn.lookupByUUIDString(guest.uuid)
    dom.suspend()                                   # its vCPUs stop: no ACPI eject
    try:
        assert hv.detach(guest.uuid, alias, timeout=2) == PENDING
        assert definitions(conn, guest.uuid, alias) == (1, 0)   # still in the guest
        assert hv.guest(guest.uuid).aliases == (alias,)
        assert hv.detach(guest.uuid, alias, timeout=0.5) == PENDING
    finally:
        dom.resume()
    assert hv.detach(guest.uuid, alias, timeout=60) == REMOVED
    assert definitions(conn, guest.uuid, alias) == (0, 0)
    guest.wait_pci(lambda devs: rngs(devs) == before)
    assert hv.detach(guest.uuid, alias, timeout=1) == ABSENT


def test_a_shut_off_guest_changes_its_persistent_definition_only(hv, conn,
                                                                 tmp_path) -> None:
    name_uuid = str(uuid.uuid4())
    dom = conn.defineXML(libvirt_host.domain_xml(f"acceld-off-{name_uuid[:8]}", name_uuid,
                                                 tmp_path))
    try:
        arq = str(uuid.uuid4())
        alias = devicexml.alias(arq)
        hv.attach(name_uuid, rng_xml(arq))
        hv.attach(name_uuid, rng_xml(arq))
        assert definitions(conn, name_uuid, alias) == (0, 1)
        off = hv.guest(name_uuid)
        assert not off.running and off.aliases == (alias,)
        assert off in hv.guests()
        assert hv.detach(name_uuid, alias, timeout=1) == REMOVED
        assert definitions(conn, name_uuid, alias) == (0, 0)
        assert hv.detach(name_uuid, alias, timeout=1) == ABSENT
    finally:
        dom.undefine()


def test_device_xml_without_an_alias_is_refused(hv, guest) -> None:
    with pytest.raises(ValueError, match="alias"):
        hv.attach(guest.uuid, '<rng model="virtio"><backend model="random"/></rng>')


def test_events_wake_a_waiting_detach_from_another_thread(hv, conn, guest) -> None:
    """Two devices detached at once from two threads: each returns on its own event."""
    arqs = [str(uuid.uuid4()) for _ in range(2)]
    before = rngs(guest.wait_pci(bool))
    for arq in arqs:
        hv.attach(guest.uuid, rng_xml(arq))
    guest.wait_pci(lambda devs: len(rngs(devs)) == len(before) + 2)
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda a=arq: results.__setitem__(
        a, hv.detach(guest.uuid, devicexml.alias(a), timeout=60))) for arq in arqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert results == dict.fromkeys(arqs, REMOVED)
    assert hv.guest(guest.uuid).aliases == ()
    guest.wait_pci(lambda devs: rngs(devs) == before)


def test_it_connects_again_after_libvirtd_restarts(libvirt_daemon, tmp_path) -> None:  # noqa: F811
    """A daemon of its own (the session's keeps running): restarted under a driver that
    is still open, which then goes on with a new connection."""
    import libvirt
    daemon = libvirt_host.start_libvirtd()
    h = None
    try:
        h = libvirt_driver.LibvirtHypervisor(daemon.uri)
        guest_uuid = str(uuid.uuid4())
        conn = libvirt.open(daemon.uri)
        conn.defineXML(libvirt_host.domain_xml("acceld-restart", guest_uuid, tmp_path))
        conn.close()
        assert [g.uuid for g in h.guests()] == [guest_uuid]
        daemon.restart()
        arq = str(uuid.uuid4())
        h.attach(guest_uuid, rng_xml(arq))
        assert h.guest(guest_uuid).aliases == (devicexml.alias(arq),)
    finally:
        if h is not None:
            h.close()
        daemon.stop()


def test_the_api_attach_reaches_libvirt_and_undoes_itself_on_its_refusal(
        hv, conn, guest, sqlite_db) -> None:
    """The whole acceld path (API, conductor, agent) with this libvirtd as the agent's
    hypervisor: the guest is listed, and an ARQ's PCI device (a fake host's, so libvirt
    cannot pass it through here) is refused with libvirt's reason as a 502, the ARQ back
    to Unbound with its handle free and nothing left in the guest's definitions."""
    from acceld.objects import arqs
    from acceld.objects import device_profiles as dps
    from tests.stack import Stack

    with Stack.reported(sqlite_db, agent_collaborators={"hypervisor": hv}) as stack:
        stack.ready_all()
        listed = stack.call("GET", "/v1/guests").json
        assert [(g["uuid"], g["running"]) for g in listed["guests"]] == [(guest.uuid, True)]
        dps.create(stack.db, "libvirt-e2e", [{"resources:PGPU": "1"}], None)
        arq = arqs.create(stack.db, "libvirt-e2e", "proj")[0]["uuid"]
        free = sum(arqs.free_handles_by_provider(stack.db, "host1").values())
        resp = stack.call("PUT", f"/v2/accelerator_requests/{arq}/hot_plug",
                          {"instance_uuid": guest.uuid})
        assert resp.status_int == 502, resp.text
        assert "passthrough" in resp.text and "Traceback" not in resp.text
        after = arqs.get(stack.db, arq, project_id=None)
        assert after["state"] == "Unbound" and after["instance_uuid"] is None
        assert sum(arqs.free_handles_by_provider(stack.db, "host1").values()) == free
        assert definitions(conn, guest.uuid, devicexml.alias(arq)) == (0, 0)
