"""Shared machinery of the PCI drivers (generic and sriov): specs, discovery, vfio binding.

Each PF an operator's JSON spec matches is one device whose handles are the PF or its
VFs. ``<state_dir>/<driver>-state.json`` keeps what install changed and each moved
handle's previous driver, so uninstall/release restore the host after a restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
from collections.abc import Callable, Iterable
from typing import Any

import jsonschema

from acceld import reports, states, validation
from acceld.agent.drivers import base
from acceld.agent.drivers.base import BaseDriver, Check, DriverError, Health, Skipped
from acceld.hw import names, pci
from acceld.hw.sysfs import PciDevice

VFIO = "vfio-pci"

_HEX4 = {"type": "string", "pattern": "^(0x)?[0-9a-fA-F]{4}$"}

# The fields of a spec.
BASE_PROPERTIES: dict[str, Any] = {
    "vendor_id": _HEX4,
    "product_id": _HEX4,
    "class": {"type": "string", "pattern": "^(0x)?([0-9a-fA-F]{2}){1,3}$"},
    "address": {"type": "string", "minLength": 1, "maxLength": 64},
    "device_type": {"type": "string", "enum": list(states.DEVICE_TYPES)},
    "resource_class": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]{0,254}$"},
    "traits": {"type": "array", "items": {"type": "string",
                                          "pattern": "^[A-Z][A-Z0-9_]{0,254}$"}},
    "backend": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
    "services": {"type": "string", "minLength": 1, "maxLength": 255},
    "physical_network": {"type": "string", "minLength": 1, "maxLength": 64},
    "num_vfs": {"type": "integer", "minimum": 0, "maximum": 65535},
    "vfio": {"type": "boolean"},
    "count": {"type": "integer", "minimum": 0},
}
_SPEC = {"type": "object", "additionalProperties": False, "properties": BASE_PROPERTIES}
SELECTORS = ("vendor_id", "product_id", "class", "address")
# Nova puts a port's physical network, read from the attach handle, into the port's
# binding (nova.accelerator.cyborg.get_arq_pci_device_profile): a NIC handle without one
# fails the port binding with a KeyError, so no NIC is reported without it.
_NO_PHYSNET = ("is a NIC but spec {} names no physical_network: Nova binds a port to a NIC "
               "handle only with the handle's physical network")

_NUMVFS_HINTS = {
    errno.EBUSY: "a VF is in use; release it first",
    errno.ENOENT: "no driver is bound to the PF; the kernel needs one (or pci-pf-stub) to "
                  "create VFs",
    errno.ERANGE: "more VFs than sriov_totalvfs",
}

# Default resource class per device type (a spec's resource_class wins).
DEFAULT_RESOURCE_CLASS = {
    "GPU": "PGPU", "FPGA": "FPGA", "QAT": "CUSTOM_QAT", "NIC": "CUSTOM_NIC",
    "SSD": "CUSTOM_SSD", "AICHIP": "CUSTOM_AICHIP", "CRYPTO": "CUSTOM_CRYPTO",
    "OTHER": "CUSTOM_PCI_DEVICE",
}
# PCI class prefixes -> device type when a spec does not say (base class, or base+sub).
_CLASS_TYPES = (("0108", "SSD"), ("1080", "CRYPTO"), ("0b40", "OTHER"), ("03", "GPU"),
                ("02", "NIC"), ("12", "AICHIP"))


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One validated spec: what to match and what to report for the matches."""

    index: int
    raw: str
    vendor_id: str | None = None
    product_id: str | None = None
    pci_class: str | None = None
    address: str | None = None
    device_type: str | None = None
    resource_class: str | None = None
    traits: tuple[str, ...] = ()
    backend: str | None = None
    services: str | None = None
    physical_network: str | None = None
    num_vfs: int | None = None
    vfio: bool = True
    count: int | None = None

    def matches_ids(self, dev: PciDevice) -> bool:
        """Vendor, product and class prefix (the address glob is checked apart, for explain)."""
        return ((self.vendor_id is None or dev.vendor == self.vendor_id)
                and (self.product_id is None or dev.device == self.product_id)
                and (self.pci_class is None or dev.pci_class.startswith(self.pci_class)))

    def summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in zip(
            SELECTORS, (self.vendor_id, self.product_id, self.pci_class, self.address),
            strict=True) if v is not None)


def load_specs(values: Iterable[str], group: str, option: str,
               default_vfio: bool = True) -> list[DeviceSpec]:
    """Parse and validate ``[group] option`` (one JSON object per value) or DriverError."""
    specs = []
    for index, raw in enumerate(values):
        where = f"[{group}] {option} entry {index}"
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise DriverError(f"{where} is not valid JSON ({exc}): {raw!r}") from None
        if not isinstance(data, dict):
            raise DriverError(f"{where} must be a JSON object: {raw!r}")
        error = jsonschema.exceptions.best_match(validation.problems(data, _SPEC))
        if error is not None:
            raise DriverError(f"{where}: {_field_of(error)}: {error.message}")
        if not any(key in data for key in SELECTORS):
            raise DriverError(f"{where}: needs at least one of {', '.join(SELECTORS)} "
                              "to select devices")
        try:
            pci.validate_spec(data.get("address", "*"))
        except ValueError as exc:
            raise DriverError(f"{where}: field 'address': {exc}") from None
        pci_class = data.pop("class", None)
        data.update(vendor_id=pci.hex_id(data.get("vendor_id"), 4),
                    product_id=pci.hex_id(data.get("product_id"), 4),
                    pci_class=pci_class and pci_class.lower().removeprefix("0x"),
                    traits=tuple(data.get("traits", ())), vfio=data.get("vfio", default_vfio))
        specs.append(DeviceSpec(index=index, raw=raw, **data))
    return specs


def _field_of(error: jsonschema.ValidationError) -> str:
    """The field a schema error is about (for additionalProperties: the unknown key)."""
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown field {', '.join(repr(e) for e in extra)}"
    path = "/".join(str(p) for p in error.absolute_path)
    return f"field '{path}'" if path else "spec"


@dataclasses.dataclass(frozen=True)
class Match:
    """A PF the driver reports: its spec and the addresses of its attach handles."""

    spec: DeviceSpec
    device: PciDevice
    handles: tuple[str, ...]


class PciDriverBase(BaseDriver):

    spec_option = ""                # e.g. "device_spec"
    default_vfio = True             # does install put the handles on vfio-pci by default
    requires_sriov = False          # skip PFs without SR-IOV
    pf_handle = True                # a PF without VFs is its own (single) handle

    def __init__(self, ctx: base.DriverContext) -> None:
        super().__init__(ctx)
        self.specs = load_specs(getattr(self.conf, self.spec_option), self.conf_group,
                                self.spec_option, self.default_vfio)
        self.names = names.PciNames()
        self._known: dict[str, Match] = {}

    # -- discovery -------------------------------------------------------------------
    def discover(self) -> list[reports.Device]:
        matches, skipped, checks = self._scan()
        self._known = {m.device.address: m for m in matches}
        counts = [s.count for s in self.specs if s.count is not None]
        self._explanation = base.Explanation(
            checks=tuple(checks), found=len(matches), skipped=tuple(skipped),
            expected=sum(counts) if counts else None)
        return [self._report(m) for m in matches]

    def _scan(self) -> tuple[list[Match], list[Skipped], list[Check]]:
        """Matches, skipped devices (one per address, none later matched) and checks."""
        devices = self.sysfs.pci_devices()
        checks = [self._spec_config_check(), *self._host_checks()]
        matches: list[Match] = []
        skipped: dict[str, Skipped] = {}
        claimed: set[str] = set()
        for spec in self.specs:
            found = []
            for dev in devices:
                if dev.address in claimed or not spec.matches_ids(dev):
                    continue
                match = Match(spec, dev, self._handles(spec, dev))
                reason = self._exclusion(spec, dev) or (
                    _NO_PHYSNET.format(spec.index) if self.device_type(match) == "NIC"
                    and not spec.physical_network else None)
                if reason:
                    skipped.setdefault(dev.address, Skipped(dev.address, reason))
                    continue
                claimed.add(dev.address)
                matches.append(match)
                found.append(match)
                checks.extend(self._device_checks(match))
            checks.append(self._spec_check(spec, found))
        return matches, [s for a, s in skipped.items() if a not in claimed], checks

    def _exclusion(self, spec: DeviceSpec, dev: PciDevice) -> str | None:
        """Why a device that matched the ids is not reported (None: it is)."""
        if spec.address is not None and not pci.matches(spec.address, dev.address):
            return f"matches spec {spec.index} ids but not its address {spec.address!r}"
        if dev.is_vf:
            return (f"is a VF of {dev.physfn}; VFs are reported as attach handles of "
                    "their PF, so match the PF instead")
        if dev.driver in self.conf.protected_drivers:
            return (f"bound to {dev.driver}, which [{self.conf_group}] protected_drivers "
                    "says never to take")
        if self.sysfs.attr(dev.address, "boot_vga") == "1":
            return "is the boot VGA device (it hosts the console); not taken"
        if self.requires_sriov and not dev.sriov_capable:
            return "is not SR-IOV capable (no sriov_totalvfs)"
        return None

    def _handles(self, spec: DeviceSpec, dev: PciDevice) -> tuple[str, ...]:
        return dev.virtfns if dev.virtfns or spec.num_vfs or not self.pf_handle else (
            dev.address,)

    def _spec_config_check(self) -> Check:
        return Check(self.spec_option, bool(self.specs),
                     f"{len(self.specs)} spec(s) configured" if self.specs else
                     f"no [{self.conf_group}] {self.spec_option} configured: this driver "
                     "reports nothing")

    def _host_checks(self) -> list[Check]:
        groups = len(self.sysfs.listdir("/sys/kernel/iommu_groups"))
        loaded = self.sysfs.driver_loaded(VFIO)
        return [Check("iommu", groups > 0, f"{groups} IOMMU group(s)" if groups else
                      "no IOMMU groups in /sys/kernel/iommu_groups: the IOMMU is off; "
                      "vfio-pci passthrough needs intel_iommu=on or amd_iommu=on"),
                Check("vfio-pci", loaded, "vfio-pci driver registered" if loaded else
                      "vfio-pci is not loaded (modprobe vfio-pci): install and prepare "
                      "need it to hand devices to guests")]

    def _spec_check(self, spec: DeviceSpec, found: list[Match]) -> Check:
        addresses = ", ".join(m.device.address for m in found) or "none"
        ok = len(found) == spec.count if spec.count is not None else bool(found)
        expected = f"expected {spec.count}" if spec.count is not None else "expected >= 1"
        return Check(f"spec {spec.index} ({spec.summary()})", ok,
                     f"{expected}, found {len(found)}: {addresses}")

    def _device_checks(self, match: Match) -> list[Check]:
        """Per-device facts worth showing: QAT down, VF count not yet as configured."""
        spec, dev = match.spec, match.device
        checks = []
        qat_state = self.sysfs.attr(dev.address, "qat", "state")
        if qat_state is not None:
            checks.append(Check(f"{dev.address} qat", qat_state == "up",
                                f"qat/state is {qat_state}"))
        if spec.num_vfs is not None:
            problem = self._vf_problem(spec, dev)
            have = dev.sriov_numvfs or 0
            checks.append(Check(f"{dev.address} sriov", problem is None and have == spec.num_vfs,
                                problem or f"{have} of {spec.num_vfs} configured VFs present"
                                + ("" if have == spec.num_vfs else "; install creates them")))
        return checks

    @staticmethod
    def _vf_problem(spec: DeviceSpec, dev: PciDevice) -> str | None:
        """Why ``spec.num_vfs`` cannot be had on ``dev`` (None: it can)."""
        if not dev.sriov_capable:
            return f"num_vfs={spec.num_vfs} is configured but the device is not SR-IOV capable"
        if (spec.num_vfs or 0) > (dev.sriov_totalvfs or 0):
            return f"num_vfs={spec.num_vfs} is above sriov_totalvfs={dev.sriov_totalvfs}"
        return None

    # -- reports ---------------------------------------------------------------------
    def device_type(self, match: Match) -> str:
        if match.spec.device_type:
            return match.spec.device_type
        if self.sysfs.is_dir(self.sysfs.device_path(match.device.address, "qat")):
            return "QAT"
        return next((dtype for prefix, dtype in _CLASS_TYPES
                     if match.device.pci_class.startswith(prefix)), "OTHER")

    def services(self, match: Match) -> str | None:
        """The spec's services, else what the device says it runs (QAT cfg_services)."""
        if match.spec.services:
            return match.spec.services
        return self.sysfs.attr(match.device.address, "qat", "cfg_services") or None

    def _report(self, match: Match) -> reports.Device:
        spec, dev = match.spec, match.device
        dtype = self.device_type(match)
        physnet = {"physical_network": spec.physical_network} if spec.physical_network else {}
        extra = {"backend": spec.backend, "services": self.services(match), **physnet,
                 "numa_node": dev.numa_node}
        std = {"numa_node": dev.numa_node, "iommu_group": dev.iommu_group,
               "sriov_totalvfs": dev.sriov_totalvfs}
        return reports.make_device(
            identity=dev.address, type=dtype, vendor=dev.vendor, model=dev.device,
            name=f"{self.ctx.host}_{dtype.lower()}_{dev.address}",
            std_board_info={"vendor_id": dev.vendor, "product_id": dev.device,
                            "class": dev.pci_class, **_present(std)},
            vendor_board_info={"vendor_name": self.names.vendor(dev.vendor),
                               "product_name": self.names.device(dev.vendor, dev.device)},
            controlpath={"type": "PCI", "info": pci.to_attach_info(dev.address)},
            deployables=[base.deployable(
                f"{self.ctx.host}_{dev.address}",
                spec.resource_class or DEFAULT_RESOURCE_CLASS[dtype], spec.traits,
                [base.pci_handle(h, **physnet) for h in match.handles], **_present(extra))])

    # -- health ------------------------------------------------------------------------
    def health(self) -> dict[str, Health]:
        if not self._known:
            self._known = {m.device.address: m for m in self._scan()[0]}
        return {identity: self._health_of(match) for identity, match in self._known.items()}

    def _health_of(self, match: Match) -> Health:
        address = match.device.address
        dev = self.sysfs.pci_device(address)
        if dev is None:
            return Health.of([f"{address} is gone from /sys/bus/pci/devices"], [])
        failed: list[str] = []
        degraded: list[str] = []
        with contextlib.suppress(OSError), open(
                self.sysfs.path(self.sysfs.device_path(address, "config")), "rb") as config:
            if config.read(2) == b"\xff\xff":
                failed.append(f"{address} config space reads all-ones (fell off the bus)")
        fatal = self.sysfs.aer_fatal_count(address)
        if fatal:
            failed.append(f"{address} has {fatal} fatal AER error(s) (aer_dev_fatal)")
        if self.sysfs.attr(address, "qat", "state") == "down":
            degraded.append(f"{address} QAT state is down (qat/state)")
        missing = [vf for vf in match.handles if self.sysfs.pci_device(vf) is None]
        if missing:
            degraded.append(f"VF(s) gone: {', '.join(missing)}")
        for vf in match.handles:
            if vf != address and self.sysfs.aer_fatal_count(vf):
                degraded.append(f"VF {vf} has fatal AER errors")
        return Health.of(failed, degraded)

    # -- state -------------------------------------------------------------------------
    def _update(self, identity: str, fn: Callable[[dict[str, Any]], Any]) -> None:
        """Change the state entry of ``identity`` in place (an emptied one is dropped)."""
        state = self._state()
        fn(state.setdefault(identity, {}))
        if not state[identity]:
            del state[identity]
        self._save_state(state)

    # -- lookups shared by the operations ------------------------------------------------
    def _match(self, identity: str) -> Match:
        """The current match for an identity, rescanning sysfs (never a stale view)."""
        address = base.pci_address(identity)
        if self.sysfs.pci_device(address) is None:
            raise DriverError(f"device {address} is gone (not in /sys/bus/pci/devices): was "
                              "it removed or hot-unplugged?")
        match = self._rescan(address)
        if match is not None:
            return match
        raise DriverError(f"{address} is not a device this driver manages (no "
                          f"[{self.conf_group}] {self.spec_option} entry reports it)")

    def _rescan(self, address: str) -> Match | None:
        return next((m for m in self._scan()[0] if m.device.address == address), None)

    def _need_vfio(self, address: str) -> None:
        for check in self._host_checks():
            if not check.ok:
                raise DriverError(f"cannot give {address} to vfio-pci: {check.detail}")

    def _set_numvfs(self, address: str, count: int, autoprobe: bool | None) -> None:
        base.sysfs_op(f"setting the VF count of {address} to {count}",
                       lambda: self.sysfs.set_numvfs(address, count, autoprobe=autoprobe),
                       _NUMVFS_HINTS)

    def _give_back(self, address: str, original: str | None) -> None:
        """Put a device back on ``original``; None means "let the kernel choose"."""
        if self.sysfs.pci_device(address) is None:
            return  # a VF removed with its PF's VF count: nothing to give back
        if not original:
            base.sysfs_op(f"reprobing {address}", lambda: self.sysfs.reprobe(address))
        else:
            base.sysfs_op(f"restoring {address} to {original}",
                           lambda: self.sysfs.restore_driver(address, original))

    # -- install / uninstall -------------------------------------------------------------
    def install(self, identity: str) -> None:
        match = self._match(identity)
        spec, dev = match.spec, match.device
        address = dev.address
        if spec.vfio:
            self._need_vfio(address)
        entry = self._state().get(address, {})
        if spec.num_vfs is not None:
            self._install_vfs(match, entry)
            match = self._match(address)
        if spec.vfio:
            for handle in match.handles:
                self._to_vfio(address, handle)
        self._update(address, lambda e: e.update(installed=True))

    def _install_vfs(self, match: Match, entry: dict[str, Any]) -> None:
        spec, dev = match.spec, match.device
        address = dev.address
        problem = self._vf_problem(spec, dev)
        if problem:
            raise DriverError(f"{address}: {problem}")
        if "original_numvfs" not in entry:
            self._update(address, lambda e: e.update(
                original_numvfs=dev.sriov_numvfs or 0,
                original_autoprobe=dev.sriov_drivers_autoprobe))
        if (dev.sriov_numvfs or 0) == spec.num_vfs:
            return
        self._set_numvfs(address, spec.num_vfs or 0, False if spec.vfio else None)

    def _to_vfio(self, identity: str, handle: str) -> None:
        """Bind a handle of ``identity`` to vfio-pci, recording its previous driver (once)."""
        driver = self.sysfs.driver_of(handle)
        self._update(identity, lambda e: e.setdefault("handles", {}).setdefault(handle, driver))
        base.sysfs_op(f"binding {handle} to {VFIO}",
                       lambda: self.sysfs.bind_driver(handle, VFIO))

    def uninstall(self, identity: str) -> None:
        address = base.pci_address(identity)
        entry = self._state().get(address)
        if not entry:
            return
        if self.sysfs.pci_device(address) is None:
            raise DriverError(f"device {address} is gone (not in /sys/bus/pci/devices); its "
                              "install state is kept until it comes back")
        for handle, original in sorted(entry.get("handles", {}).items()):
            if handle != address:
                self._give_back(handle, original)
        if "original_numvfs" in entry:
            self._set_numvfs(address, int(entry["original_numvfs"]),
                             entry.get("original_autoprobe"))
        if address in entry.get("handles", {}):
            self._give_back(address, entry["handles"][address])
        self._update(address, dict.clear)

    # -- host use ------------------------------------------------------------------------
    def attach_host(self, identity: str) -> None:
        """Give the handles back to the host (their drivers before us, or the kernel's)."""
        match = self._match(identity)
        known = self._state().get(match.device.address, {}).get("handles", {})
        for handle in match.handles:
            original = known.get(handle)
            if self.sysfs.driver_of(handle) in (None, VFIO) and original != VFIO:
                self._give_back(handle, original)

    def detach_host(self, identity: str) -> None:
        """Take the handles from the host: onto vfio-pci, ready for guests."""
        match = self._match(identity)
        self._need_vfio(match.device.address)
        for handle in match.handles:
            self._to_vfio(match.device.address, handle)

    # -- prepare / release -----------------------------------------------------------------
    def _handle_of(self, match: Match, attach_info: dict[str, str]) -> str:
        handle = base.attach_address(attach_info)
        if handle not in match.handles:
            raise DriverError(f"{handle} is not an attach handle of {match.device.address} "
                              f"(handles: {', '.join(match.handles) or 'none'})")
        return handle

    def prepare(self, identity: str, attach_info: dict[str, str]) -> dict[str, str]:
        """Make one handle ready for a guest: on vfio-pci (idempotent)."""
        match = self._match(identity)
        handle = self._handle_of(match, attach_info)
        if self.sysfs.driver_of(handle) != VFIO:
            self._need_vfio(handle)
            self._to_vfio(match.device.address, handle)
        return dict(attach_info)

    def release(self, identity: str, attach_info: dict[str, str]) -> None:
        """Give a handle back after a guest: to the driver it had before prepare (staying on
        vfio-pci when install put it there). Idempotent; a vanished VF is already free."""
        handle, address = base.attach_address(attach_info), base.pci_address(identity)
        if self.sysfs.pci_device(handle) is None:
            return
        entry = self._state().get(address, {})
        handles = entry.get("handles", {})
        if handle not in handles:
            return  # we never moved it
        if entry.get("installed") and (match := self._rescan(address)) is not None \
                and match.spec.vfio:
            return  # install's resting state is vfio-pci (only then is the host scanned)
        self._give_back(handle, handles[handle])

        def forget(e: dict[str, Any]) -> None:
            # on the state as it is now: another VF of this PF may have been released since
            e.get("handles", {}).pop(handle, None)
            if not e.get("handles"):
                e.pop("handles", None)
        self._update(address, forget)


def _present(values: dict[str, Any]) -> dict[str, str]:
    """The values that are set, as strings."""
    return {k: str(v) for k, v in values.items() if v is not None and v != ""}
