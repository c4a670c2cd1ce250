"""What a bind and an unbind cost in transactions and statements, and what the one-step
bind leaves behind when it fails (objects/arqs.py, conductor/binding.py), on each backend.

Bind and unbind run for every instance boot and delete, through the conductor: a bind of
a handle that needs no host work is one transaction (the no-hot-add check included), an
unbind one too, and whether a claimed or a freed handle needs host work is read with the
handle, so a handle without host work costs no further statement or transaction. Each
bind and unbind also writes its allocation ledger line (objects/ledger.py) in the same
transaction: one INSERT more (on MySQL/MariaDB the claim or unbind UPDATE and that INSERT
make the one transaction). The counts are of statements that reach the database
(transaction control aside).
"""

from __future__ import annotations

import datetime
import uuid as uuidlib
from typing import Any

import pytest
from oslo_utils import timeutils
from sqlalchemy import event, literal_column, select

from acceld import exception
from acceld.conductor.binding import AgentHostWork, Binder
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs
from tests import helpers
from tests.functional.test_statement_count import StatementCounter

PROJECT = "proj1"
_DATA = ("SELECT", "INSERT", "UPDATE", "DELETE")


class Transactions:
    """Counts the transactions begun on ``engine`` while active."""

    def __init__(self, engine) -> None:
        self.engine, self.count = engine, 0

    def _on_begin(self, conn) -> None:
        self.count += 1

    def __enter__(self) -> Transactions:
        event.listen(self.engine, "begin", self._on_begin)
        return self

    def __exit__(self, *exc) -> None:
        event.remove(self.engine, "begin", self._on_begin)


class RecordingHostWork:
    """Host work that records what it is asked; ``need`` answers ``needs``."""

    def __init__(self, need: bool) -> None:
        self.need = need
        self.prepared: list[str] = []
        self.released: list[str] = []

    def needs(self, handle: dict[str, Any], conn: Any = None) -> bool:
        assert conn is not None               # asked inside the caller's transaction
        return self.need

    def prepare(self, handle: dict[str, Any]) -> None:
        self.prepared.append(handle["uuid"])

    def release(self, handle: dict[str, Any]) -> None:
        self.released.append(handle["uuid"])


def _fields(rp_uuid: str) -> dict[str, str]:
    return {"hostname": "host1", "device_rp_uuid": rp_uuid,
            "instance_uuid": str(uuidlib.uuid4()), "project_id": PROJECT}


def _data_statements(counter: StatementCounter) -> list[str]:
    return [s for s in counter.statements if s.lstrip().upper().startswith(_DATA)]


def _in_use(db: Database) -> int:
    with db.reader() as s:
        return len(s.execute(select(m.AttachHandle.id)
                             .where(m.AttachHandle.in_use.is_(True))).all())


class NoAgents:
    """An AgentClient that must not be called: these handles need no host work."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"agent called: {name}")


@pytest.mark.parametrize("host", ["none", "agents"])
def test_a_bind_and_an_unbind_without_host_work_cost_few_statements(
        db: Database, host: str) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    # "agents": the conductor's own host work decides from the columns the claim and the
    # release read with the handle, at no statement of its own
    binder = Binder(db) if host == "none" else \
        Binder(db, host_work=AgentHostWork(db, NoAgents()))
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    with StatementCounter(db) as counter, Transactions(db.engine) as tx:
        binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    statements = _data_statements(counter)
    if db.updates_tables_together:
        # free handles with the no-hot-add answer; one UPDATE of both rows (the claim and
        # the ARQ's CAS straight to Bound) and the ledger line, one transaction
        assert len(statements) == 3, statements
        assert statements[1].startswith(
            "UPDATE attach_handles, extended_accelerator_requests, devices SET"), statements
        assert statements[2].startswith("INSERT INTO ledger"), statements
        assert tx.count == 1
    else:
        # free handles with the no-hot-add answer, (PostgreSQL: the device's row read
        # again under a shared lock), claim one, the ARQ's CAS to Bound, the ledger line
        assert len(statements) == (5 if db.dialect == "postgresql" else 4), statements
        assert tx.count == 1
        assert counter.writes() == {("UPDATE", "attach_handles"): 1,
                                    ("UPDATE", "extended_accelerator_requests"): 1,
                                    ("INSERT", "ledger"): 1}
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Bound"
    assert _in_use(db) == 1

    with StatementCounter(db) as counter, Transactions(db.engine) as tx:
        binder.unbind([uuid], PROJECT)
    statements = _data_statements(counter)
    if db.updates_tables_together:
        # the ARQ with its handle and target; one UPDATE of both rows, on condition that
        # the ARQ is still as read, and the ledger line, one transaction
        assert len(statements) == 3, statements
        assert statements[1].startswith(
            "UPDATE extended_accelerator_requests, attach_handles SET"), statements
        assert statements[2].startswith("INSERT INTO ledger"), statements
        assert tx.count == 1
    else:
        # lock the ARQ, the ledger line (INSERT ... SELECT), read (with its target) and
        # free its handle, the ARQ's CAS
        assert len(statements) == 5, statements
        assert tx.count == 1
        assert counter.writes() == {("UPDATE", "attach_handles"): 1,
                                    ("UPDATE", "extended_accelerator_requests"): 1,
                                    ("INSERT", "ledger"): 1}
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Unbound"
    assert _in_use(db) == 0


def test_a_bind_nova_waits_on_costs_the_wait_row_and_a_read_of_the_states(
        db: Database) -> None:
    """With Nova to tell, a bind writes what Nova waits on (``bind_waits``, so that
    another conductor finishes it if this one dies) before the claim, and once the ARQs
    are resolved reads their states and takes the wait (the taker alone tells Nova):
    two writes and a read more than the bind itself, none in its transaction."""
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    sent: list[Any] = []

    class Notifier:
        def send_external_events(self, events: list[Any]) -> None:
            sent.append(events)

    binder = Binder(db, notifier=Notifier())
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    with StatementCounter(db) as counter, Transactions(db.engine) as tx:
        binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    statements = _data_statements(counter)
    # the claim as in the test above: 3 statements on MySQL, 5 on PostgreSQL, 4 on SQLite
    claim = 3 if db.updates_tables_together else 5 if db.dialect == "postgresql" else 4
    assert len(statements) == claim + 3, statements
    assert statements[0].startswith("INSERT INTO bind_waits"), statements
    assert statements[-2].startswith("SELECT extended_accelerator_requests.uuid, "
                                     "extended_accelerator_requests.state"), statements
    assert statements[-1].startswith("DELETE FROM bind_waits"), statements
    assert tx.count == 1
    assert len(sent) == 1 and sent[0][0].status == "completed"


@pytest.mark.parametrize("need", [False, True])
def test_host_work_runs_only_for_handles_that_need_it(db: Database, need: bool) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    work = RecordingHostWork(need)
    binder = Binder(db, host_work=work)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    handle = arqs.get(db, uuid, project_id=PROJECT)["attach_handle_uuid"]
    with Transactions(db.engine) as tx:
        binder.unbind([uuid], PROJECT)
    # the question was asked inside the unbind's transaction (MySQL: before it)
    assert tx.count == 1
    assert work.prepared == work.released == ([handle] if need else [])
    assert _in_use(db) == 0


def test_host_work_without_needs_is_asked_for_every_handle(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)

    class Always(RecordingHostWork):
        needs = None  # type: ignore[assignment]  # an implementation without ``needs``

    work = Always(need=True)
    binder = Binder(db, host_work=work)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    binder.unbind([uuid], PROJECT)
    assert len(work.prepared) == len(work.released) == 1


def test_a_bind_that_fails_its_state_cas_keeps_no_handle(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    binder = Binder(db)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    with pytest.raises(exception.ARQBadState):      # Bound already: the claim rolls back
        binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    with pytest.raises(exception.ARQNotFound):      # another project's ARQ
        binder.bind({uuid: _fields(rp_uuid)}, "other-project")
    with pytest.raises(exception.ARQNotFound):
        binder.bind({str(uuidlib.uuid4()): _fields(rp_uuid)}, PROJECT)
    assert _in_use(db) == 1
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Bound"


def test_two_deployables_behind_one_rp_uuid_fail_the_bind(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    helpers.make_qat_inventory(db, handles=1)
    with db.writer() as s:                   # the second deployable takes the same rp_uuid
        dep = s.execute(select(m.Deployable).where(m.Deployable.rp_uuid != rp_uuid)
                        ).scalar_one()
        dep.rp_uuid = rp_uuid
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    with pytest.raises(exception.NotFound, match="No deployable"):
        Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    shown = arqs.get(db, uuid, project_id=PROJECT)
    assert shown["state"] == "BindFailed"
    assert shown["hostname"] == "host1"       # where it was to bind stays recorded
    assert _in_use(db) == 0


def test_a_refused_bind_changes_nothing_and_leaves_nova_nothing_to_wait_on(
        db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=3)
    sent: list[Any] = []

    class Notifier:
        def send_external_events(self, events: list[Any]) -> None:
            sent.append(events)

    binder = Binder(db, notifier=Notifier())
    first, second, third = (arqs.create(db, profile, PROJECT)[0]["uuid"] for _ in range(3))
    taken = _fields(rp_uuid)
    binder.bind({first: taken}, PROJECT)
    sent.clear()
    # the first ARQ of the request asks for both instances; the second one is taken
    with pytest.raises(exception.InvalidInput, match="already has accelerator requests"):
        binder.bind({second: _fields(rp_uuid), third: dict(taken)}, PROJECT)
    assert [arqs.get(db, u, project_id=PROJECT)["state"] for u in (second, third)] == \
        ["Initial", "Initial"]
    assert _in_use(db) == 1
    assert sent == []
    assert binder.expire_overdue(now=timeutils.utcnow() + datetime.timedelta(hours=1)) == []
    # a request whose first ARQ fails for its own reason still binds the others
    other = _fields(rp_uuid)
    with pytest.raises(exception.ARQBadState):
        binder.bind({first: other, second: dict(other)}, PROJECT)
    assert arqs.get(db, second, project_id=PROJECT)["state"] == "Bound"


def test_the_no_hot_add_check_holds_when_no_deployable_answers(db: Database) -> None:
    """The claim's statement carries the no-hot-add answer on its rows; with an rp_uuid
    that no deployable has there is no row, and the check must still refuse first."""
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    binder = Binder(db)
    first, second = (arqs.create(db, profile, PROJECT)[0]["uuid"] for _ in range(2))
    taken = _fields(rp_uuid)
    binder.bind({first: taken}, PROJECT)
    elsewhere = dict(taken, device_rp_uuid=str(uuidlib.uuid4()))
    with pytest.raises(exception.InvalidInput, match="already has accelerator requests"):
        binder.bind({second: elsewhere}, PROJECT)
    assert arqs.get(db, second, project_id=PROJECT)["state"] == "Initial"
    # another instance on that unknown provider is an ordinary failed bind
    with pytest.raises(exception.NotFound, match="No deployable with rp_uuid"):
        binder.bind({second: dict(elsewhere, instance_uuid=str(uuidlib.uuid4()))}, PROJECT)
    assert arqs.get(db, second, project_id=PROJECT)["state"] == "BindFailed"


def _handle_ids(db: Database) -> list[int]:
    with db.reader() as s:
        return list(s.execute(select(m.AttachHandle.id).order_by(m.AttachHandle.id)).scalars())


@pytest.mark.parametrize("lost", [arqs._CANDIDATES, arqs._CANDIDATES + 1, 100])
def test_a_claim_reads_further_candidates_when_racers_took_the_first(
        db: Database, monkeypatch: pytest.MonkeyPatch, lost: int) -> None:
    """A bind reads a few free handles at a time. Here the claim's CAS loses on the first
    ``lost`` of them, as if racing binds had taken them after this bind read them: it
    must go on to the next ones, and report no free handle only when none is left."""
    handles = arqs._CANDIDATES * 2 + 1
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=handles)
    ids = _handle_ids(db)
    taken_by_racers = set(ids[:lost])
    # the ids written into the SQL: the statements keep the parameters they have
    not_taken = m.AttachHandle.__table__.c.id.not_in(
        [literal_column(str(i)) for i in sorted(taken_by_racers)])
    monkeypatch.setattr(arqs, "_TAKE", arqs._TAKE.where(not_taken))
    monkeypatch.setattr(arqs, "_TAKE_AND_BEGIN", {
        scoped: stmt.where(not_taken) for scoped, stmt in arqs._TAKE_AND_BEGIN.items()})
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    binder = Binder(db)
    if lost >= handles:
        with pytest.raises(exception.NoFreeAttachHandle):
            binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
        assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "BindFailed"
        assert _in_use(db) == 0
        return
    binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    with db.reader() as s:
        held = s.execute(select(m.ExtendedAcceleratorRequest.attach_handle_id)).scalar()
    assert held == ids[lost]                  # the first one no racer took
    assert _in_use(db) == 1
