"""Inventory rows of one host: load them for the diff, apply a plan, one transaction."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

from oslo_db import api as oslo_db_api
from sqlalchemy import delete, insert, select, tuple_, update
from sqlalchemy.orm import Session

from acceld import AGENT_BINARY, reports, states
from acceld import diff as inv
from acceld.db import models as m
from acceld.db.api import Database, duplicate_entry
from acceld.objects import health, identity


@dataclasses.dataclass(frozen=True)
class ApplyResult:
    """What a report changed; ``discovered`` and ``removed``: the devices it added and
    deleted, as :data:`DEVICE_COLUMNS` dicts."""

    changed: bool
    stale: bool = False
    changed_devices: tuple[str, ...] = ()
    discovered: tuple[dict[str, str], ...] = ()
    removed: tuple[dict[str, str], ...] = ()
    # life-cycle changes the report caused (diff.HealthRules)
    transitions: tuple[health.Transition, ...] = ()


#: What ``ApplyResult`` tells of a device added or removed (column -> key).
DEVICE_COLUMNS = {"uuid": m.Device.uuid, "host": m.Device.hostname,
                  "driver": m.Device.driver_name, "identity": m.Device.identity,
                  "type": m.Device.type, "vendor": m.Device.vendor, "model": m.Device.model,
                  "name": m.Device.name}


def _devices(s: Session, where: object) -> tuple[dict[str, str], ...]:
    rows = s.execute(select(*DEVICE_COLUMNS.values()).where(where)
                     .order_by(m.Device.id)).all()
    return tuple(dict(zip(DEVICE_COLUMNS, row, strict=True)) for row in rows)


@oslo_db_api.wrap_db_retry(max_retries=10, retry_interval=0.05, inc_retry_interval=True,
                           retry_on_deadlock=True,
                           exception_checker=duplicate_entry)
def apply_report(db: Database, report: reports.InventoryReport,
                 rules: inv.HealthRules | None = None, *,
                 describe: bool = True) -> ApplyResult:
    """Reconcile the host's rows with ``report`` in one transaction (retried whole on a
    deadlock). A report not newer than the last applied (same epoch, seq not above) is
    stale; one whose content equals the last applied one writes nothing. ``rules``:
    when the report takes a healthy device out of ``healthy``. ``describe``: read the
    devices it adds and removes for ``discovered``/``removed`` (a read each; their
    notifications are all that uses them)."""
    digest = report.content_digest()
    with db.writer() as s:
        svc = s.execute(select(m.Service).where(m.Service.host == report.host,
                                                m.Service.binary == AGENT_BINARY)
                        .with_for_update()).scalar_one_or_none()
        if svc is not None and svc.report_epoch == report.epoch and \
                (svc.report_seq or 0) >= report.seq:
            return ApplyResult(changed=False, stale=True)
        if svc is not None and svc.report_digest == digest:
            return ApplyResult(changed=False)
        plan = inv.diff(load_host(s, report.host), report, rules)
        removed = _devices(s, m.Device.id.in_(plan.delete_devices)) \
            if describe and plan.delete_devices else ()
        changed = _apply_plan(s, report.host, plan)
        discovered = _devices(s, (m.Device.hostname == report.host) & tuple_(
            m.Device.driver_name, m.Device.identity).in_(
            [(drv, dev.identity) for drv, dev in plan.add_devices])) \
            if describe and plan.add_devices else ()
        transitions = health.apply_verdicts(s, plan.lifecycle)
        now = m.utcnow()
        provider = report.provider_name or report.host
        node = report.compute_node_uuid or None
        renamed = svc is not None and (svc.provider_name, svc.compute_node_uuid) != (
            provider, node)
        if svc is None:
            s.add(m.Service(host=report.host, binary=AGENT_BINARY, last_seen_at=now,
                            version=report.agent_version, report_epoch=report.epoch,
                            report_seq=report.seq, report_digest=digest,
                            provider_name=provider, compute_node_uuid=node))
        else:
            svc.report_epoch, svc.report_seq, svc.report_digest = (
                report.epoch, report.seq, digest)
            svc.last_seen_at, svc.provider_name = now, provider
            svc.compute_node_uuid, svc.version = node, report.agent_version
        return ApplyResult(changed=not plan.is_empty() or svc is None or renamed,
                           changed_devices=tuple(changed), discovered=discovered,
                           removed=removed, transitions=tuple(transitions))


def forget_digest(session: Session, host: str) -> None:
    """Make the next report of ``host`` go through the full diff again."""
    session.execute(update(m.Service).where(m.Service.host == host,
                                            m.Service.binary == AGENT_BINARY)
                    .values(report_digest=None))


def load_host(s: Session, host: str) -> inv.HostInventory:
    """Everything the diff needs about ``host``: its devices, what hangs off them (not
    read for a host with none, e.g. one new to acceld) and its drivers."""
    rows = list(s.execute(select(m.Device).where(m.Device.hostname == host)).scalars())
    cpids, deps = _below_devices(s, host) if rows else ({}, {})
    devices = {}
    for dev in rows:
        cpid = cpids.get(dev.id)
        fields = {"type": dev.type, "vendor": dev.vendor, "model": dev.model,
                  "std_board_info": dev.std_board_info,
                  "vendor_board_info": dev.vendor_board_info,
                  "cpid_type": cpid.cpid_type if cpid else None,
                  "cpid_info": cpid.cpid_info if cpid else None,
                  "health_reasons": dev.health_reasons,
                  "health_counters": dev.health_counters}
        my_deps = deps.get(dev.id, {})
        devices[(dev.driver_name, dev.identity)] = inv.CurrentDevice(
            id=dev.id, driver=dev.driver_name, identity=dev.identity, fields=fields,
            health=dev.health, cpid_id=cpid.id if cpid else 0, deployables=my_deps,
            held=dev.attached_to is not None or any(d.held for d in my_deps.values()),
            lifecycle=dev.lifecycle)
    drivers = {d.name: inv.CurrentDriver(d.version, d.state, d.error, d.device_count,
                                         d.explanation, d.capabilities)
               for d in s.execute(select(m.DriverState).where(m.DriverState.host == host))
               .scalars()}
    return inv.HostInventory(host=host, devices=devices, drivers=drivers)


def _below_devices(s: Session, host: str) -> tuple[
        dict[int, m.ControlpathID], dict[int, dict[str, inv.CurrentDeployable]]]:
    """The control path ids and deployables (with their attributes, handles and whether
    something holds them) of ``host``'s devices, by device id, in five queries."""
    dev_ids = select(m.Device.id).where(m.Device.hostname == host).scalar_subquery()
    dep_ids = select(m.Deployable.id).where(m.Deployable.device_id.in_(dev_ids)) \
        .scalar_subquery()
    cpids = {c.device_id: c for c in s.execute(
        select(m.ControlpathID).where(m.ControlpathID.device_id.in_(dev_ids))).scalars()}
    attrs: dict[int, dict[str, tuple[int, str]]] = defaultdict(dict)
    for a in s.execute(select(m.Attribute.id, m.Attribute.deployable_id, m.Attribute.key,
                              m.Attribute.value)
                       .where(m.Attribute.deployable_id.in_(dep_ids))):
        attrs[a.deployable_id][a.key] = (a.id, a.value)
    handles: dict[int, dict[str, inv.CurrentHandle]] = defaultdict(dict)
    for h in s.execute(select(m.AttachHandle.id, m.AttachHandle.deployable_id,
                              m.AttachHandle.attach_info, m.AttachHandle.attach_type,
                              m.AttachHandle.in_use)
                       .where(m.AttachHandle.deployable_id.in_(dep_ids))):
        handles[h.deployable_id][h.attach_info] = inv.CurrentHandle(h.id, h.attach_type,
                                                                    bool(h.in_use))
    held_deps = set(s.execute(
        select(m.ExtendedAcceleratorRequest.deployable_id)
        .where(m.ExtendedAcceleratorRequest.deployable_id.in_(dep_ids))).scalars())
    deps: dict[int, dict[str, inv.CurrentDeployable]] = defaultdict(dict)
    for d in s.execute(select(m.Deployable.id, m.Deployable.device_id, m.Deployable.name,
                              m.Deployable.num_accelerators)
                       .where(m.Deployable.device_id.in_(dev_ids))):
        hs = handles.get(d.id, {})
        deps[d.device_id][d.name] = inv.CurrentDeployable(
            id=d.id, num_accelerators=d.num_accelerators, attributes=attrs.get(d.id, {}),
            handles=hs, held=d.id in held_deps or any(h.in_use for h in hs.values()))
    return cpids, deps


def _apply_plan(s: Session, host: str, plan: inv.Plan) -> list[str]:
    """Write ``plan``; returns the uuids of the devices whose rows changed."""
    if plan.is_empty():
        return []
    changed: set[int] = set()
    _delete_deployables(s, plan.delete_deployables)
    _delete_devices(s, plan.delete_devices)
    for dev_id, fields in plan.update_devices:
        cp = {k: fields.pop(k) for k in ("cpid_type", "cpid_info") if k in fields}
        if fields:
            s.execute(update(m.Device).where(m.Device.id == dev_id).values(**fields))
        if cp:
            s.execute(update(m.ControlpathID).where(m.ControlpathID.device_id == dev_id)
                      .values(**cp))
        changed.add(dev_id)
    for dev_id, status in plan.set_health:
        s.execute(update(m.Device).where(m.Device.id == dev_id).values(health=status))
        changed.add(dev_id)
    for model, column, updates, deletes in (
            (m.Deployable, "num_accelerators", plan.update_deployables, []),
            (m.Attribute, "value", plan.update_attributes, plan.delete_attributes),
            (m.AttachHandle, "attach_type", plan.update_handles, plan.delete_handles)):
        for row_id, value in updates:
            s.execute(update(model).where(model.id == row_id).values({column: value}))
        if deletes:
            s.execute(delete(model).where(model.id.in_(deletes)))
    added = _add_devices(s, host, plan.add_devices)
    _add_deployables(s, plan.add_deployables)
    _add_to_deployables(s, plan.add_attributes, plan.add_handles)
    _write_drivers(s, host, plan)
    uuids = set(s.execute(select(m.Device.uuid).where(m.Device.id.in_(changed))).scalars()) \
        if changed else set()
    uuids.update(added)
    return sorted(uuids)


def _delete_deployables(s: Session, dep_ids: list[int]) -> None:
    if not dep_ids:
        return
    s.execute(delete(m.AttachHandle).where(m.AttachHandle.deployable_id.in_(dep_ids)))
    s.execute(delete(m.Attribute).where(m.Attribute.deployable_id.in_(dep_ids)))
    s.execute(delete(m.Deployable).where(m.Deployable.id.in_(dep_ids)))


def _delete_devices(s: Session, dev_ids: list[int]) -> None:
    if not dev_ids:
        return
    dep_ids = list(s.execute(select(m.Deployable.id)
                             .where(m.Deployable.device_id.in_(dev_ids))).scalars())
    _delete_deployables(s, dep_ids)
    s.execute(delete(m.ControlpathID).where(m.ControlpathID.device_id.in_(dev_ids)))
    s.execute(delete(m.Device).where(m.Device.id.in_(dev_ids)))


def _add_devices(s: Session, host: str,
                 added: list[tuple[str, reports.Device]]) -> list[str]:
    """Insert discovered devices (a declared one of the same name is adopted); their uuids."""
    if not added:
        return []
    names = [dev.name or f"{host}-{dev.identity}" for _drv, dev in added]
    taken = {row.name: row for row in s.execute(
        select(m.Device.id, m.Device.name, m.Device.hostname, m.Device.uuid)
        .where(m.Device.name.in_(names)))}
    new_rows, cpid_rows = [], []
    for (drv, dev), name in zip(added, names, strict=True):
        fields = inv.device_fields(dev)
        cp = {"cpid_type": fields.pop("cpid_type"), "cpid_info": fields.pop("cpid_info")}
        base = dict(hostname=host, driver_name=drv, identity=dev.identity, **fields)
        row = taken.get(name)
        if row is not None and row.hostname is None:
            s.execute(update(m.Device).where(m.Device.id == row.id)
                      .values(health=dev.health, **base))
            cpid_rows.append((row.uuid, cp))
            continue
        dev_uuid = identity.device_uuid(host, drv, dev.identity)
        if row is not None:
            name = f"{name}-{dev_uuid[:8]}"
        new_rows.append(dict(uuid=dev_uuid, name=name, state=states.INACTIVE,
                             health=dev.health, acc_specs=_initial_specs(dev),
                             revision=1, created_at=m.utcnow(), **base))
        cpid_rows.append((dev_uuid, cp))
    if new_rows:
        s.execute(insert(m.Device), new_rows)
    ids = dict(s.execute(select(m.Device.uuid, m.Device.id)
                         .where(m.Device.uuid.in_([u for u, _ in cpid_rows]))).all())
    s.execute(insert(m.ControlpathID), [
        dict(uuid=identity.controlpath_uuid(u), device_id=ids[u], created_at=m.utcnow(), **cp)
        for u, cp in cpid_rows])
    cpid_ids = dict(s.execute(select(m.ControlpathID.device_id, m.ControlpathID.id)
                              .where(m.ControlpathID.device_id.in_(ids.values()))).all())
    deps = [(ids[u], cpid_ids[ids[u]], dep)
            for (u, _cp), (_drv, dev) in zip(cpid_rows, added, strict=True)
            for dep in dev.deployables]
    _add_deployables(s, deps)
    return [u for u, _cp in cpid_rows]


def _initial_specs(dev: reports.Device) -> str:
    total = sum(dep.num_accelerators for dep in dev.deployables)
    return json.dumps({"remote": 0, "num": total, "device_type": dev.type,
                       "acc_capability": {}}, sort_keys=True)


def _add_deployables(s: Session, added: list[tuple[int, int, reports.Deployable]]) -> None:
    if not added:
        return
    devs = {row.id: row for row in s.execute(
        select(m.Device.id, m.Device.uuid, m.Device.driver_name)
        .where(m.Device.id.in_({d for d, _c, _dep in added})))}
    rows = []
    for dev_id, _cpid, dep in added:
        dep_uuid = identity.deployable_uuid(devs[dev_id].uuid, dep.name)
        rows.append(dict(uuid=dep_uuid, name=dep.name, num_accelerators=dep.num_accelerators,
                         device_id=dev_id, rp_uuid=identity.rp_uuid(dep_uuid),
                         driver_name=devs[dev_id].driver_name, created_at=m.utcnow()))
    s.execute(insert(m.Deployable), rows)
    dep_ids = dict(s.execute(select(m.Deployable.uuid, m.Deployable.id)
                             .where(m.Deployable.uuid.in_([r["uuid"] for r in rows]))).all())
    attrs, handles = [], []
    for row, (_dev_id, cpid_id, dep) in zip(rows, added, strict=True):
        dep_id = dep_ids[row["uuid"]]
        attrs.extend((dep_id, k, v) for k, v in dep.attributes)
        handles.extend((dep_id, cpid_id, h) for h in dep.attach_handles)
    uuids = {dep_id: dep_uuid for dep_uuid, dep_id in dep_ids.items()}
    _add_attributes(s, attrs, uuids)
    _add_handles(s, handles, uuids)


def _add_to_deployables(s: Session, attrs: list[tuple[int, str, str]],
                        handles: list[tuple[int, int, reports.AttachHandle]]) -> None:
    """New attributes and handles of deployables that were there: their uuids in one read."""
    ids = {a[0] for a in attrs} | {h[0] for h in handles}
    if not ids:
        return
    uuids = dict(s.execute(select(m.Deployable.id, m.Deployable.uuid)
                           .where(m.Deployable.id.in_(ids))).all())
    _add_attributes(s, attrs, uuids)
    _add_handles(s, handles, uuids)


def _add_attributes(s: Session, added: list[tuple[int, str, str]],
                    uuids: dict[int, str]) -> None:
    if added:
        s.execute(insert(m.Attribute), [
            dict(uuid=identity.attribute_uuid(uuids[dep_id], key), deployable_id=dep_id,
                 key=key, value=value, created_at=m.utcnow()) for dep_id, key, value in added])


def _add_handles(s: Session, added: list[tuple[int, int, reports.AttachHandle]],
                 uuids: dict[int, str]) -> None:
    if added:
        s.execute(insert(m.AttachHandle), [
            dict(uuid=h.uuid or identity.attach_handle_uuid(uuids[dep_id], h.info_key),
                 deployable_id=dep_id, cpid_id=cpid_id, in_use=False,
                 attach_type=h.attach_type, attach_info=h.info_key, created_at=m.utcnow())
            for dep_id, cpid_id, h in added])


def _write_drivers(s: Session, host: str, plan: inv.Plan) -> None:
    if plan.delete_drivers:
        s.execute(delete(m.DriverState).where(m.DriverState.host == host,
                                              m.DriverState.name.in_(plan.delete_drivers)))
    if plan.add_drivers:
        s.execute(insert(m.DriverState), [
            dict(host=host, name=drv.name, created_at=m.utcnow(), **inv.driver_fields(drv))
            for drv in plan.add_drivers])
    for drv in plan.update_drivers:
        s.execute(update(m.DriverState).where(m.DriverState.host == host,
                                              m.DriverState.name == drv.name)
                  .values(**inv.driver_fields(drv)))
