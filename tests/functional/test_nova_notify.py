"""Nova's ``accelerator-request-bound`` external events (contract 3.2 step 3, 10 item 4).

A loopback HTTP server stands in for Nova's compute API; acceld's ``[nova]`` points at it
with the ``admin_token`` plugin. Every body it receives is validated against the schema
Nova 34.0.0 itself applies to ``POST /os-server-external-events`` at 2.82.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from typing import Any

import pytest

from acceld import clients, exception
from acceld.clients import nova
from acceld.conductor import binding
from acceld.conductor.binding import Binder
from acceld.db.api import Database
from acceld.objects import arqs
from tests import helpers
from tests.nova_events import Receiver
from tests.stack import Stack, wait_for

PROJECT = "proj1"


def _nova_conf(url: str, **extra: Any) -> dict[str, Any]:
    # retries as configured by default, without their production back-off
    return {"auth_type": "admin_token", "endpoint": url, "token": "x",
            "connect_retry_delay": 0.01, "status_code_retry_delay": 0.01, **extra}


def _patch(uuids: list[str], rp_uuid: str, instance: str) -> dict[str, dict[str, str]]:
    return {u: {"hostname": "host1", "device_rp_uuid": rp_uuid, "instance_uuid": instance,
                "project_id": PROJECT} for u in uuids}


def _stack(db: Database, receiver: Receiver | None) -> Stack:
    groups = {"nova": _nova_conf(receiver.url)} if receiver is not None else {}
    return Stack(db, hosts=(), **groups)


def _sent(stack: Stack) -> None:
    """The conductor sends Nova's events from a thread of its own: wait until it did."""
    assert stack.conductor._binder.wait_sent(timeout=10)


def test_all_bound_sends_one_request_completed_per_arq(db: Database,
                                                       receiver: Receiver) -> None:
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=2, units=2)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        instance = str(uuidlib.uuid4())
        stack.conductor.arq_bind(_patch(uuids, rp_uuid, instance), PROJECT)
        _sent(stack)
        events = receiver.events()
        assert len(events) == 1
        assert sorted(events[0], key=lambda e: e["tag"]) == [
            {"name": "accelerator-request-bound", "server_uuid": instance, "tag": u,
             "status": "completed"} for u in sorted(uuids)]
    finally:
        stack.stop()


def test_a_bind_does_not_wait_on_novas_answer(db: Database, receiver: Receiver) -> None:
    """Nova's API holds the events request; the bind has answered all the same, and the
    event still reaches Nova once it answers (a stop sends what was resolved)."""
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        receiver.hold = threading.Event()
        stack.conductor.arq_bind(_patch(uuids, rp_uuid, str(uuidlib.uuid4())), PROJECT)
        # had the bind waited for Nova, the held request would have been answered (after
        # its 10 s) before the bind returned
        assert receiver.answered == 0
        assert arqs.get(db, uuids[0], project_id=None)["state"] == "Bound"
        wait_for(lambda: receiver.requests, timeout=10)
        receiver.hold.set()
    finally:
        stack.stop()
    assert receiver.answered == 1
    assert [e["tag"] for e in receiver.events()[0]] == uuids


def test_one_bind_failed_is_failed(db: Database, receiver: Receiver) -> None:
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=2)   # one handle short
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        instance = str(uuidlib.uuid4())
        with pytest.raises(exception.NoFreeAttachHandle):
            stack.conductor.arq_bind(_patch(uuids, rp_uuid, instance), PROJECT)
        states = {u: arqs.get(db, u, project_id=None)["state"] for u in uuids}
        assert sorted(states.values()) == ["BindFailed", "Bound"]
        _sent(stack)
        events = receiver.events()
        assert len(events) == 1
        assert {e["tag"]: e["status"] for e in events[0]} == {
            u: "completed" if s == "Bound" else "failed" for u, s in states.items()}
        assert {e["server_uuid"] for e in events[0]} == {instance}
    finally:
        stack.stop()


def test_multi_status_with_422_is_tolerated(db: Database, receiver: Receiver,
                                            caplog: pytest.LogCaptureFixture) -> None:
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=2, units=2)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        instance = str(uuidlib.uuid4())
        receiver.reply = (207, {"events": [
            {"name": "accelerator-request-bound", "server_uuid": instance, "tag": u,
             "status": "completed", "code": 422} for u in uuids]})
        with caplog.at_level("INFO", logger="acceld.clients.nova"):
            stack.conductor.arq_bind(_patch(uuids, rp_uuid, instance), PROJECT)
            _sent(stack)
        assert len(receiver.events()) == 1
        assert "422" in caplog.text
        assert "could not tell Nova" not in caplog.text
        assert all(arqs.get(db, u, project_id=None)["state"] == "Bound" for u in uuids)
    finally:
        stack.stop()


def test_client_errors_are_typed(receiver: Receiver) -> None:
    conf = helpers.make_conf(nova=_nova_conf(receiver.url))
    client = nova.NovaClient(clients.make_adapter(conf, "nova"))
    event = nova.BoundEvent(str(uuidlib.uuid4()), str(uuidlib.uuid4()), nova.COMPLETED)
    receiver.reply = (207, {"events": [{"server_uuid": event.server_uuid,
                                        "tag": event.arq_uuid, "code": 404}]})
    with pytest.raises(nova.ClientError):
        client.send_external_events([event])
    receiver.reply = (503, {})
    with pytest.raises(nova.ServerError):
        client.send_external_events([event])
    receiver.reply = (404, {})
    with pytest.raises(nova.ClientError):
        client.send_external_events([event])
    # the 503 was sent again three times ([nova] status_code_retries); the 4xx were not
    assert len(receiver.events()) == 1 + 4 + 1
    gone = Receiver()
    gone.close()
    unreachable = nova.NovaClient(clients.make_adapter(
        helpers.make_conf(nova=_nova_conf(gone.url)), "nova"))
    with pytest.raises(nova.ServerError):
        unreachable.send_external_events([event])


class _StuckWork:
    """Host work that blocks until released: a bind that does not finish in time."""

    def __init__(self) -> None:
        self.release_bind = threading.Event()
        self.released: list[str] = []

    def prepare(self, handle: dict[str, Any]) -> None:
        assert self.release_bind.wait(30)

    def release(self, handle: dict[str, Any]) -> None:
        self.released.append(handle["uuid"])


def _bind_in_thread(binder: Binder, patch: dict[str, dict[str, str]],
                    errors: list[BaseException]) -> threading.Thread:
    """``binder.bind(patch)`` on a thread of its own (started); its error into ``errors``."""
    def bind() -> None:
        try:
            binder.bind(patch, PROJECT)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    thread = threading.Thread(target=bind, daemon=True)
    thread.start()
    return thread


def test_bind_timeout_sends_failed(db: Database, receiver: Receiver) -> None:
    conf = helpers.make_conf(nova=_nova_conf(receiver.url))
    work = _StuckWork()
    notifier = nova.NovaClient(clients.make_adapter(conf, "nova"))
    binder = Binder(db, host_work=work, notifier=notifier, bind_timeout=0.3)
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    instance = str(uuidlib.uuid4())
    errors: list[BaseException] = []

    thread = _bind_in_thread(binder, _patch([uuid], rp_uuid, instance), errors)
    try:
        # the watch starts once the claim has committed: the prepare is what is stuck
        wait_for(lambda: arqs.get(db, uuid, project_id=None)["state"] == "BindStarted")
        binder.start_watch()
        wait_for(lambda: receiver.requests, timeout=10)
        assert receiver.events() == [[{"name": "accelerator-request-bound",
                                       "server_uuid": instance, "tag": uuid,
                                       "status": "failed"}]]
        assert arqs.get(db, uuid, project_id=None)["state"] == "BindFailed"
    finally:
        work.release_bind.set()
        thread.join(30)
        binder.stop_watch()
    # the late bind loses its CAS, frees its handle, and Nova hears nothing more; the
    # handle's host side was released by the expiry (its binder might have been dead)
    # and again by the late bind once its prepare ended (release is idempotent)
    assert len(errors) == 1 and isinstance(errors[0], exception.AccelDError)
    assert arqs.get(db, uuid, project_id=None)["state"] == "BindFailed"
    assert len(work.released) == 2 and len(set(work.released)) == 1
    assert len(receiver.requests) == 1


def test_bind_timeout_before_the_claim_commits_fails_the_arq(
        db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline passes while the bind's claim has not committed (the ARQ still
    Initial): Nova hears failed, the ARQ is BindFailed, and the late claim loses."""
    conf = helpers.make_conf(nova=_nova_conf(receiver.url))
    binder = Binder(db, notifier=nova.NovaClient(clients.make_adapter(conf, "nova")),
                    bind_timeout=0.3)
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    instance = str(uuidlib.uuid4())
    claim_may_go, errors = threading.Event(), []
    real_bind = binding.arqs.bind

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        assert claim_may_go.wait(30)
        return real_bind(*args, **kwargs)

    monkeypatch.setattr(binding.arqs, "bind", slow_claim)

    thread = _bind_in_thread(binder, _patch([uuid], rp_uuid, instance), errors)
    try:
        wait_for(lambda: binder.expire_overdue() == [instance])
        assert arqs.get(db, uuid, project_id=None)["state"] == "BindFailed"
        assert receiver.events() == [[{"name": "accelerator-request-bound",
                                       "server_uuid": instance, "tag": uuid,
                                       "status": "failed"}]]
    finally:
        claim_may_go.set()
        thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], exception.ARQBadState)
    arq = arqs.get(db, uuid, project_id=None)
    assert arq["state"] == "BindFailed" and arq["attach_handle_uuid"] is None
    assert len(receiver.requests) == 1


def test_no_notification_without_nova(db: Database, receiver: Receiver) -> None:
    stack = _stack(db, None)
    try:
        assert not stack.conf.nova.auth_type
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        stack.conductor.arq_bind(_patch(uuids, rp_uuid, str(uuidlib.uuid4())), PROJECT)
        assert arqs.get(db, uuids[0], project_id=None)["state"] == "Bound"
        assert receiver.requests == []
    finally:
        stack.stop()
