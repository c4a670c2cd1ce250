"""The NVIDIA GPU driver: whole GPUs, MIG instances and vGPUs (both sysfs layouts).

NVML inventory joined with sysfs by PCI address; each GPU is one device with one kind of
deployable, the first that applies: vGPU (an enabled type the GPU can create), MIG (mode
on), else the whole GPU. The handle shapes and what Nova expects of them are in
``docs/drivers/nvidia.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import logging
import re
import uuid as uuidlib
from typing import Any

from oslo_config import cfg, types

from acceld import reports
from acceld.agent.drivers import base
from acceld.agent.drivers.base import BaseDriver, Check, DriverError, Health, Skipped
from acceld.hw import nvml as nvmlmod
from acceld.hw import pci
from acceld.hw.runner import RC_NOT_FOUND
from acceld.hw.sysfs import PciDevice

# XIDs NVIDIA documents as caused by the application (illegal address, MMU fault from a
# user kernel, ECC page retirement notices, ...), not by the GPU; the Kubernetes device
# plugin ignores the same set by default.
_APPLICATION_XIDS = [13, 31, 43, 45, 68, 109]

OPTS: list[cfg.Opt] = [
    cfg.ListOpt("address", default=[],
                help="PCI address globs of the GPUs this driver manages, e.g. "
                     "'0000:3b:00.0, 0000:86:*.*' or '3b:00.*'. Empty means every NVIDIA "
                     "GPU that NVML sees. Excluded GPUs are listed, with the reason, by "
                     "`driver-list --long`."),
    cfg.ListOpt("vgpu_types", default=[],
                help="vGPU types to offer, by NVIDIA type id: 'nvidia-471' (the mdev "
                     "directory name) or '471' (the id in nvidia/creatable_vgpu_types); "
                     "both spellings mean the same type. A GPU that can create an enabled "
                     "type is reported as VGPU inventory (one deployable per type) instead "
                     "of a whole GPU. Empty: no vGPUs."),
    cfg.IntOpt("expected_devices", min=0,
               help="How many GPUs this host should have. Only used to explain discovery "
                    "(expected versus found); unset means unknown."),
    cfg.StrOpt("min_driver_version",
               help="Lowest NVIDIA driver version (e.g. '535.104') this host should run. "
                    "An older driver is flagged in the explanation; nothing is refused."),
    cfg.StrOpt("ecc_uncorrected_status", default="failed",
               choices=[("failed", "the GPU is failed and taken out of scheduling"),
                        ("degraded", "the GPU stays schedulable but is flagged")],
               help="Health of a GPU with uncorrected (double-bit) ECC errors since the "
                    "driver was loaded (the volatile counter)."),
    cfg.ListOpt("ignored_xids", item_type=types.Integer(min=0),
                default=list(_APPLICATION_XIDS),
                help="XID error codes that do not affect a GPU's health because the "
                     "application, not the GPU, caused them. Every other critical XID "
                     "marks the GPU failed."),
    cfg.IntOpt("xid_hold_seconds", default=3600, min=0,
               help="How long a GPU stays failed after a critical XID or double-bit ECC "
                    "event (0: until the agent restarts)."),
    cfg.IntOpt("event_wait_ms", default=100, min=0, max=5000,
               help="How long one health check waits for the first NVML event (XID, ECC). "
                    "Events queue in NVML between checks, so 0 also loses none."),
]


LOG = logging.getLogger(__name__)

VENDOR = "10de"
_DISPLAY_CLASS = 0x03            # PCI base class of VGA/3D controllers
_GIB = 1024 ** 3
# Namespace of the mdev UUIDs this driver derives (fixed forever: changing it would
# orphan every mdev created before).
_MDEV_NAMESPACE = uuidlib.UUID("5b0e3a52-8f0c-4c55-9d51-64a3f7f0c2d1")
_VGPU_LINE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*$")
_MDEVCTL_TIMEOUT = 30.0
_TYPE_ID = re.compile(r"^(?:nvidia-)?(\d+)$")
_VGPU_HINTS = {errno.ENOSPC: "no free vGPU instance", errno.EBUSY: "in use",
               errno.EINVAL: "type not creatable now"}


@dataclasses.dataclass(frozen=True)
class _Known:
    """What the last discovery learnt, for health, stats, prepare and release."""

    gpus: dict[str, nvmlmod.GpuInfo] = dataclasses.field(default_factory=dict)
    migs: dict[str, list[nvmlmod.MigInfo]] = dataclasses.field(default_factory=dict)
    pending: dict[str, nvmlmod.GpuInfo] = dataclasses.field(default_factory=dict)
    vanished: dict[str, reports.Device] = dataclasses.field(default_factory=dict)
    devices: dict[str, reports.Device] = dataclasses.field(default_factory=dict)


def parse_vgpu_types(text: str | None) -> dict[int, str]:
    """Type id -> name from NVIDIA's ``creatable_vgpu_types`` table (``ID : Name``)."""
    return {int(m.group(1)): m.group(2) for line in (text or "").splitlines()
            if (m := _VGPU_LINE.match(line))}


def vgpu_type_id(spec: str) -> int | None:
    """``"nvidia-471"`` or ``"471"`` -> 471; None for anything else."""
    m = _TYPE_ID.match(spec.strip().lower())
    return int(m.group(1)) if m else None


def mig_resource_class(profile_name: str, profile_id: int) -> str:
    """``1g.10gb`` -> ``CUSTOM_NVIDIA_MIG_1G_10GB``; unnamed profiles by id (-1: unknown)."""
    if not profile_name:
        return (f"CUSTOM_NVIDIA_MIG_PROFILE_{profile_id}" if profile_id >= 0
                else "CUSTOM_NVIDIA_MIG_UNKNOWN")
    return "CUSTOM_NVIDIA_MIG_" + re.sub(r"[^A-Z0-9]+", "_", profile_name.upper()).strip("_")


class NvidiaDriver(BaseDriver):
    name = "nvidia_gpu"
    version = "1.0.0"
    conf_group = "nvidia_driver"
    conf_opts = OPTS

    def __init__(self, ctx: base.DriverContext) -> None:
        super().__init__(ctx)
        self._nvml: Any = ctx.nvml if ctx.nvml is not None else nvmlmod.NvmlBackend()
        self._known = _Known()
        self._events: dict[str, tuple[float, str]] = {}   # identity -> (when, reason)

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> list[reports.Device]:
        checks = self._host_checks()
        skipped: list[Skipped] = []
        known = _Known()
        if not self._nvml.start():
            checks.insert(0, Check("nvml", False, self._nvml.reason or "NVML unavailable"))
            skipped += self._unmanaged(set(), "NVML is unavailable")
        else:
            version, cuda = self._nvml.driver_version(), self._nvml.cuda_driver_version()
            checks.insert(0, Check("nvml", True, f"driver {version or 'unknown'}"
                                   + (f", CUDA {cuda}" if cuda else "")))
            checks.append(self._driver_version_check())
            types = [(spec, vgpu_type_id(spec)) for spec in self.conf.vgpu_types]
            enabled = {t for _, t in types if t is not None}
            bad = [spec for spec, t in types if t is None]
            known = self._scan(enabled, checks, skipped)
            if enabled or bad:
                checks.append(self._vgpu_types_check(enabled, bad, known))
        self._known = known
        devices = [*known.devices.values(), *known.vanished.values()]
        self._explanation = base.Explanation(tuple(checks), self.conf.expected_devices,
                                             len(devices), tuple(skipped))
        return devices

    def _scan(self, enabled: set[int], checks: list[Check],
              skipped: list[Skipped]) -> _Known:
        known = _Known()
        seen: set[str] = set()
        for index in range(self._nvml.gpu_count()):
            try:
                gpu = self._nvml.gpu(index)
            except nvmlmod.NvmlError as exc:
                skipped.append(Skipped(f"nvml-index-{index}", str(exc)))
                continue
            seen.add(gpu.address)
            reason = self._skip_reason(gpu)
            if reason:
                skipped.append(Skipped(gpu.address, reason))
                if gpu.mig_change_pending:
                    known.pending[gpu.address] = gpu
                continue
            try:
                known.devices[gpu.address] = self._device(gpu, enabled, known, checks)
            except nvmlmod.NvmlError as exc:
                known.migs.pop(gpu.address, None)
                skipped.append(Skipped(gpu.address, f"NVML failed while reading it: {exc}"))
                continue
            known.gpus[gpu.address] = gpu
        skipped += self._unmanaged(seen, "not visible to NVML")
        previous = {**self._known.vanished, **self._known.devices}
        for address, device in previous.items():
            # one that left NVML but is still bound to nvidia has failed: health says so
            if address not in seen and self.sysfs.driver_of(address) == "nvidia":
                known.vanished[address] = device
        return known

    def _skip_reason(self, gpu: nvmlmod.GpuInfo) -> str | None:
        if self.conf.address and not any(pci.matches(spec, gpu.address)
                                          for spec in self.conf.address):
            return "excluded by [nvidia_driver] address"
        if gpu.mig_change_pending:
            return (f"MIG mode change pending (current "
                    f"{_onoff(gpu.mig_current)}, pending {_onoff(gpu.mig_pending)}): "
                    "reset the GPU to apply it")
        return None

    def _unmanaged(self, seen: set[str], why: str) -> list[Skipped]:
        """NVIDIA GPUs (PFs of display class) in sysfs that NVML did not report."""
        out = []
        for address in self.sysfs.pci_addresses():
            if address in seen or pci.hex_id(self.sysfs.attr(address, "vendor"), 4) != VENDOR:
                continue
            dev = self.sysfs.pci_device(address)
            if dev is not None and dev.class_code >> 16 == _DISPLAY_CLASS and not dev.is_vf:
                out.append(Skipped(address, f"{why} (bound to {dev.driver or 'no driver'})"))
        return out

    # -- checks ------------------------------------------------------------------------

    def _host_checks(self) -> list[Check]:
        module = self.sysfs.module_loaded("nvidia")
        iommu = self.sysfs.iommu_enabled()
        return [Check("kernel_module", module,
                      "nvidia is loaded" if module else "/sys/module/nvidia is missing: the "
                      "nvidia kernel module is not loaded"),
                Check("iommu", iommu,
                      "IOMMU groups present" if iommu else "no IOMMU groups: passthrough and "
                      "vGPU need the IOMMU on (intel_iommu=on / amd_iommu=on)")]

    def _driver_version_check(self) -> Check:
        version = self._nvml.driver_version() or ""
        wanted = self.conf.min_driver_version
        return Check("driver_version", bool(version) and (
            not wanted or _version_tuple(version) >= _version_tuple(wanted)),
            (version or "unknown") + (f" (at least {wanted} wanted)" if wanted else ""))

    def _vgpu_types_check(self, enabled: set[int], bad: list[str], known: _Known) -> Check:
        """Are the configured vGPU types real on this host, by NVML's list?"""
        supported: dict[int, str] = {}
        for gpu in known.gpus.values():
            with contextlib.suppress(nvmlmod.NvmlError):
                supported.update(self._nvml.vgpu_types(gpu.uuid))
        parts = [f"{t} ({supported[t]})" for t in sorted(enabled) if t in supported]
        unknown = [str(t) for t in sorted(enabled) if t not in supported]
        detail = "enabled: " + (", ".join(parts) or "none")
        if unknown:
            detail += "; no GPU here supports: " + ", ".join(unknown)
            if not supported:
                detail += " (NVML lists no vGPU types: is the vGPU host driver installed?)"
        if bad:
            detail += "; not vGPU type ids, ignored: " + ", ".join(bad)
        return Check("vgpu_types", not unknown and not bad, detail)

    # -- building the report -----------------------------------------------------------

    def _device(self, gpu: nvmlmod.GpuInfo, enabled: set[int], known: _Known,
                checks: list[Check]) -> reports.Device:
        sysdev = self.sysfs.pci_device(gpu.address)
        deployables = self._vgpu_deployables(gpu, sysdev, enabled, checks)
        if not deployables and gpu.mig_current:
            known.migs[gpu.address] = self._nvml.mig_devices(gpu.uuid)
            deployables = self._mig_deployables(gpu, known.migs[gpu.address])
        if not deployables and not gpu.mig_current:
            deployables = [self._pgpu_deployable(gpu)]
        numa = gpu.numa_node if gpu.numa_node is not None else (
            sysdev.numa_node if sysdev is not None else None)
        std = {"vendor_id": VENDOR, "product_id": gpu.device_id,
               **({"class": sysdev.pci_class} if sysdev is not None else {}),
               **({"numa_node": str(numa)} if numa is not None else {})}
        vendor_info = {"uuid": gpu.uuid, "product_name": gpu.name,
                       "subsystem_id": gpu.subsystem_id,
                       "mig": _onoff(gpu.mig_current) if gpu.mig_current is not None
                       else "unsupported", **({"serial": gpu.serial} if gpu.serial else {}),
                       **({"memory_mib": str(gpu.memory_total // (1024 * 1024))}
                          if gpu.memory_total is not None else {})}
        return reports.make_device(
            identity=gpu.address, type="GPU", vendor=VENDOR, model=gpu.device_id,
            name=f"{self.ctx.host}_nvidia_{gpu.address}", std_board_info=std,
            vendor_board_info=vendor_info,
            controlpath={"type": "PCI", "info": pci.to_attach_info(gpu.address)},
            deployables=deployables)

    def _base_traits(self, gpu: nvmlmod.GpuInfo) -> list[str]:
        return [f"CUSTOM_NVIDIA_{gpu.device_id.upper()}"]

    def _pgpu_deployable(self, gpu: nvmlmod.GpuInfo) -> dict[str, Any]:
        traits = self._base_traits(gpu)
        if gpu.memory_total:
            traits.append(f"CUSTOM_NVIDIA_GPU_MEMORY_{round(gpu.memory_total / _GIB)}GB")
        return base.deployable(f"{self.ctx.host}_{gpu.address}", "PGPU", traits,
                               [base.pci_handle(gpu.address)])

    def _mig_deployables(self, gpu: nvmlmod.GpuInfo,
                         migs: list[nvmlmod.MigInfo]) -> list[dict[str, Any]]:
        out = []
        for profile_id, group in itertools.groupby(
                sorted(migs, key=lambda m: (m.profile_id, m.uuid)), lambda m: m.profile_id):
            members = list(group)
            rc = mig_resource_class(members[0].profile_name, profile_id)
            traits = self._base_traits(gpu)
            if profile_id >= 0:
                traits.append(f"CUSTOM_NVIDIA_MIG_PROFILE_{profile_id}")
            handles = [{"attach_type": "MIG",
                        "attach_info": {"parent": gpu.address, "mig_uuid": m.uuid}}
                       for m in members]
            suffix = str(profile_id) if profile_id >= 0 else "unknown"
            out.append(base.deployable(f"{self.ctx.host}_{gpu.address}_mig_{suffix}", rc,
                                       traits, handles))
        return out

    # -- vGPU --------------------------------------------------------------------------

    def _vgpu_deployables(self, gpu: nvmlmod.GpuInfo, sysdev: PciDevice | None,
                          enabled: set[int], checks: list[Check]) -> list[dict[str, Any]]:
        if sysdev is None:
            return []
        vfs = [d for d in (self.sysfs.pci_device(a) for a in sysdev.virtfns) if d]
        layout = _vgpu_layout(sysdev, vfs)
        if layout is None:
            return []
        handles = (self._mdev_handles([sysdev, *vfs], enabled) if layout == "mdev"
                   else self._vf_handles(vfs, enabled))
        offered = _offered_types([sysdev, *vfs], layout)
        checks.append(Check(f"vgpu {gpu.address}", bool(handles),
                            f"{layout} layout; creatable types: "
                            + (", ".join(f"{t} ({n})" for t, n in sorted(offered.items()))
                               or "none")
                            + ("" if enabled else "; none enabled in [nvidia_driver] "
                               "vgpu_types")))
        return [base.deployable(f"{self.ctx.host}_{gpu.address}_vgpu_{type_id}", "VGPU",
                                [*self._base_traits(gpu), f"CUSTOM_NVIDIA_VGPU_{type_id}"],
                                type_handles)
                for type_id, type_handles in sorted(handles.items()) if type_handles]

    def _mdev_handles(self, parents: list[PciDevice],
                      enabled: set[int]) -> dict[int, list[dict[str, Any]]]:
        """One handle per instance this driver may create (free + already ours)."""
        out: dict[int, list[dict[str, Any]]] = {}
        for parent in parents:
            for type_name, mtype in sorted(parent.mdev_supported_types.items()):
                type_id = vgpu_type_id(type_name)
                if type_id not in enabled:
                    continue
                for slot, uuid in self._mdev_slots(parent.address, type_name,
                                                   mtype.available_instances or 0):
                    out.setdefault(type_id, []).append({
                        "attach_type": "MDEV", "uuid": uuid,
                        "attach_info": mdev_attach_info(parent.address, type_name, slot)})
        return out

    def _mdev_slots(self, parent: str, type_name: str,
                    available: int) -> list[tuple[int, str]]:
        """(slot, mdev UUID) to offer: our existing mdevs plus the kernel's free slots."""
        existing = set(self.sysfs.mdev_devices(parent, type_name))
        candidates = [(slot, self._mdev_uuid(parent, type_name, slot))
                      for slot in range(max(0, available) + len(existing))]
        unused = [c for c in candidates if c[1] not in existing][:max(0, available)]
        return [c for c in candidates if c[1] in existing or c in unused]

    def _vf_handles(self, vfs: list[PciDevice],
                    enabled: set[int]) -> dict[int, list[dict[str, Any]]]:
        """A VF offers a type when it is free and can create it, or already has it."""
        out: dict[int, list[dict[str, Any]]] = {}
        for vf in vfs:
            creatable = parse_vgpu_types(vf.nvidia_creatable_vgpu_types)
            current = _int(vf.nvidia_current_vgpu_type)
            for type_id in sorted(enabled):
                if current == type_id or (current == 0 and type_id in creatable):
                    out.setdefault(type_id, []).append(
                        base.pci_handle(vf.address, vgpu_type=str(type_id)))
        return out

    def _mdev_uuid(self, parent: str, type_name: str, slot: int) -> str:
        """Deterministic: the same handle always names the same mdev."""
        key = f"{self.ctx.host}|{pci.normalize(parent)}|{type_name}|{slot}"
        return str(uuidlib.uuid5(_MDEV_NAMESPACE, key))

    # -- prepare / release -------------------------------------------------------------

    def prepare(self, identity: str, attach_info: dict[str, str]) -> dict[str, str]:
        """Create what the handle names (mdev or per-VF vGPU); idempotent."""
        if "mig_uuid" in attach_info:
            self._check_mig(identity, attach_info["mig_uuid"])
        elif "vgpu_type" in attach_info:
            self._set_vf_vgpu(identity, attach_info)
        elif "asked_type" in attach_info:
            self._create_mdev(identity, attach_info)
        return dict(attach_info)

    def release(self, identity: str, attach_info: dict[str, str]) -> None:
        """Destroy what :meth:`prepare` created; a missing mdev or free VF is fine."""
        if "vgpu_type" in attach_info:
            vf = self._own_parent(identity, attach_info)
            current = _int(self.sysfs.attr(vf, "nvidia", "current_vgpu_type"))
            if current == int(attach_info["vgpu_type"]):
                base.sysfs_op(vf, lambda: self.sysfs.set_current_vgpu_type(vf, 0), _VGPU_HINTS)
            return
        if "asked_type" in attach_info:
            uuid = self._handle_uuid(identity, attach_info)
            base.sysfs_op(uuid, lambda: self.sysfs.mdev_remove(uuid), _VGPU_HINTS)
            self._undefine_mdev(uuid)

    def _undefine_mdev(self, uuid: str) -> None:
        """Remove mdevctl's persistent definition of mdev ``uuid`` (libvirt's, for Nova), if any."""
        listed = self.runner.run(["mdevctl", "list", "--defined", "--uuid", uuid],
                                 _MDEVCTL_TIMEOUT, privileged=False)
        if listed.rc == RC_NOT_FOUND or (listed.ok and not listed.stdout.strip()):
            return
        done = self.runner.run(["mdevctl", "undefine", "--uuid", uuid], _MDEVCTL_TIMEOUT,
                               privileged=True)
        if not done.ok:
            raise DriverError(f"mdev {uuid}: mdevctl undefine failed: "
                              f"{(done.stderr or listed.stderr).strip()[:500]}")

    def _check_mig(self, identity: str, mig_uuid: str) -> None:
        if not self._nvml.start():
            raise DriverError(f"NVML unavailable: {self._nvml.reason}")
        gpu = self._known.gpus.get(pci.normalize(identity))
        try:
            uuids = {m.uuid for m in self._nvml.mig_devices(gpu.uuid)} if gpu else set()
        except nvmlmod.NvmlError as exc:
            raise DriverError(f"{identity}: cannot list MIG devices: {exc}") from exc
        if mig_uuid not in uuids:
            raise DriverError(f"MIG device {mig_uuid} does not exist on {identity}")

    def _set_vf_vgpu(self, identity: str, attach_info: dict[str, str]) -> None:
        vf = self._own_parent(identity, attach_info)
        wanted = int(attach_info["vgpu_type"])
        current = _int(self.sysfs.attr(vf, "nvidia", "current_vgpu_type"))
        if current == wanted:
            return
        if current != 0:
            raise DriverError(f"VF {vf} already has vGPU type {current}, not {wanted}")
        base.sysfs_op(vf, lambda: self.sysfs.set_current_vgpu_type(vf, wanted), _VGPU_HINTS)

    def _create_mdev(self, identity: str, attach_info: dict[str, str]) -> None:
        parent = self._own_parent(identity, attach_info)
        type_name = attach_info["asked_type"]
        uuid = self._handle_uuid(identity, attach_info)
        if self.sysfs.mdev_exists(uuid):
            have = (self.sysfs.mdev_parent_of(uuid), self.sysfs.mdev_type_of(uuid))
            if have != (parent, type_name):
                raise DriverError(f"mdev {uuid} exists as {have[1]} on {have[0]}, not "
                                  f"{type_name} on {parent}")
        else:
            base.sysfs_op(uuid, lambda: self.sysfs.mdev_create(parent, type_name, uuid),
                          _VGPU_HINTS)

    def _handle_uuid(self, identity: str, attach_info: dict[str, str]) -> str:
        """The mdev UUID discovery gave an MDEV handle (from parent, type and vgpu_mark slot)."""
        type_name = attach_info["asked_type"]
        mark = attach_info.get("vgpu_mark", f"{type_name}_0")
        slot = mark.removeprefix(f"{type_name}_")
        if not slot.isdigit():
            raise DriverError(f"bad vgpu_mark {mark!r} for type {type_name}")
        return self._mdev_uuid(self._own_parent(identity, attach_info), type_name, int(slot))

    def _own_parent(self, identity: str, attach_info: dict[str, str]) -> str:
        """The handle's address, when it is the GPU ``identity`` or one of its VFs."""
        gpu, parent = pci.normalize(identity), base.attach_address(attach_info)
        if parent != gpu and self.sysfs.link_name(self.sysfs.device_path(parent, "physfn")) != gpu:
            raise DriverError(f"{parent} is neither {gpu} nor one of its VFs")
        return parent

    # -- health and stats --------------------------------------------------------------

    def health(self) -> dict[str, Health]:
        known = self._known
        if not (known.gpus or known.pending or known.vanished) or not self._nvml.start():
            return {}
        self._collect_events(known)
        out = {address: self._gpu_health(address, gpu) for address, gpu in known.gpus.items()}
        for address, gpu in known.pending.items():
            out[address] = Health.of([], [f"MIG mode change pending (pending "
                                          f"{_onoff(gpu.mig_pending)}): reset the GPU to "
                                          "apply it"])
        for address in known.vanished:
            out[address] = Health.of(["no longer visible to NVML while bound to nvidia "
                                      "(fell off the bus?)"], [])
        return out

    def _gpu_health(self, address: str, gpu: nvmlmod.GpuInfo) -> Health:
        failed: list[str] = []
        degraded: list[str] = []
        try:
            cond = self._nvml.condition(gpu.uuid)
        except nvmlmod.GpuLost:
            return Health.of(["GPU is lost (NVML): it fell off the bus or stopped "
                              "answering; reset or reboot needed"], [])
        except nvmlmod.NvmlError as exc:
            return Health.of([], [f"cannot read health: {exc}"])
        if cond.ecc_uncorrected_volatile:
            text = f"{cond.ecc_uncorrected_volatile} uncorrected ECC errors since driver load"
            (failed if self.conf.ecc_uncorrected_status == "failed" else degraded).append(text)
        if cond.remap_failed:
            failed.append("row remapping failed: the GPU needs service")
        if cond.remap_pending:
            degraded.append("row remapping pending: reset the GPU")
        if cond.retired_pages_pending:
            degraded.append("page retirement pending: reset the GPU")
        event = self._events.get(address)
        if event is not None:
            failed.append(event[1])
        return Health.of(failed, degraded)

    def _collect_events(self, known: _Known) -> None:
        """Drain NVML events (bounded wait) and expire old ones."""
        by_uuid = {gpu.uuid: address for address, gpu in known.gpus.items()}
        now = self.ctx.clock()
        try:
            events = self._nvml.wait_events(sorted(by_uuid), self.conf.event_wait_ms)
        except nvmlmod.NvmlError as exc:
            LOG.warning("NVML event wait failed: %s", exc)
            events = []
        ignored = set(self.conf.ignored_xids)
        for event in events:
            address = by_uuid.get(event.gpu_uuid)
            if address is None or (event.kind == "xid" and event.data in ignored):
                continue
            reason = {"xid": f"critical XID {event.data}",
                      "dbe": "double-bit ECC error event",
                      "unavailable": "GPU unavailable event"}[event.kind]
            LOG.warning("GPU %s: %s", address, reason)
            self._events[address] = (now, reason)
        hold = self.conf.xid_hold_seconds
        if hold:
            self._events = {a: e for a, e in self._events.items() if now - e[0] < hold}

    def stats(self) -> dict[str, dict[str, float]]:
        """Per GPU (by address) and per MIG device (by MIG UUID); what NVML supports."""
        known = self._known
        if not known.gpus or not self._nvml.start():
            return {}
        out: dict[str, dict[str, float]] = {}
        targets = [(a, g.uuid) for a, g in known.gpus.items()]
        targets += [(m.uuid, m.uuid) for migs in known.migs.values() for m in migs]
        for key, uuid in targets:
            with contextlib.suppress(nvmlmod.NvmlError):
                if values := self._nvml.stats(uuid):
                    out[key] = values
        return out


def mdev_attach_info(parent: str, type_name: str, slot: int) -> dict[str, str]:
    """An MDEV handle as Nova's libvirt driver reads it: parent address, type, slot."""
    return {**pci.to_attach_info(parent), "asked_type": type_name,
            "vgpu_mark": f"{type_name}_{slot}"}


def _vgpu_layout(pf: PciDevice, vfs: list[PciDevice]) -> str | None:
    """"mdev" (legacy), "vfio" (NVIDIA's per-VF framework) or None, by probing sysfs."""
    if pf.mdev_supported_types or any(vf.mdev_supported_types for vf in vfs):
        return "mdev"
    if any(vf.nvidia_creatable_vgpu_types is not None for vf in vfs):
        return "vfio"
    return None


def _offered_types(devices: list[PciDevice], layout: str) -> dict[str, str]:
    if layout == "mdev":
        return {t: m.name or "?" for dev in devices for t, m in dev.mdev_supported_types.items()}
    return {str(t): name for dev in devices
            for t, name in parse_vgpu_types(dev.nvidia_creatable_vgpu_types).items()}


def _onoff(value: bool | None) -> str:
    return "on" if value else "off"


def _int(text: str | None) -> int:
    with contextlib.suppress(ValueError):
        return int((text or "0").strip())
    return 0


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
