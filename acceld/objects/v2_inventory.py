"""The inventory as the Cyborg v2 API shows it: devices, deployables, attributes.

Only devices an agent reported (``hostname IS NOT NULL``) are v2 devices. Lists are read
in batches (``acceld.db.paging``); every other public function is one transaction.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from oslo_db import exception as db_exc
from sqlalchemy import Connection, Row, Select, delete, select, update
from sqlalchemy.orm import Session

from acceld import exception, states
from acceld.db import generations, paging
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import holders

DEVICE_STATUSES = (states.DEVICE_STATUS_ENABLED, "maintaining")
# The generation (``Database.generation``) every list of this module is cached under.
GENERATION = generations.INVENTORY


# -- devices ----------------------------------------------------------------------------------

_REPORTED = m.Device.hostname.is_not(None)
# A device as the API shows it: the row's columns (Core rows: lists are the hot read path).
_DEVICES = select(m.Device.uuid, m.Device.type, m.Device.vendor, m.Device.model,
                  m.Device.std_board_info, m.Device.vendor_board_info, m.Device.hostname,
                  m.Device.status, m.Device.created_at, m.Device.updated_at).where(_REPORTED)


def _as_dict(stmt: Select[Any]) -> Callable[[Row[Any]], dict[str, Any]]:
    """A row of ``stmt`` as the API shows it: its selected columns by name (the ``row_id``
    that :func:`paging.keyset` adds after them left out)."""
    keys = tuple(stmt.selected_columns.keys())
    return lambda row: dict(zip(keys, row, strict=False))


_device = _as_dict(_DEVICES)


def list_devices(db: Database, *, type: str | None = None, vendor: str | None = None,
                 hostname: str | None = None, limit: int | None = None,
                 marker: str | None = None) -> paging.Listing:
    """Reported devices, with exact-match filters; a page of ``limit`` after ``marker``."""
    q = _DEVICES
    for column, value in ((m.Device.type, type), (m.Device.vendor, vendor),
                          (m.Device.hostname, hostname)):
        if value is not None:
            q = q.where(column == value)
    return paging.listing(db.rows, paging.keyset(q.order_by(m.Device.id), m.Device.id),
                          paging.each(_device), table=m.Device.__table__, what="a device",
                          where=[_REPORTED], limit=limit, marker=marker)


def _one(conn: Connection, stmt: Select[Any], uuid: str, label: str) -> Row[Any]:
    """The row ``stmt`` reads of ``uuid``, or NotFound naming it."""
    row = conn.execute(stmt.where(stmt.selected_columns.uuid == uuid)).first()
    if row is None:
        raise exception.NotFound(f"{label} {uuid} could not be found.")
    return row


def get_device(db: Database, uuid: str) -> dict[str, Any]:
    with db.rows() as conn:
        return _device(_one(conn, _DEVICES, uuid, "Device"))


def set_device_status(db: Database, uuid: str, status: str) -> str:
    """Sets a reported device's ``status`` (DeviceInUse to disable a held one); its host."""
    if status not in DEVICE_STATUSES:
        raise exception.InvalidInput(f"status must be one of {DEVICE_STATUSES}")
    with db.writer() as s:
        dev = holders.lock_device(s, uuid, _REPORTED)
        if status != states.DEVICE_STATUS_ENABLED:     # maintenance takes it from whoever holds it
            holders.refuse_if_held(s, dev, f"disable device {uuid}")
        s.execute(update(m.Device).where(m.Device.id == dev.id).values(status=status))
        return dev.hostname


# -- deployables ------------------------------------------------------------------------------

def _deployable(dep: Any, attrs: list[tuple[str, str]]) -> dict[str, Any]:
    return {"uuid": dep.uuid, "parent_id": dep.parent_id, "root_id": dep.root_id,
            "name": dep.name, "num_accelerators": dep.num_accelerators,
            "device_id": dep.device_id,
            # Cyborg emits this as a JSON string of one-key objects, in row order.
            "attributes_list": json.dumps([{k: v} for k, v in attrs]),
            "rp_uuid": dep.rp_uuid, "driver_name": dep.driver_name,
            "bitstream_id": dep.bitstream_id, "created_at": dep.created_at,
            "updated_at": dep.updated_at}


def _with_attributes(s: Session | Connection, deps: list[Any]) -> list[dict[str, Any]]:
    attrs: dict[int, list[tuple[str, str]]] = {d.id: [] for d in deps}
    if deps:
        rows = s.execute(select(m.Attribute.deployable_id, m.Attribute.key,
                                m.Attribute.value)
                         .where(m.Attribute.deployable_id.in_(list(attrs)))
                         .order_by(m.Attribute.id))
        for dep_id, key, value in rows:
            attrs[dep_id].append((key, value))
    return [_deployable(d, attrs[d.id]) for d in deps]


_DEPLOYABLE = select(m.Deployable.__table__)
_DEPLOYABLES = paging.keyset(_DEPLOYABLE.order_by(m.Deployable.id), m.Deployable.id)


def list_deployables(db: Database, *, limit: int | None = None,
                     marker: str | None = None) -> paging.Listing:
    """Deployables with their attributes; a page of ``limit`` after ``marker``."""
    # rows, not ORM entities (hot read path)
    return paging.listing(db.rows, _DEPLOYABLES, _with_attributes,
                          table=m.Deployable.__table__, what="a deployable", limit=limit,
                          marker=marker)


def get_deployable(db: Database, uuid: str) -> dict[str, Any]:
    with db.rows() as conn:
        return _with_attributes(conn, [_one(conn, _DEPLOYABLE, uuid, "Deployable")])[0]


# -- attributes -------------------------------------------------------------------------------

_ATTRIBUTES = select(m.Attribute.uuid, m.Attribute.deployable_id, m.Attribute.key,
                     m.Attribute.value, m.Attribute.created_at, m.Attribute.updated_at)
_attribute = _as_dict(_ATTRIBUTES)


def list_attributes(db: Database, *, deployable_id: int | None = None,
                    key: str | None = None, limit: int | None = None,
                    marker: str | None = None) -> paging.Listing:
    """Attributes, with exact-match filters; a page of ``limit`` after ``marker``."""
    q = _ATTRIBUTES
    if deployable_id is not None:
        q = q.where(m.Attribute.deployable_id == deployable_id)
    if key is not None:
        q = q.where(m.Attribute.key == key)
    return paging.listing(db.rows, paging.keyset(q.order_by(m.Attribute.id), m.Attribute.id),
                          paging.each(_attribute), table=m.Attribute.__table__,
                          what="an attribute", limit=limit, marker=marker)


def get_attribute(db: Database, uuid: str) -> dict[str, Any]:
    with db.rows() as conn:
        return _attribute(_one(conn, _ATTRIBUTES, uuid, "Attribute"))


def create_attribute(db: Database, deployable_id: int, key: str,
                     value: str) -> dict[str, Any]:
    """A new attribute of an existing deployable (not pushed to Placement, as in Cyborg)."""
    with db.writer() as s:
        exists = s.execute(select(m.Deployable.id).where(m.Deployable.id == deployable_id)
                           ).scalar()
        if exists is None:
            raise exception.InvalidInput(f"deployable_id {deployable_id} is not a "
                                         "deployable.")
        attr = m.Attribute(uuid=str(uuidlib.uuid4()), deployable_id=deployable_id,
                           key=key, value=value)
        s.add(attr)
        try:
            s.flush()
        except db_exc.DBReferenceError as exc:  # the deployable vanished meanwhile
            raise exception.InvalidInput(f"deployable_id {deployable_id} is not a "
                                         "deployable.") from exc
        return {column.key: getattr(attr, column.key) for column in _ATTRIBUTES.selected_columns}


def delete_attribute(db: Database, uuid: str) -> None:
    with db.writer() as s:
        if s.execute(delete(m.Attribute).where(m.Attribute.uuid == uuid)).rowcount == 0:
            raise exception.NotFound(f"Attribute {uuid} could not be found.")
