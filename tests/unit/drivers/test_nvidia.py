"""NvidiaDriver against a fake kernel tree (tests/fakes/kernel.py) and the real
nvidia-ml-py wrappers over a fake libnvidia-ml (tests/fakes/nvml.py)."""

from __future__ import annotations

import dataclasses
import errno
import shutil
import uuid as uuidlib
from typing import Any

import pynvml
import pytest

from acceld import reports
from acceld.agent.drivers import nvidia, registry
from acceld.agent.drivers.base import (
    HEALTH_DEGRADED,
    HEALTH_FAILED,
    HEALTH_OK,
    DriverContext,
    DriverError,
)
from acceld.agent.drivers.nvidia import (
    NvidiaDriver,
    mdev_attach_info,
    mig_resource_class,
    vgpu_type_id,
)
from acceld.hw import pci
from acceld.hw.nvml import NvmlBackend
from acceld.hw.runner import Result
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.fakes.nvml import GIB, FakeGpu, FakeNvmlLib, NvmlSandbox, h100, mig
from tests.fakes.runner import RecordingRunner
from tests.helpers import make_conf

A = "0000:3b:00.0"
B = "0000:86:00.0"
NVML_A = "00000000:3B:00.0"
NVML_B = "00000000:86:00.0"


@pytest.fixture
def sandbox():
    box = NvmlSandbox()
    yield box
    box.restore()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class World:
    driver: NvidiaDriver
    kernel: FakeKernel
    lib: FakeNvmlLib
    gpus: list[FakeGpu]
    clock: Clock
    runner: RecordingRunner


def _world(tmp_path, sandbox, gpus: list[FakeGpu], *, conf: dict[str, Any] | None = None,
           gpu_kwargs: dict[str, dict[str, Any]] | None = None, numa: int = 1,
           vfs: dict[str, int] | None = None) -> World:
    """Both GPUs (A, B) in sysfs bound to nvidia, NVML describing ``gpus``."""
    builder = FakeSysfsBuilder(tmp_path / "root").driver("nvidia").driver("vfio-pci")
    for address in (A, B):
        builder.pci(address, "10de", "2330", "0x030200", numa=numa, driver="nvidia",
                    **(gpu_kwargs or {}).get(address, {}))
    kernel = builder.kernel()
    for pf, count in (vfs or {}).items():
        kernel.set_numvfs(pf, count)
    lib = sandbox.install(FakeNvmlLib(gpus))
    clock = Clock()
    runner = RecordingRunner()          # no mdevctl on this host (127) unless scripted
    ctx = DriverContext(conf=make_conf(nvidia_driver=conf or {}), host="host1",
                        state_dir=str(tmp_path / "state"), sysfs=kernel, nvml=NvmlBackend(),
                        runner=runner, clock=clock, sleep=lambda s: None)
    return World(NvidiaDriver(ctx), kernel, lib, gpus, clock, runner)


def _plain_and_mig() -> list[FakeGpu]:
    return [h100(0, NVML_A, numa_node=None, utilization=(42, 17), memory_used=2 * GIB),
            h100(1, NVML_B, numa_node=0, mig_mode=(1, 1),
                 migs=[mig(1, 0, 19, 9, 10 * GIB), mig(1, 1, 19, 10, 10 * GIB),
                       mig(1, 2, 14, 3, 20 * GIB)])]


def _by_identity(devices: list[reports.Device]) -> dict[str, reports.Device]:
    return {d.identity: d for d in devices}


def _deployables(device: reports.Device) -> dict[str, reports.Deployable]:
    return {dict(d.attributes)["rc"] + ":" + d.name.rsplit("_", 1)[-1]: d
            for d in device.deployables}


def _handles(dep: reports.Deployable) -> list[dict[str, str]]:
    return [dict(h.attach_info) for h in dep.attach_handles]


def _mdev_uuids(dep: reports.Deployable) -> list[str]:
    """The uuids the driver named its MDEV handles by (their mdevs' UUIDs)."""
    return [h.uuid for h in dep.attach_handles]


def _validate(devices: list[reports.Device]) -> None:
    """Round-trip through the report schema, as the conductor receives it."""
    report = reports.InventoryReport(host="host1", epoch="e", seq=1, drivers=(
        reports.DriverReport(name="nvidia_gpu", version="1.0.0", devices=tuple(devices)),))
    reports.InventoryReport.from_dict(report.to_dict())


# -- discovery ---------------------------------------------------------------------------


def test_discovers_whole_gpu_and_mig_instances(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    devices = _by_identity(w.driver.discover())
    _validate(list(devices.values()))
    assert sorted(devices) == [A, B]

    whole = devices[A]
    assert (whole.type, whole.vendor, whole.model) == ("GPU", "10de", "2330")
    assert dict(whole.controlpath_info) == {"domain": "0000", "bus": "3b", "device": "00",
                                            "function": "0"}
    assert dict(whole.vendor_board_info)["uuid"] == w.gpus[0].uuid
    [dep] = whole.deployables
    assert dict(dep.attributes) == {"rc": "PGPU", "trait0": "CUSTOM_NVIDIA_2330",
                                    "trait1": "CUSTOM_NVIDIA_GPU_MEMORY_80GB"}
    assert dep.num_accelerators == 1
    assert [(h.attach_type, dict(h.attach_info)) for h in dep.attach_handles] == [
        ("PCI", {"domain": "0000", "bus": "3b", "device": "00", "function": "0"})]

    migged = devices[B]
    by_rc = {dict(d.attributes)["rc"]: d for d in migged.deployables}
    assert sorted(by_rc) == ["CUSTOM_NVIDIA_MIG_1G_10GB", "CUSTOM_NVIDIA_MIG_2G_20GB"]
    small = by_rc["CUSTOM_NVIDIA_MIG_1G_10GB"]
    assert small.num_accelerators == 2
    assert dict(small.attributes)["trait1"] == "CUSTOM_NVIDIA_MIG_PROFILE_19"
    assert {h.attach_type for h in small.attach_handles} == {"MIG"}   # not an mdev
    assert _handles(small) == [{"parent": B, "mig_uuid": m.uuid} for m in w.gpus[1].migs[:2]]
    assert _handles(by_rc["CUSTOM_NVIDIA_MIG_2G_20GB"]) == [
        {"parent": B, "mig_uuid": w.gpus[1].migs[2].uuid}]
    assert "PGPU" not in by_rc                     # a MIG GPU is not offered whole

    explanation = w.driver.explain()
    assert explanation.found == 2 and explanation.skipped == ()
    checks = {c.name: c for c in explanation.checks}
    assert checks["nvml"].ok and "550.54.15" in checks["nvml"].detail
    assert checks["kernel_module"].ok and checks["iommu"].ok


def test_discovery_is_deterministic(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    assert w.driver.discover() == w.driver.discover()


def test_numa_falls_back_to_sysfs_when_nvml_cannot_tell(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig(), numa=1)
    devices = _by_identity(w.driver.discover())
    assert dict(devices[A].std_board_info)["numa_node"] == "1"   # NotSupported -> sysfs
    assert dict(devices[B].std_board_info)["numa_node"] == "0"   # NVML wins when it knows
    assert "nvmlDeviceGetNumaNodeId" in w.lib.calls


def test_no_numa_anywhere_means_no_numa_key(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, [h100(0, NVML_A, numa_node=None)], numa=-1)
    [device] = w.driver.discover()
    assert "numa_node" not in dict(device.std_board_info)


def test_address_globs_exclude_with_a_reason(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig(), conf={"address": ["86:*.*"]})
    assert [d.identity for d in w.driver.discover()] == [B]
    assert [(s.address, s.reason) for s in w.driver.explain().skipped] == [
        (A, "excluded by [nvidia_driver] address")]


def test_mig_pending_reset_is_skipped_and_flagged(tmp_path, sandbox):
    gpus = _plain_and_mig()
    gpus[0].mig_mode = (0, 1)                       # enabled, GPU not reset yet
    w = _world(tmp_path, sandbox, gpus)
    assert [d.identity for d in w.driver.discover()] == [B]
    [skipped] = w.driver.explain().skipped
    assert skipped.address == A
    assert "MIG mode change pending (current off, pending on)" in skipped.reason
    health = w.driver.health()
    assert health[A].status == HEALTH_DEGRADED
    assert "reset the GPU" in health[A].reasons[0]
    assert health[B].status == HEALTH_OK


def test_mig_enabled_without_instances_offers_nothing(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, [h100(0, NVML_A, mig_mode=(1, 1))])
    [device] = w.driver.discover()
    assert device.deployables == ()


def test_gpus_nvml_does_not_see_are_explained(tmp_path, sandbox):
    # B is in sysfs (bound to vfio-pci for passthrough) but NVML only sees A.
    w = _world(tmp_path, sandbox, [h100(0, NVML_A)])
    w.kernel.builder.unbind(B)
    w.kernel.builder.bind(B, "vfio-pci")
    assert [d.identity for d in w.driver.discover()] == [A]
    assert [(s.address, s.reason) for s in w.driver.explain().skipped] == [
        (B, "not visible to NVML (bound to vfio-pci)")]


def test_without_nvml_library(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    sandbox.no_library()
    w.kernel.builder.remove_driver("nvidia")
    shutil.rmtree(w.kernel.path("/sys/module/nvidia"))      # module unloaded
    assert w.driver.discover() == []
    explanation = w.driver.explain()
    checks = {c.name: c for c in explanation.checks}
    assert not checks["nvml"].ok
    assert "libnvidia-ml.so.1 not found" in checks["nvml"].detail
    assert not checks["kernel_module"].ok
    assert explanation.found == 0
    assert {s.address for s in explanation.skipped} == {A, B}
    assert all("NVML is unavailable" in s.reason for s in explanation.skipped)
    assert w.driver.health() == {} and w.driver.stats() == {}


def test_loads_with_only_conf_host_and_state_dir(tmp_path):
    ctx = DriverContext(conf=make_conf(), host="host1", state_dir=str(tmp_path))
    driver = registry.load("nvidia_gpu", ctx)
    assert isinstance(driver, NvidiaDriver) and driver.name == "nvidia_gpu"
    # The real /sys and whatever NVML this machine has: never an exception.
    assert isinstance(driver.discover(), list)
    assert "nvml" in {c.name for c in driver.explain().checks}


def test_driver_version_check(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig(), conf={"min_driver_version": "560.28"})
    w.driver.discover()
    check = {c.name: c for c in w.driver.explain().checks}["driver_version"]
    assert not check.ok and check.detail == "550.54.15 (at least 560.28 wanted)"
    w.lib.driver_version = "570.86.15"
    w.driver.discover()
    assert {c.name: c for c in w.driver.explain().checks}["driver_version"].ok


def test_iommu_off_is_explained(tmp_path, sandbox):
    builder = FakeSysfsBuilder(tmp_path / "root", iommu=False).driver("nvidia")
    builder.pci(A, "10de", "2330", "0x030200", driver="nvidia")
    sandbox.install(FakeNvmlLib([h100(0, NVML_A)]))
    driver = NvidiaDriver(DriverContext(conf=make_conf(), host="h", state_dir=str(tmp_path),
                                        sysfs=builder.kernel(), nvml=NvmlBackend()))
    assert len(driver.discover()) == 1
    iommu = {c.name: c for c in driver.explain().checks}["iommu"]
    assert not iommu.ok and "intel_iommu=on" in iommu.detail


# -- health ------------------------------------------------------------------------------


def test_health_ok(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig(), conf={"event_wait_ms": 7})
    w.driver.discover()
    assert w.driver.health() == {A: w.driver.health()[A], B: w.driver.health()[B]}
    assert {h.status for h in w.driver.health().values()} == {HEALTH_OK}
    assert w.lib.wait_timeouts[0] == 7             # the configured, bounded wait


def test_health_critical_xid_fails_for_the_hold_time(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig(), conf={"xid_hold_seconds": 600})
    w.driver.discover()
    w.lib.queue_event(w.gpus[0].uuid, pynvml.nvmlEventTypeXidCriticalError, 79)
    w.lib.queue_event(w.gpus[1].uuid, pynvml.nvmlEventTypeXidCriticalError, 13)  # app XID
    health = w.driver.health()
    assert health[A] == type(health[A])(HEALTH_FAILED, ("critical XID 79",))
    assert health[B].status == HEALTH_OK
    w.clock.now += 599
    assert w.driver.health()[A].status == HEALTH_FAILED
    w.clock.now += 2
    assert w.driver.health()[A].status == HEALTH_OK


def test_health_double_bit_ecc_event(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    w.driver.discover()
    w.lib.queue_event(w.gpus[1].uuid, pynvml.nvmlEventTypeDoubleBitEccError)
    assert w.driver.health()[B].reasons == ("double-bit ECC error event",)


def test_health_ecc_counters(tmp_path, sandbox):
    gpus = _plain_and_mig()
    gpus[0].ecc_uncorrected_volatile = 3
    gpus[1].remapped_rows = (0, 0, 1, 0)
    w = _world(tmp_path, sandbox, gpus)
    w.driver.discover()
    health = w.driver.health()
    assert health[A].status == HEALTH_FAILED
    assert health[A].reasons == ("3 uncorrected ECC errors since driver load",)
    assert health[B] == type(health[B])(HEALTH_DEGRADED,
                                        ("row remapping pending: reset the GPU",))
    gpus[1].remapped_rows = (0, 0, 0, 1)
    gpus[1].retired_pages_pending = True
    assert w.driver.health()[B].status == HEALTH_FAILED


def test_health_ecc_can_be_degraded_only(tmp_path, sandbox):
    gpus = _plain_and_mig()
    gpus[0].ecc_uncorrected_volatile = 1
    w = _world(tmp_path, sandbox, gpus, conf={"ecc_uncorrected_status": "degraded"})
    w.driver.discover()
    assert w.driver.health()[A].status == HEALTH_DEGRADED


def test_health_gpu_lost(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    w.driver.discover()
    w.gpus[0].lost = True
    health = w.driver.health()
    assert health[A].status == HEALTH_FAILED and "GPU is lost" in health[A].reasons[0]
    assert health[B].status == HEALTH_OK
    # Still bound to nvidia in sysfs: the device stays in inventory, failed, so the
    # conductor takes it out of scheduling instead of deleting it.
    devices = _by_identity(w.driver.discover())
    assert sorted(devices) == [A, B]
    assert any(s.address == "nvml-index-0" and "GPU is lost" in s.reason
               for s in w.driver.explain().skipped)
    assert w.driver.health()[A].status == HEALTH_FAILED
    # Once the device left sysfs it is gone.
    w.kernel.builder.remove_pci(A)
    assert [d.identity for d in w.driver.discover()] == [B]


# -- stats -------------------------------------------------------------------------------


def test_stats(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    w.driver.discover()
    stats = w.driver.stats()
    assert stats[A]["utilization_gpu_percent"] == 42.0
    assert stats[A]["memory_used_bytes"] == float(2 * GIB)
    assert stats[A]["temperature_celsius"] == 35.0 and stats[A]["power_watts"] == 70.0
    small = w.gpus[1].migs[0].uuid
    assert stats[small] == {"memory_used_bytes": 0.0, "memory_total_bytes": float(10 * GIB)}
    assert not any(k.startswith("utilization") for k in stats[small])


def test_stats_skip_what_the_board_does_not_support(tmp_path, sandbox):
    gpus = _plain_and_mig()
    gpus[0].not_supported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates"}
    w = _world(tmp_path, sandbox, gpus)
    w.driver.discover()
    assert sorted(w.driver.stats()[A]) == ["memory_total_bytes", "memory_used_bytes",
                                           "temperature_celsius"]


# -- vGPU: legacy mdev layout ------------------------------------------------------------


def _mdev_world(tmp_path, sandbox, **conf: Any) -> World:
    types = {"nvidia-471": ("GRID H100-4C", 2), "nvidia-472": ("GRID H100-8C", 1)}
    nvml_types = {471: "GRID H100-4C", 472: "GRID H100-8C"}
    return _world(tmp_path, sandbox, [h100(0, NVML_A, vgpu_types=nvml_types), h100(1, NVML_B)],
                  conf={"vgpu_types": ["nvidia-471"], **conf},
                  gpu_kwargs={A: {"mdev_types": types}})


def test_vgpu_mdev_layout_reports_vgpu_deployables(tmp_path, sandbox):
    w = _mdev_world(tmp_path, sandbox)
    devices = _by_identity(w.driver.discover())
    _validate(list(devices.values()))
    [dep] = devices[A].deployables
    assert dict(dep.attributes) == {"rc": "VGPU", "trait0": "CUSTOM_NVIDIA_2330",
                                    "trait1": "CUSTOM_NVIDIA_VGPU_471"}
    assert dep.num_accelerators == 2
    handles = _handles(dep)
    assert {h.attach_type for h in dep.attach_handles} == {"MDEV"}
    # what Nova 34's libvirt driver reads: the parent's address, the type to create
    assert handles == [{"domain": "0000", "bus": "3b", "device": "00", "function": "0",
                        "asked_type": "nvidia-471", "vgpu_mark": f"nvidia-471_{slot}"}
                       for slot in (0, 1)]
    uuids = _mdev_uuids(dep)
    assert len(set(uuids)) == 2 and all(str(uuidlib.UUID(u)) == u for u in uuids)
    assert dict(devices[B].deployables[0].attributes)["rc"] == "PGPU"   # no mdev types
    check = {c.name: c for c in w.driver.explain().checks}[f"vgpu {A}"]
    assert check.ok and "mdev layout" in check.detail and "GRID H100-8C" in check.detail


def test_vgpu_type_spellings_are_equivalent(tmp_path, sandbox):
    assert vgpu_type_id("nvidia-471") == vgpu_type_id("471") == 471
    assert vgpu_type_id("GRID H100-4C") is None
    w = _mdev_world(tmp_path, sandbox, vgpu_types=["471", "bogus"])
    dep = _by_identity(w.driver.discover())[A].deployables[0]
    assert dict(dep.attributes)["rc"] == "VGPU"
    bad = {c.name: c for c in w.driver.explain().checks}["vgpu_types"]
    assert not bad.ok
    assert bad.detail == "enabled: 471 (GRID H100-4C); not vGPU type ids, ignored: bogus"


def test_vgpu_types_nvml_does_not_know_are_flagged(tmp_path, sandbox):
    w = _mdev_world(tmp_path, sandbox, vgpu_types=["nvidia-471", "999"])
    w.driver.discover()
    check = {c.name: c for c in w.driver.explain().checks}["vgpu_types"]
    assert not check.ok
    assert check.detail == "enabled: 471 (GRID H100-4C); no GPU here supports: 999"
    w = _world(tmp_path / "plain", sandbox, [h100(0, NVML_A)], conf={"vgpu_types": ["471"]})
    w.driver.discover()
    check = {c.name: c for c in w.driver.explain().checks}["vgpu_types"]
    assert not check.ok and "is the vGPU host driver installed?" in check.detail


def test_vgpu_mdev_prepare_release(tmp_path, sandbox):
    w = _mdev_world(tmp_path, sandbox)
    [dep] = _by_identity(w.driver.discover())[A].deployables
    first, second = _handles(dep)
    uuid1, _uuid2 = _mdev_uuids(dep)

    assert w.driver.prepare(A, first) == first      # the handle's identity never changes
    assert w.kernel.mdev_exists(uuid1)              # created under the handle's uuid
    assert w.kernel.mdev_type_of(uuid1) == "nvidia-471"
    assert w.kernel.mdev_parent_of(uuid1) == A
    creates = len(w.kernel.writes_to("/create"))
    assert w.driver.prepare(A, first) == first      # idempotent: no second create
    assert len(w.kernel.writes_to("/create")) == creates

    # The handles stay the same after the mdev exists (in-use handles never vanish).
    [dep_after] = _by_identity(w.driver.discover())[A].deployables
    assert _handles(dep_after) == [first, second] and dep_after.num_accelerators == 2
    assert _mdev_uuids(dep_after) == _mdev_uuids(dep)

    w.driver.prepare(A, second)
    assert w.kernel.read_int(w.kernel.device_path(
        A, "mdev_supported_types/nvidia-471/available_instances")) == 0
    w.driver.release(A, first)
    assert not w.kernel.mdev_exists(uuid1)
    w.driver.release(A, first)                              # already gone: fine
    assert w.kernel.writes_to(f"{uuid1}/remove") == [
        (f"/sys/bus/mdev/devices/{uuid1}/remove", "1")]


def test_an_mdev_nova_made_after_a_host_reboot_is_the_handles_own(tmp_path, sandbox):
    """A reboot loses the mdevs; Nova's libvirt driver then creates the guest's mdev
    itself under the handle's uuid: the driver still counts it as that slot's, and the
    unbind removes it (no second mdev, none left behind)."""
    w = _mdev_world(tmp_path, sandbox)
    [dep] = _by_identity(w.driver.discover())[A].deployables
    first, second = _handles(dep)
    uuid1, _uuid2 = _mdev_uuids(dep)
    w.kernel.mdev_create(A, "nvidia-471", uuid1)            # what Nova did at spawn
    [dep_after] = _by_identity(w.driver.discover())[A].deployables
    assert _handles(dep_after) == [first, second] and _mdev_uuids(dep_after) == [
        uuid1, _uuid2]
    creates = len(w.kernel.writes_to("/create"))
    w.driver.prepare(A, first)                              # found, not made twice
    assert len(w.kernel.writes_to("/create")) == creates
    w.driver.release(A, first)
    assert not w.kernel.mdev_exists(uuid1)


def test_release_undefines_the_mdev_nova_defined(tmp_path, sandbox):
    """Nova's libvirt driver defines the mdevs it creates (libvirt through mdevctl, with
    autostart): the unbind removes the definition too, or the next boot would bring the
    mdev back while its handle is free."""
    w = _mdev_world(tmp_path, sandbox)
    [dep] = _by_identity(w.driver.discover())[A].deployables
    first = _handles(dep)[0]
    uuid = _mdev_uuids(dep)[0]
    w.driver.prepare(A, first)
    defined = f"{uuid} {A} nvidia-471 auto (defined)\n"
    w.runner.script(["mdevctl", "list"], Result(0, stdout=defined))
    w.runner.script(["mdevctl", "undefine"], Result(0))
    w.driver.release(A, first)
    assert not w.kernel.mdev_exists(uuid)
    assert [(c.argv, c.privileged) for c in w.runner.calls] == [
        (["mdevctl", "list", "--defined", "--uuid", uuid], False),
        (["mdevctl", "undefine", "--uuid", uuid], True)]
    # nothing defined: nothing undefined; a failing undefine is the release's error
    w.runner.script(["mdevctl", "list"], Result(0, stdout=""))
    w.driver.release(A, first)
    assert len(w.runner.calls) == 3
    w.runner.script(["mdevctl", "list"], Result(0, stdout=defined))
    w.runner.script(["mdevctl", "undefine"], Result(1, stderr="permission denied"))
    with pytest.raises(DriverError, match="mdevctl undefine failed: permission denied"):
        w.driver.release(A, first)


def test_vgpu_mdev_prepare_errors(tmp_path, sandbox):
    w = _mdev_world(tmp_path, sandbox)
    [dep] = _by_identity(w.driver.discover())[A].deployables
    on_b = {**_handles(dep)[0], "bus": "86"}
    with pytest.raises(DriverError, match="neither"):
        w.driver.prepare(A, on_b)
    with pytest.raises(DriverError, match="bad vgpu_mark"):
        w.driver.prepare(A, {**_handles(dep)[0], "vgpu_mark": "nvidia-471_x"})
    # nvidia-472 has one instance: the second distinct mdev finds none free (ENOSPC).
    w.driver.prepare(A, mdev_attach_info(A, "nvidia-472", 0))
    with pytest.raises(DriverError, match="no free vGPU instance"):
        w.driver.prepare(A, mdev_attach_info(A, "nvidia-472", 1))
    # A UUID already used by an mdev of another type is not silently accepted.
    w.kernel.mdev_create(A, "nvidia-471", _mdev_uuid(w, A, "nvidia-472", 5))
    with pytest.raises(DriverError, match="exists as nvidia-471"):
        w.driver.prepare(A, mdev_attach_info(A, "nvidia-472", 5))


def _mdev_uuid(w: World, parent: str, type_name: str, slot: int) -> str:
    """The uuid the driver derives for a slot (the one its report names the handle by)."""
    key = f"{w.driver.ctx.host}|{parent}|{type_name}|{slot}"
    return str(uuidlib.uuid5(nvidia._MDEV_NAMESPACE, key))


def test_vgpu_mdev_on_sriov_vfs(tmp_path, sandbox):
    # Ampere-style: sriov-manage enabled VFs; the mdev types live on the VFs.
    w = _world(tmp_path, sandbox, [h100(0, NVML_A), h100(1, NVML_B)],
               conf={"vgpu_types": ["nvidia-471"]}, vfs={A: 2},
               gpu_kwargs={A: {"totalvfs": 4, "vf_driver": "nvidia",
                               "vf_mdev_types": {"nvidia-471": ("GRID A100-4C", 1)}}})
    [dep] = _by_identity(w.driver.discover())[A].deployables
    vfs = w.kernel.virtfns(A)
    # each VF is the parent Nova names (pci_<domain>_<bus>_<device>_<function>)
    assert [pci.from_attach_info(h) for h in _handles(dep)] == [pci.parse(v) for v in vfs]
    assert dep.num_accelerators == 2
    assert all(s.address != vfs[0] for s in w.driver.explain().skipped)  # VFs: no noise
    handle, uuid = _handles(dep)[1], _mdev_uuids(dep)[1]
    w.driver.prepare(A, handle)
    assert w.kernel.mdev_parent_of(uuid) == vfs[1]
    w.driver.release(A, handle)
    assert not w.kernel.mdev_exists(uuid)


# -- vGPU: NVIDIA vendor-specific VFIO framework (per-VF nvidia/) -------------------------


def _vf_world(tmp_path, sandbox) -> World:
    types = {557: "NVIDIA H100-1-10C", 558: "NVIDIA H100-2-20C"}
    return _world(tmp_path, sandbox, [h100(0, NVML_A, vgpu_types=types), h100(1, NVML_B)],
                  conf={"vgpu_types": ["557"]}, vfs={A: 3},
                  gpu_kwargs={A: {"totalvfs": 16, "vf_driver": "nvidia",
                                  "vf_nvidia_vgpu_types": types}})


def test_vgpu_vf_layout_reports_vf_handles(tmp_path, sandbox):
    w = _vf_world(tmp_path, sandbox)
    devices = _by_identity(w.driver.discover())
    _validate(list(devices.values()))
    [dep] = devices[A].deployables
    assert dict(dep.attributes)["rc"] == "VGPU" and dep.num_accelerators == 3
    vfs = w.kernel.virtfns(A)
    assert [(h.attach_type, dict(h.attach_info)) for h in dep.attach_handles] == [
        ("PCI", {"domain": "0000", "bus": vf[5:7], "device": vf[8:10], "function": vf[11],
                 "vgpu_type": "557"}) for vf in vfs]
    check = {c.name: c for c in w.driver.explain().checks}[f"vgpu {A}"]
    assert "vfio layout" in check.detail and "558 (NVIDIA H100-2-20C)" in check.detail


def test_vgpu_vf_prepare_release(tmp_path, sandbox):
    w = _vf_world(tmp_path, sandbox)
    [dep] = _by_identity(w.driver.discover())[A].deployables
    handle = _handles(dep)[0]
    vf = w.kernel.virtfns(A)[0]
    current = w.kernel.device_path(vf, "nvidia", "current_vgpu_type")

    assert w.driver.prepare(A, handle) == handle
    assert w.kernel.read(current) == "557"
    assert w.driver.prepare(A, handle) == handle            # idempotent: no second write
    assert w.kernel.writes_to("current_vgpu_type") == [(current, "557")]
    # The VF stays offered for its type while it carries it.
    [dep_after] = _by_identity(w.driver.discover())[A].deployables
    assert handle in _handles(dep_after)

    w.driver.release(A, handle)
    assert w.kernel.read(current) == "0"
    w.driver.release(A, handle)                            # already free: no write
    assert w.kernel.writes_to("current_vgpu_type") == [(current, "557"), (current, "0")]


def test_vgpu_vf_busy_with_another_type(tmp_path, sandbox):
    w = _vf_world(tmp_path, sandbox)
    [dep] = _by_identity(w.driver.discover())[A].deployables
    handle = _handles(dep)[0]
    vf = w.kernel.virtfns(A)[0]
    w.kernel.set_current_vgpu_type(vf, 558)
    assert handle not in _handles(_by_identity(w.driver.discover())[A].deployables[0])
    with pytest.raises(DriverError, match="already has vGPU type 558"):
        w.driver.prepare(A, handle)
    w.driver.release(A, handle)                            # not ours: left alone
    assert w.kernel.read(w.kernel.device_path(vf, "nvidia", "current_vgpu_type")) == "558"


def test_vgpu_vf_kernel_refusal_is_a_driver_error(tmp_path, sandbox):
    w = _vf_world(tmp_path, sandbox)
    vf = w.kernel.virtfns(A)[1]
    bad = {"domain": "0000", "bus": vf[5:7], "device": vf[8:10], "function": vf[11],
           "vgpu_type": "999"}
    with pytest.raises(DriverError, match="type not creatable now") as err:
        w.driver.prepare(A, bad)
    assert isinstance(err.value.__cause__, OSError)
    assert err.value.__cause__.errno == errno.EINVAL


# -- MIG handles -------------------------------------------------------------------------


def test_mig_prepare_checks_the_instance_exists(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    w.driver.discover()
    handle = {"parent": B, "mig_uuid": w.gpus[1].migs[0].uuid}
    assert w.driver.prepare(B, handle) == handle
    w.gpus[1].migs.pop(0)                                  # destroyed behind our back
    with pytest.raises(DriverError, match="does not exist"):
        w.driver.prepare(B, handle)


def test_pgpu_prepare_is_a_no_op(tmp_path, sandbox):
    w = _world(tmp_path, sandbox, _plain_and_mig())
    w.driver.discover()
    info = {"domain": "0000", "bus": "3b", "device": "00", "function": "0"}
    assert w.driver.prepare(A, info) == info
    w.driver.release(A, info)
    assert w.kernel.writes == []


def test_mig_resource_class_names():
    assert mig_resource_class("1g.10gb", 19) == "CUSTOM_NVIDIA_MIG_1G_10GB"
    assert mig_resource_class("1g.10gb+me", 20) == "CUSTOM_NVIDIA_MIG_1G_10GB_ME"
    assert mig_resource_class("", 42) == "CUSTOM_NVIDIA_MIG_PROFILE_42"
    assert mig_resource_class("", -1) == "CUSTOM_NVIDIA_MIG_UNKNOWN"


def test_mig_profile_unknown_to_nvml(tmp_path, sandbox):
    gpus = _plain_and_mig()
    gpus[1].migs[2].profile_id = 99               # a profile the GPU does not list
    gpus[1].no_permission = {"nvmlDeviceGetGpuInstanceById"}
    w = _world(tmp_path, sandbox, gpus)
    devices = _by_identity(w.driver.discover())
    _validate(list(devices.values()))
    by_rc = {dict(d.attributes)["rc"]: d for d in devices[B].deployables}
    assert sorted(by_rc) == ["CUSTOM_NVIDIA_MIG_1G_10GB", "CUSTOM_NVIDIA_MIG_UNKNOWN"]
    unknown = by_rc["CUSTOM_NVIDIA_MIG_UNKNOWN"]
    assert dict(unknown.attributes) == {"rc": "CUSTOM_NVIDIA_MIG_UNKNOWN",
                                        "trait0": "CUSTOM_NVIDIA_2330"}
    assert unknown.name == f"host1_{B}_mig_unknown"
