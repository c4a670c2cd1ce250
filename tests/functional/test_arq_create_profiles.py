"""ARQ create from a device profile this process has read before (objects/arqs.py): one
statement, and never from a profile that is gone or was made again under its name, on
each backend (SQLite gives a deleted profile's id to the next one). Where ids never come
back (``Database.ids_reused``) the statement is a plain INSERT naming the profile's id;
elsewhere an INSERT ... SELECT that also matches its uuid."""

from __future__ import annotations

import datetime
import types

import pytest
from sqlalchemy import select

from acceld import exception
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs
from acceld.objects import device_profiles as dps
from tests.functional.test_statement_count import StatementCounter

PROJECT = "proj1"


def _profile(db: Database, name: str, units: int) -> dict:
    return dps.create(db, name, [{"resources:FPGA": str(units)}], None)


def _rows(db: Database, uuids: list[str]) -> list[tuple[int, int]]:
    arq = m.ExtendedAcceleratorRequest
    with db.reader() as s:
        return [tuple(r) for r in s.execute(
            select(arq.device_profile_id, arq.device_profile_group_id)
            .where(arq.uuid.in_(uuids)).order_by(arq.id))]


def _profile_id(db: Database, uuid: str) -> int:
    with db.reader() as s:
        return s.execute(select(m.DeviceProfile.id)
                         .where(m.DeviceProfile.uuid == uuid)).scalar_one()


def test_a_known_one_unit_profile_costs_one_statement(db: Database) -> None:
    dp = _profile(db, "one", 1)
    first = arqs.create(db, "one", PROJECT)
    with StatementCounter(db) as counter:
        second = arqs.create(db, "one", PROJECT)
    data = [s for s in counter.statements if not s.lstrip().upper().startswith(
        ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SELECT 1"))]
    assert len(data) == 1 and data[0].lstrip().upper().startswith("INSERT"), data
    # the plain INSERT where ids never come back: SQLite's come back (see below)
    assert db.ids_reused is (db.dialect == "sqlite")
    assert ("SELECT" in data[0].upper()) is db.ids_reused, data
    # both paths give the same ARQ, as the API shows it and as it reads back
    for made in (first, second):
        assert len(made) == 1
        got = arqs.get(db, made[0]["uuid"], project_id=PROJECT)
        assert (got["state"], got["device_profile_name"], got["device_profile_group_id"],
                got["project_id"]) == ("Initial", "one", 0, PROJECT)
        assert isinstance(got["created_at"], datetime.datetime)
        # what the create answered is what reads show later (MariaDB keeps whole seconds)
        assert got["created_at"] == made[0]["created_at"]
    assert _rows(db, [first[0]["uuid"], second[0]["uuid"]]) == \
        [(_profile_id(db, dp["uuid"]), 0)] * 2


def _drop_arqs(db: Database) -> None:
    """Deletes every ARQ (a profile in use cannot be deleted)."""
    with db.reader() as s:
        uuids = list(s.execute(select(m.ExtendedAcceleratorRequest.uuid)).scalars())
    arqs.delete_by_uuids(db, uuids, project_id=None, service=True)


def test_a_profile_made_again_under_its_name_is_read_again(db: Database) -> None:
    old = _profile(db, "again", 1)
    arqs.create(db, "again", PROJECT)          # known from now on
    _drop_arqs(db)
    dps.delete_by_uuid(db, old["uuid"])
    new = _profile(db, "again", 2)             # on SQLite this takes the old id back
    made = arqs.create(db, "again", PROJECT)
    assert len(made) == 2
    assert _rows(db, [a["uuid"] for a in made]) == [(_profile_id(db, new["uuid"]), 0)] * 2


def test_a_deleted_profile_is_not_found(db: Database) -> None:
    dp = _profile(db, "gone", 1)
    arqs.create(db, "gone", PROJECT)           # known from now on
    _drop_arqs(db)
    dps.delete_by_uuid(db, dp["uuid"])
    with pytest.raises(exception.NotFound, match="name=gone"):
        arqs.create(db, "gone", PROJECT)


def test_a_cached_profile_whose_id_went_to_another_is_not_used(sqlite_db: Database) -> None:
    """SQLite gives a deleted last profile's id to the next profile, whatever its name:
    the ARQ of a cached one-unit profile that is gone must not take that id."""
    db = sqlite_db
    old = _profile(db, "first", 1)
    old_id = _profile_id(db, old["uuid"])
    arqs.create(db, "first", PROJECT)          # known from now on
    _drop_arqs(db)
    dps.delete_by_uuid(db, old["uuid"])
    other = _profile(db, "second", 1)
    assert _profile_id(db, other["uuid"]) == old_id      # the id came back
    with pytest.raises(exception.NotFound, match="name=first"):
        arqs.create(db, "first", PROJECT)
    with db.reader() as s:
        assert list(s.execute(select(m.ExtendedAcceleratorRequest.uuid))) == []


@pytest.mark.parametrize(("name", "mariadb", "version", "reused"), [
    ("postgresql", False, (16, 4), False),
    ("mysql", True, (10, 11, 19), False),
    ("mysql", True, (10, 2, 4), False),       # MariaDB keeps its counter from 10.2.4 on
    ("mysql", True, (10, 2, 3), True),
    ("mysql", True, (10, 1, 48), True),
    ("mariadb", True, (10, 6, 12), False),    # a mariadb:// URL's dialect
    ("mysql", False, (8, 0, 36), False),      # MySQL from 8.0 on
    ("mysql", False, (5, 7, 44), True),
    ("mysql", False, None, True),             # not connected yet: the safe statement
])
def test_which_servers_hand_ids_out_again(monkeypatch: pytest.MonkeyPatch, name: str,
                                          mariadb: bool, version: tuple | None,
                                          reused: bool) -> None:
    db = Database("mysql+pymysql://nobody@127.0.0.1:9/none")     # never connected
    dialect = types.SimpleNamespace(name=name, is_mariadb=mariadb,
                                    server_version_info=version)
    monkeypatch.setattr(db, "_autocommit_engine",
                        lambda: types.SimpleNamespace(dialect=dialect))
    assert db.ids_reused is reused
