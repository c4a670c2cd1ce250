"""What Placement should hold for a host, and the writes that get it there (pure, no I/O).

One child provider of the compute node per deployable; one that is not schedulable keeps
its inventory with ``reserved = total``. Every provider acceld owns carries
``OWNER_CYBORG``: how it tells its own from Nova's or Neutron's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Container, Iterable, Mapping
from typing import Any

import os_resource_classes as orc
import os_traits

OWNER_TRAIT = os_traits.OWNER_CYBORG
_INVALID = re.compile(r"[^A-Z0-9_]")


@dataclasses.dataclass(frozen=True)
class DeployableRow:
    """What the database says about one deployable (input of ``desired_tree``)."""

    rp_uuid: str
    name: str
    num_accelerators: int
    attributes: tuple[tuple[str, str], ...]
    vendor: str
    model: str
    schedulable: bool


@dataclasses.dataclass(frozen=True)
class DesiredProvider:
    uuid: str
    name: str
    resource_class: str | None
    inventories: Mapping[str, Mapping[str, Any]]
    traits: frozenset[str]

    def digest(self) -> str:
        body = json.dumps({"name": self.name, "inventories": self.inventories,
                           "traits": sorted(self.traits)}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class ActualProvider:
    uuid: str
    generation: int
    inventories: Mapping[str, Mapping[str, Any]] | None = None   # None: not read
    traits: frozenset[str] | None = None                         # None: not read


@dataclasses.dataclass
class Plan:
    create: list[DesiredProvider] = dataclasses.field(default_factory=list)
    set_inventories: list[DesiredProvider] = dataclasses.field(default_factory=list)
    set_traits: list[DesiredProvider] = dataclasses.field(default_factory=list)
    delete: list[str] = dataclasses.field(default_factory=list)
    custom_classes: set[str] = dataclasses.field(default_factory=set)
    custom_traits: set[str] = dataclasses.field(default_factory=set)

    def is_empty(self) -> bool:
        return not (self.create or self.set_inventories or self.set_traits or self.delete)

    def describe(self) -> list[dict[str, Any]]:
        """Human/JSON view of the plan (for ``acceld placement sync --dry-run``)."""
        steps: list[dict[str, Any]] = []
        steps += [{"action": "create", "provider": p.uuid, "name": p.name} for p in self.create]
        steps += [{"action": "set_inventories", "provider": p.uuid, "name": p.name,
                   "inventories": dict(p.inventories)} for p in self.set_inventories]
        steps += [{"action": "set_traits", "provider": p.uuid, "name": p.name,
                   "traits": sorted(p.traits)} for p in self.set_traits]
        steps += [{"action": "delete", "provider": u} for u in self.delete]
        return steps


def _custom(name: str, standard: Container[str]) -> str:
    """A standard name as it is; any other one ``CUSTOM_``."""
    return name if name in standard or name.startswith("CUSTOM_") else "CUSTOM_" + name


def normalize_trait(name: str) -> str | None:
    value = _INVALID.sub("_", name.strip().upper())
    return _custom(value, _STANDARD_TRAITS)[:255] if value else None


_STANDARD_TRAITS = frozenset(os_traits.get_traits())


def _resource_class(value: str | None) -> str | None:
    return _custom(_INVALID.sub("_", value.strip().upper()), orc.STANDARDS) if value else None


def _inventory(total: int, reserved: int) -> dict[str, Any]:
    return {"total": total, "reserved": reserved, "min_unit": 1, "max_unit": total,
            "step_size": 1, "allocation_ratio": 1.0}


def desired_provider(row: DeployableRow) -> DesiredProvider:
    attrs = dict(row.attributes)
    rc = _resource_class(attrs.get("rc"))
    inventories: dict[str, dict[str, Any]] = {}
    if rc and row.num_accelerators > 0:
        total = row.num_accelerators
        inventories[rc] = _inventory(total, 0 if row.schedulable else total)
    traits = {OWNER_TRAIT}
    traits.update(t for key, value in attrs.items() if key.startswith("trait")
                  for t in [normalize_trait(value)] if t)
    if row.vendor:
        traits.add(normalize_trait(f"CUSTOM_VENDOR_{row.vendor}") or "")
        if row.model:
            traits.add(normalize_trait(f"CUSTOM_PRODUCT_{row.vendor}_{row.model}") or "")
    traits.discard("")
    return DesiredProvider(uuid=row.rp_uuid, name=row.name, resource_class=rc,
                           inventories=inventories, traits=frozenset(traits))


def desired_tree(rows: Iterable[DeployableRow]) -> dict[str, DesiredProvider]:
    return {row.rp_uuid: desired_provider(row) for row in rows}


def clamp_to_usage(inventories: Mapping[str, Mapping[str, Any]],
                   usages: Mapping[str, int]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Inventories held up to what is allocated (all reserved), and a line per held class."""
    result = {rc: dict(inv) for rc, inv in inventories.items()}
    held = []
    for rc, used in sorted(usages.items()):
        if used <= 0:
            continue
        want = result.get(rc)
        if want is None or want["total"] < used:
            offered = want["total"] if want else 0
            result[rc] = _inventory(used, used)
            held.append(f"{rc}: {used} allocated, the device now offers {offered}")
    return result, held


def _inventory_differs(actual: Mapping[str, Mapping[str, Any]],
                       desired: Mapping[str, Mapping[str, Any]]) -> bool:
    if set(actual) != set(desired):
        return True
    return any(actual[rc].get(k) != v for rc, inv in desired.items() for k, v in inv.items())


def plan(desired: Mapping[str, DesiredProvider], actual: Mapping[str, ActualProvider],
         synced_digests: Mapping[str, str] | None = None) -> Plan:
    """Writes making ``actual`` equal ``desired``; unread providers go by ``synced_digests``."""
    synced = synced_digests or {}
    result = Plan()
    for uuid, want in desired.items():
        have = actual.get(uuid)
        if have is None:
            result.create.append(want)
            if want.inventories:
                result.set_inventories.append(want)
            result.set_traits.append(want)
        elif have.inventories is None or have.traits is None:
            if synced.get(uuid) != want.digest():
                result.set_inventories.append(want)
                result.set_traits.append(want)
        else:
            if _inventory_differs(have.inventories, want.inventories):
                result.set_inventories.append(want)
            if set(have.traits) != set(want.traits):
                result.set_traits.append(want)
        if want.resource_class and want.resource_class not in orc.STANDARDS:
            result.custom_classes.add(want.resource_class)
        result.custom_traits.update(t for t in want.traits if os_traits.is_custom(t))
    result.delete.extend(sorted(set(actual) - set(desired)))
    return result
