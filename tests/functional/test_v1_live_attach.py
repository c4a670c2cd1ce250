"""v1 attach to an instance through the real conductor and agents (fake hypervisors):
the instance must run on the accelerator's host, each attach handle goes into the guest
under its own alias, a failure leaves nothing behind, and a detach frees the device only
once the guest released every handle."""

from __future__ import annotations

import datetime
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
from oslo_utils import timeutils
from sqlalchemy import func, select

from acceld import exception, rpc
from acceld import states as st
from acceld.conductor import hotplug
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators
from acceld.virt import devicexml, fake
from tests.stack import Stack

VM1 = "0a0a0a0a-0000-4000-8000-000000000001"      # runs on host1
STUBBORN = "0a0a0a0a-0000-4000-8000-000000000002"  # on host1, keeps its devices
VM2 = "0a0a0a0a-0000-4000-8000-000000000003"       # runs on host2
PROJECT = "proj-v1"


@pytest.fixture
def hvs() -> dict[str, fake.FakeHypervisor]:
    return {"host1": fake.FakeHypervisor([(VM1, "vm-1"), (STUBBORN, "stubborn")],
                                         ignore_unplug=[STUBBORN]),
            "host2": fake.FakeHypervisor([(VM2, "vm-2")])}


@pytest.fixture
def stack(db: Database, hvs: dict[str, fake.FakeHypervisor]) -> Iterator[Stack]:
    with Stack.reported(db, hosts=("host1", "host2"),
                        agent_collaborators=lambda host: {"hypervisor": hvs[host]}) as s:
        s.ready_all()
        yield s


def _acc(stack: Stack, kind: str = "QAT", host: str = "host1") -> str:
    (acc,) = [a for a in accelerators.list_accelerators(stack.db, host=host).items
              if a["device_type"] == kind]
    return str(acc["uuid"])


def _aliases(stack: Stack, host: str, instance: str) -> list[str]:
    guests = rpc.AgentClient(stack.transport, timeout=10).guests(host)
    return next(list(g["aliases"]) for g in guests if g["uuid"] == instance)


def _handles(stack: Stack, uuid: str) -> tuple[list[str], int]:
    """(the device's handle uuids, how many are in use)."""
    with stack.db.reader() as s:
        dev_id = s.execute(select(m.Device.id).where(m.Device.uuid == uuid)).scalar_one()
        of_dev = m.AttachHandle.deployable_id.in_(
            select(m.Deployable.id).where(m.Deployable.device_id == dev_id))
        uuids = list(s.execute(select(m.AttachHandle.uuid).where(of_dev)
                               .order_by(m.AttachHandle.id)).scalars())
        used = s.execute(select(func.count()).select_from(m.AttachHandle)
                         .where(of_dev, m.AttachHandle.in_use.is_(True))).scalar_one()
    return uuids, used


def _attached(stack: Stack, uuid: str) -> dict[str, str] | None:
    return accelerators.get_accelerator(stack.db, uuid)["attached_to"]


def test_each_handle_goes_into_the_guest_under_its_own_alias_and_leaves_on_detach(
        stack: Stack) -> None:
    qat = _acc(stack)
    handles, used = _handles(stack, qat)
    assert len(handles) == 4 and used == 0
    record = stack.conductor.attach(qat, "instance", VM1)
    assert record["attached_to"] == {"type": "instance", "id": VM1, "hot_plug": st.HOT_ATTACHED}
    assert _aliases(stack, "host1", VM1) == [devicexml.alias(h) for h in handles]
    assert _handles(stack, qat)[1] == 4

    stack.conductor.detach(qat)
    assert _aliases(stack, "host1", VM1) == []
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0


def test_an_instance_no_host_runs_is_not_found_and_nothing_changes(stack: Stack) -> None:
    qat = _acc(stack)
    revision = accelerators.get_accelerator(stack.db, qat)["revision"]
    resp = stack.call("PUT", f"/v1/accelerators/{qat}",
                      {"instance_uuid": str(uuidlib.uuid4())})
    assert resp.status_int == 404, resp.text
    assert resp.json["errors"][0]["code"] == "acceld.guest.not_found"
    after = accelerators.get_accelerator(stack.db, qat)
    assert (after["attached_to"], after["revision"]) == (None, revision)
    assert _handles(stack, qat)[1] == 0 and _aliases(stack, "host1", VM1) == []


def test_an_instance_of_another_host_is_a_conflict_naming_both_hosts(stack: Stack) -> None:
    qat = _acc(stack)
    resp = stack.call("PUT", f"/v1/accelerators/{qat}", {"instance_uuid": VM2})
    assert resp.status_int == 409, resp.text
    detail = resp.json["errors"][0]["detail"]
    assert f"Instance {VM2} runs on host host2" in detail and "on host host1" in detail
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0
    assert _aliases(stack, "host2", VM2) == []
    # the accelerator of the instance's own host goes
    other = _acc(stack, host="host2")
    assert stack.conductor.attach(other, "instance", VM2)["attached_to"]["id"] == VM2
    assert len(_aliases(stack, "host2", VM2)) == 4


def _fail_second_attach(monkeypatch: pytest.MonkeyPatch, hv: fake.FakeHypervisor,
                        error: Exception) -> list[str]:
    """``hv`` attaches the first device, then raises ``error`` (a refusal, or an agent
    dying mid-attach) for the second and attaches the rest; the device XML it was given."""
    attach, calls = hv.attach, []

    def fail_the_second(instance: str, device_xml: str) -> None:
        calls.append(device_xml)
        if len(calls) == 2:
            raise error
        attach(instance, device_xml)

    monkeypatch.setattr(hv, "attach", fail_the_second)
    return calls


def test_a_hypervisor_refusal_undoes_the_claim_and_what_was_attached(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor],
        monkeypatch: pytest.MonkeyPatch) -> None:
    qat, hv = _acc(stack), hvs["host1"]
    calls = _fail_second_attach(
        monkeypatch, hv, exception.HypervisorError("internal error: no IOMMU group for "
                                                   "the device"))
    resp = stack.call("PUT", f"/v1/accelerators/{qat}", {"instance_uuid": VM1})
    assert resp.status_int == 502, resp.text
    assert "no IOMMU group for the device" in resp.json["errors"][0]["detail"]
    assert len(calls) == 2                      # the first was attached, then taken out
    assert _aliases(stack, "host1", VM1) == []
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0


def test_a_guest_that_keeps_its_devices_leaves_the_detach_pending(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor]) -> None:
    qat = _acc(stack)
    handles, _ = _handles(stack, qat)
    stack.conductor.attach(qat, "instance", STUBBORN)
    for _ in range(2):                          # asking again waits again
        resp = stack.call("DELETE", f"/v1/accelerators/{qat}")
        assert resp.status_int == 409, resp.text
        assert resp.json["errors"][0]["detail"] == (
            f"Detach of accelerator {qat} from instance {STUBBORN} is pending: the guest "
            "has not released 4 of its devices yet; it stays attached. Ask again to wait "
            "again.")
        assert _attached(stack, qat) == {
            "type": "instance", "id": STUBBORN, "hot_plug": st.HOT_DETACHING}
        assert _handles(stack, qat)[1] == 4
        assert _aliases(stack, "host1", STUBBORN) == [devicexml.alias(h) for h in handles]
    hvs["host1"].set_ignores_unplug(STUBBORN, False)
    assert stack.call("DELETE", f"/v1/accelerators/{qat}").status_int == 204
    assert _attached(stack, qat) is None and _aliases(stack, "host1", STUBBORN) == []


def test_the_attachment_of_a_deleted_instance_is_detached(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor]) -> None:
    qat = _acc(stack)
    stack.conductor.attach(qat, "instance", VM1)
    hvs["host1"].remove_guest(VM1)              # deleted, its devices with it
    stack.conductor.detach(qat)
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0


def test_the_reconcile_detaches_what_a_deleted_instance_held(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor]) -> None:
    """Nova tells acceld nothing when an instance goes: the periodic reconcile (and an
    agent's start) finds the guest gone and frees the device; a live one is untouched."""
    gone, kept = _acc(stack), _acc(stack, "GPU")
    stack.conductor.attach(gone, "instance", VM1)
    stack.conductor.attach(kept, "instance", STUBBORN)
    hvs["host1"].remove_guest(VM1)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == [gone]
    assert _attached(stack, gone) is None and _handles(stack, gone)[1] == 0
    assert _attached(stack, kept) == {
        "type": "instance", "id": STUBBORN, "hot_plug": st.HOT_ATTACHED}
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == []


def test_another_projects_detach_unplugs_nothing(stack: Stack) -> None:
    qat = _acc(stack)
    stack.conductor.attach(qat, "instance", VM1)     # an admin's: no project's
    with pytest.raises(exception.OtherProject):
        stack.conductor.detach(qat, project_id=PROJECT)
    assert len(_aliases(stack, "host1", VM1)) == 4
    assert _attached(stack, qat) == {"type": "instance", "id": VM1, "hot_plug": st.HOT_ATTACHED}


def test_without_nova_a_projects_attach_is_forbidden(stack: Stack) -> None:
    qat = _acc(stack)
    with pytest.raises(exception.Forbidden):
        stack.conductor.attach(qat, "instance", VM1, project_id=PROJECT)
    assert _attached(stack, qat) is None and _aliases(stack, "host1", VM1) == []


def test_a_host_attachment_touches_no_guest(stack: Stack) -> None:
    qat = _acc(stack)
    assert stack.conductor.attach(qat, "host", "host1")["attached_to"] == {
        "type": "host", "id": "host1"}
    assert _aliases(stack, "host1", VM1) == [] and _handles(stack, qat)[1] == 4
    stack.conductor.detach(qat)
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0


@pytest.fixture
def clock() -> Iterator[None]:
    timeutils.set_time_override()
    yield
    timeutils.clear_time_override()


def _hot_plug(stack: Stack, uuid: str) -> str | None:
    """The attachment's hot-plug substate (Attaching, Attached, Detaching)."""
    with stack.db.reader() as s:
        return s.execute(select(m.Device.hot_plug).where(m.Device.uuid == uuid)).scalar_one()


def _past_the_grace(stack: Stack, uuid: str) -> None:
    """The clock past the attach's grace from the device's own last write (taken from
    the real clock, however long the set-up took on a loaded machine)."""
    with stack.db.reader() as s:
        written = s.execute(select(m.Device.updated_at).where(m.Device.uuid == uuid)
                            ).scalar_one()
    timeutils.set_time_override(
        written + datetime.timedelta(seconds=2 * stack.conf.rpc_timeout + 1))


def test_an_attach_whose_agent_died_stays_and_the_reconcile_completes_it(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor],
        monkeypatch: pytest.MonkeyPatch, clock: None) -> None:
    """The agent dies after the first of the device's 4 handles reached the guest: the
    records stay attached (the guest may hold devices), and the reconcile attaches the
    handles the guest lacks once the attach is past its grace (as a hot-plugged ARQ's);
    a guest Nova defined again gets them back the same way."""
    qat, hv = _acc(stack), hvs["host1"]
    with monkeypatch.context() as patched:
        _fail_second_attach(patched, hv, RuntimeError("agent killed"))
        with pytest.raises(exception.Unavailable, match="stays attached"):
            stack.conductor.attach(qat, "instance", VM1)
    assert _attached(stack, qat) == {"type": "instance", "id": VM1, "hot_plug": st.HOT_ATTACHING}
    assert _hot_plug(stack, qat) == st.HOT_ATTACHING
    assert len(_aliases(stack, "host1", VM1)) == 1
    # within the grace the agent may still be attaching: nothing is put, and a detach
    # waits for the attach to end
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == []
    assert len(_aliases(stack, "host1", VM1)) == 1
    with pytest.raises(exception.Conflict, match="being attached"):
        stack.conductor.detach(qat)
    _past_the_grace(stack, qat)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == []
    assert len(_aliases(stack, "host1", VM1)) == 4
    assert _hot_plug(stack, qat) == st.HOT_ATTACHED
    hv.redefine(VM1)                                # Nova's hard reboot, stop/start
    stack.conductor.reconcile_hot_plug()
    assert len(_aliases(stack, "host1", VM1)) == 4
    assert _attached(stack, qat) == {"type": "instance", "id": VM1, "hot_plug": st.HOT_ATTACHED}


def test_an_attach_nobody_saw_end_whose_instance_went_is_detached_after_the_grace(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor],
        monkeypatch: pytest.MonkeyPatch, clock: None) -> None:
    qat, hv = _acc(stack), hvs["host1"]
    with monkeypatch.context() as patched:
        _fail_second_attach(patched, hv, RuntimeError("agent killed"))
        with pytest.raises(exception.Unavailable):
            stack.conductor.attach(qat, "instance", VM1)
    hv.remove_guest(VM1)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == []      # the grace
    _past_the_grace(stack, qat)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == [qat]
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0


def _other_conductor(stack: Stack) -> hotplug.HotPlug:
    """The hot plug of a second conductor (its own in-flight set): only the records
    stand between its reconcile and this conductor's attaches and detaches."""
    return hotplug.HotPlug(stack.db, rpc.AgentClient(stack.transport, timeout=10),
                           binder=None, attach_grace=2 * stack.conf.rpc_timeout)


def test_a_detach_the_guest_answers_late_is_completed_not_undone_by_the_reconcile(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor]) -> None:
    """A pending detach (409) is remembered: while the guest holds some of the handles
    the reconcile leaves them as they are (never putting back the ones released), and
    once it released them all the reconcile detaches the accelerator in the records."""
    qat, hv = _acc(stack), hvs["host1"]
    handles, _ = _handles(stack, qat)
    stack.conductor.attach(qat, "instance", STUBBORN)
    with pytest.raises(exception.Conflict, match="pending"):
        stack.conductor.detach(qat)
    hv.set_ignores_unplug(STUBBORN, False)          # the guest's OS answers the eject late
    for handle in handles[:2]:
        hv.detach(STUBBORN, devicexml.alias(handle), 0)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == []
    assert _aliases(stack, "host1", STUBBORN) == [devicexml.alias(h) for h in handles[2:]]
    assert _attached(stack, qat) == {
        "type": "instance", "id": STUBBORN, "hot_plug": st.HOT_DETACHING}
    assert _hot_plug(stack, qat) == st.HOT_DETACHING
    for handle in handles[2:]:
        hv.detach(STUBBORN, devicexml.alias(handle), 0)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == [qat]
    assert _aliases(stack, "host1", STUBBORN) == []
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0
    assert _hot_plug(stack, qat) is None


@pytest.mark.parametrize("other", [False, True], ids=["this-conductor", "another"])
def test_a_reconcile_between_the_guests_release_and_the_records_puts_nothing_back(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, other: bool) -> None:
    """A pass that runs after the guest released the handles and before the detach is
    written leaves the guest empty: this conductor's pass leaves the detach it runs
    alone, another's completes it in the records."""
    qat = _acc(stack)
    stack.conductor.attach(qat, "instance", VM1)
    reconcile = (_other_conductor(stack).reconcile if other
                 else stack.conductor.reconcile_hot_plug)
    detach, passes = accelerators.detach, []

    def pass_first(*args: Any, **kwargs: Any) -> bool:
        if not passes:                  # the request's detach (not the pass's own)
            passes.append({})
            passes[0] = reconcile()
        return detach(*args, **kwargs)

    monkeypatch.setattr(accelerators, "detach", pass_first)
    stack.conductor.detach(qat)
    assert passes[0]["v1_detached"] == ([qat] if other else [])
    assert _aliases(stack, "host1", VM1) == []
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0


@pytest.mark.parametrize("other", [False, True], ids=["this-conductor", "another"])
@pytest.mark.parametrize("refused", [False, True], ids=["attached", "refused"])
def test_a_reconcile_during_an_attach_puts_no_handle(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, other: bool, refused: bool) -> None:
    """A pass that runs after the attach put its first handle puts none of the others
    (the attach puts them, once), so an attach the hypervisor then refuses leaves the
    guest as it was."""
    qat = _acc(stack)
    reconcile = (_other_conductor(stack).reconcile if other
                 else stack.conductor.reconcile_hot_plug)
    put, by_attach, by_pass, passing = rpc.AgentClient.attach_to_guest, [], [], []

    def attach_to_guest(self: rpc.AgentClient, *args: Any, **kwargs: Any) -> None:
        if passing:                                 # the pass runs: its own put
            by_pass.append(args)
            return put(self, *args, **kwargs)
        by_attach.append(args)
        if refused and len(by_attach) == 2:
            raise exception.HypervisorError("internal error: no IOMMU group")
        put(self, *args, **kwargs)
        if len(by_attach) == 1:
            passing.append(True)
            try:
                reconcile()
            finally:
                passing.clear()

    monkeypatch.setattr(rpc.AgentClient, "attach_to_guest", attach_to_guest)
    if refused:
        with pytest.raises(exception.HypervisorError):
            stack.conductor.attach(qat, "instance", VM1)
        assert by_pass == [] and _aliases(stack, "host1", VM1) == []
        assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0
    else:
        stack.conductor.attach(qat, "instance", VM1)
        assert by_pass == []
        assert len(by_attach) == 4 and len(_aliases(stack, "host1", VM1)) == 4
        assert _hot_plug(stack, qat) == st.HOT_ATTACHED


def test_a_detach_while_the_reconcile_puts_a_handle_back_is_asked_again(
        stack: Stack, hvs: dict[str, fake.FakeHypervisor],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """This conductor's pass holds the accelerator while it puts the handles a redefined
    guest lost: a detach meanwhile is a 409 to ask again; the detach stays asked, so no
    later pass puts anything back, and once the guest holds none of the handles (here:
    defined again) a pass detaches the accelerator in the records."""
    qat = _acc(stack)
    stack.conductor.attach(qat, "instance", VM1)
    hvs["host1"].redefine(VM1)
    put, refused = rpc.AgentClient.attach_to_guest, []

    def attach_to_guest(self: rpc.AgentClient, *args: Any, **kwargs: Any) -> None:
        put(self, *args, **kwargs)
        if not refused:
            with pytest.raises(exception.Conflict, match="try again") as caught:
                stack.conductor.detach(qat)
            refused.append(caught.value)

    monkeypatch.setattr(rpc.AgentClient, "attach_to_guest", attach_to_guest)
    stack.conductor.reconcile_hot_plug()
    assert len(refused) == 1 and _hot_plug(stack, qat) == st.HOT_DETACHING
    assert len(_aliases(stack, "host1", VM1)) == 4        # the pass had begun: it ends
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == []     # still held
    hvs["host1"].redefine(VM1)
    assert stack.conductor.reconcile_hot_plug()["v1_detached"] == [qat]
    assert _aliases(stack, "host1", VM1) == []
    assert _attached(stack, qat) is None and _handles(stack, qat)[1] == 0
