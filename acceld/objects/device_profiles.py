"""Device profiles (Cyborg v2): validation of the groups (stored as ``profile_json =
{"groups": [...]}``), and their rows. Every write is one transaction. Unlike Cyborg,
deleting several is all-or-nothing and deleting one in use is a Conflict (not a 500).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from oslo_db import exception as db_exc
from sqlalchemy import bindparam, delete, func, insert, select

from acceld import exception, jsoncodec, limits, uuids
from acceld.db import models as m
from acceld.db import paging
from acceld.db.api import Database
from acceld.objects.arqs import units_per_group

KEY_PREFIXES = ("resources:", "trait:", "accel:")
STANDARD_RCS = ("FPGA", "GPU", "VGPU", "PGPU", "CUSTOM_QAT", "CUSTOM_NIC", "CUSTOM_SSD")
TRAIT_VALUES = ("required", "forbidden")


def _normalise_entry(index: int, key: str, value: Any) -> tuple[str, str]:
    what = f"{index} key {limits.prefix(key)}"
    if not key.startswith(KEY_PREFIXES):
        raise exception.InvalidInput(f"Group {what} must start with one of "
                                     f"{', '.join(KEY_PREFIXES)}.")
    prefix, _, rest = key.partition(":")
    name = rest.strip(" ")
    text = str(value)
    if prefix == "trait":
        if not name.startswith("CUSTOM_"):
            raise exception.InvalidInput(f"Group {what}: traits must start with "
                                         "CUSTOM_.")
        if text not in TRAIT_VALUES:
            raise exception.InvalidInput(f"Group {what}: the value must be one of "
                                         f"{', '.join(TRAIT_VALUES)}, not "
                                         f"{limits.prefix(text)}.")
    elif prefix == "resources":
        if name not in STANDARD_RCS and not name.startswith("CUSTOM_"):
            raise exception.InvalidInput(f"Group {what}: the resource class must be "
                                         f"one of {', '.join(STANDARD_RCS)} or start with "
                                         "CUSTOM_.")
        try:
            int(text)           # Cyborg's own test; a group of 0 (or less) asks for nothing
        except ValueError:
            raise exception.InvalidInput(f"Group {what}: the value must be an "
                                         f"integer, not {limits.prefix(text)}.") from None
    return f"{prefix}:{name}", text


def _check_amount(index: int, key: str, text: str, max_arqs: int) -> None:
    """A ``resources:`` amount is in [-INT_MAX, ``max_arqs``]."""
    amount = int(text)
    if amount > max_arqs:
        raise exception.InvalidInput(
            f"Group {index} key {limits.prefix(key)}: the amount {limits.prefix(text, 16)} "
            f"is more than {max_arqs}, the most accelerators one device profile may ask "
            "for ([api] max_arqs_per_profile).")
    if amount < -limits.INT_MAX:
        raise exception.InvalidInput(
            f"Group {index} key {limits.prefix(key)}: the amount {limits.prefix(text, 16)} "
            f"is less than {-limits.INT_MAX}.")


def normalise_groups(groups: list[dict[str, Any]],
                     max_arqs: int = limits.PROFILE_ARQS) -> list[dict[str, str]]:
    """Cyborg's group rules (contract 1.4); InvalidInput naming the key or the limit."""
    out = []
    for index, group in enumerate(groups):
        normal: dict[str, str] = {}
        for key, value in group.items():
            new_key, text = _normalise_entry(index, key, value)
            if new_key in normal:
                raise exception.InvalidInput(f"Group {index} names "
                                             f"{limits.prefix(new_key)} twice.")
            if new_key.startswith("resources:"):
                _check_amount(index, new_key, text, max_arqs)
            normal[new_key] = text
        out.append(normal)
    asked = sum(units_per_group(out))
    if asked > max_arqs:
        raise exception.InvalidInput(f"The groups ask for {asked} accelerators; one device "
                                     f"profile may ask for at most {max_arqs} ([api] "
                                     "max_arqs_per_profile).")
    return out


def _to_dict(uuid: str, name: str, description: str | None, groups: list[dict[str, str]],
             created_at: datetime.datetime, updated_at: datetime.datetime | None
             ) -> dict[str, Any]:
    """The API view of a profile: what :func:`create` writes, or :func:`_row_to_dict`."""
    return {"uuid": uuid, "name": name, "description": description, "groups": groups,
            "created_at": created_at, "updated_at": updated_at}


def _row_to_dict(dp: Any) -> dict[str, Any]:
    """The API view of a row of ``_COLUMNS``."""
    return _to_dict(dp.uuid, dp.name, dp.description, json.loads(dp.profile_json)["groups"],
                    dp.created_at, dp.updated_at)


_DP = m.DeviceProfile.__table__
_INSERT = insert(_DP)
_dumps = jsoncodec.encoder()


def create(db: Database, name: str, groups: list[dict[str, Any]],
           description: str | None = None, uuid: str | None = None,
           max_arqs: int = limits.PROFILE_ARQS) -> dict[str, Any]:
    """A new profile, one self-committing INSERT; Conflict for a taken name or uuid."""
    normal = normalise_groups(groups, max_arqs)
    profile_json = _dumps({"groups": normal})
    if len(profile_json) > limits.STORED_JSON_BYTES:
        raise exception.InvalidInput(f"The groups take {len(profile_json)} bytes as stored "
                                     f"(JSON); at most {limits.STORED_JSON_BYTES} are "
                                     "accepted.")
    row = {"uuid": uuid or uuids.random_uuid(), "name": name, "description": description,
           "profile_json": profile_json,
           # whole seconds: what every backend stores, so a later GET shows the same
           "created_at": m.utcnow().replace(microsecond=0), "updated_at": None}
    try:
        with db.autocommit(write=True) as conn:
            conn.execute(_INSERT, row)
    except db_exc.DBDuplicateEntry as exc:
        column = next((c for c in ("name", "uuid") if c in (exc.columns or ())), None)
        if column is None:
            raise exception.Conflict(f"A device_profile with name {name} or uuid "
                                     f"{row['uuid']} already exists.") from exc
        raise exception.Conflict(f"A device_profile with {column} {row[column]} already "
                                 "exists.") from exc
    return _to_dict(row["uuid"], name, description, normal, row["created_at"], None)


_COLUMNS = (_DP.c.uuid, _DP.c.name, _DP.c.description, _DP.c.profile_json, _DP.c.created_at,
            _DP.c.updated_at)
_BY_UUID = select(*_COLUMNS).where(_DP.c.uuid == bindparam("value"))
_BY_NAME = select(*_COLUMNS).where(_DP.c.name == bindparam("value"))


_PAGE = {named: paging.keyset(
              select(*_COLUMNS).where(*([_DP.c.name.in_(bindparam("names", expanding=True))]
                                        if named else [])).order_by(_DP.c.id), _DP.c.id)
         for named in (False, True)}


def list_profiles(db: Database, *, names: list[str] | None = None, limit: int | None = None,
                  marker: str | None = None) -> paging.Listing:
    """In id order (``acceld.db.paging``), each batch one statement."""
    return paging.listing(lambda: db.autocommit(write=False), _PAGE[names is not None],
                          paging.each(_row_to_dict), table=_DP, what="a device profile",
                          params=None if names is None else {"names": names}, limit=limit,
                          marker=marker)


def get(db: Database, *, uuid: str | None = None, name: str | None = None) -> dict[str, Any]:
    """By uuid or by name (one statement); NotFound in Cyborg's words."""
    stmt, value, what = (_BY_UUID, uuid, "uuid") if uuid is not None else \
        (_BY_NAME, name, "name")
    with db.autocommit(write=False) as conn:
        row = conn.execute(stmt, {"value": value}).first()
    if row is None:
        raise exception.NotFound(f"Device Profile not found with {what}={value}")
    return _row_to_dict(row)


def _in_use(db: Database, where: Any) -> exception.Conflict:
    with db.rows() as conn:
        used = conn.execute(
            select(_DP.c.name, _DP.c.uuid, func.count())
            .join(m.ExtendedAcceleratorRequest.__table__,
                  m.ExtendedAcceleratorRequest.device_profile_id == _DP.c.id)
            .where(where).group_by(_DP.c.id, _DP.c.name, _DP.c.uuid)
            .order_by(_DP.c.id)).first()
    if used is None:   # the ARQs went away meanwhile
        return exception.Conflict("A device profile being deleted is used by an "
                                  "accelerator request.")
    return exception.Conflict(f"Device profile {used[0]} ({used[1]}) is used by "
                              f"{used[2]} accelerator request(s).")


_DELETE_UUID = delete(_DP).where(_DP.c.uuid == bindparam("uuid"))


def delete_by_uuid(db: Database, uuid: str) -> None:
    """One self-committing statement: NotFound, or Conflict (:func:`_in_use`)."""
    try:
        with db.autocommit(write=True) as conn:
            deleted = conn.execute(_DELETE_UUID, {"uuid": uuid}).rowcount
    except db_exc.DBReferenceError as exc:
        raise _in_use(db, _DP.c.uuid == uuid) from exc
    if deleted == 0:
        raise exception.NotFound(f"Device Profile not found with uuid={uuid}")


def delete_by_names(db: Database, names: list[str]) -> None:
    """All or nothing: NotFound for a missing name, Conflict for one in use."""
    where = _DP.c.name.in_(names)
    try:
        with db.write_rows() as conn:
            rows = dict(conn.execute(select(_DP.c.name, _DP.c.id).where(where)).all())
            absent = [n for n in names if n not in rows]
            if absent:
                raise exception.NotFound(f"Device Profile not found with name={absent[0]}")
            conn.execute(delete(_DP).where(_DP.c.id.in_(list(rows.values()))))
    except db_exc.DBReferenceError as exc:
        raise _in_use(db, where) from exc
