"""Accelerator requests (Cyborg v2 ARQs): their rows, binding and unbinding them.

Every public function is one transaction (on MySQL, a read and one self-committing
statement). ``project_id`` is the caller's project, None for an administrator.

Invariant: a handle is ``in_use`` exactly when one ARQ names it, both changed in one
transaction; whoever takes a handle away (unbind, failed bind, delete) first locks the ARQ
row. On MySQL/MariaDB (``Database.updates_tables_together``) a bind or unbind is one
UPDATE of both tables whose conditions are the compare-and-swap, so no lock is needed.
Statements are built once at import (building one costs more than running it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
from sqlalchemy import (
    ColumnElement,
    Connection,
    Executable,
    Row,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    literal_column,
    select,
    update,
)

from acceld import exception, limits, reports, uuids
from acceld import states as st
from acceld.db import models as m
from acceld.db import paging
from acceld.db.api import Database
from acceld.objects import hostwork, ledger

_arq = m.ExtendedAcceleratorRequest.__table__
_ah = m.AttachHandle.__table__
_dp = m.DeviceProfile.__table__
_dep = m.Deployable.__table__
_dev = m.Device.__table__

# Whether a handle needs host work (binding.HostWork.needs), asked with the bind's or the
# unbind's own connection, or with the Database where the answer is read without one.
HostWorkQuestion = Callable[["Connection | Database", dict[str, Any]], bool]

# Every public writer is one transaction, so a deadlock (MariaDB gap locks when binds,
# unbinds and deletes race on the same rows) is retried as a whole.
_retry_on_deadlock = oslo_db_api.wrap_db_retry(max_retries=10, retry_interval=0.02,
                                               inc_retry_interval=True,
                                               retry_on_deadlock=True)


# -- pure helpers -----------------------------------------------------------------------------

def units_per_group(groups: list[dict[str, str]]) -> list[int]:
    """ARQs each group asks for: the sum of its ``resources:*`` (at least 0)."""
    return [max(0, sum(int(v) for k, v in g.items() if k.startswith("resources:")))
            for g in groups]


def require_resolved(arqs: list[dict[str, Any]]) -> None:
    """NotResolved (423) when any of an instance's ARQs is still being bound."""
    if any(a["state"] not in st.ARQ_RESOLVED for a in arqs):
        raise _not_resolved()


def _not_resolved() -> exception.NotResolved:
    return exception.NotResolved("Some accelerator requests of the instance are not "
                                 "resolved yet.")


def attach_info_strings(attach_info: str | dict[str, Any]) -> dict[str, str]:
    """A handle's ``attach_info`` (its stored JSON, or that decoded) with every value a
    string: as Cyborg's API shows it and as an agent takes it to build a guest's device."""
    info = json.loads(attach_info) if isinstance(attach_info, str) else attach_info
    return {k: str(v) for k, v in info.items()}


def _to_dict(row: Any) -> dict[str, Any]:
    """An ARQ as the API shows it, from a row shaped as :data:`_ROWS`."""
    bound = row.state == st.ARQ_BOUND and row.handle_uuid is not None
    return {"uuid": row.uuid, "state": row.state,
            "device_profile_name": row.profile_name,
            "device_profile_group_id": row.device_profile_group_id,
            "hostname": row.hostname, "device_rp_uuid": row.device_rp_uuid,
            "instance_uuid": row.instance_uuid, "project_id": row.project_id,
            "attach_handle_type": row.handle_type if bound else "",
            "attach_handle_uuid": row.handle_uuid if bound else None,
            "attach_handle_info": attach_info_strings(row.handle_info) if bound else {},
            "created_at": row.created_at, "updated_at": row.updated_at}


def _handle_dict(handle: Row[Any], arq_uuid: str, hostname: str | None) -> dict[str, Any]:
    """A handle as host work needs it, from a row with :data:`_HANDLE` (and its
    ``deployable_id``, where read)."""
    target = hostwork.target_of(handle)
    return {"uuid": handle.uuid, "attach_type": handle.attach_type,
            "attach_info": json.loads(handle.attach_info), "hostname": hostname,
            "arq_uuid": arq_uuid, "deployable_id": getattr(handle, "deployable_id", None),
            "target": None if target is None else dataclasses.asdict(target)}


# -- statements -------------------------------------------------------------------------------

# What :func:`_handle_dict` reads of a handle (from ``hostwork.HANDLES_WITH_TARGET``).
_HANDLE = (_ah.c.id, _ah.c.uuid, _ah.c.attach_type, _ah.c.attach_info, *hostwork.TARGET_COLUMNS)


def _scoped(stmt: Any) -> dict[bool, Any]:
    """``stmt`` unscoped (False) and limited to the ``scope`` project (True)."""
    return {False: stmt, True: stmt.where(_arq.c.project_id == bindparam("scope"))}


def _state_in(states: Iterable[str]) -> ColumnElement[bool]:
    """``state IN (...)`` with the states in the SQL (not re-rendered at each run)."""
    return _arq.c.state.in_([literal_column(f"'{state}'") for state in sorted(states)])


# An ARQ as the API shows it: the row, its profile's name and the handle it holds. The
# profile is outer-joined although every ARQ has one (a foreign key, NOT NULL): with an
# inner join MariaDB reads the profile first and then every ARQ of it, sorted, for each
# batch of a list (ORDER BY id LIMIT n): a million ARQs took seconds a batch. The ARQ
# table first, as an outer join keeps it, reads each batch along the primary key.
_ROWS = (select(_arq.c.uuid, _arq.c.state, _arq.c.device_profile_group_id,
                _arq.c.hostname, _arq.c.device_rp_uuid, _arq.c.instance_uuid,
                _arq.c.project_id, _arq.c.created_at, _arq.c.updated_at,
                _dp.c.name.label("profile_name"), _ah.c.uuid.label("handle_uuid"),
                _ah.c.attach_type.label("handle_type"),
                _ah.c.attach_info.label("handle_info"))
         .select_from(_arq.outerjoin(_dp, _dp.c.id == _arq.c.device_profile_id)
                      .outerjoin(_ah, _ah.c.id == _arq.c.attach_handle_id))
         .order_by(_arq.c.id))
_GET = _scoped(_ROWS.where(_arq.c.uuid == bindparam("arq_uuid")))
# One batch of a list (``acceld.db.paging``), by (one instance, resolved only).
_PAGE = {(instance, done): _scoped(paging.keyset(
             _ROWS.where(*([_arq.c.instance_uuid == bindparam("instance")] if instance
                           else []),
                         *([_state_in(st.ARQ_RESOLVED)] if done else [])), _arq.c.id))
         for instance in (False, True) for done in (False, True)}
_UNRESOLVED = _scoped(select(_arq.c.id).where(
    _arq.c.instance_uuid == bindparam("instance"), ~_state_in(st.ARQ_RESOLVED)).limit(1))
_STATE = _scoped(select(_arq.c.state).where(_arq.c.uuid == bindparam("arq_uuid")))
_TAKEN = _scoped(select(_arq.c.instance_uuid)
                 .where(_arq.c.instance_uuid.in_(bindparam("instances", expanding=True)))
                 .order_by(_arq.c.id).limit(1))

_PROFILE = select(_dp.c.id, _dp.c.uuid, _dp.c.name, _dp.c.profile_json).where(
    _dp.c.name == bindparam("name"))
_INSERT = insert(_arq)
_NEW_ARQ = {"uuid": bindparam("uuid", type_=_arq.c.uuid.type),
            "project_id": bindparam("project_id", type_=_arq.c.project_id.type),
            "state": literal_column(f"'{st.ARQ_INITIAL}'"),
            "substate": literal_column(f"'{st.ARQ_INITIAL}'"),
            "device_profile_group_id": bindparam(
                "group", type_=_arq.c.device_profile_group_id.type),
            "created_at": bindparam("created_at", type_=_arq.c.created_at.type)}
# One ARQ from a profile known by id *and* uuid: no row is inserted when that profile is
# gone (an id can come back on SQLite, a uuid cannot).
_INSERT_ONE = insert(_arq).from_select(
    [*_NEW_ARQ, "device_profile_id"], select(*_NEW_ARQ.values(), _dp.c.id)
    .where(_dp.c.id == bindparam("dp_id"), _dp.c.uuid == bindparam("dp_uuid")))
# The same where ids never come back (``Database.ids_reused``): a plain INSERT, and the
# foreign key refuses a profile that is gone.
_INSERT_ONE_BY_ID = insert(_arq).values(
    **_NEW_ARQ, device_profile_id=bindparam("dp_id", type_=_arq.c.device_profile_id.type))

# Whether the device may be handed to a guest (``states``): read with the candidates, and
# read again under a shared lock of the device's row before a claim (see ``holders``).
_DEVICE_COLUMNS = (_dev.c.id.label("device_id"), _dev.c.uuid.label("device_uuid"),
                   _dev.c.state.label("device_state"), _dev.c.status.label("device_status"),
                   _dev.c.health.label("device_health"),
                   _dev.c.lifecycle.label("device_lifecycle"),
                   _dev.c.maintenance.label("device_maintenance"))
_USABLE = and_(_dev.c.state == st.READY, _dev.c.status == st.DEVICE_STATUS_ENABLED,
               _dev.c.health.in_([literal_column(f"'{h}'") for h in st.USABLE_HEALTH]),
               _dev.c.lifecycle.in_([literal_column(f"'{h}'")
                                     for h in st.SCHEDULABLE_LIFECYCLE]),
               _dev.c.maintenance.is_(False))
_DEVICE_NOW = select(*_DEVICE_COLUMNS).where(_dev.c.id == bindparam("device_id"))
_LOCK_DEVICE = _DEVICE_NOW.with_for_update(read=True)

# The deployables behind an rp_uuid, each with its first few free handles after handle id
# ``after`` (none: one NULL row) and the handles' target. A claim needs one handle; reading
# every free one cost more than the rest of the bind.
_CANDIDATES = 4
# The ARQ being bound, joined to its candidates (at most one row): what its ledger line
# says it was bound from, read by the same statement.
_me = _arq.alias("me")
_FREE_ROWS = (select(_dep.c.id.label("deployable_id"), _dep.c.uuid.label("deployable_uuid"),
                     *_HANDLE, *_DEVICE_COLUMNS, _me.c.state.label("arq_state"),
                     _me.c.substate.label("arq_substate"),
                     _me.c.project_id.label("arq_project"))
              .select_from(hostwork.with_target(
                  _dep.outerjoin(_ah, and_(_ah.c.deployable_id == _dep.c.id,
                                           _ah.c.in_use.is_(False),
                                           _ah.c.id > bindparam("after"))))
                  .outerjoin(_me, _me.c.uuid == bindparam("arq_uuid")))
              .where(_dep.c.rp_uuid == bindparam("rp_uuid"))
              .order_by(_dep.c.id, _ah.c.id)
              .limit(_CANDIDATES))
_FREE = _FREE_ROWS.add_columns(literal_column("NULL").label("taken"))
# The same with a request's first bind: whether one of its instances already has ARQs
# (the one ``taken``, or NULL), asked in the same statement.
_FREE_UNBOUND = {
    scoped: _FREE_ROWS.add_columns(
        _TAKEN[scoped].scalar_subquery().label("taken")) for scoped in (False, True)}
# A bind never moves an ARQ to another project: ``owner`` (an admin's ``/project_id``)
# only fills in the project of an ARQ that has none (rows from before projects were kept).
_KEEP_OWNER = func.coalesce(_arq.c.project_id, bindparam("owner", type_=_arq.c.project_id.type))
_TAKE = update(_ah).where(_ah.c.id == bindparam("handle_id"), _ah.c.in_use.is_(False)) \
    .values(in_use=True)
# Initial/Unbound -> ``to_state``, recording where and for whom it binds and its handle.
_BINDING = {_arq.c.state: bindparam("to_state"), _arq.c.hostname: bindparam("to_hostname"),
            _arq.c.device_rp_uuid: bindparam("to_rp_uuid"),
            _arq.c.instance_uuid: bindparam("to_instance"), _arq.c.project_id: _KEEP_OWNER,
            _arq.c.deployable_id: bindparam("to_deployable_id")}
_BEGIN = _scoped(update(_arq).where(_arq.c.uuid == bindparam("arq_uuid"),
                                    _state_in(st.ARQ_TRANSITIONS[st.ARQ_BIND_STARTED]))
                 .values({**_BINDING, _arq.c.attach_handle_id: bindparam("to_handle_id")}))
_FINISH = update(_arq).where(_arq.c.uuid == bindparam("arq_uuid"),
                             _arq.c.state == st.ARQ_BIND_STARTED,
                             _arq.c.attach_handle_id.is_not(None)) \
    .values(state=st.ARQ_BOUND)

# MySQL and MariaDB: a claim as one statement that changes both rows, committing by
# itself (see :func:`bind`): the handle, still free, and the ARQ, still Initial/Unbound,
# of a device still usable (InnoDB reads the device's row of a multi-table UPDATE with a
# shared lock, so a concurrent change of its state waits for the claim or the claim for
# it: ``acceld.objects.holders``).
# Every value is a parameter (``updated_at`` too: a column's Python-side ``onupdate``
# covers the first table of a multi-table UPDATE only).
_TAKE_AND_BEGIN = _scoped(
    update(_ah).where(_ah.c.id == bindparam("handle_id"), _ah.c.in_use.is_(False),
                      _arq.c.uuid == bindparam("arq_uuid"),
                      _state_in(st.ARQ_TRANSITIONS[st.ARQ_BIND_STARTED]),
                      _dev.c.id == bindparam("device_id"), _USABLE)
    .values({_ah.c.in_use: True, _ah.c.updated_at: bindparam("now"), **_BINDING,
             _arq.c.attach_handle_id: bindparam("handle_id"),
             _arq.c.updated_at: bindparam("now")}))
# MySQL and MariaDB: what an unbind decides from (the ARQ, the handle it holds and that
# handle's target), read without a lock, then the unbind as one statement whose CAS is
# that the ARQ still is as read (its state, its handle); the handle is freed by the same
# statement.
_HOLDING = _scoped(
    select(_arq.c.id.label("arq_id"), _arq.c.state, _arq.c.substate, _arq.c.hostname,
           _arq.c.attach_handle_id, _arq.c.instance_uuid, _arq.c.project_id,
           _dep.c.uuid.label("deployable_uuid"), _dev.c.uuid.label("device_uuid"), *_HANDLE)
    .select_from(_arq.outerjoin(hostwork.HANDLES_WITH_TARGET,
                                _ah.c.id == _arq.c.attach_handle_id))
    .where(_arq.c.uuid == bindparam("arq_uuid")))
_UNBIND_VALUES = {_arq.c.state: st.ARQ_UNBOUND, _arq.c.hostname: None,
                  _arq.c.device_rp_uuid: None, _arq.c.instance_uuid: None,
                  _arq.c.attach_handle_id: None, _arq.c.deployable_id: None,
                  _arq.c.substate: st.ARQ_INITIAL, _arq.c.updated_at: bindparam("now")}
# as read: the same state and hot-plug substate (a hot attach that began since the read
# makes the unbind read again, and refuse)
_AS_READ = update(_arq).where(_arq.c.id == bindparam("arq_id"),
                              _arq.c.state == bindparam("seen_state"),
                              _arq.c.substate == bindparam("seen_substate"))
_UNBIND_AS_READ = _AS_READ.where(_arq.c.attach_handle_id.is_(None)).values(_UNBIND_VALUES)
_UNBIND_AND_FREE = (_AS_READ.where(_ah.c.id == bindparam("handle_id"),
                                   _arq.c.attach_handle_id == _ah.c.id)
                    .values({**_UNBIND_VALUES, _ah.c.in_use: False,
                             _ah.c.updated_at: bindparam("now")}))
# An unbind that finds its ARQ changed at every try gives up after this many reads.
_UNBIND_TRIES = 20

# Locking reads of the rows whose handles are taken away (in id order: no lock cycles).
_LOCKED = select(_arq.c.id, _arq.c.uuid, _arq.c.state, _arq.c.substate, _arq.c.hostname,
                 _arq.c.instance_uuid, _arq.c.attach_handle_id) \
    .order_by(_arq.c.id).with_for_update()
_LOCK_ONE = _scoped(_LOCKED.where(_arq.c.uuid == bindparam("arq_uuid")))
_LOCK_BINDING = _LOCKED.where(_arq.c.uuid == bindparam("arq_uuid"),
                              _state_in(st.ARQ_TRANSITIONS[st.ARQ_BIND_FAILED]))
_LOCK_MANY = _scoped(_LOCKED.where(_arq.c.uuid.in_(bindparam("uuids", expanding=True))))
_LOCK_INSTANCE = _scoped(_LOCKED.where(_arq.c.instance_uuid == bindparam("instance")))

_HELD = (select(*_HANDLE).select_from(hostwork.HANDLES_WITH_TARGET)
         .where(_ah.c.id.in_(bindparam("handle_ids", expanding=True))))
_RELEASE = update(_ah).where(_ah.c.id.in_(bindparam("handle_ids", expanding=True))) \
    .values(in_use=False)
# The ledger line of each ARQ whose handle is freed (before the ARQ's own UPDATE clears
# it): one INSERT ... SELECT for all of them, costing no read.
_HOT = _arq.c.substate.in_(sorted(st.HOT_PLUGGED))
_LEDGER_FREED = ledger.insert_from(
    select(bindparam("at", type_=m.LedgerEntry.at.type).label("at"),
           case((_HOT, literal(ledger.DETACH)), else_=literal(ledger.UNBIND)).label("event"),
           case((_HOT, literal(ledger.KIND_HOT_PLUG)),
                else_=literal(ledger.KIND_ARQ)).label("kind"),
           _dev.c.uuid.label("device_uuid"), _dep.c.uuid.label("deployable_uuid"),
           _ah.c.uuid.label("attach_handle_uuid"), _arq.c.uuid.label("arq_uuid"),
           _arq.c.instance_uuid.label("instance_uuid"), _arq.c.hostname.label("host"),
           _arq.c.project_id.label("project_id"),
           bindparam("user_id", type_=m.LedgerEntry.user_id.type).label("user_id"),
           _arq.c.state.label("from_state"),
           bindparam("to_state", type_=m.LedgerEntry.to_state.type).label("to_state"))
    .select_from(_arq.join(_ah, _ah.c.id == _arq.c.attach_handle_id)
                 .join(_dep, _dep.c.id == _ah.c.deployable_id)
                 .join(_dev, _dev.c.id == _dep.c.device_id))
    .where(_arq.c.id.in_(bindparam("arq_ids", expanding=True))))
_FAIL = update(_arq).where(_arq.c.id == bindparam("arq_id"),
                           _state_in(st.ARQ_TRANSITIONS[st.ARQ_BIND_FAILED])) \
    .values(state=st.ARQ_BIND_FAILED, attach_handle_id=None, deployable_id=None)
_UNBIND = update(_arq).where(_arq.c.id == bindparam("arq_id"),
                             _state_in(st.ARQ_TRANSITIONS[st.ARQ_UNBOUND])) \
    .values(_UNBIND_VALUES)
_DELETE = delete(_arq).where(_arq.c.id.in_(bindparam("arq_ids", expanding=True)),
                             _state_in(st.ARQ_TRANSITIONS[st.ARQ_DELETING]))
# One ARQ that holds nothing and belongs to no instance: nothing to free, no service
# token to ask for, so its delete needs no lock first (see delete_by_uuids).
_DELETE_FREE = _scoped(delete(_arq).where(_arq.c.uuid == bindparam("arq_uuid"),
                                          _arq.c.instance_uuid.is_(None),
                                          _arq.c.attach_handle_id.is_(None),
                                          _arq.c.substate.not_in(sorted(st.HOT_PLUGGED)),
                                          _state_in(st.ARQ_TRANSITIONS[st.ARQ_DELETING])))


def _read(db: Connection | Database, stmt: Executable,
          params: dict[str, Any]) -> Sequence[Row[Any]]:
    """One SELECT's rows: in a Connection's transaction, or a statement of its own."""
    if isinstance(db, Connection):
        return db.execute(stmt, params).all()
    with db.autocommit(write=False) as conn:
        return conn.execute(stmt, params).all()


def _write(db: Connection | Database, stmt: Executable, params: dict[str, Any]) -> int:
    """One writing statement's rowcount: in a Connection's transaction, or self-committing."""
    if isinstance(db, Connection):
        return db.execute(stmt, params).rowcount
    with db.autocommit(write=True) as conn:
        return conn.execute(stmt, params).rowcount


def _scope(stmts: dict[bool, Any], project_id: str | None,
           **params: Any) -> tuple[Executable, dict[str, Any]]:
    """The one of :func:`_scoped` ``stmts`` that fits ``project_id``, with its parameters."""
    if project_id is not None:
        params["scope"] = project_id
    return stmts[project_id is not None], params


# -- reads ------------------------------------------------------------------------------------

def page_arqs(db: Database, *, project_id: str | None, instance_uuid: str | None = None,
              resolved_only: bool = False, after: int = 0,
              n: int = paging.BATCH) -> tuple[list[dict[str, Any]], int | None]:
    """One batch (``acceld.db.paging``) of the ARQs the scope sees; one statement."""
    params: dict[str, Any] = {"after": after, "n": n}
    if instance_uuid is not None:
        params["instance"] = instance_uuid
    rows = _read(db, *_scope(_PAGE[instance_uuid is not None, resolved_only], project_id,
                             **params))
    return [_to_dict(row) for row in rows], paging.last_id(rows)


def list_arqs(db: Database, *, project_id: str | None, instance_uuid: str | None = None,
            resolved_only: bool = False, limit: int | None = None,
            marker: str | None = None) -> paging.Listing:
    """The ARQs the scope sees, of one instance or all; a page of ``limit`` after
    ``marker``. ``resolved_only`` for one instance is all of them or NotResolved (423),
    decided before anything is sent: from the first batch, or, when that is not all of
    them, by one more query for an unresolved one. Later batches read resolved ones only."""
    after = 0
    if marker is not None:
        mine = [] if project_id is None else [_arq.c.project_id == project_id]
        with db.autocommit(write=False) as conn:
            after = paging.marker_id(conn, _arq, marker,
                                     "an accelerator request (of this project)", *mine)
    by_instance = resolved_only and instance_uuid is not None

    def read(done: bool) -> paging.Read:
        return lambda a, n: page_arqs(db, project_id=project_id, instance_uuid=instance_uuid,
                                      resolved_only=done, after=a, n=n)

    found = paging.Listing(read(resolved_only and not by_instance), after=after, limit=limit,
                           rest=read(resolved_only))
    if by_instance:
        require_resolved(found.items)
        if (marker is not None or not found.complete) and _read(
                db, *_scope(_UNRESOLVED, project_id, instance=instance_uuid)):
            raise _not_resolved()
    return found


def _not_found(uuid: str) -> exception.ARQNotFound:
    return exception.ARQNotFound(f"ExtArq not found with uuid={uuid}")


def get(db: Database, uuid: str, *, project_id: str | None) -> dict[str, Any]:
    """One ARQ; another project's is NotFound, as a missing one."""
    rows = _read(db, *_scope(_GET, project_id, arq_uuid=uuid))
    if not rows:
        raise _not_found(uuid)
    return _to_dict(rows[0])


# -- hot plug (docs/hot-plug.md) ----------------------------------------------------------------

_FREE_ON_HOST = (select(_dep.c.rp_uuid, func.count(_ah.c.id).label("free"))
                 .select_from(_dep.join(_dev, _dev.c.id == _dep.c.device_id)
                              .join(_ah, _ah.c.deployable_id == _dep.c.id))
                 .where(_dev.c.hostname == bindparam("host"), _ah.c.in_use.is_(False),
                        _ah.c.attach_type.in_(sorted(st.GUEST_ATTACH_TYPES)))
                 .group_by(_dep.c.rp_uuid))
_GET_HOT = _scoped(_ROWS.add_columns(_arq.c.substate).where(_arq.c.uuid == bindparam("arq_uuid")))
_SET_SUBSTATE = update(_arq).where(_arq.c.uuid == bindparam("arq_uuid"),
                                   _arq.c.substate.in_(bindparam("expect", expanding=True))) \
    .values(substate=bindparam("to"), updated_at=bindparam("now"))


_HOT_PLUGGED = (select(_arq.c.uuid, _arq.c.substate, _arq.c.hostname, _arq.c.instance_uuid,
                       _arq.c.updated_at)
                .where(_arq.c.substate.in_(sorted(st.HOT_PLUGGED)),
                       _arq.c.state == st.ARQ_BOUND)
                .order_by(_arq.c.hostname, _arq.c.id))
_HOT_PLUGGED_KEYS = tuple(_HOT_PLUGGED.selected_columns.keys())


_STATES = select(_arq.c.uuid, _arq.c.state).where(
    _arq.c.uuid.in_(bindparam("uuids", expanding=True)))


def states_of(db: Database, uuids: Collection[str]) -> dict[str, str | None]:
    """Each ARQ's state now, in one statement; None for one that is gone (deleted)."""
    found = {r.uuid: r.state for r in _read(db, _STATES, {"uuids": sorted(set(uuids))})}
    return {uuid: found.get(uuid) for uuid in uuids}


def hot_plugged(db: Database, host: str | None = None) -> list[dict[str, Any]]:
    """Every Bound ARQ attached live (or being attached or detached), of ``host`` when
    given: uuid, substate, hostname, instance_uuid, updated_at (naive UTC); by host."""
    stmt = _HOT_PLUGGED if host is None else _HOT_PLUGGED.where(_arq.c.hostname == host)
    return [dict(zip(_HOT_PLUGGED_KEYS, row, strict=True)) for row in _read(db, stmt, {})]


def free_handles_by_provider(db: Database, host: str) -> dict[str, int]:
    """Resource provider uuid -> free handles a guest takes, of ``host``'s deployables."""
    return {row.rp_uuid: row.free for row in _read(db, _FREE_ON_HOST, {"host": host})}


def get_hot_plug(db: Database, uuid: str, *, project_id: str | None) -> dict[str, Any]:
    """:func:`get` with the ARQ's hot-plug ``substate`` as ``hot_plug`` (``Initial`` when
    it is not hot-plugged), in the same statement."""
    rows = _read(db, *_scope(_GET_HOT, project_id, arq_uuid=uuid))
    if not rows:
        raise _not_found(uuid)
    return {**_to_dict(rows[0]), "hot_plug": rows[0].substate}


def set_hot_plug_state(db: Database, uuid: str, to: str, *, expect: Collection[str]) -> bool:
    """Substate ``expect`` -> ``to`` in one compare-and-swap; False when it was not."""
    return _write(db, _SET_SUBSTATE, {"arq_uuid": uuid, "to": to, "now": m.utcnow(),
                                      "expect": sorted(expect)}) == 1


# -- create -----------------------------------------------------------------------------------

class _Profile(NamedTuple):
    id: int
    uuid: str
    name: str
    groups: tuple[int, ...]           # group index of each ARQ the profile asks for


# Per database: profile name -> what a create needs of it. Profiles are never updated, so
# an entry is right while its row exists with that uuid; the one-statement INSERT checks
# exactly that (id and uuid, or the foreign key), so a stale entry inserts nothing and the
# profile is read again: the write validates the entry, no invalidation is needed.
_PROFILES: weakref.WeakKeyDictionary[Database, dict[str, _Profile]] = \
    weakref.WeakKeyDictionary()
_PROFILES_MAX = 1024


def _read_profile(conn: Connection, name: str, max_arqs: int) -> _Profile:
    dp = conn.execute(_PROFILE, {"name": name}).first()
    if dp is None:
        raise exception.NotFound(f"Device Profile not found with name={name}")
    units = units_per_group(json.loads(dp.profile_json)["groups"])
    if sum(units) > max_arqs:   # stored before the limit, or over a lowered one
        raise exception.InvalidInput(f"Device profile {dp.name} asks for {sum(units)} "
                                     f"accelerators; at most {max_arqs} are created for one "
                                     "request ([api] max_arqs_per_profile).")
    return _Profile(dp.id, dp.uuid, dp.name,
                    tuple(group for group, count in enumerate(units) for _ in range(count)))


@_retry_on_deadlock
def create(db: Database, profile_name: str, project_id: str | None,
           max_arqs: int = limits.PROFILE_ARQS) -> list[dict[str, Any]]:
    """One Initial ARQ per unit of the profile; one INSERT for a known one-ARQ profile."""
    known = _PROFILES.setdefault(db, {})
    profile = known.get(profile_name)
    rows: list[dict[str, Any]] = []
    if profile is not None and len(profile.groups) == 1:
        row = _arq_row(profile, profile.groups[0], project_id)
        params = {"uuid": row["uuid"], "project_id": project_id, "group": profile.groups[0],
                  "created_at": row["created_at"], "dp_id": profile.id, "dp_uuid": profile.uuid}
        try:
            inserted = _write(db, _INSERT_ONE if db.ids_reused else _INSERT_ONE_BY_ID, params)
        except db_exc.DBReferenceError:
            inserted = 0
        if inserted == 1:
            rows = [row]                # else deleted, or deleted and made again: read it
    if not rows:
        with db.write_rows() as conn:
            profile = _read_profile(conn, profile_name, max_arqs)
            rows = [_arq_row(profile, group, project_id) for group in profile.groups]
            if rows:
                conn.execute(_INSERT, rows)
    if len(known) >= _PROFILES_MAX:
        known.clear()
    known[profile_name] = profile
    return [_to_dict(types.SimpleNamespace(
                **row, profile_name=profile.name, hostname=None, device_rp_uuid=None,
                instance_uuid=None, updated_at=None, handle_uuid=None, handle_type=None,
                handle_info=None))
            for row in rows]


def _arq_row(profile: _Profile, group: int, project_id: str | None) -> dict[str, Any]:
    return {"uuid": uuids.random_uuid(), "project_id": project_id,
            "state": st.ARQ_INITIAL, "substate": st.ARQ_INITIAL,
            "device_profile_id": profile.id, "device_profile_group_id": group,
            "created_at": m.utcnow().replace(microsecond=0)}  # as every backend keeps it


# -- bind -------------------------------------------------------------------------------------

def _state_error(uuid: str, state: str | None, target: str) -> Exception:
    """Why a CAS towards ``target`` matched no row, from the ARQ's ``state`` (None: gone)."""
    if state is None:
        return _not_found(uuid)
    return exception.ARQBadState(f"Bad state: {state} for ARQ: {uuid}. Expected state(s): "
                                 f"{sorted(st.ARQ_TRANSITIONS[target])}")


def _state_now(db: Connection | Database, uuid: str, project_id: str | None) -> str | None:
    rows = _read(db, *_scope(_STATE, project_id, arq_uuid=uuid))
    return rows[0].state if rows else None


Reader = Callable[[Executable, dict[str, Any]], Sequence[Any]]


def _hot_add(instance_uuid: str) -> exception.InstanceHasARQs:
    """Cyborg refuses a bind for an instance that already has ARQs (no hot add)."""
    return exception.InstanceHasARQs(f"Instance {instance_uuid} already has accelerator "
                                     "requests. Cannot bind additional ARQs.")


def _refuse_unusable(row: Any, rp_uuid: str, uuid: str) -> None:
    """_ClaimFailed when a candidate's device (:data:`_DEVICE_COLUMNS`) may not go to a guest."""
    why = st.unusable_reasons(row.device_state, row.device_status, row.device_health,
                              row.device_lifecycle, bool(row.device_maintenance))
    if why:
        raise _ClaimFailed(exception.DeviceNotUsable(
            f"Device {row.device_uuid} of resource provider {rp_uuid} {' and '.join(why)}: "
            f"ARQ {uuid} cannot be bound to it."))


def _candidates(read: Reader, rp_uuid: str, uuid: str, unbound_instances: Collection[str],
                project_id: str | None,
                lock: Callable[[int], Any] | None = None) -> Iterator[Any]:
    """The free handles (with deployable id and target) of the one deployable behind
    ``rp_uuid``, a few at a time in id order (a racing bind may take any). No such
    deployable, an unusable device or handles Nova cannot attach: :class:`_ClaimFailed`.
    ``unbound_instances`` are checked by the same statement (see :func:`bind`).
    ``lock(device_id)``, if given, re-reads the device under a shared lock, which decides."""
    params = {"rp_uuid": rp_uuid, "after": 0, "arq_uuid": uuid}
    if unbound_instances:
        instances = sorted(unbound_instances)
        rows = read(*_scope(_FREE_UNBOUND, project_id, instances=instances, **params))
        if rows and rows[0].taken is not None:
            raise _hot_add(rows[0].taken)
        if not rows:            # no deployable: no row to carry the answer, so ask alone
            taken = read(*_scope(_TAKEN, project_id, instances=instances))
            if taken:
                raise _hot_add(taken[0].instance_uuid)
    else:
        rows = read(_FREE, params)
    if len({row.deployable_id for row in rows}) != 1:
        raise _ClaimFailed(exception.NotFound(
            f"No deployable with rp_uuid {rp_uuid} for ARQ {uuid}."))
    _refuse_unusable(lock(rows[0].device_id) if lock else rows[0], rp_uuid, uuid)
    if rows[0].id is not None and rows[0].attach_type not in st.GUEST_ATTACH_TYPES:
        raise _ClaimFailed(exception.DeviceNotUsable(
            f"The attach handles of resource provider {rp_uuid} are of type "
            f"{rows[0].attach_type}, which Nova cannot attach to a guest (it attaches "
            f"{' and '.join(sorted(st.GUEST_ATTACH_TYPES))}): ARQ {uuid} cannot be bound "
            "to it."))
    while rows and rows[0].id is not None:
        yield from rows
        params["after"] = rows[-1].id
        rows = read(_FREE, params)


def _no_free_handle(rp_uuid: str, uuid: str) -> _ClaimFailed:
    return _ClaimFailed(exception.NoFreeAttachHandle(
        f"No free attach handle on the deployable of resource provider {rp_uuid} for "
        f"ARQ {uuid}."))


def _claim(conn: Connection, rp_uuid: str, uuid: str, unbound_instances: Collection[str],
           project_id: str | None) -> Row[Any]:
    """CAS ``in_use`` false -> true on the first free :func:`_candidates`; its row."""
    def lock(device_id: int) -> Any:
        return conn.execute(_LOCK_DEVICE, {"device_id": device_id}).one()

    # SQLite runs one writing transaction at a time (BEGIN IMMEDIATE): no lock to take
    locking = lock if conn.dialect.name != "sqlite" else None
    for row in _candidates(functools.partial(_read, conn), rp_uuid, uuid, unbound_instances,
                           project_id, locking):
        if conn.execute(_TAKE, {"handle_id": row.id}).rowcount == 1:
            return row
    raise _no_free_handle(rp_uuid, uuid)


class _ClaimFailed(Exception):
    """A claim's error: :func:`bind` commits BindFailed, then raises ``error``."""

    def __init__(self, error: exception.AccelDError) -> None:
        super().__init__(str(error))
        self.error = error


def _begin(db: Connection | Database, project_id: str | None, binding: dict[str, Any],
           state: str, handle: Row[Any] | None) -> None:
    """CAS Initial/Unbound -> ``state`` with ``binding`` and ``handle``; else ARQBadState."""
    if _write(db, *_scope(
            _BEGIN, project_id, **binding, to_state=state,
            to_handle_id=None if handle is None else handle.id,
            to_deployable_id=None if handle is None else handle.deployable_id)) != 1:
        uuid = binding["arq_uuid"]
        raise _state_error(uuid, _state_now(db, uuid, project_id), st.ARQ_BIND_STARTED)


@_retry_on_deadlock
def bind(db: Database, uuid: str, *, hostname: str, device_rp_uuid: str, instance_uuid: str,
         owner: str | None, project_id: str | None,
         needs_host_work: HostWorkQuestion,
         unbound_instances: Collection[str] = (), user_id: str | None = None,
         ) -> tuple[dict[str, Any], bool]:
    """Claims a free handle for the Initial/Unbound ARQ and records it in one transaction:
    Bound when ``needs_host_work(conn, handle)`` is false (it must read through ``conn``),
    else BindStarted. Returns ``(handle, bound)``; unbound, the caller does the host work,
    then :func:`finish_bind` or :func:`fail_bind`. No deployable or no free handle:
    BindFailed is committed and the error raised; an ARQ in another state (or missing) is
    ARQBadState (NotFound), nothing changed. ``unbound_instances`` (given with a request's
    first ARQ) already having ARQs is InstanceHasARQs, nothing changed. A claim writes its
    ledger line (``user_id``: who asked) in its transaction; a failed bind writes none."""
    binding = {"arq_uuid": uuid, "to_hostname": hostname, "to_rp_uuid": device_rp_uuid,
               "to_instance": instance_uuid, "owner": owner}
    if db.updates_tables_together:
        return _bind_by_one_statement(db, binding, project_id, needs_host_work,
                                      unbound_instances, user_id)
    with db.write_rows() as conn:
        try:
            handle = _claim(conn, device_rp_uuid, uuid, unbound_instances, project_id)
        except _ClaimFailed as failed:
            failure = failed.error
        else:
            info = _handle_dict(handle, uuid, hostname)
            bound = not needs_host_work(conn, info)
            state = st.ARQ_BOUND if bound else st.ARQ_BIND_STARTED
            _begin(conn, project_id, binding, state, handle)
            ledger.record(conn, _bind_entry(handle, binding, state, user_id))
            return info, bound
        _begin(conn, project_id, binding, st.ARQ_BIND_FAILED, None)
    raise failure                   # after the block: BindFailed has committed


def _bind_entry(row: Any, binding: dict[str, Any], state: str,
                user_id: str | None) -> ledger.Entry:
    """The ledger line of a claim, from its candidate row (:data:`_FREE_ROWS`)."""
    hot = row.arq_substate in st.HOT_PLUGGED        # a hot plug's attach (Attaching)
    return ledger.Entry(
        event=ledger.ATTACH if hot else ledger.BIND,
        kind=ledger.KIND_HOT_PLUG if hot else ledger.KIND_ARQ,
        device_uuid=row.device_uuid, deployable_uuid=row.deployable_uuid,
        attach_handle_uuid=row.uuid, arq_uuid=binding["arq_uuid"],
        instance_uuid=binding["to_instance"], host=binding["to_hostname"],
        project_id=row.arq_project or binding["owner"], user_id=user_id,
        from_state=row.arq_state, to_state=state)


def _bind_by_one_statement(db: Database, binding: dict[str, Any], project_id: str | None,
                           needs_host_work: HostWorkQuestion,
                           unbound_instances: Collection[str],
                           user_id: str | None) -> tuple[dict[str, Any], bool]:
    """:func:`bind` on MySQL/MariaDB: read the candidates, then :data:`_TAKE_AND_BEGIN` each
    with the claim's ledger line, in a transaction of the two."""
    uuid, rp_uuid = binding["arq_uuid"], binding["to_rp_uuid"]
    try:
        for row in _candidates(functools.partial(_read, db), rp_uuid, uuid,
                               unbound_instances, project_id):
            info = _handle_dict(row, uuid, binding["to_hostname"])
            bound = not needs_host_work(db, info)
            state = st.ARQ_BOUND if bound else st.ARQ_BIND_STARTED
            with db.write_rows() as conn:
                taken = conn.execute(*_scope(
                    _TAKE_AND_BEGIN, project_id, **binding, handle_id=row.id,
                    to_deployable_id=row.deployable_id, device_id=row.device_id,
                    to_state=state, now=m.utcnow())).rowcount
                if taken:
                    ledger.record(conn, _bind_entry(row, binding, state, user_id))
            if taken:
                return info, bound
            state = _state_now(db, uuid, project_id)
            if state not in st.ARQ_TRANSITIONS[st.ARQ_BIND_STARTED]:
                raise _state_error(uuid, state, st.ARQ_BIND_STARTED)
            # taken out of service since the read?
            _refuse_unusable(_read(db, _DEVICE_NOW, {"device_id": row.device_id})[0],
                             rp_uuid, uuid)
        raise _no_free_handle(rp_uuid, uuid)
    except _ClaimFailed as failed:
        _begin(db, project_id, binding, st.ARQ_BIND_FAILED, None)
        raise failed.error from None


# -- programming at bind (accel:bitstream_id / accel:function_id) ------------------------------

PROGRAM_KEYS = ("accel:bitstream_id", "accel:function_id")
_ARQ_GROUP = (select(_dp.c.profile_json, _arq.c.device_profile_group_id)
              .select_from(_arq.join(_dp, _dp.c.id == _arq.c.device_profile_id))
              .where(_arq.c.uuid == bindparam("arq_uuid")))
_LOADED = (select(_dep.c.uuid, _dep.c.bitstream_id, m.Attribute.value)
           .select_from(_dep.outerjoin(m.Attribute.__table__, and_(
               m.Attribute.deployable_id == _dep.c.id, m.Attribute.key.like("trait%"))))
           .where(_dep.c.id == bindparam("dep_id")))


def program_request(conn: Connection | Database, arq_uuid: str,
                    deployable_id: int) -> dict[str, str] | None:
    """What a bind must load into the deployable first (contract 6.3): the profile
    group's ``accel:bitstream_id`` (a Glance image id) unless the deployable's
    ``bitstream_id`` is it, or ``accel:function_id`` unless the deployable shows that
    function's trait. ``{"deployable_uuid", "image_ref"}``, ``{"error"}`` (both asked, or
    no UUID), or None. ``conn``: the bind's transaction, or the Database."""
    rows = _read(conn, _ARQ_GROUP, {"arq_uuid": arq_uuid})
    if not rows:
        return None
    groups = json.loads(rows[0].profile_json)["groups"]
    group = groups[rows[0].device_profile_group_id]
    asked = {key: str(group[key]) for key in PROGRAM_KEYS if group.get(key)}
    if not asked:
        return None
    if len(asked) > 1:
        return {"error": "a device profile group names both accel:bitstream_id and "
                         "accel:function_id; give one"}
    loaded = _read(conn, _LOADED, {"dep_id": deployable_id})
    if "accel:bitstream_id" in asked:
        image = uuids.canonical(asked["accel:bitstream_id"])
        if image is None:
            return {"error": f"accel:bitstream_id {asked['accel:bitstream_id']!r} is not "
                             "a Glance image id"}
        if loaded[0].bitstream_id == image:
            return None
        return {"deployable_uuid": loaded[0].uuid, "image_ref": image}
    function = asked["accel:function_id"]
    if reports.function_trait(function) in {row.value for row in loaded}:
        return None
    return {"deployable_uuid": loaded[0].uuid,
            "image_ref": reports.FUNCTION_IMAGE_PREFIX + function}


_BOUND_HANDLE = (select(_arq.c.instance_uuid, _arq.c.hostname, *_HANDLE,
                        _ah.c.deployable_id.label("deployable_id"))
                 .select_from(_arq.join(hostwork.HANDLES_WITH_TARGET,
                                        _ah.c.id == _arq.c.attach_handle_id))
                 .where(_arq.c.uuid == bindparam("arq_uuid")))


def held_handle(db: Database, uuid: str) -> tuple[str | None, dict[str, Any]] | None:
    """(instance, the handle the ARQ holds, as :func:`bind` returns it); None: none."""
    rows = _read(db, _BOUND_HANDLE, {"arq_uuid": uuid})
    if not rows:
        return None
    return rows[0].instance_uuid, _handle_dict(rows[0], uuid, rows[0].hostname)


@_retry_on_deadlock
def finish_bind(db: Database, uuid: str) -> None:
    """CAS BindStarted -> Bound; ARQBadState or NotFound when an unbind or delete won."""
    with db.write_rows() as conn:
        if conn.execute(_FINISH, {"arq_uuid": uuid}).rowcount != 1:
            raise _state_error(uuid, _state_now(conn, uuid, None), st.ARQ_BOUND)


def _free_handles(conn: Connection, arqs: list[Row[Any]], to_state: str,
                  user_id: str | None = None) -> list[dict[str, Any]]:
    """Frees the handles the locked ``arqs`` hold, writing their ledger lines (the ARQs
    go ``to_state``); returns them for host clean-up."""
    held = {a.attach_handle_id: a for a in arqs if a.attach_handle_id is not None}
    if not held:
        return []
    ids = sorted(held)
    conn.execute(_LEDGER_FREED, {"at": m.utcnow(), "user_id": user_id, "to_state": to_state,
                                 "arq_ids": sorted(a.id for a in held.values())})
    handles = conn.execute(_HELD, {"handle_ids": ids}).all()
    conn.execute(_RELEASE, {"handle_ids": ids})
    return [_handle_dict(h, held[h.id].uuid, held[h.id].hostname) for h in handles]


@_retry_on_deadlock
def fail_bind(db: Database, uuid: str) -> list[dict[str, Any]]:
    """Initial/BindStarted/Bound -> BindFailed, freeing its handle (returned); else a no-op."""
    with db.write_rows() as conn:
        arqs = conn.execute(_LOCK_BINDING, {"arq_uuid": uuid}).all()
        freed = _free_handles(conn, arqs, st.ARQ_BIND_FAILED)
        for arq in arqs:
            conn.execute(_FAIL, {"arq_id": arq.id})
        return freed


# -- unbind and delete ------------------------------------------------------------------------

class _HostWorkAhead(Exception):
    """An unbind that frees a handle needing host work was asked not to (rolled back)."""


@_retry_on_deadlock
def unbind(db: Database, uuid: str, *, project_id: str | None,
           needs_host_work: HostWorkQuestion | None = None, hot_plugged: bool = False,
           user_id: str | None = None) -> list[dict[str, Any]]:
    """-> Unbound, freeing its handle (idempotent); the freed ones needing ``needs_host_work``.
    An ARQ attached live (hot plug) is refused unless ``hot_plugged`` (its detach). A freed
    handle's ledger line (``user_id``: who asked) is written with the unbind."""
    return _unbind(db, uuid, project_id, needs_host_work, refuse_host_work=False,
                   hot_plugged=hot_plugged, user_id=user_id)


@_retry_on_deadlock
def unbind_unless_host_work(db: Database, uuid: str, *, project_id: str | None,
                            needs_host_work: HostWorkQuestion,
                            user_id: str | None = None) -> bool:
    """:func:`unbind` unless a freed handle needs host work (False, nothing changed)."""
    try:
        _unbind(db, uuid, project_id, needs_host_work, refuse_host_work=True,
                user_id=user_id)
    except _HostWorkAhead:
        return False
    return True


def _unbind(db: Database, uuid: str, project_id: str | None,
            needs_host_work: HostWorkQuestion | None,
            refuse_host_work: bool, hot_plugged: bool = False,
            user_id: str | None = None) -> list[dict[str, Any]]:
    """The unbind: on MySQL and MariaDB the ARQ and its handle are read (no lock), then one
    UPDATE, committing by itself, moves the ARQ to Unbound and frees the handle if the ARQ
    is still as read (else it is read again); elsewhere one transaction that locks it."""
    def needing_work(where: Connection | Database,
                     freed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if needs_host_work is not None:
            freed = [handle for handle in freed if needs_host_work(where, handle)]
            if freed and refuse_host_work:
                raise _HostWorkAhead        # before any write (or rolled back with it)
        return freed

    if not db.updates_tables_together:
        with db.write_rows() as conn:
            arq = conn.execute(*_scope(_LOCK_ONE, project_id, arq_uuid=uuid)).first()
            if not _unbindable(arq, uuid, hot_plugged):
                return []
            freed = needing_work(conn, _free_handles(conn, [arq], st.ARQ_UNBOUND, user_id))
            conn.execute(_UNBIND, {"arq_id": arq.id, "now": m.utcnow()})
            return freed
    for _ in range(_UNBIND_TRIES):
        rows = _read(db, *_scope(_HOLDING, project_id, arq_uuid=uuid))
        arq = rows[0] if rows else None
        if not _unbindable(arq, uuid, hot_plugged):
            return []
        params = {"arq_id": arq.arq_id, "seen_state": arq.state,
                  "seen_substate": arq.substate, "now": m.utcnow()}
        if arq.attach_handle_id is None:
            freed: list[dict[str, Any]] = []
            done = _write(db, _UNBIND_AS_READ, params)
        else:
            freed = needing_work(db, [_handle_dict(arq, uuid, arq.hostname)])
            with db.write_rows() as conn:
                done = conn.execute(_UNBIND_AND_FREE,
                                    dict(params, handle_id=arq.attach_handle_id)).rowcount
                if done:
                    ledger.record(conn, _unbind_entry(arq, uuid, user_id))
        if done:
            return freed
    raise exception.Conflict(f"ARQ {uuid} changed at each of {_UNBIND_TRIES} tries to "
                             "unbind it; try again.")


def _unbind_entry(arq: Any, uuid: str, user_id: str | None) -> ledger.Entry:
    """The ledger line of an unbind on MySQL, from its read (:data:`_HOLDING`)."""
    hot = arq.substate in st.HOT_PLUGGED            # a hot plug's detach
    return ledger.Entry(
        event=ledger.DETACH if hot else ledger.UNBIND,
        kind=ledger.KIND_HOT_PLUG if hot else ledger.KIND_ARQ,
        device_uuid=arq.device_uuid, deployable_uuid=arq.deployable_uuid,
        attach_handle_uuid=arq.uuid, arq_uuid=uuid, instance_uuid=arq.instance_uuid,
        host=arq.hostname, project_id=arq.project_id, user_id=user_id,
        from_state=arq.state, to_state=st.ARQ_UNBOUND)


def _unbindable(arq: Any, uuid: str, hot_plugged: bool) -> bool:
    """Whether ``arq`` is to be unbound (not Unbound yet); NotFound or ARQBadState (also
    for one attached live, unless ``hot_plugged``: its detach)."""
    if arq is None:
        raise _not_found(uuid)
    if arq.state == st.ARQ_UNBOUND:
        return False
    if not hot_plugged:
        _refuse_hot_plugged(uuid, arq.substate)
    if not st.can_transition(st.ARQ_TRANSITIONS, arq.state, st.ARQ_UNBOUND):
        raise _state_error(uuid, arq.state, st.ARQ_UNBOUND)
    return True


def _refuse_hot_plugged(uuid: str, substate: str) -> None:
    """Nothing is pulled from under a running guest: an ARQ whose device acceld attached
    live is unbound or deleted only by its detach (or with its instance)."""
    if substate in st.HOT_PLUGGED:
        raise exception.ARQBadState(
            f"ARQ {uuid} is attached live to its instance (hot plug: {substate}); detach "
            f"it first (DELETE /v2/accelerator_requests/{uuid}/hot_plug).")


def _delete_locked(conn: Connection, arqs: list[Row[Any]],
                   user_id: str | None) -> list[dict[str, Any]]:
    freed = _free_handles(conn, arqs, ledger.DELETED, user_id)
    ids = [a.id for a in arqs]
    if ids and conn.execute(_DELETE, {"arq_ids": ids}).rowcount != len(ids):
        # cannot happen while the rows are locked; never half-delete
        raise exception.Conflict("Accelerator requests changed while being deleted.")
    return freed


@_retry_on_deadlock
def delete_by_uuids(db: Database, uuids: list[str], *, project_id: str | None,
                    service: bool, user_id: str | None = None) -> list[dict[str, Any]]:
    """Unbind and delete, all or nothing (NotFound; Forbidden without ``service``); freed.
    The ledger keeps the lines of deleted ARQs; a freed handle writes one more."""
    wanted = sorted(set(uuids))
    if len(wanted) == 1:
        if _write(db, *_scope(_DELETE_FREE, project_id, arq_uuid=wanted[0])) == 1:
            return []
    with db.write_rows() as conn:
        arqs = conn.execute(*_scope(_LOCK_MANY, project_id, uuids=wanted)).all()
        found = {a.uuid for a in arqs}
        for uuid in uuids:
            if uuid not in found:
                raise _not_found(uuid)
        for arq in arqs:
            _refuse_hot_plugged(arq.uuid, arq.substate)
        bound = [a.uuid for a in arqs if a.instance_uuid]
        if bound and not service:
            raise exception.Forbidden(f"Deleting ARQ {bound[0]}, which belongs to an "
                                      "instance, requires a service token. Use the Compute "
                                      "API to manage instance accelerators.")
        return _delete_locked(conn, arqs, user_id)


@_retry_on_deadlock
def delete_by_instance(db: Database, instance_uuid: str, *, project_id: str | None,
                       deleted: list[str] | None = None,
                       user_id: str | None = None) -> list[dict[str, Any]]:
    """Unbind and delete every visible ARQ of the instance (none is fine); the freed
    handles. ``deleted``, when given, receives the uuids of the ARQs deleted."""
    with db.write_rows() as conn:
        arqs = conn.execute(*_scope(_LOCK_INSTANCE, project_id, instance=instance_uuid)).all()
        freed = _delete_locked(conn, arqs, user_id)
    if deleted is not None:
        deleted[:] = sorted(a.uuid for a in arqs)
    return freed
