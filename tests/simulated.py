"""Compares what a simulated fleet expects (``Fleet.expected_inventory()``, or the
``expected_inventory`` of ``acceld-sim --json-out``) with what acceld's database holds,
by the deterministic uuids acceld gives the rows of a report: the devices through the
objects layer (the v1 listing), their deployables and attach handles by one query."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators, identity

Rows = tuple[dict[str, tuple[str, str, str]], dict[str, tuple[int, int]]]


def expected_rows(expected: dict[str, list[dict[str, Any]]]) -> Rows:
    """(device uuid -> (host, driver, health), deployable uuid -> (accelerators,
    attach handles))."""
    devices, deployables = {}, {}
    for host, found in expected.items():
        for dev in found:
            dev_uuid = identity.device_uuid(host, dev["driver"], dev["identity"])
            devices[dev_uuid] = (host, dev["driver"], dev["health"])
            for name, size in dev["deployables"].items():
                deployables[identity.deployable_uuid(dev_uuid, name)] = (size, size)
    return devices, deployables


def database_rows(db: Database, hosts: set[str]) -> Rows:
    """The same two maps, as the database holds them for ``hosts``."""
    devices = {r["uuid"]: (r["host"], r["driver"], r["health"])
               for r in accelerators.list_accelerators(db) if r["host"] in hosts}
    handles = (select(m.Deployable.uuid, m.Deployable.num_accelerators,
                      func.count(m.AttachHandle.id))
               .join(m.Device, m.Deployable.device_id == m.Device.id)
               .outerjoin(m.AttachHandle, m.AttachHandle.deployable_id == m.Deployable.id)
               .where(m.Device.hostname.in_(sorted(hosts)))
               .group_by(m.Deployable.uuid, m.Deployable.num_accelerators))
    with db.reader() as s:
        deployables = {uuid: (size, count) for uuid, size, count in s.execute(handles)}
    return devices, deployables


def mismatches(db: Database, expected: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What differs between the database and ``expected`` (empty: they match)."""
    want_devices, want_deployables = expected_rows(expected)
    have_devices, have_deployables = database_rows(db, set(expected))
    out = [f"device {uuid}: expected {want_devices.get(uuid)}, database "
           f"{have_devices.get(uuid)}"
           for uuid in sorted(set(want_devices) | set(have_devices))
           if want_devices.get(uuid) != have_devices.get(uuid)]
    out += [f"deployable {uuid}: expected (accelerators, handles) "
            f"{want_deployables.get(uuid)}, database {have_deployables.get(uuid)}"
            for uuid in sorted(set(want_deployables) | set(have_deployables))
            if want_deployables.get(uuid) != have_deployables.get(uuid)]
    return out


def placement_mismatches(placement: Any, computes: dict[str, str],
                         expected: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per compute node (host -> compute provider uuid) of ``placement`` (a
    ``tests.placement_server.PlacementEndpoint``): its acceld providers against the
    deployables ``expected``, by total (empty: they match)."""
    from acceld.conductor import placement_plan as pp

    admin = placement.admin_session()
    _devices, deployables = expected_rows(expected)
    want = {identity.rp_uuid(dep): size for dep, (size, _handles) in deployables.items()}
    have: dict[str, int] = {}
    roots = set(computes.values())
    owned = admin.get(f"/resource_providers?required={pp.OWNER_TRAIT}",
                      microversion="1.18").json()
    for rp in owned["resource_providers"]:
        if rp["root_provider_uuid"] not in roots:
            continue                      # another test's or fleet's provider
        inventories = admin.get(f"/resource_providers/{rp['uuid']}/inventories")
        totals = [inv["total"] for inv in inventories.json()["inventories"].values()]
        have[rp["uuid"]] = totals[0] if len(totals) == 1 else -1
    return [f"provider {rp}: expected {want.get(rp)}, Placement {have.get(rp)}"
            for rp in sorted(set(want) | set(have)) if want.get(rp) != have.get(rp)]
