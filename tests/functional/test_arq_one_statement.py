"""MySQL and MariaDB: a bind and an unbind as a read and one UPDATE of two tables
(objects/arqs.py, ``Database.updates_tables_together``), with another session changing
the rows between the read and the UPDATE, as a racing bind, unbind or delete would.

The other session acts from a hook on the engines, just before the UPDATE is sent,
on a connection of its own (``helpers.outside_connection``), and commits: the UPDATE then
finds the rows as that session left them. What must hold: a handle is in use exactly
when an ARQ holds it, and the ARQ's state is one the API could have given.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import event, select, text

from acceld import exception
from acceld.conductor.binding import Binder
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs
from tests import helpers
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize(
    "backend", [b for b in BACKENDS if b.values[0] == "mysql"])

PROJECT = "proj1"
_TAKE_SQL = "UPDATE attach_handles, extended_accelerator_requests, devices SET"
_UNBIND_SQL = "UPDATE extended_accelerator_requests, attach_handles SET"


def _fields(rp_uuid: str) -> dict[str, str]:
    return {"hostname": "host1", "device_rp_uuid": rp_uuid,
            "instance_uuid": str(uuidlib.uuid4()), "project_id": PROJECT}


def _in_use(db: Database) -> list[int]:
    with db.reader() as s:
        return list(s.execute(select(m.AttachHandle.id).where(
            m.AttachHandle.in_use.is_(True)).order_by(m.AttachHandle.id)).scalars())


def _held(db: Database) -> list[int]:
    with db.reader() as s:
        return sorted(s.execute(select(m.ExtendedAcceleratorRequest.attach_handle_id).where(
            m.ExtendedAcceleratorRequest.attach_handle_id.is_not(None))).scalars())


def _handle_ids(db: Database) -> list[int]:
    with db.reader() as s:
        return list(s.execute(select(m.AttachHandle.id).order_by(m.AttachHandle.id))
                    .scalars())


@pytest.fixture
def before(db: Database) -> Iterator[Callable[[str, Callable[[], None]], list[int]]]:
    """``before(prefix, act)``: ``act()`` runs each time a statement starting with
    ``prefix`` is about to be sent; returns a list that counts those times."""
    hooks: list[Callable[..., None]] = []

    def add(prefix: str, act: Callable[[], None]) -> list[int]:
        seen: list[int] = []

        def hook(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
            if statement.startswith(prefix):
                seen.append(1)
                act()
        for engine in db.engines:
            event.listen(engine, "before_cursor_execute", hook)
        hooks.append(hook)
        return seen

    yield add
    for hook in hooks:
        for engine in db.engines:
            event.remove(engine, "before_cursor_execute", hook)


def _outside(db: Database, sql: str, **params: object) -> None:
    with helpers.outside_connection(db) as conn:
        conn.execute(text(sql), params)
        conn.commit()


def test_a_handle_taken_after_the_read_sends_the_bind_to_the_next_one(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=3)
    first, second, _third = _handle_ids(db)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    racer_took: list[int] = []

    def racer() -> None:        # the first time only: a racing bind takes the first one
        if not racer_took:
            _outside(db, "UPDATE attach_handles SET in_use = 1 WHERE id = :id", id=first)
            racer_took.append(first)
    seen = before(_TAKE_SQL, racer)
    Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    assert len(seen) == 2                     # the first UPDATE changed nothing
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Bound"
    assert _held(db) == [second]
    assert _in_use(db) == [first, second]     # the racer's, and ours


def test_every_handle_taken_after_the_read_fails_the_bind_and_frees_nothing(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    before(_TAKE_SQL, lambda: _outside(db, "UPDATE attach_handles SET in_use = 1"))
    with pytest.raises(exception.NoFreeAttachHandle):
        Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "BindFailed"
    assert _held(db) == []
    assert len(_in_use(db)) == 2              # the racers' own, untouched


def test_an_arq_deleted_after_the_read_is_not_found_and_takes_no_handle(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    before(_TAKE_SQL, lambda: _outside(
        db, "DELETE FROM extended_accelerator_requests WHERE uuid = :u", u=uuid))
    with pytest.raises(exception.ARQNotFound):
        Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    assert _in_use(db) == []


def test_an_arq_bound_elsewhere_after_the_read_is_a_bad_state_and_takes_nothing(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    before(_TAKE_SQL, lambda: _outside(
        db, "UPDATE extended_accelerator_requests SET state = 'BindFailed' WHERE uuid = :u",
        u=uuid))
    with pytest.raises(exception.ARQBadState, match="BindFailed"):
        Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    assert _in_use(db) == []
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "BindFailed"


def test_an_unbind_that_another_session_did_first_reads_again_and_is_a_no_op(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    binder = Binder(db)
    binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    handle = _held(db)[0]

    def other_unbind() -> None:
        with helpers.outside_connection(db) as conn:
            conn.execute(text("UPDATE extended_accelerator_requests SET state = 'Unbound', "
                              "attach_handle_id = NULL WHERE uuid = :u"), {"u": uuid})
            conn.execute(text("UPDATE attach_handles SET in_use = 0 WHERE id = :h"),
                         {"h": handle})
            conn.commit()
    seen = before(_UNBIND_SQL, other_unbind)
    assert arqs.unbind(db, uuid, project_id=PROJECT) == []  # nothing freed by this one
    assert len(seen) == 1
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Unbound"
    assert _in_use(db) == [] and _held(db) == []


def test_an_arq_that_changes_at_every_try_fails_the_unbind_and_keeps_its_handle(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    flip = {"Bound": "BindStarted", "BindStarted": "Bound"}

    def other_session() -> None:   # moves the ARQ on between each read and its UPDATE
        state = arqs.get(db, uuid, project_id=None)["state"]
        _outside(db, "UPDATE extended_accelerator_requests SET state = :s WHERE uuid = :u",
                 s=flip[state], u=uuid)
    seen = before(_UNBIND_SQL, other_session)
    with pytest.raises(exception.Conflict, match="try again"):
        arqs.unbind(db, uuid, project_id=PROJECT)
    assert len(seen) == arqs._UNBIND_TRIES
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] in flip
    assert _in_use(db) == _held(db) and len(_held(db)) == 1


def test_an_unbind_whose_handle_needs_host_work_is_left_to_the_conductor_unchanged(
        db: Database, before) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    seen = before(_UNBIND_SQL, lambda: None)
    asked: list[object] = []

    def needs(where: object, handle: dict) -> bool:
        asked.append(where)
        return True
    assert arqs.unbind_unless_host_work(db, uuid, project_id=PROJECT,
                                        needs_host_work=needs) is False
    assert asked == [db] and seen == []       # decided from the read, nothing sent
    shown = arqs.get(db, uuid, project_id=PROJECT)
    assert shown["state"] == "Bound"
    # the conductor's unbind: the same handle freed, and returned for its host's release
    freed = arqs.unbind(db, uuid, project_id=PROJECT, needs_host_work=needs)
    assert [h["uuid"] for h in freed] == [shown["attach_handle_uuid"]]
    assert freed[0]["target"]["host"] == "host1"
    assert _in_use(db) == [] and len(seen) == 1
