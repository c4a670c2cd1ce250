"""A small sysfs layer with an injectable root: the kernel ABI every driver reads.

Methods take *host* paths (``/sys/...``) mapped under the root; reads return None for a
missing file; every write goes to the injected writer (privsep's ``sysfs_write`` for
root ``/``), so tests hand the drivers ``FakeKernel`` (``tests/fakes/kernel.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
from collections.abc import Callable, Mapping

from acceld.hw import pci

Writer = Callable[[str, str], None]

PCI_DEVICES = "/sys/bus/pci/devices"
PCI_DRIVERS = "/sys/bus/pci/drivers"
PCI_DRIVERS_PROBE = "/sys/bus/pci/drivers_probe"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
MDEV_BUS = "/sys/class/mdev_bus"
MDEV_DEVICES = "/sys/bus/mdev/devices"
MODULES = "/sys/module"

_VIRTFN_RE = re.compile(r"^virtfn(\d+)$")


class BindError(Exception):
    """A driver (un)bind did not end with the device on the driver asked for."""


@dataclasses.dataclass(frozen=True)
class MdevType:
    """One entry of ``mdev_supported_types`` (``available_instances`` None: unreadable)."""

    type_id: str
    name: str | None
    available_instances: int | None
    device_api: str | None
    description: str | None


@dataclasses.dataclass(frozen=True)
class PciDevice:
    """A snapshot of one PCI function's sysfs attributes: ids in lower-case hex without
    ``0x``, None for what the device does not have (NUMA affinity, IOMMU group, SR-IOV,
    the ``nvidia/`` files of NVIDIA's per-VF vGPU framework)."""

    address: str
    vendor: str
    device: str
    pci_class: str
    subsystem_vendor: str | None = None
    subsystem_device: str | None = None
    numa_node: int | None = None
    iommu_group: int | None = None
    driver: str | None = None
    driver_override: str | None = None
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    sriov_drivers_autoprobe: bool | None = None
    sriov_vf_device: str | None = None
    physfn: str | None = None
    virtfns: tuple[str, ...] = ()
    mdev_supported_types: Mapping[str, MdevType] = dataclasses.field(default_factory=dict)
    nvidia_creatable_vgpu_types: str | None = None
    nvidia_current_vgpu_type: str | None = None

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    @property
    def sriov_capable(self) -> bool:
        return self.sriov_totalvfs is not None

    @property
    def class_code(self) -> int:
        return int(self.pci_class, 16)


def _plain_writer(real_path: str, value: str) -> None:
    with open(real_path, "w", encoding="ascii") as f:
        f.write(value)


def _privsep_writer(real_path: str, value: str) -> None:
    from acceld.hw import privileged  # lazy: importing privsep costs time

    privileged.sysfs_write(real_path, value)


class Sysfs:
    def __init__(self, root: str = "/", writer: Writer | None = None) -> None:
        self.root = os.path.abspath(root)
        self._real_root = os.path.realpath(self.root)
        if writer is None:
            writer = _privsep_writer if self.root == "/" else _plain_writer
        self._writer = writer

    # -- paths and plain reads ---------------------------------------------------------
    def path(self, host_path: str, *parts: str) -> str:
        joined = os.path.join(host_path, *parts)
        if not joined.startswith("/"):
            raise ValueError(f"host paths are absolute: {joined!r}")
        return os.path.join(self.root, joined.lstrip("/"))

    def host_path(self, real_path: str) -> str:
        """The inverse of :meth:`path` for a resolved real path."""
        rel = os.path.relpath(os.path.realpath(real_path), self._real_root)
        if rel.startswith(".."):
            raise ValueError(f"{real_path!r} is outside the sysfs root {self.root!r}")
        return "/" if rel == "." else "/" + rel

    def realpath(self, host_path: str, *parts: str) -> str:
        return self.host_path(os.path.realpath(self.path(host_path, *parts)))

    def exists(self, host_path: str, *parts: str) -> bool:
        return os.path.exists(self.path(host_path, *parts))

    def read(self, host_path: str, *parts: str) -> str | None:
        """The stripped content of a file; None when it is missing or unreadable."""
        try:
            with open(self.path(host_path, *parts), encoding="utf-8",
                      errors="replace") as f:
                return f.read().strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            return None
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.ENXIO, errno.EIO, errno.EINVAL):
                return None
            raise

    def read_int(self, host_path: str, *parts: str) -> int | None:
        """An integer attribute (decimal, or hex with ``0x``); None if missing or not one."""
        raw = self.read(host_path, *parts) or ""
        with contextlib.suppress(ValueError):
            return int(raw, 0) if raw.lower().startswith(("0x", "-0x")) else int(raw)
        return None

    def readlink(self, host_path: str, *parts: str) -> str | None:
        with contextlib.suppress(OSError):
            return os.readlink(self.path(host_path, *parts))
        return None

    def link_name(self, host_path: str, *parts: str) -> str | None:
        """The basename of a symlink's target (a device's ``driver`` -> ``vfio-pci``)."""
        target = self.readlink(host_path, *parts)
        return os.path.basename(target.rstrip("/")) if target else None

    def listdir(self, host_path: str, *parts: str) -> list[str]:
        """Sorted entries of a directory; empty when it does not exist."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            return sorted(os.listdir(self.path(host_path, *parts)))
        return []

    def is_dir(self, host_path: str, *parts: str) -> bool:
        return os.path.isdir(self.path(host_path, *parts))

    def write(self, host_path: str, value: str) -> None:
        """Write ``value`` to a sysfs attribute; raises OSError as the kernel would."""
        self._writer(self.path(host_path), value)

    # -- host facts ---------------------------------------------------------------------
    def iommu_enabled(self) -> bool:
        """True when the kernel created any IOMMU group (IOMMU on and in use)."""
        return bool(self.listdir(IOMMU_GROUPS))

    def driver_loaded(self, name: str) -> bool:
        return self.is_dir(PCI_DRIVERS, name)

    def module_loaded(self, name: str) -> bool:
        """True when a kernel module is present (``-`` and ``_`` are the same to the kernel)."""
        return self.is_dir(MODULES, name.replace("-", "_"))

    # -- PCI view -----------------------------------------------------------------------
    def pci_addresses(self) -> list[str]:
        return sorted(pci.normalize(e) for e in self.listdir(PCI_DEVICES) if pci.is_address(e))

    def pci_devices(self) -> list[PciDevice]:
        """A snapshot of every PCI function (devices that vanish mid-scan are left out)."""
        return [d for d in map(self.pci_device, self.pci_addresses()) if d is not None]

    def device_path(self, address: str, *parts: str) -> str:
        return os.path.join(PCI_DEVICES, pci.normalize(address), *parts)

    def attr(self, address: str, *parts: str) -> str | None:
        return self.read(self.device_path(address, *parts))

    def pci_device(self, address: str) -> PciDevice | None:
        """A snapshot of one PCI function, or None when it does not exist."""
        addr = pci.normalize(address)
        base = self.device_path(addr)
        vendor = pci.hex_id(self.read(base, "vendor"), 4)
        device = pci.hex_id(self.read(base, "device"), 4)
        if vendor is None or device is None:
            return None
        numa = self.read_int(base, "numa_node")
        group = self.link_name(base, "iommu_group")
        override = self.read(base, "driver_override")
        autoprobe = self.read_int(base, "sriov_drivers_autoprobe")
        physfn = self.link_name(base, "physfn")
        return PciDevice(
            address=addr, vendor=vendor, device=device,
            pci_class=pci.hex_id(self.read(base, "class"), 6) or "000000",
            subsystem_vendor=pci.hex_id(self.read(base, "subsystem_vendor"), 4),
            subsystem_device=pci.hex_id(self.read(base, "subsystem_device"), 4),
            numa_node=None if numa is None or numa < 0 else numa,
            iommu_group=int(group) if group and group.isdigit() else None,
            driver=self.link_name(base, "driver"),
            driver_override=None if override in (None, "", "(null)") else override,
            sriov_totalvfs=self.read_int(base, "sriov_totalvfs"),
            sriov_numvfs=self.read_int(base, "sriov_numvfs"),
            sriov_drivers_autoprobe=None if autoprobe is None else bool(autoprobe),
            sriov_vf_device=pci.hex_id(self.read(base, "sriov_vf_device"), 4),
            physfn=pci.normalize(physfn) if physfn and pci.is_address(physfn) else None,
            virtfns=tuple(self.virtfns(addr)),
            mdev_supported_types=self.mdev_types_at(base),
            nvidia_creatable_vgpu_types=self.read(base, "nvidia", "creatable_vgpu_types"),
            nvidia_current_vgpu_type=self.read(base, "nvidia", "current_vgpu_type"),
        )

    def virtfns(self, pf: str) -> list[str]:
        """The PF's VF addresses, ordered by VF index (virtfn0, virtfn1, ...)."""
        base = self.device_path(pf)
        found = [(int(m.group(1)), target) for entry in self.listdir(base)
                 if (m := _VIRTFN_RE.match(entry)) and (target := self.link_name(base, entry))
                 and pci.is_address(target)]
        return [pci.normalize(target) for _, target in sorted(found)]

    def driver_of(self, address: str) -> str | None:
        return self.link_name(self.device_path(address, "driver"))

    def aer_fatal_count(self, address: str) -> int | None:
        """The TOTAL_ERR_FATAL counter of ``aer_dev_fatal``; None when there is no AER."""
        for line in (self.attr(address, "aer_dev_fatal") or "").splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == "TOTAL_ERR_FATAL" and fields[1].isdigit():
                return int(fields[1])
        return None

    # -- mdev view ----------------------------------------------------------------------
    def mdev_types_at(self, parent_path: str) -> dict[str, MdevType]:
        types = os.path.join(parent_path, "mdev_supported_types")
        return {t: MdevType(type_id=t, name=self.read(types, t, "name"),
                            available_instances=self.read_int(types, t, "available_instances"),
                            device_api=self.read(types, t, "device_api"),
                            description=self.read(types, t, "description"))
                for t in self.listdir(types)}

    def mdev_types(self, parent: str) -> dict[str, MdevType]:
        return self.mdev_types_at(os.path.join(MDEV_BUS, _mdev_parent_name(parent)))

    def mdev_exists(self, uuid: str) -> bool:
        return self.exists(MDEV_DEVICES, uuid.lower())

    def mdev_type_of(self, uuid: str) -> str | None:
        return self.link_name(MDEV_DEVICES, uuid.lower(), "mdev_type")

    def mdev_parent_of(self, uuid: str) -> str | None:
        if not self.mdev_exists(uuid):
            return None
        return os.path.basename(os.path.dirname(self.realpath(MDEV_DEVICES, uuid.lower())))

    def mdev_devices(self, parent: str, type_id: str) -> list[str]:
        return self.listdir(MDEV_BUS, _mdev_parent_name(parent), "mdev_supported_types",
                            type_id, "devices")

    # -- operations ---------------------------------------------------------------------
    def set_numvfs(self, pf: str, count: int, *, autoprobe: bool | None = None) -> None:
        """Set a PF's VF count, through 0 (the kernel refuses N -> M); ``autoprobe`` first."""
        base = self.device_path(pf)
        current = self.read_int(base, "sriov_numvfs")
        if current is None:
            raise OSError(errno.ENOTSUP, f"{pci.normalize(pf)} is not SR-IOV capable")
        if autoprobe is not None:
            wanted = "1" if autoprobe else "0"
            if self.read(base, "sriov_drivers_autoprobe") != wanted:
                self.write(os.path.join(base, "sriov_drivers_autoprobe"), wanted)
        if current == count:
            return
        if current and count:
            self.write(os.path.join(base, "sriov_numvfs"), "0")
        self.write(os.path.join(base, "sriov_numvfs"), str(count))

    def unbind(self, address: str) -> None:
        addr = pci.normalize(address)
        driver = self.driver_of(addr)
        if driver is not None:
            self.write(os.path.join(PCI_DRIVERS, driver, "unbind"), addr)

    def set_driver_override(self, address: str, driver: str | None) -> None:
        """Set or clear (None) ``driver_override``; the kernel reads back ``(null)``."""
        self.write(self.device_path(address, "driver_override"), driver or "\n")

    def bind_driver(self, address: str, driver: str) -> None:
        """Bind a device to ``driver`` as driverctl does, keeping the override; idempotent."""
        addr = self._existing(address)
        current = self.driver_of(addr)
        override = self.read(self.device_path(addr, "driver_override"))
        if current == driver and override == driver:
            return
        self.set_driver_override(addr, driver)
        if current == driver:
            return
        self.unbind(addr)
        self.write(PCI_DRIVERS_PROBE, addr)
        bound = self.driver_of(addr)
        if bound != driver:
            raise BindError(f"{addr} is bound to {bound or 'no driver'} after probing "
                            f"for {driver}")

    def restore_driver(self, address: str, original: str | None) -> None:
        """Give a device back to ``original`` (None: unbound) and clear the override."""
        addr = self._existing(address)
        if original is None:
            self.unbind(addr)
        elif self.driver_of(addr) != original:
            self.bind_driver(addr, original)
        self._clear_override(addr)

    def reprobe(self, address: str) -> str | None:
        """Hand a device back to the kernel's driver matching; the driver it chose, or None."""
        addr = self._existing(address)
        self._clear_override(addr)
        self.unbind(addr)
        self.write(PCI_DRIVERS_PROBE, addr)
        return self.driver_of(addr)

    def _existing(self, address: str) -> str:
        addr = pci.normalize(address)
        if not self.exists(self.device_path(addr)):
            raise OSError(errno.ENODEV, f"PCI device {addr} does not exist")
        return addr

    def _clear_override(self, addr: str) -> None:
        if self.attr(addr, "driver_override") not in (None, "(null)", ""):
            self.set_driver_override(addr, None)

    def mdev_create(self, parent: str, type_id: str, uuid: str) -> bool:
        """Create an mdev; False when that UUID already existed (EEXIST counts as done)."""
        uuid = uuid.lower()
        if self.mdev_exists(uuid):
            return False
        path = os.path.join(MDEV_BUS, _mdev_parent_name(parent), "mdev_supported_types",
                            type_id, "create")
        try:
            self.write(path, uuid)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                return False
            raise
        return True

    def mdev_remove(self, uuid: str) -> bool:
        """Remove an mdev; False when it was already gone."""
        uuid = uuid.lower()
        if not self.mdev_exists(uuid):
            return False
        try:
            self.write(os.path.join(MDEV_DEVICES, uuid, "remove"), "1")
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return False
            raise
        return True

    def set_current_vgpu_type(self, vf: str, type_id: int) -> None:
        """Create (type id) or destroy (0) a VF's vGPU (NVIDIA's per-VF framework)."""
        self.write(self.device_path(vf, "nvidia", "current_vgpu_type"), str(int(type_id)))


def _mdev_parent_name(parent: str) -> str:
    """PCI parents are listed under their canonical address; others (mtty) by name."""
    return pci.normalize(parent) if pci.is_address(parent) else parent
