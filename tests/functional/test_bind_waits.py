"""The binds Nova waits on, kept in the database (objects/bind_waits.py,
conductor/binding.py), on each backend: a conductor that dies leaves its waits to any
other that owns the ARQs' host, which finishes them at their deadline; whoever takes a
wait's row tells Nova, so Nova hears once, however many conductors race.

Nova is a loopback receiver (``tests.nova_events``). A conductor that dies is a Binder
whose watch is stopped and whose bind thread is stuck in its host work: it neither
expires nor sends anything until the test lets it go, and then it unwinds as a dying
process would not (its ``finally``), which shows that its late try sends nothing twice.
"""

from __future__ import annotations

import datetime
import threading
import uuid as uuidlib
from typing import Any

import pytest
from oslo_utils import timeutils

from acceld import clients, exception
from acceld.clients import nova
from acceld.conductor import binding
from acceld.conductor.binding import Binder
from acceld.db.api import Database
from acceld.objects import arqs, bind_waits
from tests import helpers
from tests.functional.test_statement_count import StatementCounter
from tests.nova_events import Receiver
from tests.stack import wait_for

PROJECT = "proj1"
HOST = "host1"
SECOND = datetime.timedelta(seconds=1)


def _nova(receiver: Receiver) -> nova.NovaClient:
    conf = helpers.make_conf(nova=receiver.acceld_config())
    return nova.NovaClient(clients.make_adapter(conf, "nova"))


def _patch(uuids: list[str], rp_uuid: str, instance: str) -> dict[str, dict[str, str]]:
    return {u: {"hostname": HOST, "device_rp_uuid": rp_uuid, "instance_uuid": instance,
                "project_id": PROJECT} for u in uuids}


def _event(instance: str, uuid: str, status: str) -> dict[str, str]:
    return {"name": "accelerator-request-bound", "server_uuid": instance, "tag": uuid,
            "status": status}


def _state(db: Database, uuid: str) -> str:
    return arqs.get(db, uuid, project_id=None)["state"]


class Died(BaseException):
    """What unwinds a dead conductor's bind thread at the end of a test (no ``except
    Exception`` of the bind catches it, as nothing ran after a real death)."""


class StuckWork:
    """Host work whose prepare never returns while the test runs: the bind stays
    BindStarted. ``let_go`` unwinds it with :class:`Died`."""

    def __init__(self, dies: bool = True) -> None:
        self.let_go = threading.Event()
        self.dies = dies

    def prepare(self, handle: dict[str, Any]) -> None:
        assert self.let_go.wait(60)
        if self.dies:
            raise Died

    def release(self, handle: dict[str, Any]) -> None:
        return None


class ReleasingWork(binding.HostWork):
    """Host work that records the handles it releases."""

    def __init__(self) -> None:
        self.released: list[str] = []

    def release(self, handle: dict[str, Any]) -> None:
        self.released.append(handle["uuid"])


class BindThread:
    """``binder.bind(patch)`` on a thread of its own; what ends it in ``error``."""

    def __init__(self, binder: Binder, patch: dict[str, dict[str, str]]) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(binder, patch), daemon=True)
        self._thread.start()

    def _run(self, binder: Binder, patch: dict[str, dict[str, str]]) -> None:
        try:
            binder.bind(patch, PROJECT)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc

    def join(self) -> None:
        self._thread.join(30)
        assert not self._thread.is_alive()


def _dying_bind(db: Database, receiver: Receiver, bind_timeout: float = 1.0,
                ) -> tuple[Binder, StuckWork, BindThread, str, str]:
    """A conductor that begins a bind (BindStarted, Nova waiting) and dies: its watch
    stopped, its bind thread stuck. (its Binder, its work, its thread, ARQ, instance)"""
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    instance = str(uuidlib.uuid4())
    work = StuckWork()
    dead = Binder(db, host_work=work, notifier=_nova(receiver), bind_timeout=bind_timeout)
    dead.start_watch()
    thread = BindThread(dead, _patch([uuid], rp_uuid, instance))
    wait_for(lambda: _state(db, uuid) == "BindStarted")
    dead.stop_watch()
    return dead, work, thread, uuid, instance


def _wait_of(db: Database, instance: str) -> bind_waits.Wait:
    wait = bind_waits.find(db, instance)
    assert wait is not None
    return wait


# -- objects.bind_waits -----------------------------------------------------------------------

def _new_wait(token: str, deadline: datetime.datetime, host: str = HOST,
              instance: str | None = None) -> bind_waits.Wait:
    return bind_waits.Wait(instance or str(uuidlib.uuid4()), token, host,
                           [str(uuidlib.uuid4())], deadline)


def test_a_newer_request_replaces_an_instances_wait_in_one_statement(db: Database) -> None:
    now = timeutils.utcnow().replace(microsecond=0)
    first, other = _new_wait("t1", now), _new_wait("t1", now)
    with StatementCounter(db) as counter:
        bind_waits.expect(db, [first, other])
    assert counter.writes() == {("INSERT", "bind_waits"): 1}
    newer = _new_wait("t2", now + 5 * SECOND, host="host2", instance=first.instance)
    with StatementCounter(db) as counter:
        bind_waits.expect(db, [newer])
    assert counter.writes() == {("INSERT", "bind_waits"): 1}
    assert bind_waits.find(db, first.instance) == newer
    assert bind_waits.find(db, other.instance) == other
    assert bind_waits.overdue(db, now + 10 * SECOND) == [other, newer]   # oldest first


def test_a_deadline_is_kept_to_the_second_and_never_earlier(db: Database) -> None:
    now = timeutils.utcnow().replace(microsecond=0)
    wait = _new_wait("t", now + datetime.timedelta(microseconds=1))
    bind_waits.expect(db, [wait])
    assert _wait_of(db, wait.instance).deadline == now + SECOND
    assert bind_waits.overdue(db, now + datetime.timedelta(microseconds=999_999)) == []
    assert [w.instance for w in bind_waits.overdue(db, now + SECOND)] == [wait.instance]


def test_only_the_first_take_of_a_wait_removes_it(db: Database) -> None:
    now = timeutils.utcnow()
    wait, other = _new_wait("t1", now), _new_wait("t1", now)
    bind_waits.expect(db, [wait, other])
    assert not bind_waits.take(db, wait.instance, "another request's")
    assert bind_waits.take(db, wait.instance, "t1")
    assert not bind_waits.take(db, wait.instance, "t1")
    assert bind_waits.take(db, other.instance, "t1")        # another instance's wait
    assert bind_waits.overdue(db, now + datetime.timedelta(days=1)) == []


def test_extend_and_forget_touch_their_own_requests_waits_only(db: Database) -> None:
    now = timeutils.utcnow().replace(microsecond=0)
    mine, theirs = _new_wait("t1", now), _new_wait("t2", now)
    bind_waits.expect(db, [mine])
    bind_waits.expect(db, [theirs])
    assert not bind_waits.extend(db, mine.instance, "t2", now + 60 * SECOND)
    assert bind_waits.extend(db, mine.instance, "t1", now + 60 * SECOND)
    assert _wait_of(db, mine.instance).deadline == now + 60 * SECOND
    assert _wait_of(db, theirs.instance).deadline == now
    assert bind_waits.forget(db, "t2") == 1
    assert bind_waits.find(db, theirs.instance) is None
    assert bind_waits.find(db, mine.instance) is not None


# -- a conductor that dies -------------------------------------------------------------------

def test_another_binder_fails_a_dead_binders_bind_at_its_deadline(
        db: Database, receiver: Receiver) -> None:
    dead, work, thread, uuid, instance = _dying_bind(db, receiver)
    deadline = _wait_of(db, instance).deadline
    handle = arqs.held_handle(db, uuid)[1]["uuid"]
    host = ReleasingWork()
    other = Binder(db, host_work=host, notifier=_nova(receiver), bind_timeout=1.0)
    assert other.expire_overdue(now=deadline - SECOND) == []
    assert receiver.requests == []
    other.start_watch()
    try:
        wait_for(lambda: receiver.requests, timeout=10)
        assert timeutils.utcnow() >= deadline
        assert receiver.events() == [[_event(instance, uuid, "failed")]]
        assert _state(db, uuid) == "BindFailed"
        assert bind_waits.find(db, instance) is None
        assert host.released == [handle]      # the dead one's host work is undone here
    finally:
        other.stop_watch()
        work.let_go.set()
        thread.join()
    assert isinstance(thread.error, Died)
    # what the dead one still ran on its way out (its finally) took no wait: sent nothing
    assert len(receiver.requests) == 1


def test_a_bound_bind_whose_binder_died_before_telling_nova_is_completed(
        db: Database, receiver: Receiver) -> None:
    dead, work, thread, uuid, instance = _dying_bind(db, receiver)
    # the dead conductor's last write: the bind finished, and Nova was never told
    arqs.finish_bind(db, uuid)
    deadline = _wait_of(db, instance).deadline
    other = Binder(db, notifier=_nova(receiver))
    assert other.expire_overdue(now=deadline - SECOND) == []
    assert other.expire_overdue(now=deadline) == [instance]
    assert receiver.events() == [[_event(instance, uuid, "completed")]]
    assert _state(db, uuid) == "Bound"
    assert other.expire_overdue(now=deadline + SECOND) == []
    work.let_go.set()
    thread.join()
    assert len(receiver.requests) == 1


def test_a_bind_outcome_that_reaches_another_binder_tells_nova_at_once(
        db: Database, receiver: Receiver) -> None:
    """The bind's work ends on a conductor that did not begin it (an agent's outcome
    goes to the host's owner): that one reads the wait and tells Nova, no deadline."""
    dead, work, thread, uuid, instance = _dying_bind(db, receiver, bind_timeout=3600)
    other = Binder(db, notifier=_nova(receiver))
    other.program_done(uuid, True, None)
    assert _state(db, uuid) == "Bound"
    assert receiver.events() == [[_event(instance, uuid, "completed")]]
    assert bind_waits.find(db, instance) is None
    work.let_go.set()
    thread.join()
    assert len(receiver.requests) == 1


def test_an_arq_deleted_while_nova_waits_is_reported_failed(
        db: Database, receiver: Receiver) -> None:
    dead, work, thread, uuid, instance = _dying_bind(db, receiver)
    arqs.delete_by_uuids(db, [uuid], project_id=None, service=True)
    other = Binder(db, notifier=_nova(receiver))
    assert other.expire_overdue(now=_wait_of(db, instance).deadline) == [instance]
    assert receiver.events() == [[_event(instance, uuid, "failed")]]
    work.let_go.set()
    thread.join()
    assert len(receiver.requests) == 1


def test_two_binders_expiring_the_same_waits_tell_nova_once(
        db: Database, receiver: Receiver) -> None:
    rounds = 6
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=rounds)
    binders = [Binder(db, notifier=_nova(receiver)) for _ in range(2)]
    expected: dict[str, dict[str, str]] = {}
    for _ in range(rounds):
        bound, initial = (arqs.create(db, profile, PROJECT)[0]["uuid"] for _ in range(2))
        finished, unclaimed = str(uuidlib.uuid4()), str(uuidlib.uuid4())
        Binder(db).bind(_patch([bound], rp_uuid, finished), PROJECT)   # told no one
        now = timeutils.utcnow().replace(microsecond=0)      # a deadline as stored
        token = str(uuidlib.uuid4())
        bind_waits.expect(db, [bind_waits.Wait(finished, token, HOST, [bound], now),
                               bind_waits.Wait(unclaimed, token, HOST, [initial], now)])
        start = threading.Barrier(len(binders))
        told: list[list[str]] = [[] for _ in binders]

        def expire(binder: Binder, told: list[str], start: threading.Barrier,
                   now: datetime.datetime) -> None:
            start.wait(10)
            told.extend(binder.expire_overdue(now=now))

        threads = [threading.Thread(target=expire, args=(binder, mine, start, now))
                   for binder, mine in zip(binders, told, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(told[0] + told[1]) == sorted([finished, unclaimed])
        assert _state(db, initial) == "BindFailed"
        expected[finished] = {bound: "completed"}
        expected[unclaimed] = {initial: "failed"}
    sent: dict[str, dict[str, str]] = {}
    for events in receiver.events():
        for event in events:
            assert event["tag"] not in sent.get(event["server_uuid"], {})
            sent.setdefault(event["server_uuid"], {})[event["tag"]] = event["status"]
    assert sent == expected
    assert len(receiver.requests) == 2 * rounds


def test_a_binder_leaves_the_waits_of_hosts_it_does_not_own(
        db: Database, receiver: Receiver) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    instance, now = str(uuidlib.uuid4()), timeutils.utcnow().replace(microsecond=0)
    bind_waits.expect(db, [bind_waits.Wait(instance, "t", HOST, [uuid], now)])
    elsewhere = Binder(db, notifier=_nova(receiver), owns=lambda host: host != HOST)
    assert elsewhere.expire_overdue(now=now) == []
    assert _state(db, uuid) == "Initial"
    assert bind_waits.find(db, instance) is not None
    assert receiver.requests == []
    owner = Binder(db, notifier=_nova(receiver), owns=lambda host: host == HOST)
    assert owner.expire_overdue(now=now) == [instance]
    assert _state(db, uuid) == "BindFailed"
    assert receiver.events() == [[_event(instance, uuid, "failed")]]


def test_a_refused_request_leaves_a_newer_requests_wait(
        db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests for one instance: the older one's claim comes last and is refused
    (the instance has the newer one's ARQ); the newer one's wait stays, and Nova hears
    of its bind once it is Bound."""
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    older, newer = (arqs.create(db, profile, PROJECT)[0]["uuid"] for _ in range(2))
    instance = str(uuidlib.uuid4())
    work = StuckWork(dies=False)
    binder = Binder(db, host_work=work, notifier=_nova(receiver))
    at_claim, claim_may_go = threading.Event(), threading.Event()
    real_bind = binding.arqs.bind

    def held_claim(db_: Database, uuid: str, **kwargs: Any) -> Any:
        if uuid == older:
            at_claim.set()
            assert claim_may_go.wait(30)
        return real_bind(db_, uuid, **kwargs)

    monkeypatch.setattr(binding.arqs, "bind", held_claim)
    first = BindThread(binder, _patch([older], rp_uuid, instance))
    assert at_claim.wait(10)
    second = BindThread(binder, _patch([newer], rp_uuid, instance))
    try:
        wait_for(lambda: _state(db, newer) == "BindStarted")
        assert _wait_of(db, instance).arq_uuids == [newer]
        claim_may_go.set()
        first.join()
        assert isinstance(first.error, exception.InstanceHasARQs)
        assert _state(db, older) == "Initial"
        assert _wait_of(db, instance).arq_uuids == [newer]
    finally:
        claim_may_go.set()
        work.let_go.set()
    second.join()
    assert second.error is None
    assert _state(db, newer) == "Bound"
    assert receiver.events() == [[_event(instance, newer, "completed")]]
    assert bind_waits.find(db, instance) is None
