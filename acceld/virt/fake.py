"""An in-memory hypervisor for the all-in-one demo and tests: a few running guests that
take and release acceld's ``<hostdev>`` devices, checked as libvirt would (a hostdev named
by an acceld alias, one guest per host device). A guest marked as ignoring unplugs keeps
its devices: its detach answers PENDING at once."""

from __future__ import annotations

import dataclasses
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterable

from acceld import exception, uuids
from acceld.virt import devicexml
from acceld.virt.hypervisor import ABSENT, PENDING, REMOVED, Guest


@dataclasses.dataclass
class _Domain:
    name: str
    ignores_unplug: bool
    devices: dict[str, str] = dataclasses.field(default_factory=dict)  # alias -> source


def parse_instances(entries: Iterable[str]) -> list[tuple[str, str]]:
    """``UUID:NAME`` entries as (canonical UUID, name); ValueError for a malformed one."""
    found = []
    for entry in entries:
        raw, _, name = entry.partition(":")
        uuid = uuids.canonical(raw.strip())
        if uuid is None or not name.strip():
            raise ValueError(f"a fake instance is UUID:NAME, not {entry[:80]!r}")
        found.append((uuid, name.strip()))
    return found


def _device(device_xml: str) -> tuple[str, str]:
    """(alias, source) of an acceld hostdev; HypervisorError as libvirt would refuse it."""
    try:
        dev = ET.fromstring(device_xml)
    except ET.ParseError as exc:
        raise exception.HypervisorError(f"device XML does not parse: {exc}") from None
    alias = dev.find("alias")
    name = alias.get("name", "") if alias is not None else ""
    if dev.tag != "hostdev" or devicexml.arq_of(name) is None:
        raise exception.HypervisorError(
            f"not an acceld device: <{dev.tag}> with alias {name[:60]!r}")
    source = dev.find("source/address")
    if source is None:
        raise exception.HypervisorError(f"device {name} has no source address")
    return name, f"{dev.get('type')}:{sorted(source.attrib.items())}"


class FakeHypervisor:
    """``instances``: (UUID, name) of the guests, all running; ``ignore_unplug``: UUIDs
    of those that never release a device."""

    def __init__(self, instances: Iterable[tuple[str, str]] = (),
                 ignore_unplug: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._domains: dict[str, _Domain] = {}
        for uuid, name in instances:
            key = uuids.canonical(uuid)
            if key is None:
                raise ValueError(f"not a UUID: {uuid[:40]!r}")
            self._domains[key] = _Domain(name, ignores_unplug=False)
        for uuid in ignore_unplug:
            self.set_ignores_unplug(uuid)

    def remove_guest(self, uuid: str) -> None:
        """The guest is deleted (or moved away), its devices with it."""
        with self._lock:
            self._domain(uuid)
            del self._domains[uuids.canonical(uuid) or ""]

    def redefine(self, uuid: str) -> None:
        """The guest is defined again from scratch, as Nova's hard reboot or stop/start
        does: it runs without the devices acceld attached."""
        with self._lock:
            self._domain(uuid).devices.clear()

    def set_ignores_unplug(self, uuid: str, ignores: bool = True) -> None:
        with self._lock:
            self._domain(uuid).ignores_unplug = ignores

    def _domain(self, uuid: str) -> _Domain:
        domain = self._domains.get(uuids.canonical(uuid) or "")
        if domain is None:
            raise exception.GuestNotFound(f"no guest {uuid[:40]} on this host")
        return domain

    def guests(self) -> list[Guest]:
        with self._lock:
            return [_guest(uuid, d) for uuid, d in self._domains.items()]

    def guest(self, instance_uuid: str) -> Guest:
        with self._lock:
            return _guest(uuids.canonical(instance_uuid) or "", self._domain(instance_uuid))

    def attach(self, instance_uuid: str, device_xml: str) -> None:
        alias, source = _device(device_xml)
        with self._lock:
            domain = self._domain(instance_uuid)
            if domain.devices.get(alias) == source:
                return                          # the same device again: nothing to do
            for uuid, other in self._domains.items():
                for held_alias, held in other.devices.items():
                    if held == source or (other is domain and held_alias == alias):
                        raise exception.HypervisorError(
                            f"device of {alias} conflicts with {held_alias} of guest {uuid}")
            domain.devices[alias] = source

    def detach(self, instance_uuid: str, alias: str, timeout: float) -> str:
        with self._lock:
            domain = self._domain(instance_uuid)
            if alias not in domain.devices:
                return ABSENT
            if domain.ignores_unplug:
                return PENDING
            del domain.devices[alias]
            return REMOVED

    def close(self) -> None:
        """Nothing to release."""


def _guest(uuid: str, domain: _Domain) -> Guest:
    return Guest(uuid=uuid, name=domain.name, running=True, aliases=tuple(domain.devices))
