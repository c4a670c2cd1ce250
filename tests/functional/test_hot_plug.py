"""Hot plug through the real conductor and agent (the fake hypervisor): an ARQ attached
to a running instance is bound on the instance's host and its device is in the guest;
a detach unbinds only once the guest released it; nothing changes for an instance no
host runs, and a failed attach leaves nothing behind."""

from __future__ import annotations

import contextlib
import datetime
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from oslo_utils import timeutils
from sqlalchemy import select

from acceld import exception, rpc
from acceld import states as st
from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs
from acceld.objects import device_profiles as dps
from acceld.objects import placement as placement_objects
from acceld.virt import devicexml, fake
from tests.conftest import BACKENDS
from tests.placement_server import PlacementServer
from tests.stack import Stack, wait_for

DEMO = "de300001-0000-4000-8000-000000000001"
STUBBORN = "de300001-0000-4000-8000-000000000002"
PROJECT = "proj-hot"
NOTHING_DONE = {"reattached": [], "released": [], "detached": [], "adopted": [],
                "v1_detached": []}


@pytest.fixture
def hv() -> fake.FakeHypervisor:
    return fake.FakeHypervisor([(DEMO, "demo-1"), (STUBBORN, "demo-2")],
                               ignore_unplug=[STUBBORN])


@pytest.fixture
def stack(db: Database, hv: fake.FakeHypervisor) -> Iterator[Stack]:
    with Stack.reported(db, agent_collaborators={"hypervisor": hv}) as s:
        s.ready_all()
        yield s


def _arq(stack: Stack, rc: str = "PGPU") -> str:
    name = f"hot-{uuidlib.uuid4().hex[:8]}"
    dps.create(stack.db, name, [{f"resources:{rc}": "1"}], None)
    return str(arqs.create(stack.db, name, PROJECT)[0]["uuid"])


def _aliases(stack: Stack, instance: str) -> list[str]:
    guests = rpc.AgentClient(stack.transport, timeout=10).guests("host1")
    return next(g["aliases"] for g in guests if g["uuid"] == instance)


def _hot(db: Database, uuid: str) -> str:
    """The ARQ's hot-plug state."""
    return str(arqs.get_hot_plug(db, uuid, project_id=None)["hot_plug"])


def _free(stack: Stack) -> int:
    return sum(arqs.free_handles_by_provider(stack.db, "host1").values())


def test_attach_binds_on_the_instances_host_and_puts_the_device_in_the_guest(
        stack: Stack) -> None:
    uuid, free = _arq(stack), _free(stack)
    view = stack.conductor.hot_attach(uuid, DEMO)
    assert view["state"] == st.ARQ_BOUND and view["hot_plug"] == st.HOT_ATTACHED
    assert view["hostname"] == "host1" and view["instance_uuid"] == DEMO
    assert view["attach_handle_type"] == "PCI"
    assert _aliases(stack, DEMO) == [devicexml.alias(uuid)]
    assert _free(stack) == free - 1

    view = stack.conductor.hot_detach(uuid)
    assert view["state"] == st.ARQ_UNBOUND and view["hot_plug"] == st.ARQ_INITIAL
    assert _aliases(stack, DEMO) == [] and _free(stack) == free
    with pytest.raises(exception.ARQBadState):     # nothing attached any more
        stack.conductor.hot_detach(uuid)


def test_a_guest_that_keeps_the_device_leaves_the_detach_pending(
        stack: Stack, hv: fake.FakeHypervisor) -> None:
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, STUBBORN)
    for _ in range(2):                              # asking again waits again
        view = stack.conductor.hot_detach(uuid)
        assert view["state"] == st.ARQ_BOUND and view["hot_plug"] == st.HOT_DETACHING
        assert _aliases(stack, STUBBORN) == [devicexml.alias(uuid)]
    hv.set_ignores_unplug(STUBBORN, False)
    view = stack.conductor.hot_detach(uuid)
    assert view["state"] == st.ARQ_UNBOUND and view["hot_plug"] == st.ARQ_INITIAL
    assert _aliases(stack, STUBBORN) == []


def test_an_instance_no_host_runs_is_not_found_and_nothing_changes(stack: Stack) -> None:
    uuid, free = _arq(stack), _free(stack)
    with pytest.raises(exception.GuestNotFound):
        stack.conductor.hot_attach(uuid, str(uuidlib.uuid4()))
    arq = arqs.get(stack.db, uuid, project_id=None)
    assert arq["state"] == st.ARQ_INITIAL and _hot(stack.db, uuid) == "Initial"
    assert _free(stack) == free


def test_a_failed_attach_undoes_the_bind(stack: Stack, hv: fake.FakeHypervisor,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    uuid, free = _arq(stack), _free(stack)

    def refuse(instance: str, device_xml: str) -> None:
        raise exception.HypervisorError("internal error: no IOMMU group for the device")

    monkeypatch.setattr(hv, "attach", refuse)
    with pytest.raises(exception.HypervisorError, match="IOMMU"):
        stack.conductor.hot_attach(uuid, DEMO)
    arq = arqs.get(stack.db, uuid, project_id=None)
    assert arq["state"] == st.ARQ_UNBOUND and arq["instance_uuid"] is None
    assert _hot(stack.db, uuid) == st.ARQ_INITIAL and _free(stack) == free


def test_the_detach_of_a_deleted_guests_device_releases_it(
        stack: Stack, hv: fake.FakeHypervisor) -> None:
    uuid, free = _arq(stack), _free(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    hv.remove_guest(DEMO)
    view = stack.conductor.hot_detach(uuid)
    assert view["state"] == st.ARQ_UNBOUND and view["hot_plug"] == st.ARQ_INITIAL
    assert _free(stack) == free


def test_only_an_initial_or_unbound_arq_is_attached(stack: Stack) -> None:
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    with pytest.raises(exception.ARQBadState):
        stack.conductor.hot_attach(uuid, DEMO)


def test_without_nova_only_an_admin_attaches(stack: Stack) -> None:
    uuid = _arq(stack)
    with pytest.raises(exception.Forbidden):
        stack.conductor.hot_attach(uuid, DEMO, project_id=PROJECT)
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_INITIAL


def test_nothing_on_the_host_fits(stack: Stack) -> None:
    uuid = _arq(stack, rc="CUSTOM_NOTHING_HAS_IT")
    with pytest.raises(exception.NoFreeAttachHandle):
        stack.conductor.hot_attach(uuid, DEMO)
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_INITIAL


@pytest.fixture(scope="module")
def placement() -> Iterator[PlacementServer]:
    with PlacementServer() as server:
        yield server


@contextlib.contextmanager
def _synced(placement: PlacementServer, tmp_path: Any, guests: dict[str, str],
            **stack_options: Any
            ) -> Iterator[tuple[Stack, str, str, fake.FakeHypervisor]]:
    """A new host (its compute node made in Placement) whose agent's fake hypervisor runs
    ``guests`` (uuid -> name), devices reported, readied and synced; (stack, host,
    compute node uuid, hypervisor). ``stack_options``: more of :class:`Stack`'s, the
    agent's collaborators as ``agent_collaborators``."""
    host = f"cn-{uuidlib.uuid4().hex[:8]}"
    compute = placement.create_compute_node(host)
    db = Database(f"sqlite:///{tmp_path / 'acceld.sqlite'}")
    migration.upgrade(db)
    hv = fake.FakeHypervisor(list(guests.items()))
    collaborators = {"hypervisor": hv, **stack_options.pop("agent_collaborators", {})}
    stack = Stack(db, hosts=(host,), agent_collaborators=collaborators,
                  placement=dict(placement.acceld_config(), sync_interval=3600.0,
                                 status_code_retry_delay=0.01, connect_retry_delay=0.01),
                  **stack_options)
    try:
        stack.report_all()
        stack.ready_all()
        assert stack.conductor.placement is not None
        assert stack.conductor.placement.wait_idle(60)
        yield stack, host, compute, hv
    finally:
        stack.stop()


def _nova_made(placement: PlacementServer, instance: str, compute: str, vcpus: int) -> None:
    """The allocations Nova makes for an instance at boot."""
    resp = placement.admin_session().put(f"/allocations/{instance}", json={
        "allocations": {compute: {"resources": {"VCPU": vcpus}}},
        "consumer_generation": None, "project_id": PROJECT, "user_id": "u1",
        "consumer_type": "INSTANCE"})
    assert resp.status_code == 204, resp.text


def test_the_device_joins_and_leaves_the_instances_placement_allocations(
        placement: PlacementServer, tmp_path: Any) -> None:
    """Against the real Placement: the device's class is added to the allocations Nova
    made for the instance (consumer generation respected) and taken back on detach."""
    instance = str(uuidlib.uuid4())
    admin = placement.admin_session()
    with _synced(placement, tmp_path, {instance: "vm-1"}) as (stack, _host, compute, _hv):
        _nova_made(placement, instance, compute, vcpus=2)
        uuid = _arq(stack)
        view = stack.conductor.hot_attach(uuid, instance)
        allocs = admin.get(f"/allocations/{instance}").json()
        assert allocs["allocations"] == {
            compute: {"resources": {"VCPU": 2}, "generation": mock.ANY},
            view["device_rp_uuid"]: {"resources": {"PGPU": 1}, "generation": mock.ANY}}
        assert allocs["consumer_generation"] == 2 and allocs["project_id"] == PROJECT
        assert allocs["user_id"] == "u1" and allocs["consumer_type"] == "INSTANCE"
        stack.conductor.hot_detach(uuid)
        allocs = admin.get(f"/allocations/{instance}").json()
        assert allocs["allocations"] == {
            compute: {"resources": {"VCPU": 2}, "generation": mock.ANY}}


def test_reconcile_attaches_again_what_a_redefined_guest_lost(
        stack: Stack, hv: fake.FakeHypervisor) -> None:
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    hv.redefine(DEMO)                               # Nova's hard reboot, stop/start
    assert _aliases(stack, DEMO) == []
    assert stack.conductor.reconcile_hot_plug()["reattached"] == [uuid]
    assert _aliases(stack, DEMO) == [devicexml.alias(uuid)]
    assert stack.conductor.reconcile_hot_plug() == NOTHING_DONE


def test_reconcile_releases_what_a_deleted_guest_held(stack: Stack,
                                                      hv: fake.FakeHypervisor) -> None:
    uuid, free = _arq(stack), _free(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    hv.remove_guest(DEMO)                           # deleted: Nova tells acceld nothing
    assert stack.conductor.reconcile_hot_plug()["released"] == [uuid]
    arq = arqs.get(stack.db, uuid, project_id=None)
    assert arq["state"] == st.ARQ_UNBOUND and _hot(stack.db, uuid) == "Initial"
    assert _free(stack) == free


def test_reconcile_finishes_a_detach_whose_device_went(stack: Stack,
                                                       hv: fake.FakeHypervisor) -> None:
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, STUBBORN)
    assert stack.conductor.hot_detach(uuid)["hot_plug"] == st.HOT_DETACHING
    hv.set_ignores_unplug(STUBBORN, False)
    hv.redefine(STUBBORN)                           # released while nobody listened
    assert stack.conductor.reconcile_hot_plug()["detached"] == [uuid]
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_UNBOUND


def test_reconcile_leaves_a_host_it_cannot_ask(stack: Stack) -> None:
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    stack.agents["host1"].stop()
    stack._agent_servers["host1"].stop()
    assert stack.conductor.reconcile_hot_plug() == NOTHING_DONE
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_BOUND


def test_the_v2_extension_attaches_shows_and_detaches(stack: Stack) -> None:
    uuid = _arq(stack)
    base = f"/v2/accelerator_requests/{uuid}"
    assert stack.call("GET", f"{base}/hot_plug").json["hot_plug"] == "Initial"
    resp = stack.call("PUT", f"{base}/hot_plug", {"instance_uuid": DEMO})
    assert resp.status_int == 200, resp.text
    shown = stack.call("GET", base).json
    assert resp.json == {**shown, "hot_plug": st.HOT_ATTACHED}   # the ARQ as v2 shows it
    assert shown["state"] == st.ARQ_BOUND and shown["instance_uuid"] == DEMO
    resp = stack.call("DELETE", f"{base}/hot_plug")
    assert resp.status_int == 200 and resp.json["hot_plug"] == "Initial"
    assert resp.json["state"] == st.ARQ_UNBOUND


@pytest.mark.parametrize(("body", "status", "names"), [
    ({}, 400, "instance_uuid"),
    ({"instance_uuid": "not-a-uuid"}, 400, "instance_uuid"),
    ({"instance_uuid": DEMO, "host": "h"}, 400, "host"),
    ({"instance_uuid": "de300001-0000-4000-8000-0000000000ff"}, 404, "de300001"),
])
def test_the_v2_extension_refuses_bad_input_naming_it(stack: Stack, body: dict[str, str],
                                                       status: int, names: str) -> None:
    uuid = _arq(stack)
    resp = stack.call("PUT", f"/v2/accelerator_requests/{uuid}/hot_plug", body)
    assert resp.status_int == status and names in resp.text, resp.text
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_INITIAL


def test_the_v2_extension_404s_an_unknown_arq(stack: Stack) -> None:
    path = f"/v2/accelerator_requests/{uuidlib.uuid4()}/hot_plug"
    assert stack.call("PUT", path, {"instance_uuid": DEMO}).status_int == 404
    assert stack.call("DELETE", path).status_int == 404
    assert stack.call("GET", path).status_int == 404


class _CrashAfter:
    """The agent dies during the attach: after the hypervisor attached the device
    (``attached``) or before; the conductor hears no answer (a RemoteFailure)."""

    def __init__(self, hv: fake.FakeHypervisor, attached: bool) -> None:
        self._hv, self._attached = hv, attached

    def __call__(self, instance: str, device_xml: str) -> None:
        if self._attached:
            fake.FakeHypervisor.attach(self._hv, instance, device_xml)
        raise RuntimeError("agent killed")


@pytest.fixture
def clock() -> Iterator[None]:
    timeutils.set_time_override()
    yield
    timeutils.clear_time_override()


@pytest.mark.parametrize("attached", [True, False])
def test_an_attach_nobody_saw_end_is_settled_from_the_guest_after_the_grace(
        stack: Stack, hv: fake.FakeHypervisor, monkeypatch: pytest.MonkeyPatch,
        clock: None, attached: bool) -> None:
    uuid, free = _arq(stack), _free(stack)
    monkeypatch.setattr(hv, "attach", _CrashAfter(hv, attached))
    with pytest.raises(exception.Unavailable, match="stays Attaching"):
        stack.conductor.hot_attach(uuid, DEMO)
    assert _hot(stack.db, uuid) == st.HOT_ATTACHING
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_BOUND
    assert stack.conductor.reconcile_hot_plug() == NOTHING_DONE      # within the grace
    # past the grace from the ARQ's own last write (taken from the real clock, however
    # long the set-up took on a loaded machine)
    with stack.db.rows() as conn:
        written = conn.execute(select(m.ExtendedAcceleratorRequest.updated_at).where(
            m.ExtendedAcceleratorRequest.uuid == uuid)).scalar_one()
    timeutils.set_time_override(
        written + datetime.timedelta(seconds=2 * stack.conf.rpc_timeout + 1))
    done = stack.conductor.reconcile_hot_plug()
    if attached:        # the guest holds it: the records follow the host
        assert done == {**NOTHING_DONE, "adopted": [uuid]}
        assert _hot(stack.db, uuid) == st.HOT_ATTACHED
        assert _aliases(stack, DEMO) == [devicexml.alias(uuid)] and _free(stack) == free - 1
    else:               # it never got there: nothing held, nothing leaked
        assert done == {**NOTHING_DONE, "released": [uuid]}
        assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_UNBOUND
        assert _aliases(stack, DEMO) == [] and _free(stack) == free


def test_placement_down_is_a_503_and_nothing_changes(placement: PlacementServer,
                                                    tmp_path: Any) -> None:
    instance = str(uuidlib.uuid4())
    with _synced(placement, tmp_path, {instance: "vm"}) as (stack, host, _compute, _hv):
        db = stack.db
        uuid, free = _arq(stack), _free_on(stack, host)
        placement.set_down(True)
        try:
            with pytest.raises(exception.Unavailable, match="Placement"):
                stack.conductor.hot_attach(uuid, instance)
        finally:
            placement.set_down(False)
        assert arqs.get(db, uuid, project_id=None)["state"] == st.ARQ_INITIAL
        assert _hot(db, uuid) == st.ARQ_INITIAL
        assert _free_on(stack, host) == free and _aliases_on(stack, host, instance) == []


def test_a_host_that_lived_through_a_crash_a_reboot_and_a_delete_ends_as_it_is(
        placement: PlacementServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the real Placement: the agent dies in the middle of one attach (after the
    device reached the guest), the host reboots (a new boot id; Nova's restart of a guest
    defines it again without acceld's device; six devices do not come back, one of them
    held) and a guest is deleted while acceld is not told. When the agent starts again,
    the records and Placement match the host: nothing lost, nothing leaked, the vanished
    device that a guest holds kept and reported missing."""
    vm = {name: str(uuidlib.uuid4()) for name in ("crashed", "rebooted", "deleted")}
    boot = {"id": "boot-1"}
    admin = placement.admin_session()
    with _synced(placement, tmp_path, {uuid: name for name, uuid in vm.items()},
                 device_count=8, fake_driver={"device_types": ["GPU"]},
                 agent_collaborators={"boot_id": lambda: boot["id"]}) as (
                     stack, host, compute, hv):
        db = stack.db
        for uuid in vm.values():
            _nova_made(placement, uuid, compute, vcpus=1)
        arq = {name: _arq(stack) for name in vm}
        stack.conductor.hot_attach(arq["rebooted"], vm["rebooted"])
        stack.conductor.hot_attach(arq["deleted"], vm["deleted"])
        with monkeypatch.context() as m:            # the agent dies mid-attach
            m.setattr(hv, "attach", _CrashAfter(hv, attached=True))
            with pytest.raises(exception.Unavailable):
                stack.conductor.hot_attach(arq["crashed"], vm["crashed"])

        boot["id"] = "boot-2"                       # the host reboots ...
        hv.redefine(vm["rebooted"])                 # ... Nova restarts the guest without it
        hv.remove_guest(vm["deleted"])              # deleted; Nova tells acceld nothing
        assert admin.delete(f"/allocations/{vm['deleted']}").status_code == 204
        # devices 2-7 are gone after the reboot; the crashed attach holds device 2 (the
        # attaches took the first free device in turn: rebooted 0, deleted 1, crashed 2)
        assert [_device_of(db, arq[n]) for n in ("rebooted", "deleted", "crashed")] == [
            f"{host}-fake-gpu-{i}" for i in range(3)]
        stack.set_control(device_count=2)
        agent = stack.restart_agent(host)
        agent.start()                               # recover(): the conductor reconciles
        wait_for(lambda: _hot(db, arq["deleted"]) == "Initial"
                 and _hot(db, arq["crashed"]) == st.HOT_ATTACHED
                 and _aliases_on(stack, host, vm["rebooted"]) == [
                     devicexml.alias(arq["rebooted"])]
                 and _health(db, f"{host}-fake-gpu-2") == "missing"
                 and _health(db, f"{host}-fake-gpu-3") is None, timeout=30)

        for name in ("crashed", "rebooted"):        # held, as the host holds them
            view = arqs.get(db, arq[name], project_id=None)
            assert view["state"] == st.ARQ_BOUND and view["instance_uuid"] == vm[name]
            assert _aliases_on(stack, host, vm[name]) == [devicexml.alias(arq[name])]
            allocs = admin.get(f"/allocations/{vm[name]}").json()["allocations"]
            assert allocs[view["device_rp_uuid"]]["resources"] == {"PGPU": 1}
        gone = arqs.get(db, arq["deleted"], project_id=None)
        assert gone["state"] == st.ARQ_UNBOUND and gone["instance_uuid"] is None
        assert admin.get(f"/allocations/{vm['deleted']}").json()["allocations"] == {}
        assert _free_on(stack, host) == 1      # device 1, the deleted guest's
        devices = [row["rp_uuid"] for row in placement_objects.host_inputs(db, host).rows]
        assert len(devices) == 3

        def children() -> list[str]:
            tree = admin.get(f"/resource_providers?in_tree={compute}").json()
            return sorted(rp["uuid"] for rp in tree["resource_providers"]
                          if rp["uuid"] != compute)

        wait_for(lambda: children() == sorted(devices), timeout=30)   # the sync follows
        assert sum(admin.get(f"/resource_providers/{rp}/usages").json()["usages"]
                   .get("PGPU", 0) for rp in devices) == 2


def _device_of(db: Database, arq: str) -> str:
    rp = arqs.get(db, arq, project_id=None)["device_rp_uuid"]
    with db.reader() as s:
        return str(s.execute(select(m.Device.name).join(m.Deployable,
                                                        m.Deployable.device_id == m.Device.id)
                             .where(m.Deployable.rp_uuid == rp)).scalar_one())


def _health(db: Database, device: str) -> str | None:
    """The device's health as acceld keeps it (``missing``: vanished while held); None
    once it is deleted."""
    with db.reader() as s:
        return s.execute(select(m.Device.health).where(m.Device.name == device)).scalar()


def _free_on(stack: Stack, host: str) -> int:
    return sum(arqs.free_handles_by_provider(stack.db, host).values())


def _aliases_on(stack: Stack, host: str, instance: str) -> list[str]:
    guests = rpc.AgentClient(stack.transport, timeout=10).guests(host)
    return next(g["aliases"] for g in guests if g["uuid"] == instance)


SERVICE = {"X-Auth-Token": "nova-user:proj-hot", "X-Service-Token": "nova"}


def test_an_arq_attached_live_is_not_unbound_or_deleted_from_under_its_guest(
        stack: Stack) -> None:
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    unbind = stack.call("PATCH", "/v2/accelerator_requests",
                        {uuid: [{"op": "remove", "path": "/hostname"}]}, headers=SERVICE)
    delete = stack.call("DELETE", f"/v2/accelerator_requests/{uuid}", headers=SERVICE)
    for resp in (unbind, delete):
        assert resp.status_int == 409 and "detach it first" in resp.text, resp.text
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_BOUND
    assert _aliases(stack, DEMO) == [devicexml.alias(uuid)]
    stack.conductor.hot_detach(uuid)                # the detach, then the delete
    assert stack.call("DELETE", f"/v2/accelerator_requests/{uuid}",
                      headers=SERVICE).status_int == 204


def test_a_hot_attach_begun_keeps_its_arq_from_a_delete_by_uuid(stack: Stack) -> None:
    """A hot attach marks its ARQ Attaching before it binds: a delete of that one ARQ
    (no lock taken: it holds nothing yet) refuses it as a locked delete does."""
    uuid = _arq(stack)
    assert arqs.set_hot_plug_state(stack.db, uuid, st.HOT_ATTACHING, expect={st.ARQ_INITIAL})
    with pytest.raises(exception.ARQBadState, match="detach it first"):
        arqs.delete_by_uuids(stack.db, [uuid], project_id=None, service=True)
    assert _hot(stack.db, uuid) == st.HOT_ATTACHING


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] == "mysql"])
def test_an_unbind_that_read_before_a_hot_attach_began_does_not_undo_it(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unbind that reads, then writes as read (MySQL and MariaDB; elsewhere it reads
    under a row lock, so no attach can begin between) writes only if the
    hot-plug state is still as it read it: a hot attach marked since makes it read again,
    and refuse."""
    uuid = _arq(stack)
    read = arqs._read

    def read_then_attach_begins(db: Any, stmt: Any, params: dict[str, Any]) -> Any:
        rows = read(db, stmt, params)
        if any(stmt is holding for holding in arqs._HOLDING.values()):
            arqs.set_hot_plug_state(stack.db, uuid, st.HOT_ATTACHING,
                                    expect={st.ARQ_INITIAL})
        return rows

    monkeypatch.setattr(arqs, "_read", read_then_attach_begins)
    with pytest.raises(exception.ARQBadState, match="detach it first"):
        arqs.unbind(stack.db, uuid, project_id=None)
    assert _hot(stack.db, uuid) == st.HOT_ATTACHING


def test_novas_delete_of_the_instance_takes_its_hot_plugged_arqs(stack: Stack) -> None:
    uuid, free = _arq(stack), _free(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    resp = stack.call("DELETE", f"/v2/accelerator_requests?instance={DEMO}", headers=SERVICE)
    assert resp.status_int == 204, resp.text
    with pytest.raises(exception.ARQNotFound):
        arqs.get(stack.db, uuid, project_id=None)
    assert _free(stack) == free


def test_a_pass_puts_back_nothing_whose_detach_came_after_its_read(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass reads the hot-plugged ARQs, then asks the guests: a detach done between the
    two (the read says Attached, the guest no longer holds the device) is not undone."""
    uuid = _arq(stack)
    stack.conductor.hot_attach(uuid, DEMO)
    agents = rpc.AgentClient(stack.transport, timeout=10)
    guests = agents.guests

    def detached_first(host: str) -> list[dict[str, Any]]:
        assert stack.conductor.hot_detach(uuid)["hot_plug"] == "Initial"
        return guests(host)
    monkeypatch.setattr(rpc.AgentClient, "guests", lambda self, host: detached_first(host))
    assert stack.conductor.reconcile_hot_plug() == NOTHING_DONE
    monkeypatch.undo()
    assert _aliases(stack, DEMO) == []
    assert arqs.get(stack.db, uuid, project_id=None)["state"] == st.ARQ_UNBOUND
