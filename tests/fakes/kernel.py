"""Fake sysfs trees with kernel semantics, for driver tests without hardware.

:class:`FakeSysfsBuilder` lays out a real-looking tree under a temp directory (the same
layout the kernel uses, so it is also a umockdev testbed)::

    sys/devices/pci0000:3b/0000:3b:00.0/{vendor,device,class,numa_node,uevent,...}
    sys/bus/pci/devices/0000:3b:00.0 -> ../../../devices/pci0000:3b/0000:3b:00.0
    <dev>/driver -> ../../../bus/pci/drivers/<drv>, and drivers/<drv>/<bdf> -> the device
    <dev>/iommu_group -> ../../../kernel/iommu_groups/N, and groups/N/devices/<bdf> -> device
    <dev>/mdev_supported_types/<type>/{name,available_instances,device_api,description,
        create,devices/}, and sys/class/mdev_bus/<bdf> -> the device
    sys/module/<name>/, sys/bus/pci/drivers_probe

:class:`FakeKernel` is a :class:`acceld.hw.sysfs.Sysfs` whose ``write()`` does what the
kernel does (checked against a real 6.1 kernel with ``tests/contract/kernel_contract.py``):

* ``sriov_numvfs``: EINVAL for a non-number, ERANGE above ``sriov_totalvfs``, ENOENT
  when no PF driver is bound, EBUSY for N -> M with both non-zero and when shrinking to 0
  while a VF is in use (:meth:`FakeKernel.mark_in_use`). Creating VFs adds devices at
  PF routing id + offset + stride * n with ``physfn``/``virtfnN`` links, a fresh IOMMU
  group each (when the PF has one), the VF device id (``vf_device`` or the
  ``vf_device_ids`` map, e.g. 4940 -> 4941), and binds them to the PF's VF driver unless
  ``sriov_drivers_autoprobe`` is 0.
* ``drivers/<drv>/unbind`` (ENODEV when not bound to it), ``drivers/<drv>/bind``
  (ENODEV unless the override or the native driver is that driver, then EBUSY when
  bound), ``driver_override`` (``"\n"`` clears it: reads ``(null)``; a zero-length write
  changes nothing) and
  ``drivers_probe`` (binds to the override, or to the device's native driver, only if
  that driver is registered; otherwise the device stays unbound, as in the kernel).
* mdev ``create`` (EINVAL for a bad UUID, EEXIST for a duplicate, ENOSPC when
  ``available_instances`` is 0; decrements it) and ``<uuid>/remove`` (restores it).
* NVIDIA per-VF ``nvidia/current_vgpu_type`` (EINVAL for a type not creatable, EBUSY
  when one is already set, 0 destroys), QAT ``qat/state`` and ``qat/cfg_services``.
* EACCES for read-only attributes, ENOENT for missing files.

Every write is recorded in ``FakeKernel.writes`` as ``(host_path, value)``.

Typical use::

    b = FakeSysfsBuilder(tmp_path).driver("vfio-pci").driver("qat_4xxx")
    pf = b.pci("0000:3b:00.0", "8086", "4940", "0x0b4000", numa=1, driver="qat_4xxx",
               totalvfs=16, vf_driver="4xxxvf")
    kernel = b.kernel()
    kernel.set_numvfs(pf, 4, autoprobe=False)
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import shutil
import uuid as uuidlib
from pathlib import Path

from acceld.hw import pci
from acceld.hw.sysfs import Sysfs

_READ_ONLY = frozenset({
    "vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision",
    "sriov_totalvfs", "sriov_vf_device", "sriov_offset", "sriov_stride", "local_cpulist",
    "name", "available_instances", "device_api", "description", "creatable_vgpu_types",
    "aer_dev_fatal", "aer_dev_nonfatal", "aer_dev_correctable", "uevent", "config",
})
_VGPU_LINE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*$")


def vf_address(pf: pci.PciAddress, offset: int) -> pci.PciAddress:
    """Where the kernel places the VF ``offset`` routing ids after its PF: the 16-bit
    requester id (bus, device, function) plus the offset, carried across devices."""
    rid = ((pf.bus << 8) | (pf.device << 3) | pf.function) + offset
    return pci.PciAddress(pf.domain, (rid >> 8) & 0xFF, (rid >> 3) & 0x1F, rid & 0x7)


@dataclasses.dataclass
class _PfConfig:
    vf_device: str
    vf_driver: str | None
    offset: int
    stride: int
    vf_mdev_types: dict[str, tuple[str, int]] | None
    vf_nvidia_vgpu_types: str | None


def _oserror(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


def _hex(value: str | int, width: int) -> str:
    number = value if isinstance(value, int) else int(str(value), 16)
    return f"0x{number:0{width}x}"


def format_vgpu_types(types: dict[int, str]) -> str:
    """The table NVIDIA's ``creatable_vgpu_types`` shows (``ID : vGPU Name`` lines)."""
    lines = ["ID    : vGPU Name"]
    lines += [f"{tid:<6}: {name}" for tid, name in sorted(types.items())]
    return "\n".join(lines) + "\n"


def parse_vgpu_types(text: str | None) -> dict[int, str]:
    """Type id -> name from a ``creatable_vgpu_types`` table (header line skipped)."""
    out: dict[int, str] = {}
    for line in (text or "").splitlines():
        m = _VGPU_LINE.match(line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


class FakeSysfsBuilder:
    """Builds a sysfs tree under ``root``; methods return self or the new device address.

    ``iommu``: give every device its own IOMMU group unless told otherwise (False: no
    groups at all, as on a host with the IOMMU off). ``vf_device_ids``: PF device id ->
    VF device id, used when a PF has no explicit ``vf_device``.
    """

    def __init__(self, root: str | os.PathLike[str], *, iommu: bool = True,
                 vf_device_ids: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.sys = self.root / "sys"
        self.iommu = iommu
        self.vf_device_ids = {k.lower(): v.lower() for k, v in (vf_device_ids or {}).items()}
        self.native: dict[str, str | None] = {}
        self.pf_config: dict[str, _PfConfig] = {}
        for d in ("bus/pci/devices", "bus/pci/drivers", "bus/mdev/devices", "kernel/iommu_groups",
                  "class/mdev_bus", "module", "devices"):
            (self.sys / d).mkdir(parents=True, exist_ok=True)
        for f in ("bus/pci/drivers_probe", "bus/pci/rescan", "bus/pci/drivers_autoprobe"):
            p = self.sys / f
            if not p.exists():
                p.write_text("1\n" if f.endswith("autoprobe") else "")

    # -- small helpers ---------------------------------------------------------------
    @staticmethod
    def _link(link: Path, target: Path) -> None:
        """A relative symlink like the kernel's (``../../../bus/pci/drivers/x``)."""
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(target, link.parent))

    def device_dir(self, address: str) -> Path:
        """The real directory of a PCI device (behind ``bus/pci/devices/<bdf>``)."""
        addr = pci.normalize(address)
        link = self.sys / "bus/pci/devices" / addr
        if link.is_symlink():
            return Path(os.path.realpath(link))
        a = pci.parse(addr)
        return self.sys / "devices" / f"pci{a.domain:04x}:{a.bus:02x}" / addr

    def next_iommu_group(self) -> int:
        groups = [int(g) for g in os.listdir(self.sys / "kernel/iommu_groups") if g.isdigit()]
        return max(groups, default=-1) + 1

    def _join_group(self, devdir: Path, group: int) -> None:
        gdir = self.sys / "kernel/iommu_groups" / str(group)
        (gdir / "devices").mkdir(parents=True, exist_ok=True)
        if not (gdir / "type").exists():
            (gdir / "type").write_text("DMA\n")
        self._link(gdir / "devices" / devdir.name, devdir)
        self._link(devdir / "iommu_group", gdir)

    def _write_uevent(self, devdir: Path) -> None:
        def rd(name: str) -> str:
            return (devdir / name).read_text().strip()

        driver = os.path.basename(os.readlink(devdir / "driver")) \
            if (devdir / "driver").is_symlink() else None
        vendor, device = rd("vendor")[2:].upper(), rd("device")[2:].upper()
        sv, sd = rd("subsystem_vendor")[2:].upper(), rd("subsystem_device")[2:].upper()
        lines = ([f"DRIVER={driver}"] if driver else []) + [
            f"PCI_CLASS={rd('class')[2:].upper()}", f"PCI_ID={vendor}:{device}",
            f"PCI_SUBSYS_ID={sv}:{sd}", f"PCI_SLOT_NAME={devdir.name}",
            f"MODALIAS=pci:v0000{vendor}d0000{device}sv0000{sv}sd0000{sd}"]
        (devdir / "uevent").write_text("\n".join(lines) + "\n")

    # -- building ------------------------------------------------------------------------
    def module(self, name: str) -> FakeSysfsBuilder:
        """A loaded kernel module (``/sys/module/<name>``)."""
        (self.sys / "module" / name.replace("-", "_")).mkdir(parents=True, exist_ok=True)
        return self

    def driver(self, name: str, module: str | None = None) -> FakeSysfsBuilder:
        """A registered PCI driver (and its module): ``bus/pci/drivers/<name>``."""
        ddir = self.sys / "bus/pci/drivers" / name
        ddir.mkdir(parents=True, exist_ok=True)
        for f in ("bind", "unbind", "new_id", "remove_id", "uevent"):
            if not (ddir / f).exists():
                (ddir / f).write_text("")
        mod = (module or name).replace("-", "_")
        self.module(mod)
        self._link(ddir / "module", self.sys / "module" / mod)
        return self

    def remove_driver(self, name: str) -> FakeSysfsBuilder:
        """Unload a driver (devices bound to it become unbound)."""
        ddir = self.sys / "bus/pci/drivers" / name
        for entry in os.listdir(ddir) if ddir.is_dir() else []:
            if pci.is_address(entry):
                self.unbind(entry)
        shutil.rmtree(ddir, ignore_errors=True)
        return self

    def pci(self, address: str, vendor: str, device: str, pci_class: str = "0x000000", *,
            numa: int = -1, driver: str | None = None, native_driver: str | None = None,
            iommu_group: int | None = None, subsystem_vendor: str | None = None,
            subsystem_device: str | None = None, totalvfs: int | None = None,
            vf_device: str | None = None, vf_driver: str | None = None,
            sriov_offset: int = 1, sriov_stride: int = 1, autoprobe: bool = True,
            mdev_types: dict[str, tuple[str, int]] | None = None,
            vf_mdev_types: dict[str, tuple[str, int]] | None = None,
            nvidia_vgpu_types: dict[int, str] | str | None = None,
            vf_nvidia_vgpu_types: dict[int, str] | str | None = None,
            aer_fatal: int | None = None,
            attrs: dict[str, str] | None = None) -> str:
        """Add a PCI function; returns its canonical address.

        ``driver`` is bound now (registered first if needed); ``native_driver`` is what
        ``drivers_probe`` picks without an override (defaults to ``driver``).
        ``totalvfs`` makes it an SR-IOV PF whose VFs get ``vf_device`` and bind to
        ``vf_driver``. ``mdev_types`` maps type id -> (name, available instances).
        ``nvidia_vgpu_types`` adds the ``nvidia/`` directory of NVIDIA's vendor VFIO
        framework (type id -> name, or the raw table). ``attrs`` are extra files, e.g.
        ``{"qat/state": "up", "qat/cfg_services": "sym;asym"}``.
        """
        addr = pci.normalize(address)
        devdir = self.device_dir(addr)
        devdir.mkdir(parents=True, exist_ok=True)
        sv = subsystem_vendor or vendor
        sd = subsystem_device or "0000"
        files = {"vendor": _hex(vendor, 4), "device": _hex(device, 4),
                 "class": _hex(pci_class.removeprefix("0x"), 6),
                 "subsystem_vendor": _hex(sv, 4), "subsystem_device": _hex(sd, 4),
                 "numa_node": str(numa), "driver_override": "(null)", "enable": "1",
                 "local_cpulist": "0-1", "revision": "0x00", "remove": "", "rescan": "",
                 "reset": ""}
        for name, value in files.items():
            (devdir / name).write_text(value + "\n")
        header = bytes.fromhex(f"{int(vendor, 16):04x}")[::-1] + \
            bytes.fromhex(f"{int(device, 16):04x}")[::-1]
        (devdir / "config").write_bytes(header + bytes(60))
        self._link(self.sys / "bus/pci/devices" / addr, devdir)
        self._link(devdir / "subsystem", self.sys / "bus/pci")
        if aer_fatal is not None:
            self.set_aer_fatal(addr, aer_fatal)
        if iommu_group is not None:
            self._join_group(devdir, iommu_group)
        elif self.iommu:
            self._join_group(devdir, self.next_iommu_group())
        if totalvfs is not None:
            vfdev = (vf_device or self.vf_device_ids.get(device.lower().removeprefix("0x"))
                     or device).lower().removeprefix("0x")
            sriov = {"sriov_totalvfs": str(totalvfs), "sriov_numvfs": "0",
                     "sriov_drivers_autoprobe": "1" if autoprobe else "0",
                     "sriov_vf_device": f"{int(vfdev, 16):04x}",
                     "sriov_offset": str(sriov_offset), "sriov_stride": str(sriov_stride),
                     "sriov_vf_total_msix": "0"}
            for name, value in sriov.items():
                (devdir / name).write_text(value + "\n")
            self.pf_config[addr] = _PfConfig(
                vf_device=vfdev, vf_driver=vf_driver, offset=sriov_offset, stride=sriov_stride,
                vf_mdev_types=vf_mdev_types,
                vf_nvidia_vgpu_types=_vgpu_text(vf_nvidia_vgpu_types))
        for type_id, (name, available) in (mdev_types or {}).items():
            self.mdev_type(addr, type_id, name, available)
        if nvidia_vgpu_types is not None:
            self._nvidia_dir(devdir, _vgpu_text(nvidia_vgpu_types) or "")
        for rel, value in (attrs or {}).items():
            (devdir / rel).parent.mkdir(parents=True, exist_ok=True)
            (devdir / rel).write_text(value if value.endswith("\n") else value + "\n")
        self.native[addr] = native_driver or driver
        if driver is not None:
            self.bind(addr, driver)
        else:
            self._write_uevent(devdir)
        return addr

    def _nvidia_dir(self, devdir: Path, creatable: str) -> None:
        ndir = devdir / "nvidia"
        ndir.mkdir(exist_ok=True)
        (ndir / "creatable_vgpu_types").write_text(creatable)
        (ndir / "current_vgpu_type").write_text("0\n")

    def mdev_type(self, parent: str, type_id: str, name: str, available: int, *,
                  device_api: str = "vfio-pci", description: str | None = "") -> FakeSysfsBuilder:
        """Add an mdev type to a PCI parent (and list the parent in class/mdev_bus)."""
        devdir = self.device_dir(parent)
        self._mdev_type_at(devdir, type_id, name, available, device_api, description)
        self._link(self.sys / "class/mdev_bus" / devdir.name, devdir)
        return self

    def virtual_mdev_parent(self, name: str, types: dict[str, tuple[str, int]]) -> str:
        """A non-PCI mdev parent like the ``mtty`` sample (``devices/virtual/<n>/<n>``)."""
        devdir = self.sys / "devices/virtual" / name / name
        devdir.mkdir(parents=True, exist_ok=True)
        for type_id, (tname, available) in types.items():
            self._mdev_type_at(devdir, type_id, tname, available, "vfio-pci", None)
        self._link(self.sys / "class/mdev_bus" / name, devdir)
        return name

    @staticmethod
    def _mdev_type_at(devdir: Path, type_id: str, name: str, available: int,
                      device_api: str, description: str | None) -> None:
        tdir = devdir / "mdev_supported_types" / type_id
        (tdir / "devices").mkdir(parents=True, exist_ok=True)
        (tdir / "name").write_text(name + "\n")
        (tdir / "available_instances").write_text(f"{available}\n")
        (tdir / "device_api").write_text(device_api + "\n")
        (tdir / "create").write_text("")
        if description is not None:
            (tdir / "description").write_text(description + "\n")

    def set_aer_fatal(self, address: str, total: int) -> FakeSysfsBuilder:
        """Write an ``aer_dev_fatal`` counter file with TOTAL_ERR_FATAL = ``total``."""
        devdir = self.device_dir(address)
        lines = ["Undefined 0", "DLP 0", "SDES 0", "TLP 0", "FCP 0", "CmpltTO 0",
                 "CmpltAbrt 0", "UnxCmplt 0", "RxOF 0", "MalfTLP 0", "ECRC 0", "UnsupReq 0",
                 "ACSViol 0", f"TOTAL_ERR_FATAL {total}"]
        (devdir / "aer_dev_fatal").write_text("\n".join(lines) + "\n")
        return self

    # -- state changes shared with FakeKernel --------------------------------------------
    def bind(self, address: str, driver: str) -> None:
        """Link a device and a driver both ways (registering the driver when needed)."""
        addr = pci.normalize(address)
        ddir = self.sys / "bus/pci/drivers" / driver
        if not ddir.is_dir():
            self.driver(driver)
        devdir = self.device_dir(addr)
        self._link(devdir / "driver", ddir)
        self._link(ddir / addr, devdir)
        self._write_uevent(devdir)

    def unbind(self, address: str) -> None:
        addr = pci.normalize(address)
        devdir = self.device_dir(addr)
        link = devdir / "driver"
        if link.is_symlink():
            ddir = Path(os.path.realpath(link))
            link.unlink()
            if (ddir / addr).is_symlink():
                (ddir / addr).unlink()
        self._write_uevent(devdir)

    def remove_pci(self, address: str) -> None:
        """The device disappears (hot unplug, fell off the bus): links, groups, files."""
        addr = pci.normalize(address)
        devdir = self.device_dir(addr)
        if not devdir.exists():
            return
        self.unbind(addr)
        if (devdir / "iommu_group").is_symlink():
            gdir = Path(os.path.realpath(devdir / "iommu_group"))
            (gdir / "devices" / addr).unlink(missing_ok=True)
            if not os.listdir(gdir / "devices"):
                shutil.rmtree(gdir)
        for link in (self.sys / "bus/pci/devices" / addr, self.sys / "class/mdev_bus" / addr):
            if link.is_symlink():
                link.unlink()
        shutil.rmtree(devdir)
        self.native.pop(addr, None)
        self.pf_config.pop(addr, None)

    def kernel(self) -> FakeKernel:
        """A FakeKernel over this tree."""
        return FakeKernel(self)


def _ulong(value: str, host_path: str) -> int:
    """kstrtoul as ``remove`` attributes parse their value (EINVAL when not a number)."""
    try:
        number = int(value.strip(), 0)
    except ValueError:
        raise _oserror(errno.EINVAL, host_path) from None
    if number < 0:
        raise _oserror(errno.EINVAL, host_path)
    return number


def _vgpu_text(types: dict[int, str] | str | None) -> str | None:
    if types is None or isinstance(types, str):
        return types
    return format_vgpu_types(types)


class FakeKernel(Sysfs):
    """A Sysfs whose writes have the kernel's effects and errors (see the module doc)."""

    def __init__(self, builder: FakeSysfsBuilder | str | os.PathLike[str]) -> None:
        if not isinstance(builder, FakeSysfsBuilder):
            builder = FakeSysfsBuilder(builder)
        super().__init__(str(builder.root), writer=self._no_writer)
        self.builder = builder
        self.writes: list[tuple[str, str]] = []
        self.in_use: set[str] = set()

    @staticmethod
    def _no_writer(real_path: str, value: str) -> None:  # pragma: no cover - never used
        raise AssertionError("FakeKernel.write handles every write")

    def mark_in_use(self, address: str, in_use: bool = True) -> None:
        """A VF opened by a guest: shrinking its PF's VFs fails with EBUSY."""
        addr = pci.normalize(address)
        (self.in_use.add if in_use else self.in_use.discard)(addr)

    def writes_to(self, suffix: str) -> list[tuple[str, str]]:
        """The recorded writes whose path ends with ``suffix``."""
        return [w for w in self.writes if w[0].endswith(suffix)]

    # -- the write dispatcher ------------------------------------------------------------
    def write(self, host_path: str, value: str) -> None:
        self.writes.append((host_path, value))
        real = self.path(host_path)
        if not os.path.lexists(real):
            raise _oserror(errno.ENOENT, host_path)
        if os.path.isdir(real):
            raise _oserror(errno.EISDIR, host_path)
        hp = self.host_path(real)
        name, parent = os.path.basename(hp), os.path.dirname(hp)
        drv = re.match(r"^/sys/bus/pci/drivers/([^/]+)/(bind|unbind|new_id|remove_id)$", hp)
        if hp == "/sys/bus/pci/drivers_probe":
            self._probe(value, host_path)
        elif drv:
            self._driver_file(drv.group(1), drv.group(2), value, host_path)
        elif name == "sriov_numvfs":
            self._set_numvfs(parent, value, host_path)
        elif name == "sriov_drivers_autoprobe":
            self._set_bool(real, value, host_path)
        elif name == "driver_override":
            # A zero-length write never reaches the kernel's store (no-op); otherwise the
            # value is cut at the first newline and an empty result clears the override.
            if value:
                override = value.split("\n", 1)[0]
                Path(real).write_text((override or "(null)") + "\n")
        elif name == "create" and os.path.basename(os.path.dirname(parent)) \
                == "mdev_supported_types":
            self._mdev_create(parent, value, host_path)
        elif name == "remove" and os.path.islink(self.path(parent, "mdev_type")):
            if _ulong(value, host_path):
                self._mdev_remove(parent)
        elif name == "remove" and os.path.exists(self.path(parent, "vendor")):
            if _ulong(value, host_path):
                self.builder.remove_pci(os.path.basename(parent))
        elif name == "current_vgpu_type" and os.path.basename(parent) == "nvidia":
            self._set_vgpu(parent, value, host_path)
        elif os.path.basename(parent) == "qat" and name in ("state", "cfg_services"):
            self._qat(parent, name, value, host_path)
        elif name in _READ_ONLY:
            raise _oserror(errno.EACCES, host_path)
        else:
            Path(real).write_text(value)

    # -- handlers ------------------------------------------------------------------------
    def _device_exists(self, addr: str) -> bool:
        return os.path.exists(self.path("/sys/bus/pci/devices", addr, "vendor"))

    def _probe(self, value: str, host_path: str) -> None:
        try:
            addr = pci.normalize(value.strip())
        except ValueError:
            raise _oserror(errno.EINVAL, host_path) from None
        if not self._device_exists(addr):
            raise _oserror(errno.ENODEV, host_path)
        if self.driver_of(addr) is not None:
            return
        override = self.read(self.device_path(addr, "driver_override"))
        target = override if override not in (None, "(null)") else self.builder.native.get(addr)
        if target and self.driver_loaded(target):
            self.builder.bind(addr, target)

    def _driver_file(self, driver: str, op: str, value: str, host_path: str) -> None:
        if op in ("new_id", "remove_id"):
            return  # dynamic ids are not modelled; accepted as the kernel would
        try:
            addr = pci.normalize(value.strip())
        except ValueError:
            raise _oserror(errno.ENODEV, host_path) from None
        if not self._device_exists(addr):
            raise _oserror(errno.ENODEV, host_path)
        current = self.driver_of(addr)
        if op == "unbind":
            if current != driver:
                raise _oserror(errno.ENODEV, host_path)
            self.builder.unbind(addr)
            return
        # bind_store: the driver must match first (ENODEV), then attach (EBUSY if bound)
        override = self.read(self.device_path(addr, "driver_override"))
        allowed = override if override not in (None, "(null)") else self.builder.native.get(addr)
        if allowed != driver:
            raise _oserror(errno.ENODEV, host_path)
        if current is not None:
            raise _oserror(errno.EBUSY, host_path)
        self.builder.bind(addr, driver)

    @staticmethod
    def _set_bool(real: str, value: str, host_path: str) -> None:
        """kstrtobool: 1/y/on and 0/n/off (first letters count); reads back 1 or 0."""
        text = value.strip().lower()
        if text[:1] in ("1", "y") or text == "on":
            flag = "1"
        elif text[:1] in ("0", "n") or text == "off":
            flag = "0"
        else:
            raise _oserror(errno.EINVAL, host_path)
        Path(real).write_text(flag + "\n")

    def _set_numvfs(self, devpath: str, value: str, host_path: str) -> None:
        try:
            wanted = int(value.strip(), 0)
        except ValueError:
            raise _oserror(errno.EINVAL, host_path) from None
        if wanted < 0 or wanted > 0xFFFF:
            raise _oserror(errno.EINVAL, host_path)
        total = self.read_int(devpath, "sriov_totalvfs") or 0
        if wanted > total:
            raise _oserror(errno.ERANGE, host_path)
        pf = os.path.basename(devpath)
        current = self.read_int(devpath, "sriov_numvfs") or 0
        if wanted == current:
            return
        if self.driver_of(pf) is None:
            raise _oserror(errno.ENOENT, host_path)
        if wanted == 0:
            vfs = self.virtfns(pf)
            if any(vf in self.in_use for vf in vfs):
                raise _oserror(errno.EBUSY, host_path)
            for vf in vfs:
                self.builder.remove_pci(vf)
            for entry in self.listdir(devpath):
                if entry.startswith("virtfn"):
                    os.unlink(self.path(devpath, entry))
        elif current:
            raise _oserror(errno.EBUSY, host_path)
        else:
            self._create_vfs(pf, devpath, wanted)
        Path(self.path(devpath, "sriov_numvfs")).write_text(f"{wanted}\n")

    def _create_vfs(self, pf: str, devpath: str, count: int) -> None:
        cfg = self.builder.pf_config.get(pf)
        if cfg is None:  # a tree made by hand: derive what the kernel would
            cfg = _PfConfig(vf_device=self.read(devpath, "sriov_vf_device") or "0000",
                            vf_driver=None, offset=self.read_int(devpath, "sriov_offset") or 1,
                            stride=self.read_int(devpath, "sriov_stride") or 1,
                            vf_mdev_types=None, vf_nvidia_vgpu_types=None)
        info = self.pci_device(pf)
        assert info is not None
        autoprobe = self.read(devpath, "sriov_drivers_autoprobe") != "0"
        base = pci.parse(pf)
        addresses = [str(vf_address(base, cfg.offset + cfg.stride * index))
                     for index in range(count)]
        if any(self._device_exists(vf) for vf in addresses):
            # the kernel's device_add of a VF whose name is taken fails the same way
            raise _oserror(errno.EEXIST, self.device_path(pf, "sriov_numvfs"))
        for index, vf in enumerate(addresses):
            self.builder.pci(
                vf, info.vendor, cfg.vf_device, info.pci_class, numa=info.numa_node
                if info.numa_node is not None else -1,
                native_driver=cfg.vf_driver, subsystem_vendor=info.subsystem_vendor,
                subsystem_device=info.subsystem_device,
                iommu_group=self.builder.next_iommu_group() if info.iommu_group is not None
                else None,
                mdev_types=cfg.vf_mdev_types, nvidia_vgpu_types=cfg.vf_nvidia_vgpu_types)
            vfdir = self.builder.device_dir(vf)
            pfdir = self.builder.device_dir(pf)
            self.builder._link(vfdir / "physfn", pfdir)
            self.builder._link(pfdir / f"virtfn{index}", vfdir)
            if autoprobe and cfg.vf_driver and self.driver_loaded(cfg.vf_driver):
                self.builder.bind(vf, cfg.vf_driver)

    def _mdev_create(self, typepath: str, value: str, host_path: str) -> None:
        try:
            uid = str(uuidlib.UUID(value.strip()))
        except ValueError:
            raise _oserror(errno.EINVAL, host_path) from None
        if self.mdev_exists(uid):
            raise _oserror(errno.EEXIST, host_path)
        available = self.read_int(typepath, "available_instances") or 0
        if available <= 0:
            raise _oserror(errno.ENOSPC, host_path)
        b = self.builder
        typedir = Path(self.path(typepath))
        parentdir = typedir.parent.parent
        mdir = parentdir / uid
        mdir.mkdir()
        (mdir / "remove").write_text("")
        (mdir / "uevent").write_text(f"MDEV_TYPE={typedir.name}\n")
        b._link(mdir / "mdev_type", typedir)
        b._link(mdir / "subsystem", b.sys / "bus/mdev")
        b._link(b.sys / "bus/mdev/devices" / uid, mdir)
        b._link(typedir / "devices" / uid, mdir)
        if self.iommu_enabled() or b.iommu:
            b._join_group(mdir, b.next_iommu_group())
        (typedir / "available_instances").write_text(f"{available - 1}\n")

    def _mdev_remove(self, mdevpath: str) -> None:
        b = self.builder
        mdir = Path(self.path(mdevpath))
        typedir = Path(os.path.realpath(mdir / "mdev_type"))
        uid = mdir.name
        if (mdir / "iommu_group").is_symlink():
            gdir = Path(os.path.realpath(mdir / "iommu_group"))
            shutil.rmtree(gdir, ignore_errors=True)
        for link in (b.sys / "bus/mdev/devices" / uid, typedir / "devices" / uid):
            if link.is_symlink():
                link.unlink()
        shutil.rmtree(mdir)
        available = int((typedir / "available_instances").read_text().strip())
        (typedir / "available_instances").write_text(f"{available + 1}\n")

    def _set_vgpu(self, nvpath: str, value: str, host_path: str) -> None:
        try:
            wanted = int(value.strip())
        except ValueError:
            raise _oserror(errno.EINVAL, host_path) from None
        current = self.read_int(nvpath, "current_vgpu_type") or 0
        if wanted != 0:
            if current != 0:
                raise _oserror(errno.EBUSY, host_path)
            if wanted not in parse_vgpu_types(self.read(nvpath, "creatable_vgpu_types")):
                raise _oserror(errno.EINVAL, host_path)
        Path(self.path(nvpath, "current_vgpu_type")).write_text(f"{wanted}\n")

    def _qat(self, qatpath: str, name: str, value: str, host_path: str) -> None:
        state = self.read(qatpath, "state")
        wanted = value.strip()
        if name == "state":
            if wanted not in ("up", "down") or wanted == state:
                raise _oserror(errno.EINVAL, host_path)
        elif state == "up":
            raise _oserror(errno.EBUSY, host_path)
        Path(self.path(qatpath, name)).write_text(wanted + "\n")
