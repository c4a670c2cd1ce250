"""Accelerator requests (Cyborg v2 ARQs): their rows, and binding them to attach handles.

Every public function is one transaction. ``project_id`` (the scope) is the caller's
project, or None for an administrator who sees every project's ARQs.

A bind takes three steps, each a compare-and-swap on the ARQ's state, because host work
(FPGA programming, creating an mdev) belongs between claiming a handle and calling the ARQ
Bound: :func:`begin_bind` (Initial/Unbound -> BindStarted), :func:`claim_handle` (a free
handle of the deployable behind ``device_rp_uuid``: ``in_use`` false -> true), then
:func:`finish_bind` (-> Bound) or :func:`fail_bind` (-> BindFailed, handle released).

Invariant: a handle is ``in_use`` exactly when one ARQ row's ``attach_handle_id`` names it;
both change in one transaction. Whoever takes a handle away from an ARQ (unbind, a failed
bind, delete) first locks the ARQ row (``SELECT ... FOR UPDATE``, so it sees a claim that
committed while it waited) and frees the handle in the same transaction. A bind that loses
its row to a delete or an unbind therefore either never claims (the claim finds no
BindStarted row) or has already had its handle freed (its final CAS matches no row).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable, Iterable
from typing import Any

from oslo_db import api as oslo_db_api
from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.orm import Session

from acceld import exception
from acceld import states as st
from acceld.db import models as m
from acceld.db.api import Database

_ARQ = m.ExtendedAcceleratorRequest
_AH = m.AttachHandle
_NO_SYNC = {"synchronize_session": False}


# -- pure helpers -----------------------------------------------------------------------------

# Every public writer is one transaction, so a deadlock (MariaDB gap locks when binds,
# unbinds and deletes race on the same rows) is retried as a whole.
_retry_on_deadlock = oslo_db_api.wrap_db_retry(max_retries=10, retry_interval=0.02,
                                               inc_retry_interval=True,
                                               retry_on_deadlock=True)

def units_per_group(groups: list[dict[str, str]]) -> list[int]:
    """How many ARQs each group of a profile asks for: the sum of its ``resources:*``.

    Cyborg's quirk of doubling FPGA ARQs for ``trait:CUSTOM_FPGA_XILINX`` is not copied.
    """
    return [sum(int(v) for k, v in g.items() if k.startswith("resources:")) for g in groups]


def resolved(arqs: list[dict[str, Any]], by_instance: bool) -> list[dict[str, Any]]:
    """``bind_state=resolved`` (contract 1.4): the resolved ARQs; for one instance, all of
    them or NotResolved (423) when any is still being bound."""
    done = [a for a in arqs if a["state"] in st.ARQ_RESOLVED]
    if by_instance and len(done) != len(arqs):
        raise exception.NotResolved("Some accelerator requests of the instance are not "
                                    "resolved yet.")
    return done


def _to_dict(arq: _ARQ, profile_name: str, handle: _AH | None) -> dict[str, Any]:
    bound = arq.state == st.ARQ_BOUND and handle is not None
    info = json.loads(handle.attach_info) if bound else {}
    return {"uuid": arq.uuid, "state": arq.state, "device_profile_name": profile_name,
            "device_profile_group_id": arq.device_profile_group_id,
            "hostname": arq.hostname, "device_rp_uuid": arq.device_rp_uuid,
            "instance_uuid": arq.instance_uuid, "project_id": arq.project_id,
            "attach_handle_type": handle.attach_type if bound else "",
            "attach_handle_uuid": handle.uuid if bound else None,
            "attach_handle_info": {k: str(v) for k, v in info.items()},
            "created_at": arq.created_at, "updated_at": arq.updated_at}


def _handle_dict(handle: _AH, arq: _ARQ) -> dict[str, Any]:
    """What host work needs to know about a handle (plain data, fit for RPC)."""
    return {"uuid": handle.uuid, "attach_type": handle.attach_type,
            "attach_info": json.loads(handle.attach_info), "hostname": arq.hostname,
            "arq_uuid": arq.uuid}


# -- reads ------------------------------------------------------------------------------------

def _scope(project_id: str | None) -> list[ColumnElement[bool]]:
    return [] if project_id is None else [_ARQ.project_id == project_id]


def _select(s: Session, *where: ColumnElement[bool]) -> list[dict[str, Any]]:
    rows = s.execute(select(_ARQ, m.DeviceProfile.name, _AH)
                     .join(m.DeviceProfile, m.DeviceProfile.id == _ARQ.device_profile_id)
                     .outerjoin(_AH, _AH.id == _ARQ.attach_handle_id)
                     .where(*where).order_by(_ARQ.id)).all()
    return [_to_dict(arq, name, handle) for arq, name, handle in rows]


def list_arqs(db: Database, *, project_id: str | None,
              instance_uuid: str | None = None) -> list[dict[str, Any]]:
    with db.reader() as s:
        where = _scope(project_id)
        if instance_uuid is not None:
            where.append(_ARQ.instance_uuid == instance_uuid)
        return _select(s, *where)


def _not_found(uuid: str) -> exception.ARQNotFound:
    return exception.ARQNotFound(f"ExtArq not found with uuid={uuid}")


def get(db: Database, uuid: str, *, project_id: str | None) -> dict[str, Any]:
    """One ARQ; another project's is NotFound, as a missing one."""
    with db.reader() as s:
        found = _select(s, _ARQ.uuid == uuid, *_scope(project_id))
        if not found:
            raise _not_found(uuid)
        return found[0]


# -- create -----------------------------------------------------------------------------------

@_retry_on_deadlock
def create(db: Database, profile_name: str, project_id: str | None) -> list[dict[str, Any]]:
    """One Initial ARQ per requested unit of the named profile, all in one transaction."""
    with db.writer() as s:
        dp = s.execute(select(m.DeviceProfile).where(m.DeviceProfile.name == profile_name)
                       ).scalar_one_or_none()
        if dp is None:
            raise exception.NotFound(f"Device Profile not found with name={profile_name}")
        counts = units_per_group(json.loads(dp.profile_json)["groups"])
        rows = [_ARQ(uuid=str(uuidlib.uuid4()), project_id=project_id, state=st.ARQ_INITIAL,
                     device_profile_id=dp.id, device_profile_group_id=group,
                     substate=st.ARQ_INITIAL)
                for group, count in enumerate(counts) for _ in range(count)]
        s.add_all(rows)
        s.flush()
        return [_to_dict(arq, dp.name, None) for arq in rows]


# -- bind -------------------------------------------------------------------------------------

def _bad_state(s: Session, uuid: str, project_id: str | None, target: str) -> Exception:
    """Why a CAS towards ``target`` matched no row: the ARQ is missing, or in a bad state."""
    state = s.execute(select(_ARQ.state).where(_ARQ.uuid == uuid, *_scope(project_id))
                      ).scalar()
    if state is None:
        return _not_found(uuid)
    return exception.ARQBadState(f"Bad state: {state} for ARQ: {uuid}. Expected state(s): "
                                 f"{sorted(st.ARQ_TRANSITIONS[target])}")


def check_instances_unbound(db: Database, instance_uuids: Iterable[str], *,
                            project_id: str | None) -> None:
    """Cyborg refuses a bind for an instance that already has ARQs (no hot add)."""
    with db.reader() as s:
        taken = s.execute(select(_ARQ.instance_uuid)
                          .where(_ARQ.instance_uuid.in_(sorted(set(instance_uuids))),
                                 *_scope(project_id))
                          .order_by(_ARQ.id).limit(1)).scalar()
        if taken is not None:
            raise exception.InvalidInput(f"Instance {taken} already has accelerator requests. "
                                         "Cannot bind additional ARQs.")


def _begin(s: Session, uuid: str, *, hostname: str, device_rp_uuid: str,
           instance_uuid: str, owner: str | None, project_id: str | None) -> None:
    done = s.execute(
        update(_ARQ).where(_ARQ.uuid == uuid,
                           _ARQ.state.in_(st.ARQ_TRANSITIONS[st.ARQ_BIND_STARTED]),
                           *_scope(project_id))
        .values(state=st.ARQ_BIND_STARTED, hostname=hostname,
                device_rp_uuid=device_rp_uuid, instance_uuid=instance_uuid,
                project_id=owner)
        .execution_options(**_NO_SYNC)).rowcount
    if done != 1:
        raise _bad_state(s, uuid, project_id, st.ARQ_BIND_STARTED)


@_retry_on_deadlock
def begin_bind(db: Database, uuid: str, *, hostname: str, device_rp_uuid: str,
               instance_uuid: str, owner: str | None, project_id: str | None) -> None:
    """CAS Initial/Unbound -> BindStarted, recording where and for whom it binds."""
    with db.writer() as s:
        _begin(s, uuid, hostname=hostname, device_rp_uuid=device_rp_uuid,
               instance_uuid=instance_uuid, owner=owner, project_id=project_id)


def _lock(s: Session, *where: ColumnElement[bool]) -> list[_ARQ]:
    """The matching ARQ rows, locked (in id order) until the transaction ends."""
    return list(s.execute(select(_ARQ).where(*where).order_by(_ARQ.id).with_for_update()
                          ).scalars())


def _claim_free(s: Session, deployable_id: int) -> _AH | None:
    """CAS ``in_use`` false -> true on the first free handle that is still free."""
    free = s.execute(select(_AH.id).where(_AH.deployable_id == deployable_id,
                                          _AH.in_use.is_(False)).order_by(_AH.id)
                     ).scalars().all()
    for handle_id in free:
        if s.execute(update(_AH).where(_AH.id == handle_id, _AH.in_use.is_(False))
                     .values(in_use=True).execution_options(**_NO_SYNC)).rowcount == 1:
            return s.execute(select(_AH).where(_AH.id == handle_id)).scalar_one()
    return None


def _set_failed(s: Session, arq_id: int) -> None:
    s.execute(update(_ARQ).where(_ARQ.id == arq_id,
                                 _ARQ.state.in_(st.ARQ_TRANSITIONS[st.ARQ_BIND_FAILED]))
              .values(state=st.ARQ_BIND_FAILED, attach_handle_id=None, deployable_id=None)
              .execution_options(**_NO_SYNC))


def _claim(s: Session, arq: _ARQ, uuid: str) -> tuple[_AH, int]:
    """Claims a free handle of the deployable behind the locked BindStarted ``arq``'s
    ``device_rp_uuid``. No such deployable or no free handle: the ARQ is set BindFailed
    in this transaction and :class:`_ClaimFailed` raised; the caller catches it inside
    the transaction so that BindFailed commits, then raises its ``error``."""
    dep_ids = s.execute(select(m.Deployable.id)
                        .where(m.Deployable.rp_uuid == arq.device_rp_uuid)).scalars().all()
    if len(dep_ids) != 1:
        _set_failed(s, arq.id)
        raise _ClaimFailed(exception.NotFound(
            f"No deployable with rp_uuid {arq.device_rp_uuid} for ARQ {uuid}."))
    handle = _claim_free(s, dep_ids[0])
    if handle is None:
        _set_failed(s, arq.id)
        raise _ClaimFailed(exception.NoFreeAttachHandle(
            f"No free attach handle on the deployable of resource provider "
            f"{arq.device_rp_uuid} for ARQ {uuid}."))
    return handle, dep_ids[0]


class _ClaimFailed(Exception):
    """Carries a claim's error out of the transaction, which commits (BindFailed)."""

    def __init__(self, error: exception.AccelDError) -> None:
        super().__init__(str(error))
        self.error = error


@_retry_on_deadlock
def claim_handle(db: Database, uuid: str) -> dict[str, Any]:
    """A free attach handle of the deployable whose ``rp_uuid`` is the ARQ's
    ``device_rp_uuid``, recorded on the BindStarted ARQ. No such deployable, or no free
    handle: the ARQ becomes BindFailed (committed) and NotFound is raised."""
    with db.writer() as s:
        arqs = _lock(s, _ARQ.uuid == uuid, _ARQ.state == st.ARQ_BIND_STARTED)
        if not arqs:
            raise _bad_state(s, uuid, None, st.ARQ_BOUND)
        arq = arqs[0]
        try:
            handle, dep_id = _claim(s, arq, uuid)
        except _ClaimFailed as failed:
            failure = failed        # leave the block normally: BindFailed commits
        else:
            s.execute(update(_ARQ).where(_ARQ.id == arq.id)
                      .values(attach_handle_id=handle.id, deployable_id=dep_id)
                      .execution_options(**_NO_SYNC))
            return _handle_dict(handle, arq)
    raise failure.error


@_retry_on_deadlock
def bind(db: Database, uuid: str, *, hostname: str, device_rp_uuid: str, instance_uuid: str,
         owner: str | None, project_id: str | None,
         needs_host_work: Callable[[Session, dict[str, Any]], bool],
         ) -> tuple[dict[str, Any], bool]:
    """:func:`begin_bind` and :func:`claim_handle` in one transaction, and straight on to
    Bound when the claimed handle needs no host work (``needs_host_work(handle)`` false;
    a PCI function handed over as it is). Returns ``(handle, bound)``; when ``bound`` is
    false the ARQ is BindStarted with the handle recorded, and the caller does the host
    work and then :func:`finish_bind` or :func:`fail_bind`. ``needs_host_work`` gets this
    transaction's session: it must read through it, not open another. No deployable behind
    ``device_rp_uuid`` or no free handle: BindFailed is committed and the error raised.
    The same CAS guards as the three-step path hold (state filter, ``in_use`` false ->
    true), so racing binds, unbinds and deletes see the same outcomes, one fewer
    round trip each."""
    with db.writer() as s:
        _begin(s, uuid, hostname=hostname, device_rp_uuid=device_rp_uuid,
               instance_uuid=instance_uuid, owner=owner, project_id=project_id)
        arq = _lock(s, _ARQ.uuid == uuid)[0]
        try:
            handle, dep_id = _claim(s, arq, uuid)
        except _ClaimFailed as failed:
            failure = failed
        else:
            info = _handle_dict(handle, arq)
            bound = not needs_host_work(s, info)
            values: dict[str, Any] = {"attach_handle_id": handle.id, "deployable_id": dep_id}
            if bound:
                values["state"] = st.ARQ_BOUND
            s.execute(update(_ARQ).where(_ARQ.id == arq.id).values(**values)
                      .execution_options(**_NO_SYNC))
            return info, bound
    raise failure.error


@_retry_on_deadlock
def finish_bind(db: Database, uuid: str) -> None:
    """CAS BindStarted (with a handle) -> Bound. No row matching means an unbind or a
    delete took the ARQ meanwhile and freed its handle: ARQBadState or NotFound."""
    with db.writer() as s:
        done = s.execute(update(_ARQ).where(_ARQ.uuid == uuid,
                                            _ARQ.state == st.ARQ_BIND_STARTED,
                                            _ARQ.attach_handle_id.is_not(None))
                         .values(state=st.ARQ_BOUND).execution_options(**_NO_SYNC)).rowcount
        if done != 1:
            raise _bad_state(s, uuid, None, st.ARQ_BOUND)


def _free_handles(s: Session, arqs: list[_ARQ]) -> list[dict[str, Any]]:
    """Frees the handles the locked ``arqs`` hold; returns them for host clean-up."""
    held = {a.attach_handle_id: a for a in arqs if a.attach_handle_id is not None}
    if not held:
        return []
    s.execute(update(_AH).where(_AH.id.in_(sorted(held))).values(in_use=False)
              .execution_options(**_NO_SYNC))
    handles = s.execute(select(_AH).where(_AH.id.in_(sorted(held)))).scalars()
    return [_handle_dict(h, held[h.id]) for h in handles]


@_retry_on_deadlock
def fail_bind(db: Database, uuid: str) -> list[dict[str, Any]]:
    """BindStarted/Bound -> BindFailed, its handle freed (host work failed); a no-op when
    the ARQ has left those states meanwhile. Returns the freed handle(s)."""
    with db.writer() as s:
        arqs = _lock(s, _ARQ.uuid == uuid,
                     _ARQ.state.in_(st.ARQ_TRANSITIONS[st.ARQ_BIND_FAILED]))
        freed = _free_handles(s, arqs)
        for arq in arqs:
            _set_failed(s, arq.id)
        return freed


# -- unbind and delete ------------------------------------------------------------------------

@_retry_on_deadlock
def unbind(db: Database, uuid: str, *, project_id: str | None) -> list[dict[str, Any]]:
    """-> Unbound: handle freed, host/rp/instance cleared (idempotent on Unbound).
    Returns the freed handle(s) for host clean-up."""
    with db.writer() as s:
        arqs = _lock(s, _ARQ.uuid == uuid, *_scope(project_id))
        if not arqs:
            raise _not_found(uuid)
        arq = arqs[0]
        if arq.state == st.ARQ_UNBOUND:
            return []
        if not st.arq_can_transition(arq.state, st.ARQ_UNBOUND):
            raise _bad_state(s, uuid, project_id, st.ARQ_UNBOUND)
        freed = _free_handles(s, arqs)
        s.execute(update(_ARQ).where(_ARQ.id == arq.id,
                                     _ARQ.state.in_(st.ARQ_TRANSITIONS[st.ARQ_UNBOUND]))
                  .values(state=st.ARQ_UNBOUND, hostname=None, device_rp_uuid=None,
                          instance_uuid=None, attach_handle_id=None, deployable_id=None)
                  .execution_options(**_NO_SYNC))
        return freed


def _delete_locked(s: Session, arqs: list[_ARQ]) -> list[dict[str, Any]]:
    freed = _free_handles(s, arqs)
    ids = [a.id for a in arqs]
    if ids:
        done = s.execute(delete(_ARQ).where(
            _ARQ.id.in_(ids), _ARQ.state.in_(st.ARQ_TRANSITIONS[st.ARQ_DELETING]))
            .execution_options(**_NO_SYNC)).rowcount
        if done != len(ids):  # cannot happen while the rows are locked; never half-delete
            raise exception.Conflict("Accelerator requests changed while being deleted.")
    return freed


@_retry_on_deadlock
def delete_by_uuids(db: Database, uuids: list[str], *, project_id: str | None,
                    service: bool) -> list[dict[str, Any]]:
    """Unbind and delete the ARQs, all or nothing: a missing one is NotFound and one tied
    to an instance needs a service token (Forbidden), both before anything changes.
    Returns the freed handles."""
    with db.writer() as s:
        arqs = _lock(s, _ARQ.uuid.in_(sorted(set(uuids))), *_scope(project_id))
        found = {a.uuid for a in arqs}
        for uuid in uuids:
            if uuid not in found:
                raise _not_found(uuid)
        bound = [a.uuid for a in arqs if a.instance_uuid]
        if bound and not service:
            raise exception.Forbidden(f"Deleting ARQ {bound[0]}, which belongs to an "
                                      "instance, requires a service token. Use the Compute "
                                      "API to manage instance accelerators.")
        return _delete_locked(s, arqs)


@_retry_on_deadlock
def delete_by_instance(db: Database, instance_uuid: str, *,
                       project_id: str | None) -> list[dict[str, Any]]:
    """Unbind and delete every visible ARQ of the instance (none is fine)."""
    with db.writer() as s:
        return _delete_locked(s, _lock(s, _ARQ.instance_uuid == instance_uuid,
                                       *_scope(project_id)))
