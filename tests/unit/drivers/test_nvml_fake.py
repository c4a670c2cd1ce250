"""The NVML backend over the real nvidia-ml-py wrappers and the ctypes-boundary fake.

These tests pin what the driver relies on: the binding's private seams still exist, the
fake answers through the real marshalling (strings, structs, error classes), and the
backend turns NotSupported / FunctionNotFound / GpuIsLost / no library into values.
"""

from __future__ import annotations

import pynvml
import pytest

from acceld.hw import nvml
from tests.fakes.nvml import (
    DRIVER_NOT_LOADED,
    GIB,
    FakeNvmlLib,
    NvmlSandbox,
    h100,
    mig,
)


@pytest.fixture
def sandbox():
    box = NvmlSandbox()
    yield box
    box.restore()


def _two_gpus() -> list:
    plain = h100(0, "00000000:3B:00.0", numa_node=None, utilization=(42, 17),
                 temperature=51, power_mw=123456, memory_used=3 * GIB)
    migged = h100(1, "00000000:86:00.0", mig_mode=(1, 1),
                  migs=[mig(1, 0, 19, 9, 10 * GIB), mig(1, 1, 19, 10, 10 * GIB),
                        mig(1, 2, 14, 3, 20 * GIB)])
    return [plain, migged]


def test_binding_private_seams_exist():
    # The fake replaces nvmlLib and clears the function cache; the sandbox also saves
    # the refcount and CDLL. A new nvidia-ml-py that renames them must fail here first.
    assert hasattr(pynvml, "nvmlLib")
    assert isinstance(pynvml._nvmlGetFunctionPointer_cache, dict)
    assert isinstance(pynvml._nvmlLib_refcount, int)
    assert callable(pynvml.CDLL)
    assert callable(pynvml._nvmlGetFunctionPointer)


def test_sandbox_restores_globals(sandbox):
    before = pynvml.nvmlLib
    inner = NvmlSandbox()
    inner.install(FakeNvmlLib([]))
    pynvml.nvmlInit()
    assert pynvml._nvmlGetFunctionPointer_cache       # the fake's symbols got cached
    inner.restore()
    assert pynvml.nvmlLib is before
    assert "nvmlInitWithFlags" not in pynvml._nvmlGetFunctionPointer_cache


def test_real_wrappers_marshal_through_the_fake(sandbox):
    sandbox.install(FakeNvmlLib(_two_gpus()))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"   # str, not bytes
    info = pynvml.nvmlDeviceGetPciInfo_v3(handle)
    assert info.busId == "00000000:3B:00.0"               # the struct decodes char[]
    assert info.pciDeviceId == 0x233010DE
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNumaNodeId(handle)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetBoardId(handle)           # a symbol the fake lacks


def test_inventory_normalises_addresses_and_reads_ids(sandbox):
    sandbox.install(FakeNvmlLib(_two_gpus()))
    backend = nvml.NvmlBackend()
    assert backend.start() and backend.reason is None
    assert backend.driver_version() == "550.54.15"
    assert backend.cuda_driver_version() == "12.4"
    gpus = backend.gpus()
    assert [g.address for g in gpus] == ["0000:3b:00.0", "0000:86:00.0"]
    assert gpus[0].device_id == "2330"
    assert gpus[0].numa_node is None                 # NotSupported -> None, not an error
    assert gpus[1].numa_node == 0
    assert gpus[0].memory_total == 80 * GIB
    assert (gpus[0].mig_current, gpus[1].mig_current) == (None, True)
    assert not gpus[1].mig_change_pending


def test_missing_symbol_is_no_value(sandbox):
    sandbox.install(FakeNvmlLib(_two_gpus(), missing={"nvmlDeviceGetNumaNodeId",
                                                      "nvmlDeviceGetSerial"}))
    gpu = nvml.NvmlBackend().gpus()[1]
    assert gpu.numa_node is None and gpu.serial is None


def test_no_library(sandbox):
    sandbox.no_library()
    backend = nvml.NvmlBackend()
    assert not backend.start()
    assert "libnvidia-ml.so.1" in backend.reason
    assert backend.gpu_count() == 0 and backend.gpus() == []


def test_no_nvidia_ml_py():
    def missing():
        raise ImportError("No module named 'pynvml'")

    backend = nvml.NvmlBackend(importer=missing)
    assert not backend.available
    assert "nvidia-ml-py is not installed" in backend.reason


def test_driver_not_loaded(sandbox):
    sandbox.install(FakeNvmlLib(_two_gpus(), init_error=DRIVER_NOT_LOADED))
    backend = nvml.NvmlBackend()
    assert not backend.start()
    assert "kernel module is not loaded" in backend.reason


def test_mig_walk(sandbox):
    gpus = _two_gpus()
    sandbox.install(FakeNvmlLib(gpus))
    backend = nvml.NvmlBackend()
    migs = backend.mig_devices(gpus[1].uuid)
    assert [(m.uuid, m.gpu_instance_id, m.profile_id, m.profile_name) for m in migs] == [
        (gpus[1].migs[0].uuid, 9, 19, "1g.10gb"),
        (gpus[1].migs[1].uuid, 10, 19, "1g.10gb"),
        (gpus[1].migs[2].uuid, 3, 14, "2g.20gb"),
    ]
    assert migs[2].memory_total == 20 * GIB
    assert backend.mig_devices(gpus[0].uuid) == []   # MIG unsupported: no devices


def test_mig_walk_unprivileged(sandbox):
    # Without root NVML refuses the GPU instance calls; the profile is then found by
    # the MIG device's attributes (slices and memory).
    gpus = _two_gpus()
    gpus[1].no_permission = {"nvmlDeviceGetGpuInstanceById"}
    sandbox.install(FakeNvmlLib(gpus))
    migs = nvml.NvmlBackend().mig_devices(gpus[1].uuid)
    assert [(m.profile_id, m.profile_name) for m in migs] == [
        (19, "1g.10gb"), (19, "1g.10gb"), (14, "2g.20gb")]


def test_stats_gpu_and_mig(sandbox):
    gpus = _two_gpus()
    sandbox.install(FakeNvmlLib(gpus))
    backend = nvml.NvmlBackend()
    assert backend.stats(gpus[0].uuid) == {
        "utilization_gpu_percent": 42.0, "utilization_memory_percent": 17.0,
        "memory_used_bytes": float(3 * GIB), "memory_total_bytes": float(80 * GIB),
        "temperature_celsius": 51.0, "power_watts": 123.456}
    assert backend.stats(gpus[1].migs[0].uuid) == {
        "memory_used_bytes": 0.0, "memory_total_bytes": float(10 * GIB)}


def test_condition_and_lost_gpu(sandbox):
    gpus = _two_gpus()
    gpus[0].ecc_uncorrected_volatile = 2
    gpus[0].remapped_rows = (0, 1, 1, 0)
    sandbox.install(FakeNvmlLib(gpus))
    backend = nvml.NvmlBackend()
    cond = backend.condition(gpus[0].uuid)
    assert cond == nvml.GpuCondition(ecc_uncorrected_volatile=2, retired_pages_pending=False,
                                     remap_pending=True, remap_failed=False)
    gpus[0].lost = True
    with pytest.raises(nvml.GpuLost):
        backend.condition(gpus[0].uuid)
    with pytest.raises(nvml.GpuLost):
        backend.gpu(0)
    assert [g.index for g in backend.gpus()] == [1]


def test_events_are_drained_with_a_bounded_wait(sandbox):
    gpus = _two_gpus()
    lib = sandbox.install(FakeNvmlLib(gpus))
    backend = nvml.NvmlBackend()
    assert backend.wait_events([g.uuid for g in gpus], 250) == []
    assert lib.wait_timeouts == [250]
    for xid in (79, 48, 13):
        lib.queue_event(gpus[0].uuid, pynvml.nvmlEventTypeXidCriticalError, xid)
    lib.queue_event(gpus[1].uuid, pynvml.nvmlEventTypeDoubleBitEccError)
    lib.wait_timeouts.clear()
    events = backend.wait_events([g.uuid for g in gpus], 250, max_events=3)
    assert [(e.gpu_uuid, e.kind, e.data) for e in events] == [
        (gpus[0].uuid, "xid", 79), (gpus[0].uuid, "xid", 48), (gpus[0].uuid, "xid", 13)]
    assert lib.wait_timeouts == [250, 0, 0]        # only the first wait may block
    events = backend.wait_events([g.uuid for g in gpus], 0)
    assert [(e.gpu_uuid, e.kind) for e in events] == [(gpus[1].uuid, "dbe")]


def test_events_only_for_registered_gpus(sandbox):
    gpus = _two_gpus()
    lib = sandbox.install(FakeNvmlLib(gpus))
    backend = nvml.NvmlBackend()
    lib.queue_event(gpus[1].uuid, pynvml.nvmlEventTypeXidCriticalError, 79)
    assert backend.wait_events([gpus[0].uuid], 0) == []
    # The GPU set changed: the event set is rebuilt and the queued event arrives.
    assert [e.data for e in backend.wait_events([g.uuid for g in gpus], 0)] == [79]


def test_close_shuts_down(sandbox):
    lib = sandbox.install(FakeNvmlLib(_two_gpus()))
    backend = nvml.NvmlBackend()
    backend.start()
    backend.wait_events([], 0)
    assert lib.initialised == 1
    backend.close()
    assert lib.initialised == 0
    assert "nvmlShutdown" in lib.calls


def test_vgpu_types(sandbox):
    gpus = _two_gpus()
    gpus[0].vgpu_types = {557: "NVIDIA H100-1-10C", 558: "NVIDIA H100-2-20C"}
    sandbox.install(FakeNvmlLib(gpus))
    backend = nvml.NvmlBackend()
    assert backend.vgpu_types(gpus[0].uuid) == {557: "NVIDIA H100-1-10C",
                                                558: "NVIDIA H100-2-20C"}
    assert backend.vgpu_types(gpus[1].uuid) == {}
