"""A small NVML backend: the only module that talks to nvidia-ml-py (``import pynvml``).

Calls a board or driver cannot answer give ``None``, a GPU off the bus :class:`GpuLost`;
results are frozen dataclasses. The library is loaded lazily by :meth:`NvmlBackend.start`;
a host without it is a normal state (``reason`` says why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import operator
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from acceld.hw import pci

# NVML return codes this module branches on (stable C ABI values, see nvml.h).
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_TIMEOUT = 10
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_INVALID_ARGUMENT = 2
_NO_PERMISSION = 4
# "This board cannot tell": treated as "no value", never as a device failure.
_ABSENT = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _NOT_FOUND, _INVALID_ARGUMENT})

_MAX_EVENTS = 64           # events drained per poll: bounds the time one poll can take


class NvmlError(Exception):
    """An NVML call failed for a reason other than "not supported here"."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class GpuLost(NvmlError):
    """NVML says the GPU is lost (fallen off the bus or otherwise inaccessible)."""


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One whole GPU as NVML sees it; ``address`` is the normalised sysfs form."""

    index: int
    uuid: str
    name: str
    address: str
    device_id: str            # PCI device id, 4 lower-case hex digits ("2330")
    subsystem_id: str         # 8 hex digits, as NVML reports it
    memory_total: int | None  # bytes
    numa_node: int | None     # None when NVML cannot say (the driver falls back to sysfs)
    mig_current: bool | None  # None when the GPU has no MIG support
    mig_pending: bool | None
    serial: str | None = None

    @property
    def mig_change_pending(self) -> bool:
        """True when MIG mode was changed but the GPU has not been reset since."""
        return self.mig_current is not None and self.mig_current != self.mig_pending


@dataclasses.dataclass(frozen=True)
class MigInfo:
    """One MIG device (a compute instance inside a GPU instance)."""

    uuid: str                 # MIG-...
    parent_uuid: str
    gpu_instance_id: int
    profile_id: int           # the GPU instance profile id (19 = 1g.10gb on H100)
    profile_name: str         # canonical "1g.10gb" (from NVML's profile info), "" if unknown
    memory_total: int | None


@dataclasses.dataclass(frozen=True)
class GpuCondition:
    """What the health check reads from one GPU; ``None`` means "cannot tell"."""

    ecc_uncorrected_volatile: int | None = None
    retired_pages_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None


@dataclasses.dataclass(frozen=True)
class Event:
    """One NVML event: ``kind`` is "xid", "dbe" or "unavailable"; ``data`` the XID."""

    gpu_uuid: str
    kind: str
    data: int


class NvmlBackend:
    def __init__(self, importer: Callable[[], ModuleType] = functools.partial(
            importlib.import_module, "pynvml")) -> None:
        self._importer = importer
        self._nv: Any = None
        self.reason: str | None = None      # why NVML is unavailable
        self._lock = threading.Lock()
        self._event_set: Any = None
        self._registered: frozenset[str] = frozenset()

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> bool:
        """Import and initialise NVML once; False (with :attr:`reason`) when unusable."""
        with self._lock:
            if self._nv is not None:
                return True
            try:
                module = self._importer()
            except ImportError as exc:
                self.reason = f"nvidia-ml-py is not installed ({exc})"
                return False
            try:
                module.nvmlInit()
            except module.NVMLError as exc:
                self.reason = _init_reason(exc)
                return False
            self._nv, self.reason = module, None
            return True

    @property
    def available(self) -> bool:
        return self.start()

    def close(self) -> None:
        with self._lock:
            if self._nv is None:
                return
            if self._event_set is not None:
                self._quiet(self._nv.nvmlEventSetFree, self._event_set)
                self._event_set, self._registered = None, frozenset()
            self._quiet(self._nv.nvmlShutdown)
            self._nv = None

    # -- calls -------------------------------------------------------------------------

    def _call(self, fn_name: str, *args: Any, absent: frozenset[int] = _ABSENT) -> Any:
        """Call ``pynvml.<fn_name>``: None for an error code in ``absent``, else an NvmlError."""
        if self._nv is None and not self.start():
            raise NvmlError(self.reason or "NVML is unavailable")
        nv = self._nv
        try:
            return getattr(nv, fn_name)(*args)
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in absent:
                return None
            if code == _GPU_IS_LOST:
                raise GpuLost(f"{fn_name}: GPU is lost", code) from exc
            raise NvmlError(f"{fn_name}: {exc}", code) from exc

    def _quiet(self, fn: Callable[..., Any], *args: Any) -> None:
        with contextlib.suppress(Exception):  # best effort on teardown
            fn(*args)

    def driver_version(self) -> str | None:
        return self._call("nvmlSystemGetDriverVersion") if self.start() else None

    def cuda_driver_version(self) -> str | None:
        """CUDA version the driver supports, as ``"12.4"``."""
        value = self._call("nvmlSystemGetCudaDriverVersion_v2") if self.start() else None
        return None if value is None else f"{value // 1000}.{value % 1000 // 10}"

    def gpu_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount") or 0) if self.start() else 0

    def gpu(self, index: int) -> GpuInfo:
        """The GPU at NVML index ``index``; raises GpuLost/NvmlError."""
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            raise NvmlError(f"NVML index {index}: no such GPU")
        return self._gpu_info(index, handle)

    def gpus(self) -> list[GpuInfo]:
        """Every GPU NVML can read; lost ones are left out (see :meth:`gpu`)."""
        found = []
        for index in range(self.gpu_count()):
            with contextlib.suppress(NvmlError):
                found.append(self.gpu(index))
        return found

    def _gpu_info(self, index: int, handle: Any) -> GpuInfo:
        pci_info = self._call("nvmlDeviceGetPciInfo_v3", handle)
        if pci_info is None:
            raise NvmlError(f"NVML index {index}: no PCI information")
        mig = self._call("nvmlDeviceGetMigMode", handle)
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        numa = self._call("nvmlDeviceGetNumaNodeId", handle)
        return GpuInfo(
            index=index, uuid=self._call("nvmlDeviceGetUUID", handle),
            name=self._call("nvmlDeviceGetName", handle) or "",
            address=pci.normalize(_text(pci_info.busId)),
            device_id=f"{(pci_info.pciDeviceId >> 16) & 0xFFFF:04x}",
            subsystem_id=f"{pci_info.pciSubSystemId & 0xFFFFFFFF:08x}",
            memory_total=None if memory is None else int(memory.total),
            numa_node=None if numa is None or numa < 0 else int(numa),
            mig_current=None if mig is None else bool(mig[0]),
            mig_pending=None if mig is None else bool(mig[1]),
            serial=self._call("nvmlDeviceGetSerial", handle))

    def _handle(self, uuid: str) -> Any:
        handle = self._call("nvmlDeviceGetHandleByUUID", uuid)
        if handle is None:
            raise NvmlError(f"{uuid}: not visible to NVML", _NOT_FOUND)
        return handle

    # -- MIG ---------------------------------------------------------------------------

    def mig_devices(self, gpu_uuid: str) -> list[MigInfo]:
        parent = self._handle(gpu_uuid)
        slots = self._call("nvmlDeviceGetMaxMigDeviceCount", parent) or 0
        profiles = self._gi_profiles(parent)
        handles = [self._call("nvmlDeviceGetMigDeviceHandleByIndex", parent, slot)
                   for slot in range(slots)]
        return [self._mig_info(gpu_uuid, parent, handle, profiles)
                for handle in handles if handle is not None]    # None: an empty slot

    def _gi_profiles(self, parent: Any) -> dict[int, tuple[str, int, int]]:
        """GPU instance profile id -> (canonical name "1g.10gb", slices, MiB)."""
        count = int(getattr(self._nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))
        infos = [self._call("nvmlDeviceGetGpuInstanceProfileInfo", parent, i) for i in range(count)]
        return {int(i.id): (_profile_name(_text(i.name)), int(i.sliceCount), int(i.memorySizeMB))
                for i in infos if i is not None and i.instanceCount}

    def _mig_info(self, gpu_uuid: str, parent: Any, handle: Any,
                  profiles: dict[int, tuple[str, int, int]]) -> MigInfo:
        gi_id = int(self._call("nvmlDeviceGetGpuInstanceId", handle))
        profile_id = self._gi_profile_id(parent, gi_id)
        if profile_id is None:
            profile_id = self._profile_by_attributes(handle, profiles)
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        name = profiles[profile_id][0] if profile_id in profiles else ""
        return MigInfo(uuid=self._call("nvmlDeviceGetUUID", handle), parent_uuid=gpu_uuid,
                       gpu_instance_id=gi_id, profile_id=profile_id, profile_name=name,
                       memory_total=None if memory is None else int(memory.total))

    def _gi_profile_id(self, parent: Any, gi_id: int) -> int | None:
        """The profile of a GPU instance; None where NVML refuses (it needs root)."""
        absent = _ABSENT | {_NO_PERMISSION}
        gi = self._call("nvmlDeviceGetGpuInstanceById", parent, gi_id, absent=absent)
        info = None if gi is None else self._call("nvmlGpuInstanceGetInfo", gi,
                                                  absent=absent)
        return None if info is None else int(info.profileId)

    def _profile_by_attributes(self, handle: Any,
                               profiles: dict[int, tuple[str, int, int]]) -> int:
        """The profile matching a MIG device's slices and memory (unprivileged); -1: none."""
        attrs = self._call("nvmlDeviceGetAttributes_v2", handle)
        if attrs is None:
            return -1
        for profile_id, (_, slices, mib) in sorted(profiles.items()):
            if (slices, mib) == (int(attrs.gpuInstanceSliceCount), int(attrs.memorySizeMB)):
                return profile_id
        return -1

    # -- vGPU --------------------------------------------------------------------------

    def vgpu_types(self, gpu_uuid: str) -> dict[int, str]:
        """vGPU type id -> name the GPU supports (empty without the vGPU host driver)."""
        ids = self._call("nvmlDeviceGetSupportedVgpus", self._handle(gpu_uuid)) or []
        return {value: self._call("nvmlVgpuTypeGetName", value) or ""
                for value in (int(getattr(t, "value", t)) for t in ids)}

    # -- health and stats --------------------------------------------------------------

    def condition(self, gpu_uuid: str) -> GpuCondition:
        """ECC and memory-repair state of one GPU; raises GpuLost."""
        handle = self._handle(gpu_uuid)
        nv = self._nv
        ecc = self._call("nvmlDeviceGetTotalEccErrors", handle,
                         nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        retired = self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        remap = self._call("nvmlDeviceGetRemappedRows", handle)
        return GpuCondition(
            ecc_uncorrected_volatile=None if ecc is None else int(ecc),
            retired_pages_pending=None if retired is None else bool(retired),
            remap_pending=None if remap is None else bool(remap[2]),
            remap_failed=None if remap is None else bool(remap[3]))

    def stats(self, uuid: str) -> dict[str, float]:
        """Utilisation, memory, temperature and power, where NVML has them (MIG: memory only)."""
        handle = self._handle(uuid)
        util = self._call("nvmlDeviceGetUtilizationRates", handle)
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        temp = self._call("nvmlDeviceGetTemperature", handle, self._nv.NVML_TEMPERATURE_GPU)
        power = self._call("nvmlDeviceGetPowerUsage", handle)
        values = {"utilization_gpu_percent": util and util.gpu,
                  "utilization_memory_percent": util and util.memory,
                  "memory_used_bytes": memory and memory.used,
                  "memory_total_bytes": memory and memory.total, "temperature_celsius": temp,
                  "power_watts": None if power is None else power / 1000.0}
        return {k: float(v) for k, v in values.items() if v is not None}

    # -- events ------------------------------------------------------------------------

    def wait_events(self, gpu_uuids: list[str], timeout_ms: int,
                    max_events: int = _MAX_EVENTS) -> list[Event]:
        """Drain health events of ``gpu_uuids``, waiting at most ``timeout_ms`` for the first."""
        if not self.start():
            return []
        event_set = self._event_set_for(gpu_uuids)
        if event_set is None:
            return []
        events: list[Event] = []
        wait = max(0, int(timeout_ms))
        while len(events) < max_events:
            data = self._call("nvmlEventSetWait_v2", event_set, wait,
                              absent=_ABSENT | {_TIMEOUT})
            if data is None:
                break
            wait = 0
            event = self._event(data)
            if event is not None:
                events.append(event)
        return events

    def _wanted_events(self) -> dict[int, str]:
        nv = self._nv
        return {nv.nvmlEventTypeXidCriticalError: "xid",
                nv.nvmlEventTypeDoubleBitEccError: "dbe",
                getattr(nv, "nvmlEventTypeGpuUnavailableError", 0): "unavailable"}

    def _event_set_for(self, gpu_uuids: list[str]) -> Any:
        """One event set for the agent's life; recreated when the GPU set changes."""
        wanted = frozenset(gpu_uuids)
        if self._event_set is not None and wanted == self._registered:
            return self._event_set
        if self._event_set is not None:
            self._quiet(self._nv.nvmlEventSetFree, self._event_set)
            self._event_set = None
        event_set = self._call("nvmlEventSetCreate")
        if event_set is None:
            return None
        mask = functools.reduce(operator.or_, self._wanted_events(), 0)
        for uuid in sorted(wanted):
            try:
                handle = self._handle(uuid)
            except NvmlError:
                continue
            supported = self._call("nvmlDeviceGetSupportedEventTypes", handle)
            bits = mask if supported is None else mask & int(supported)
            if bits:
                self._call("nvmlDeviceRegisterEvents", handle, bits, event_set)
        self._event_set, self._registered = event_set, wanted
        return event_set

    def _event(self, data: Any) -> Event | None:
        kind = self._wanted_events().get(int(data.eventType))
        if kind is None:
            return None
        try:
            uuid = self._call("nvmlDeviceGetUUID", data.device)
        except GpuLost:
            uuid = None
        return Event(gpu_uuid=uuid or "", kind=kind, data=int(data.eventData))


def _init_reason(exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == _LIBRARY_NOT_FOUND:
        return f"libnvidia-ml.so.1 not found: the NVIDIA driver is not installed ({exc})"
    if code == _DRIVER_NOT_LOADED:
        return f"the nvidia kernel module is not loaded ({exc})"
    return f"nvmlInit failed: {exc}"


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _profile_name(nvml_name: str) -> str:
    """NVML names profiles "MIG 1g.10gb"; the canonical part is after the prefix."""
    name = nvml_name.strip()
    return name[4:].strip() if name.upper().startswith("MIG ") else name

