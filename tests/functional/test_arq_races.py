"""ARQ binding under concurrency, on every database backend (contract 3; objects/arqs.py).

The claim of an attach handle is a compare-and-swap on ``in_use``, and every state change
a compare-and-swap on the ARQ's state, so: two binds racing for the last free handle end
with exactly one Bound and one BindFailed; a delete racing a bind never leaks a handle
(``in_use`` is true only while a Bound ARQ holds it); concurrent life cycles never fail.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from acceld import exception
from acceld.conductor.binding import Binder
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs
from tests import helpers

PROJECT = "proj1"


def _fields(rp_uuid: str) -> dict[str, str]:
    return {"hostname": "host1", "device_rp_uuid": rp_uuid,
            "instance_uuid": str(uuidlib.uuid4()), "project_id": PROJECT}


def _race(*actions: Callable[[], Any]) -> list[BaseException | None]:
    """Runs the actions at once in threads; returns each one's exception (or None)."""
    barrier = threading.Barrier(len(actions))
    results: list[BaseException | None] = [None] * len(actions)

    def run(i: int) -> None:
        barrier.wait()
        try:
            actions[i]()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def _assert_no_leak(db: Database) -> None:
    """A handle is in use exactly when a Bound ARQ holds it."""
    with db.reader() as s:
        in_use = set(s.execute(select(m.AttachHandle.id)
                               .where(m.AttachHandle.in_use.is_(True))).scalars())
        held = set(s.execute(select(m.ExtendedAcceleratorRequest.attach_handle_id)
                             .where(m.ExtendedAcceleratorRequest.state == "Bound")).scalars())
    assert in_use == held


def test_two_binds_race_for_the_last_free_handle(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    binder = Binder(db)
    for _ in range(3):
        first, second = (a["uuid"] for a in arqs.create(db, profile, PROJECT)
                         + arqs.create(db, profile, PROJECT))
        errors = _race(lambda a=first: binder.bind({a: _fields(rp_uuid)}, PROJECT),
                       lambda b=second: binder.bind({b: _fields(rp_uuid)}, PROJECT))
        states = sorted(arqs.get(db, u, project_id=PROJECT)["state"] for u in (first, second))
        assert states == ["BindFailed", "Bound"]
        assert sum(isinstance(e, exception.NoFreeAttachHandle) for e in errors) == 1
        assert errors.count(None) == 1
        _assert_no_leak(db)
        arqs.delete_by_uuids(db, [first, second], project_id=PROJECT, service=True)
        _assert_no_leak(db)


@pytest.mark.parametrize("rounds", [10])
def test_a_delete_racing_a_bind_leaks_no_handle(db: Database, rounds: int) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    binder = Binder(db)
    for _ in range(rounds):
        uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
        bind_error, delete_error = _race(
            lambda u=uuid: binder.bind({u: _fields(rp_uuid)}, PROJECT),
            lambda u=uuid: arqs.delete_by_uuids(db, [u], project_id=PROJECT, service=True))
        assert delete_error is None
        assert bind_error is None or isinstance(bind_error, exception.AccelDError)
        assert list(arqs.list_arqs(db, project_id=PROJECT)) == []
        _assert_no_leak(db)


def test_concurrent_life_cycles_never_fail(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=8)
    binder = Binder(db)

    def life_cycle() -> None:
        uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
        fields = _fields(rp_uuid)
        binder.bind({uuid: fields}, PROJECT)
        shown = arqs.get(db, uuid, project_id=PROJECT)
        assert shown["state"] == "Bound"
        assert shown["attach_handle_type"] == "PCI"
        assert shown["instance_uuid"] == fields["instance_uuid"]
        binder.unbind([uuid], PROJECT)
        assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Unbound"
        arqs.delete_by_uuids(db, [uuid], project_id=PROJECT, service=False)

    errors = _race(*([life_cycle] * 8))
    assert errors == [None] * 8
    assert list(arqs.list_arqs(db, project_id=None)) == []
    _assert_no_leak(db)
    with db.reader() as s:
        assert not s.execute(select(m.AttachHandle.id)
                             .where(m.AttachHandle.in_use.is_(True))).first()


def test_resolved_is_all_or_423_for_an_instance() -> None:
    bound, started = {"state": "Bound"}, {"state": "BindStarted"}
    arqs.require_resolved([bound])
    with pytest.raises(exception.NotResolved):
        arqs.require_resolved([bound, started])
