"""A fake libnvidia-ml at the ctypes boundary, so the real nvidia-ml-py wrappers run.

nvidia-ml-py resolves every C symbol with ``getattr(pynvml.nvmlLib, name)`` and caches it
in ``pynvml._nvmlGetFunctionPointer_cache``. :class:`NvmlSandbox` puts a
:class:`FakeNvmlLib` there instead of the ``CDLL``; its attributes behave like the C
functions: they take the same ctypes arguments (``byref`` pointers, string buffers,
handles), fill them, and return NVML return codes. Struct marshalling, ``bytes`` to
``str`` conversion and the mapping of return codes to ``NVMLError_*`` classes are
therefore the binding's own. A symbol the fake does not define raises
``NVMLError_FunctionNotFound`` exactly as an old driver would.

The host is described with plain dataclasses (:class:`FakeGpu`, :class:`FakeMig`);
tests change them between calls (a GPU gets lost, an XID is queued) and the fake
answers from the current description. Handles are opaque pointer values that encode
which GPU (and MIG slot) they name; nothing is ever dereferenced.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable
from typing import Any

import pynvml

SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
GPU_IS_LOST = 15

GIB = 1024 ** 3

# H100-80GB GPU instance profiles: profile index -> (profile id, name, slices, MiB, max).
# Ids and names from NVIDIA's MIG user guide; the fake only needs them to be consistent.
H100_PROFILES: dict[int, tuple[int, str, int, int, int]] = {
    0: (19, "MIG 1g.10gb", 1, 9856, 7),
    1: (14, "MIG 2g.20gb", 2, 19968, 3),
    2: (9, "MIG 3g.40gb", 3, 40192, 2),
    3: (5, "MIG 4g.40gb", 4, 40192, 1),
    4: (0, "MIG 7g.80gb", 7, 80896, 1),
    9: (15, "MIG 1g.20gb", 1, 19968, 4),
}

_GPU_BASE = 0x10000
_GPU_STRIDE = 0x1000
_MIG_STRIDE = 0x10
_GI_BASE = 0x800000
_EVENT_SET = 0xE0E0


@dataclasses.dataclass
class FakeMig:
    """One MIG device: a compute instance of a GPU instance."""

    uuid: str
    profile_id: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    memory_total: int = 10 * GIB
    memory_used: int = 0


@dataclasses.dataclass
class FakeGpu:
    """One GPU as the fake NVML describes it.

    ``bus_id`` is NVML's spelling (``00000000:3B:00.0``); ``numa_node=None`` makes
    ``nvmlDeviceGetNumaNodeId`` NotSupported; ``mig_mode=None`` makes the GPU MIG-incapable;
    ``not_supported`` / ``no_permission`` name C symbols that answer NOT_SUPPORTED /
    NO_PERMISSION for this GPU (the GPU instance calls need root on a real host);
    ``lost`` makes every call on it answer GPU_IS_LOST.
    """

    uuid: str
    bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    device_id: int = 0x2330
    subsystem_id: int = 0x16C110DE
    serial: str = "1650123456789"
    memory_total: int = 80 * GIB
    memory_used: int = 1 * GIB
    numa_node: int | None = 0
    mig_mode: tuple[int, int] | None = None        # (current, pending)
    migs: list[FakeMig] = dataclasses.field(default_factory=list)
    profiles: dict[int, tuple[int, str, int, int, int]] = dataclasses.field(
        default_factory=lambda: dict(H100_PROFILES))
    ecc_uncorrected_volatile: int = 0
    retired_pages_pending: bool = False
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, unc, pending, failed
    utilization: tuple[int, int] = (0, 0)                   # gpu %, memory %
    temperature: int = 35
    power_mw: int = 70000
    vgpu_types: dict[int, str] = dataclasses.field(default_factory=dict)
    supported_events: int = (pynvml.nvmlEventTypeXidCriticalError
                             | pynvml.nvmlEventTypeDoubleBitEccError
                             | pynvml.nvmlEventTypeSingleBitEccError)
    not_supported: set[str] = dataclasses.field(default_factory=set)
    no_permission: set[str] = dataclasses.field(default_factory=set)
    lost: bool = False


class _CFunction:
    """A callable with the attributes ctypes function pointers have (the binding sets
    ``restype`` on some of them)."""

    def __init__(self, name: str, impl: Callable[..., Any], calls: list[str]) -> None:
        self.__name__ = name
        self._impl = impl
        self._calls = calls
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        self._calls.append(self.__name__)
        return self._impl(*args)


def _addr(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _set_pointer(out: Any, address: int) -> None:
    """Store ``address`` in the pointer object behind ``byref(pointer)``."""
    ctypes.c_void_p.from_buffer(out._obj).value = address


def _pointer(address: int) -> Any:
    """A device handle (``nvmlDevice_t``) holding ``address``."""
    return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)


def _set(out: Any, value: Any) -> None:
    """Store a scalar behind ``byref(c_uint())`` and friends."""
    out._obj.value = value


def _put_string(buffer: Any, length: Any, text: str) -> int:
    raw = text.encode()
    size = length.value if hasattr(length, "value") else length._obj.value
    if len(raw) + 1 > size:
        return INSUFFICIENT_SIZE
    buffer.value = raw
    return SUCCESS


class FakeNvmlLib:
    """The fake shared library. Attributes are the C symbols it implements."""

    def __init__(self, gpus: list[FakeGpu], *, driver_version: str = "550.54.15",
                 cuda_version: int = 12040, init_error: int = SUCCESS,
                 missing: set[str] | None = None) -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.init_error = init_error
        self.missing = set(missing or ())
        self.calls: list[str] = []
        self.events: list[tuple[str, int, int, int]] = []  # (gpu uuid, type, data, gi id)
        self.registered: dict[str, int] = {}               # gpu uuid -> event mask
        self.wait_timeouts: list[int] = []
        self.initialised = 0

    # -- plumbing ----------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in self.missing:
            raise AttributeError(name)
        impl = getattr(type(self), "c_" + name, None)
        if impl is None:
            raise AttributeError(name)
        return _CFunction(name, self._guard(name, impl.__get__(self)), self.calls)

    def _guard(self, name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
        """Apply per-GPU ``lost`` and ``not_supported`` to calls whose first argument is
        a device handle, before the implementation runs."""
        def call(*args: Any) -> Any:
            if args and isinstance(args[0], pynvml.c_nvmlDevice_t):
                found = self._resolve(args[0])
                if found is None:
                    return INVALID_ARGUMENT
                gpu, _ = found
                if gpu.lost:
                    return GPU_IS_LOST
                if name in gpu.not_supported:
                    return NOT_SUPPORTED
                if name in gpu.no_permission:
                    return NO_PERMISSION
            return impl(*args)
        return call

    def _resolve(self, handle: Any) -> tuple[FakeGpu, FakeMig | None] | None:
        address = _addr(handle)
        index, rest = divmod(address - _GPU_BASE, _GPU_STRIDE)
        if address < _GPU_BASE or not 0 <= index < len(self.gpus):
            return None
        gpu = self.gpus[index]
        if rest == 0:
            return gpu, None
        slot = rest // _MIG_STRIDE - 1
        if rest % _MIG_STRIDE or not 0 <= slot < len(gpu.migs):
            return None
        return gpu, gpu.migs[slot]

    def _handle_of(self, gpu: FakeGpu, mig: FakeMig | None = None) -> int:
        base = _GPU_BASE + self.gpus.index(gpu) * _GPU_STRIDE
        return base if mig is None else base + (gpu.migs.index(mig) + 1) * _MIG_STRIDE

    def queue_event(self, gpu_uuid: str, event_type: int, data: int = 0,
                    gpu_instance_id: int = 0xFFFFFFFF) -> None:
        """Queue an event as the driver would raise it (delivered only if registered)."""
        self.events.append((gpu_uuid, event_type, data, gpu_instance_id))

    # -- system ------------------------------------------------------------------------

    def c_nvmlInitWithFlags(self, flags: int) -> int:
        if self.init_error == SUCCESS:
            self.initialised += 1
        return self.init_error

    def c_nvmlInit_v2(self) -> int:
        return self.c_nvmlInitWithFlags(0)

    def c_nvmlShutdown(self) -> int:
        self.initialised = max(0, self.initialised - 1)
        return SUCCESS

    def c_nvmlErrorString(self, code: int) -> bytes:
        return f"fake NVML error {code}".encode()

    def c_nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        return _put_string(buffer, length, self.driver_version)

    def c_nvmlSystemGetCudaDriverVersion_v2(self, out: Any) -> int:
        _set(out, self.cuda_version)
        return SUCCESS

    # -- devices -----------------------------------------------------------------------

    def c_nvmlDeviceGetCount_v2(self, out: Any) -> int:
        _set(out, len(self.gpus))
        return SUCCESS

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        i = index.value
        if not 0 <= i < len(self.gpus):
            return INVALID_ARGUMENT
        if self.gpus[i].lost:
            return GPU_IS_LOST
        _set_pointer(out, self._handle_of(self.gpus[i]))
        return SUCCESS

    def c_nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> int:
        wanted = uuid.value.decode()
        for gpu in self.gpus:
            for mig in [None, *gpu.migs]:
                if (mig.uuid if mig else gpu.uuid) == wanted:
                    if gpu.lost:
                        return GPU_IS_LOST
                    _set_pointer(out, self._handle_of(gpu, mig))
                    return SUCCESS
        return NOT_FOUND

    def _device(self, handle: Any) -> tuple[FakeGpu, FakeMig | None]:
        found = self._resolve(handle)
        assert found is not None  # _guard rejected unknown handles already
        return found

    def c_nvmlDeviceGetUUID(self, handle: Any, buffer: Any, length: Any) -> int:
        gpu, mig = self._device(handle)
        return _put_string(buffer, length, mig.uuid if mig else gpu.uuid)

    def c_nvmlDeviceGetName(self, handle: Any, buffer: Any, length: Any) -> int:
        gpu, mig = self._device(handle)
        name = gpu.name if mig is None else f"{gpu.name} MIG {mig.profile_id}"
        return _put_string(buffer, length, name)

    def c_nvmlDeviceGetSerial(self, handle: Any, buffer: Any, length: Any) -> int:
        gpu, _ = self._device(handle)
        return _put_string(buffer, length, gpu.serial)

    def c_nvmlDeviceGetPciInfo_v3(self, handle: Any, out: Any) -> int:
        gpu, mig = self._device(handle)
        if mig is not None:
            return NOT_SUPPORTED
        info = out._obj
        domain, bus, rest = gpu.bus_id.split(":")
        device, _ = rest.split(".")
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id[-12:].encode()
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(device, 16)
        info.pciDeviceId = (gpu.device_id << 16) | 0x10DE
        info.pciSubSystemId = gpu.subsystem_id
        return SUCCESS

    def c_nvmlDeviceGetNumaNodeId(self, handle: Any, out: Any) -> int:
        gpu, _ = self._device(handle)
        if gpu.numa_node is None:
            return NOT_SUPPORTED
        _set(out, gpu.numa_node)
        return SUCCESS

    def c_nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> int:
        gpu, mig = self._device(handle)
        total, used = ((mig.memory_total, mig.memory_used) if mig
                       else (gpu.memory_total, gpu.memory_used))
        out._obj.total, out._obj.used, out._obj.free = total, used, total - used
        return SUCCESS

    def c_nvmlDeviceGetUtilizationRates(self, handle: Any, out: Any) -> int:
        gpu, mig = self._device(handle)
        if mig is not None:
            return NOT_SUPPORTED  # as on real MIG handles
        out._obj.gpu, out._obj.memory = gpu.utilization
        return SUCCESS

    def c_nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, out: Any) -> int:
        gpu, mig = self._device(handle)
        if mig is not None or sensor.value != pynvml.NVML_TEMPERATURE_GPU:
            return NOT_SUPPORTED
        _set(out, gpu.temperature)
        return SUCCESS

    def c_nvmlDeviceGetPowerUsage(self, handle: Any, out: Any) -> int:
        gpu, mig = self._device(handle)
        if mig is not None:
            return NOT_SUPPORTED
        _set(out, gpu.power_mw)
        return SUCCESS

    # -- health ------------------------------------------------------------------------

    def c_nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter: Any,
                                      out: Any) -> int:
        gpu, _ = self._device(handle)
        if (error_type.value, counter.value) != (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                 pynvml.NVML_VOLATILE_ECC):
            return NOT_SUPPORTED
        _set(out, gpu.ecc_uncorrected_volatile)
        return SUCCESS

    def c_nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, out: Any) -> int:
        gpu, _ = self._device(handle)
        _set(out, int(gpu.retired_pages_pending))
        return SUCCESS

    def c_nvmlDeviceGetRemappedRows(self, handle: Any, corr: Any, unc: Any, pending: Any,
                                    failed: Any) -> int:
        gpu, _ = self._device(handle)
        for out, value in zip((corr, unc, pending, failed), gpu.remapped_rows, strict=True):
            _set(out, value)
        return SUCCESS

    # -- MIG ---------------------------------------------------------------------------

    def c_nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        gpu, _ = self._device(handle)
        if gpu.mig_mode is None:
            return NOT_SUPPORTED
        _set(current, gpu.mig_mode[0])
        _set(pending, gpu.mig_mode[1])
        return SUCCESS

    def c_nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, out: Any) -> int:
        gpu, _ = self._device(handle)
        if gpu.mig_mode is None:
            return NOT_SUPPORTED
        _set(out, 7)
        return SUCCESS

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> int:
        gpu, _ = self._device(handle)
        if gpu.mig_mode is None or not gpu.mig_mode[0]:
            return INVALID_ARGUMENT
        if not 0 <= index.value < len(gpu.migs):
            return NOT_FOUND
        _set_pointer(out, self._handle_of(gpu, gpu.migs[index.value]))
        return SUCCESS

    def c_nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> int:
        _, mig = self._device(handle)
        if mig is None:
            return INVALID_ARGUMENT
        _set(out, mig.gpu_instance_id)
        return SUCCESS

    def c_nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> int:
        _, mig = self._device(handle)
        if mig is None:
            return INVALID_ARGUMENT
        _set(out, mig.compute_instance_id)
        return SUCCESS

    def c_nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int, out: Any) -> int:
        gpu, _ = self._device(handle)
        if not any(m.gpu_instance_id == gi_id for m in gpu.migs):
            return NOT_FOUND
        _set_pointer(out, _GI_BASE + self.gpus.index(gpu) * 0x100 + gi_id)
        return SUCCESS

    def c_nvmlGpuInstanceGetInfo(self, gi_handle: Any, out: Any) -> int:
        index, gi_id = divmod(_addr(gi_handle) - _GI_BASE, 0x100)
        gpu = self.gpus[index]
        mig = next(m for m in gpu.migs if m.gpu_instance_id == gi_id)
        out._obj.device = _pointer(self._handle_of(gpu))
        out._obj.id, out._obj.profileId = gi_id, mig.profile_id
        return SUCCESS

    def c_nvmlDeviceGetAttributes_v2(self, handle: Any, out: Any) -> int:
        gpu, mig = self._device(handle)
        if mig is None:
            return NOT_SUPPORTED
        profile = next((p for p in gpu.profiles.values() if p[0] == mig.profile_id), None)
        if profile is None:
            return NOT_SUPPORTED
        _, _, slices, mib, _ = profile
        out._obj.gpuInstanceSliceCount = out._obj.computeInstanceSliceCount = slices
        out._obj.memorySizeMB = mib
        return SUCCESS

    def c_nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, index: int, out: Any) -> int:
        gpu, _ = self._device(handle)
        if gpu.mig_mode is None:
            return NOT_SUPPORTED
        if index not in gpu.profiles:
            return INVALID_ARGUMENT
        profile_id, name, slices, mib, count = gpu.profiles[index]
        info = out._obj
        info.id, info.sliceCount, info.memorySizeMB = profile_id, slices, mib
        info.instanceCount, info.name = count, name.encode()
        return SUCCESS

    # -- vGPU --------------------------------------------------------------------------

    def c_nvmlDeviceGetSupportedVgpus(self, handle: Any, count: Any, ids: Any) -> int:
        gpu, _ = self._device(handle)
        wanted = sorted(gpu.vgpu_types)
        if not wanted:
            _set(count, 0)
            return SUCCESS
        if ids is None or count._obj.value < len(wanted):
            _set(count, len(wanted))
            return INSUFFICIENT_SIZE
        for i, type_id in enumerate(wanted):
            ids[i] = type_id
        _set(count, len(wanted))
        return SUCCESS

    def c_nvmlVgpuTypeGetName(self, type_id: Any, buffer: Any, length: Any) -> int:
        wanted = type_id.value if hasattr(type_id, "value") else int(type_id)
        for gpu in self.gpus:
            if wanted in gpu.vgpu_types:
                return _put_string(buffer, length, gpu.vgpu_types[wanted])
        return INVALID_ARGUMENT

    # -- events ------------------------------------------------------------------------

    def c_nvmlDeviceGetSupportedEventTypes(self, handle: Any, out: Any) -> int:
        gpu, _ = self._device(handle)
        _set(out, gpu.supported_events)
        return SUCCESS

    def c_nvmlEventSetCreate(self, out: Any) -> int:
        self.registered = {}
        _set_pointer(out, _EVENT_SET)
        return SUCCESS

    def c_nvmlDeviceRegisterEvents(self, handle: Any, mask: Any, event_set: Any) -> int:
        gpu, _ = self._device(handle)
        if mask.value & ~gpu.supported_events:
            return NOT_SUPPORTED
        self.registered[gpu.uuid] = self.registered.get(gpu.uuid, 0) | mask.value
        return SUCCESS

    def c_nvmlEventSetWait_v2(self, event_set: Any, out: Any, timeout_ms: Any) -> int:
        """Deliver the oldest queued event of a registered GPU; never sleeps (a real
        library would block up to ``timeout_ms``: the value is recorded instead)."""
        self.wait_timeouts.append(timeout_ms.value)
        for i, (uuid, event_type, data, gi_id) in enumerate(self.events):
            if self.registered.get(uuid, 0) & event_type:
                del self.events[i]
                gpu = next(g for g in self.gpus if g.uuid == uuid)
                out._obj.device = _pointer(self._handle_of(gpu))
                out._obj.eventType, out._obj.eventData = event_type, data
                out._obj.gpuInstanceId, out._obj.computeInstanceId = gi_id, 0xFFFFFFFF
                return SUCCESS
        return TIMEOUT

    def c_nvmlEventSetFree(self, event_set: Any) -> int:
        self.registered = {}
        return SUCCESS


class NvmlSandbox:
    """Installs a fake library into pynvml and restores pynvml's globals afterwards.

    Use one per test (see the ``nvml`` fixtures in the test modules): :meth:`install`
    for a fake library, :meth:`no_library` for a host without libnvidia-ml.so.1.
    """

    def __init__(self) -> None:
        self._saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache),
                       pynvml._nvmlLib_refcount, pynvml.CDLL)

    def install(self, lib: FakeNvmlLib) -> FakeNvmlLib:
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.nvmlLib = lib
        return lib

    def no_library(self) -> None:
        """Make ``CDLL("libnvidia-ml.so.1")`` fail as on a host without the driver, even
        on a machine that has one."""
        def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")

        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.nvmlLib = None
        pynvml.CDLL = refuse

    def restore(self) -> None:
        lib, cache, refcount, cdll = self._saved
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlGetFunctionPointer_cache.update(cache)
        pynvml._nvmlLib_refcount = refcount
        pynvml.CDLL = cdll


def h100(index: int, bus: str, **kwargs: Any) -> FakeGpu:
    """An H100-like GPU with a deterministic UUID from ``index``."""
    return FakeGpu(uuid=f"GPU-{index:08x}-1111-2222-3333-{index:012x}", bus_id=bus, **kwargs)


def mig(gpu_index: int, slot: int, profile_id: int, gi: int, memory: int) -> FakeMig:
    """A MIG device with a deterministic MIG UUID."""
    return FakeMig(uuid=f"MIG-{gpu_index:08x}-aaaa-bbbb-cccc-{slot:012x}",
                   profile_id=profile_id, gpu_instance_id=gi, memory_total=memory)
