"""Would a device profile fit, how many times, where, and if not, why (pure, no I/O).

The rules are Placement's and the binder's, applied to acceld's own rows
(``objects.availability``): each group of the profile is a granular request group
(``resources:RC=N`` from one provider, ``trait:T=required|forbidden`` on that provider),
as Nova asks Placement for a device profile; a provider offers its resource class with
the traits ``placement_plan`` publishes; it is schedulable (not all reserved) when its
device is usable and it has handles Nova attaches; its capacity is what a bind can still
claim: unclaimed guest handles, at most its accelerators less those held by ARQs.

Why a host does not fit is the first failing check of :data:`CHECKS`, one ordered list:
host checks first, then, for the provider that got furthest down the list, its first
failing provider check. A new device condition (a state a later life cycle adds) is one
more row of :data:`acceld.states.UNUSABLE`, which Placement's plan and the binder read too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from acceld import states
from acceld.conductor import placement_plan as pp

# A host's packing tries at most this many provider choices (a profile of many groups
# over many providers could otherwise explode); what it has placed by then is its count.
_SEARCH_STEPS = 20000


@dataclasses.dataclass(frozen=True)
class Group:
    """One request group of a profile: amounts per resource class, required and
    forbidden traits (``index``: its place among the profile's groups)."""

    index: int
    resources: Mapping[str, int]
    required: frozenset[str]
    forbidden: frozenset[str]

    def units(self) -> int:
        return sum(self.resources.values())


def parse_groups(groups: Sequence[Mapping[str, str]]) -> list[Group]:
    """A stored profile's groups as request groups; a group asking for no positive amount
    asks for nothing (no ARQ is made for it) and is left out, as Nova leaves it out."""
    out = []
    for index, group in enumerate(groups):
        resources: dict[str, int] = {}
        required, forbidden = set(), set()
        for key, value in group.items():
            prefix, _, name = key.partition(":")
            if prefix == "resources" and int(value) > 0:
                resources[name] = int(value)
            elif prefix == "trait":
                (required if value == "required" else forbidden).add(name)
        if resources:
            out.append(Group(index, resources, frozenset(required), frozenset(forbidden)))
    return out


@dataclasses.dataclass(frozen=True)
class ProviderRow(pp.DeployableRow):
    """One deployable (one child provider in Placement) and what a bind needs of it: a
    row of ``objects.availability.read_fleet`` (:func:`provider_row`)."""

    host: str
    device_uuid: str
    driver: str
    state: str
    status: str
    health: str
    lifecycle: str            # the health life cycle (acceld.states.LIFECYCLE_STATES)
    maintenance: bool         # drained
    guest_handles: int        # handles Nova attaches (PCI, MDEV)
    free_guest_handles: int   # of those, not in use
    in_use: int               # handles of any type in use (an ARQ holds each)


def provider_row(fields: Mapping[str, Any]) -> ProviderRow:
    """``placement_plan``'s rule (``objects.placement.host_inputs``): schedulable (not all
    reserved) when the device is usable and it has handles Nova attaches."""
    return ProviderRow(**fields, schedulable=fields["guest_handles"] > 0 and not
                       states.unusable_reasons(fields["state"], fields["status"],
                                               fields["health"], fields["lifecycle"],
                                               fields["maintenance"]))


@dataclasses.dataclass(frozen=True)
class Subject:
    """What a check looks at: a host, and (provider checks) one provider for one group."""

    host: Any                          # objects.availability.HostRow
    row: ProviderRow | None = None
    provider: pp.DesiredProvider | None = None
    group: Group | None = None


@dataclasses.dataclass(frozen=True)
class Check:
    """``test`` answers the reason's detail when the subject fails, else None."""

    code: str
    on: str                                       # "host" or "provider"
    test: Callable[[Subject], str | None]


def _agent_down(s: Subject) -> str | None:
    if s.host.agent_alive is False:
        return f"the agent of {s.host.host} has not been heard from (service down)"
    return None


def _not_synced(s: Subject) -> str | None:
    if s.host.placement_in_sync is False:
        return f"{s.host.host} is not in sync with Placement (its last sync failed)"
    return None


def _resource_class(s: Subject) -> str | None:
    missing = sorted(set(s.group.resources) - set(s.provider.inventories))
    return f"offers no {', '.join(missing)}" if missing else None


def _required(s: Subject) -> str | None:
    missing = sorted(s.group.required - s.provider.traits)
    return f"lacks trait {', '.join(missing)}" if missing else None


def _forbidden(s: Subject) -> str | None:
    present = sorted(s.group.forbidden & s.provider.traits)
    return f"has forbidden trait {', '.join(present)}" if present else None


def _driver_failed(s: Subject) -> str | None:
    if s.row.driver in s.host.failed_drivers:
        return f"its driver {s.row.driver} failed on {s.host.host}"
    return None


def _device(test: Callable[[Any], bool], what: Callable[[Any], str]) -> Callable[
        [Subject], str | None]:
    return lambda s: f"device {s.row.device_uuid} {what(s.row)}" if test(s.row) else None


def _no_guest_handles(s: Subject) -> str | None:
    if s.row.guest_handles == 0:
        return (f"has no handle Nova can attach (types "
                f"{', '.join(sorted(states.GUEST_ATTACH_TYPES))})")
    return None


def _exhausted(s: Subject) -> str | None:
    free = capacity(s.row)
    short = [rc for rc, n in s.group.resources.items() if n > free]
    if short:
        return f"{', '.join(short)} exhausted: {free} free, {s.group.units()} asked"
    return None


# The one ordered list of reasons; a device's own (states.UNUSABLE) go before "exhausted".
CHECKS: tuple[Check, ...] = (
    Check("agent_down", "host", _agent_down),
    Check("placement_not_synced", "host", _not_synced),
    Check("no_resource_class", "provider", _resource_class),
    Check("missing_trait", "provider", _required),
    Check("forbidden_trait", "provider", _forbidden),
    Check("driver_failed", "provider", _driver_failed),
    *(Check(code, "provider", _device(fails, what)) for code, fails, what in states.UNUSABLE),
    Check("no_guest_handles", "provider", _no_guest_handles),
    Check("exhausted", "provider", _exhausted),
)
_HOST_CHECKS = tuple(c for c in CHECKS if c.on == "host")
_PROVIDER_CHECKS = tuple(c for c in CHECKS if c.on == "provider")


def capacity(row: ProviderRow) -> int:
    """Units a bind can still claim of a schedulable provider (0 when reserved)."""
    if not row.schedulable:
        return 0
    return max(0, min(row.num_accelerators - row.in_use, row.free_guest_handles))


@dataclasses.dataclass
class _Option:
    row: ProviderRow
    free: int


def _first_failure(subject: Subject) -> tuple[int, Check] | None:
    for position, check in enumerate(_PROVIDER_CHECKS):
        if check.test(subject) is not None:
            return position, check
    return None


def _host_reason(host: Any, rows: Sequence[ProviderRow],
                 groups: Sequence[Group]) -> dict[str, Any] | None:
    """The reason nothing of the profile fits on ``host`` on its own, or None when
    every group finds a provider (then the groups only do not fit together)."""
    for check in _HOST_CHECKS:
        detail = check.test(Subject(host))
        if detail is not None:
            return {"code": check.code, "detail": detail, "provider": None, "group": None}
    for group in groups:
        best: tuple[int, Check, Subject] | None = None
        for row in rows:
            subject = Subject(host, row, pp.desired_provider(row), group)
            failed = _first_failure(subject)
            if failed is None:
                break
            if best is None or failed[0] > best[0]:
                best = (failed[0], failed[1], subject)
        else:
            if best is None:
                return {"code": "no_resource_class", "group": group.index, "provider": None,
                        "detail": f"{host.host} has no device (group {group.index} asks "
                                  f"for {', '.join(sorted(group.resources))})"}
            _pos, check, subject = best
            return {"code": check.code, "group": group.index, "provider": subject.row.rp_uuid,
                    "detail": f"provider {subject.row.name} {check.test(subject)}"}
    return None


def _place(groups: Sequence[Group], options: Sequence[Sequence[_Option]], isolate: bool,
           budget: list[int]) -> list[_Option] | None:
    """One instance: a provider for each group (depth first), capacity taken; None and
    nothing taken when it does not fit."""
    chosen: list[_Option] = []

    def dfs(i: int) -> bool:
        if i == len(groups):
            return True
        for opt in options[i]:
            budget[0] -= 1
            if budget[0] < 0:
                return False
            need = groups[i].units()
            if opt.free < need or (isolate and any(c is opt for c in chosen)):
                continue
            opt.free -= need
            chosen.append(opt)
            if dfs(i + 1):
                return True
            chosen.pop()
            opt.free += need
        return False
    return chosen if dfs(0) else None


def host_fit(host: Any, rows: Sequence[ProviderRow], groups: Sequence[Group],
             group_policy: str) -> dict[str, Any]:
    """``{"host", "count", "placements"}`` (each placement: the provider of each group,
    in group order) or ``{"host", "count": 0, "reason"}``."""
    ordered = sorted(rows, key=lambda r: r.name)
    if not groups:
        return {"host": host.host, "count": 0, "reason": {
            "code": "nothing_requested", "group": None, "provider": None,
            "detail": "the profile asks for no resources"}}
    reason = _host_reason(host, ordered, groups)
    if reason is not None:
        return {"host": host.host, "count": 0, "reason": reason}
    by_rp = {r.rp_uuid: _Option(r, capacity(r)) for r in ordered}
    options = [[by_rp[r.rp_uuid] for r in ordered
                if _first_failure(Subject(host, r, pp.desired_provider(r), g)) is None]
               for g in groups]
    placements, budget = [], [_SEARCH_STEPS]
    while (found := _place(groups, options, group_policy == "isolate", budget)) is not None:
        placements.append([opt.row for opt in found])
    if not placements:
        return {"host": host.host, "count": 0, "reason": {
            "code": "exhausted", "group": None, "provider": None,
            "detail": f"each group finds a provider on {host.host} but not all of them "
                      f"together (group_policy={group_policy})"}}
    return {"host": host.host, "count": len(placements), "placements": placements}


def explain(hosts: Mapping[str, Any], providers: Iterable[Mapping[str, Any]],
            groups: Sequence[Group], group_policy: str = "none") -> list[dict[str, Any]]:
    """:func:`host_fit` of every host (``providers``: fields of :class:`ProviderRow`), by
    host name."""
    rows: dict[str, list[ProviderRow]] = {name: [] for name in hosts}
    for fields in providers:
        rows.setdefault(fields["host"], []).append(provider_row(fields))
    return [host_fit(hosts[name], rows[name], groups, group_policy) for name in sorted(rows)
            if name in hosts]


def _reason_view(reason: Mapping[str, Any]) -> dict[str, Any]:
    return {"reason": reason["code"], "detail": reason["detail"],
            "device_profile_group_id": reason["group"], "device_rp_uuid": reason["provider"]}


def availability(profile: Mapping[str, Any], fleet: Any,
                 group_policy: str = "none") -> dict[str, Any]:
    """The API's answer for ``profile`` (its ``name``, ``uuid`` and ``groups``) on
    ``fleet`` (``objects.availability.Fleet``): the instances that fit now in all, the
    hosts where some fit (how many, on which providers), and every other host with its
    first reason."""
    fits = explain(fleet.hosts, fleet.providers, parse_groups(profile["groups"]),
                   group_policy)
    hosts, not_fitting = [], []
    for fit in fits:
        if fit["count"]:
            used = sorted({row.rp_uuid for placement in fit["placements"]
                           for row in placement})
            hosts.append({"hostname": fit["host"], "count": fit["count"],
                          "device_rp_uuids": used})
        else:
            not_fitting.append({"hostname": fit["host"], **_reason_view(fit["reason"])})
    return {"device_profile_name": profile["name"], "device_profile_uuid": profile["uuid"],
            "group_policy": group_policy, "count": sum(h["count"] for h in hosts),
            "hosts": hosts, "not_fitting": not_fitting}


def dry_run(profile: Mapping[str, Any], fleet: Any, group_policy: str = "none",
            hostname: str | None = None) -> dict[str, Any]:
    """Whether the ARQs of ``profile`` would bind now, and where: on ``hostname`` (Nova's
    choice) or else on the host with the most room (ties: by name); one entry per ARQ
    (per requested unit, as ARQ create makes them) with the provider it would bind to.
    Nothing is written."""
    groups = parse_groups(profile["groups"])
    fits = explain(fleet.hosts, fleet.providers, groups, group_policy)
    if hostname is not None:
        fits = [f for f in fits if f["host"] == hostname]
    answer: dict[str, Any] = {"device_profile_name": profile["name"],
                              "group_policy": group_policy, "would_bind": False,
                              "hostname": hostname, "arqs": []}
    fitting = sorted((f for f in fits if f["count"]), key=lambda f: (-f["count"], f["host"]))
    if fitting:
        best = fitting[0]
        answer.update(would_bind=True, hostname=best["host"], arqs=[
            {"device_profile_group_id": group.index, "hostname": best["host"],
             "device_rp_uuid": row.rp_uuid, "device_uuid": row.device_uuid}
            for group, row in zip(groups, best["placements"][0], strict=True)
            for _unit in range(group.units())])
    elif fits:
        answer.update(_reason_view(fits[0]["reason"]) if hostname is not None else {
            "reason": "no_host", "detail": "no host fits the profile now",
            "device_profile_group_id": None, "device_rp_uuid": None})
    else:
        answer.update(reason="no_host", detail=f"no host {hostname!r} has devices or an "
                      "agent" if hostname else "no host has devices or an agent",
                      device_profile_group_id=None, device_rp_uuid=None)
    return answer
