"""Device profiles (Cyborg v2): validation of the groups, and their rows.

A profile's ``groups`` are stored as ``profile_json = {"groups": [...]}``, as in Cyborg.
Every public function is one transaction. Deleting several profiles is all-or-nothing
(Cyborg deletes them one by one), and a profile that accelerator requests still use is a
conflict (Cyborg answers with the database's error, a 500).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from typing import Any

from oslo_db import exception as db_exc
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from acceld import exception
from acceld.db import models as m
from acceld.db.api import Database

KEY_PREFIXES = ("resources:", "trait:", "accel:")
STANDARD_RCS = ("FPGA", "GPU", "VGPU", "PGPU", "CUSTOM_QAT", "CUSTOM_NIC", "CUSTOM_SSD")
TRAIT_VALUES = ("required", "forbidden")


def _normalise_entry(key: str, value: Any) -> tuple[str, str]:
    if not key.startswith(KEY_PREFIXES):
        raise exception.InvalidInput(f"Group key {key!r} must start with one of "
                                     f"{', '.join(KEY_PREFIXES)}.")
    prefix, _, rest = key.partition(":")
    name = rest.strip(" ")
    text = str(value)
    if prefix == "trait":
        if not name.startswith("CUSTOM_"):
            raise exception.InvalidInput(f"Group key {key!r}: traits must start with "
                                         "CUSTOM_.")
        if text not in TRAIT_VALUES:
            raise exception.InvalidInput(f"Group key {key!r}: the value must be one of "
                                         f"{', '.join(TRAIT_VALUES)}, not {text!r}.")
    elif prefix == "resources":
        if name not in STANDARD_RCS and not name.startswith("CUSTOM_"):
            raise exception.InvalidInput(f"Group key {key!r}: the resource class must be "
                                         f"one of {', '.join(STANDARD_RCS)} or start with "
                                         "CUSTOM_.")
        try:
            amount = int(text)
        except ValueError:
            amount = 0
        if amount < 1:
            raise exception.InvalidInput(f"Group key {key!r}: the value must be a positive "
                                         f"integer, not {text!r}.")
    return f"{prefix}:{name}", text


def normalise_groups(groups: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Cyborg's group rules (contract 1.4): key prefixes, CUSTOM_ traits that are required
    or forbidden, known or CUSTOM_ resource classes with integer amounts. Keys lose the
    spaces around the name; values become strings. Raises InvalidInput naming the key."""
    out = []
    for index, group in enumerate(groups):
        normal: dict[str, str] = {}
        for key, value in group.items():
            new_key, text = _normalise_entry(key, value)
            if new_key in normal:
                raise exception.InvalidInput(f"Group {index} names {new_key!r} twice.")
            normal[new_key] = text
        out.append(normal)
    return out


def _to_dict(dp: m.DeviceProfile) -> dict[str, Any]:
    return {"uuid": dp.uuid, "name": dp.name, "description": dp.description,
            "groups": json.loads(dp.profile_json)["groups"],
            "created_at": dp.created_at, "updated_at": dp.updated_at}


def _taken(s: Session, name: str, uuid: str) -> str | None:
    for column, value in ((m.DeviceProfile.name, name), (m.DeviceProfile.uuid, uuid)):
        if s.execute(select(m.DeviceProfile.id).where(column == value)).scalar() is not None:
            return f"A device_profile with {column.key} {value} already exists."
    return None


def create(db: Database, name: str, groups: list[dict[str, Any]],
           description: str | None = None, uuid: str | None = None) -> dict[str, Any]:
    """A new profile; InvalidInput for bad groups, Conflict for a taken name or uuid."""
    normal = normalise_groups(groups)
    uuid = uuid or str(uuidlib.uuid4())
    try:
        with db.writer() as s:
            taken = _taken(s, name, uuid)
            if taken:
                raise exception.Conflict(taken)
            dp = m.DeviceProfile(uuid=uuid, name=name, description=description,
                                 profile_json=json.dumps({"groups": normal}))
            s.add(dp)
            s.flush()
            return _to_dict(dp)
    except db_exc.DBDuplicateEntry as exc:  # a concurrent create won the race
        raise exception.Conflict(f"A device_profile with name {name} or uuid {uuid} "
                                 "already exists.") from exc


def list_profiles(db: Database, *, names: list[str] | None = None, limit: int | None = None,
                  marker: str | None = None) -> list[dict[str, Any]]:
    with db.reader() as s:
        q = select(m.DeviceProfile)
        if names is not None:
            q = q.where(m.DeviceProfile.name.in_(names))
        if marker is not None:
            marker_id = s.execute(select(m.DeviceProfile.id)
                                  .where(m.DeviceProfile.uuid == marker)).scalar()
            if marker_id is None:
                raise exception.InvalidInput(f"marker {marker} is not a device profile")
            q = q.where(m.DeviceProfile.id > marker_id)
        q = q.order_by(m.DeviceProfile.id)
        if limit is not None:
            q = q.limit(limit)
        return [_to_dict(dp) for dp in s.execute(q).scalars()]


def get(db: Database, *, uuid: str | None = None, name: str | None = None) -> dict[str, Any]:
    """By uuid or by name; NotFound in Cyborg's words."""
    with db.reader() as s:
        column, value, what = ((m.DeviceProfile.uuid, uuid, "uuid") if uuid is not None
                               else (m.DeviceProfile.name, name, "name"))
        dp = s.execute(select(m.DeviceProfile).where(column == value)).scalar_one_or_none()
        if dp is None:
            raise exception.NotFound(f"Device Profile not found with {what}={value}")
        return _to_dict(dp)


def _delete(s: Session, rows: list[m.DeviceProfile]) -> None:
    ids = [dp.id for dp in rows]
    used = dict(s.execute(select(m.ExtendedAcceleratorRequest.device_profile_id,
                                 func.count())
                          .where(m.ExtendedAcceleratorRequest.device_profile_id.in_(ids))
                          .group_by(m.ExtendedAcceleratorRequest.device_profile_id)).all())
    for dp in rows:
        if used.get(dp.id):
            raise exception.Conflict(f"Device profile {dp.name} ({dp.uuid}) is used by "
                                     f"{used[dp.id]} accelerator request(s).")
    try:
        s.execute(delete(m.DeviceProfile).where(m.DeviceProfile.id.in_(ids)))
        s.flush()
    except db_exc.DBReferenceError as exc:  # an ARQ was created meanwhile
        raise exception.Conflict("A device profile being deleted is used by an accelerator "
                                 "request.") from exc


def delete_by_uuid(db: Database, uuid: str) -> None:
    with db.writer() as s:
        dp = s.execute(select(m.DeviceProfile).where(m.DeviceProfile.uuid == uuid)
                       ).scalar_one_or_none()
        if dp is None:
            raise exception.NotFound(f"Device Profile not found with uuid={uuid}")
        _delete(s, [dp])


def delete_by_names(db: Database, names: list[str]) -> None:
    """All or nothing: a missing name is NotFound before anything is deleted."""
    with db.writer() as s:
        rows = list(s.execute(select(m.DeviceProfile)
                              .where(m.DeviceProfile.name.in_(names))).scalars())
        found = {dp.name for dp in rows}
        for name in names:
            if name not in found:
                raise exception.NotFound(f"Device Profile not found with name={name}")
        _delete(s, rows)
