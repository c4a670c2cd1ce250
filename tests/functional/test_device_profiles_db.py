"""Device profile rows on every backend: the constraint-decided create and delete.

Create is one INSERT and delete one SELECT plus one DELETE; the unique constraints and the
ARQ foreign key decide the conflicts, so the error each backend raises must still come
back worded for the API (naming the column that collided, the profile in use).
"""

from __future__ import annotations

import uuid

import pytest

from acceld import exception
from acceld.objects import arqs
from acceld.objects import device_profiles as dps

GROUPS = [{"resources:FPGA": "1"}]


def names(db) -> list[str]:
    return sorted(p["name"] for p in dps.list_profiles(db))


def test_create_returns_the_row_and_conflicts_name_the_column(db):
    given = str(uuid.uuid4())
    made = dps.create(db, "p1", GROUPS, "first", given)
    assert made["uuid"] == given and made["description"] == "first"
    assert made["groups"] == GROUPS and made["created_at"] is not None
    assert dps.get(db, uuid=given) == made
    with pytest.raises(exception.Conflict, match="with name p1 already exists"):
        dps.create(db, "p1", GROUPS)
    with pytest.raises(exception.Conflict, match=f"with uuid {given} already exists"):
        dps.create(db, "p2", GROUPS, uuid=given)
    assert names(db) == ["p1"]


def test_delete_by_names_is_all_or_nothing(db):
    for name in ("a", "b"):
        dps.create(db, name, GROUPS)
    with pytest.raises(exception.NotFound, match="name=zz"):
        dps.delete_by_names(db, ["a", "zz", "b"])
    assert names(db) == ["a", "b"]
    dps.delete_by_names(db, ["a", "b"])
    assert names(db) == []


def test_delete_by_uuid_and_a_missing_uuid(db):
    made = dps.create(db, "a", GROUPS)
    missing = str(uuid.uuid4())
    with pytest.raises(exception.NotFound, match=f"uuid={missing}"):
        dps.delete_by_uuid(db, missing)
    dps.delete_by_uuid(db, made["uuid"])
    assert names(db) == []


def test_a_profile_in_use_is_a_conflict_naming_it_and_is_kept(db):
    used = dps.create(db, "used", [{"resources:FPGA": "2"}])
    dps.create(db, "free", GROUPS)
    arqs.create(db, "used", "project")
    with pytest.raises(exception.Conflict,
                       match=rf"used \({used['uuid']}\) is used by 2 accelerator"):
        dps.delete_by_names(db, ["free", "used"])
    assert names(db) == ["free", "used"]
    with pytest.raises(exception.Conflict, match="is used by 2"):
        dps.delete_by_uuid(db, used["uuid"])
    assert names(db) == ["free", "used"]
