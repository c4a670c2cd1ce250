"""The generic PCI driver on FakeKernel trees: discovery, explain, health, install and
uninstall, prepare/release, host attach, backends and every failure path."""

from __future__ import annotations

import json
import os
from importlib.metadata import entry_points

import pytest

from acceld import reports
from acceld.agent import fileutil
from acceld.agent.drivers.base import (
    HEALTH_DEGRADED,
    HEALTH_FAILED,
    HEALTH_OK,
    DriverContext,
    DriverError,
)
from acceld.agent.drivers.generic import GenericDriver
from acceld.hw import pci
from acceld.hw.sysfs import Sysfs
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.helpers import make_conf

GPU = "0000:af:00.0"
VGA = "0000:00:02.0"
PORT = "0000:00:01.0"
QAT_A = "0000:3b:00.0"
QAT_B = "0000:3d:00.0"
GPU_SPEC = {"vendor_id": "10de", "product_id": "1eb8", "device_type": "GPU",
            "traits": ["CUSTOM_NVIDIA_T4"], "backend": "gpus"}
QAT_SPEC = {"vendor_id": "8086", "product_id": "4940"}


def host(tmp_path, *, iommu: bool = True, vfio: bool = True) -> FakeKernel:
    """A host with a GPU, the boot VGA, a root port and two QAT 4xxx PFs."""
    b = FakeSysfsBuilder(tmp_path / "root", iommu=iommu, vf_device_ids={"4940": "4941"})
    if vfio:
        b.driver("vfio-pci")
    b.driver("4xxxvf", module="qat_4xxx")
    b.pci(PORT, "8086", "1901", "0x060400", driver="pcieport")
    b.pci(VGA, "8086", "3e92", "0x030000", driver="i915", attrs={"boot_vga": "1"})
    b.pci(GPU, "10de", "1eb8", "0x030200", numa=1, driver="nvidia")
    for addr, numa in ((QAT_A, 0), (QAT_B, 1)):
        b.pci(addr, "8086", "4940", "0x0b4000", numa=numa, driver="qat_4xxx", totalvfs=16,
              vf_driver="4xxxvf", attrs={"qat/state": "up", "qat/cfg_services": "sym;asym"})
    return b.kernel()


def driver(tmp_path, kernel, *specs, **options) -> GenericDriver:
    conf = make_conf(generic_driver={"device_spec": [json.dumps(s) for s in specs],
                                     **options})
    return GenericDriver(DriverContext(conf=conf, host="host1",
                                       state_dir=str(tmp_path / "state"), sysfs=kernel))


def state(tmp_path) -> dict:
    return fileutil.read_json(str(tmp_path / "state" / "generic-state.json")) or {}


def handles(device: reports.Device) -> list[str]:
    return [str(pci.from_attach_info(dict(h.attach_info)))
            for h in device.deployables[0].attach_handles]


# -- discovery ---------------------------------------------------------------------------

def test_pf_is_its_own_handle_with_numa_group_and_class(tmp_path):
    k = host(tmp_path)
    [dev] = driver(tmp_path, k, GPU_SPEC).discover()
    assert (dev.identity, dev.type, dev.vendor, dev.model) == (GPU, "GPU", "10de", "1eb8")
    info = dict(dev.std_board_info)
    assert info["numa_node"] == "1" and info["class"] == "030200"
    assert info["iommu_group"] == str(k.pci_device(GPU).iommu_group)
    [dep] = dev.deployables
    assert dict(dep.attributes) == {"rc": "PGPU", "trait0": "CUSTOM_NVIDIA_T4",
                                    "backend": "gpus", "numa_node": "1"}
    assert dep.num_accelerators == 1 and handles(dev) == [GPU]
    assert dev.controlpath_type == "PCI" and dict(dev.controlpath_info)["bus"] == "af"
    # the report passes the wire schema
    report = reports.InventoryReport(host="host1", epoch="e", seq=1, drivers=(
        reports.DriverReport(name="generic", version="1.0.0", devices=(dev,)),))
    assert reports.InventoryReport.from_dict(report.to_dict()).drivers[0].devices == (dev,)


def test_vfs_are_the_handles_and_qat_services_are_read(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(QAT_A, 3)
    devices = driver(tmp_path, k, QAT_SPEC).discover()
    assert [d.identity for d in devices] == [QAT_A, QAT_B]
    qat_a, qat_b = devices
    assert handles(qat_a) == ["0000:3b:00.1", "0000:3b:00.2", "0000:3b:00.3"]
    assert qat_a.deployables[0].num_accelerators == 3
    assert handles(qat_b) == [QAT_B]
    assert qat_a.type == "QAT"                               # qat/ directory present
    assert dict(qat_a.deployables[0].attributes)["services"] == "sym;asym"
    assert dict(qat_a.deployables[0].attributes)["rc"] == "CUSTOM_QAT"


def test_class_prefix_and_boot_vga_skip(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {"class": "0x03"})
    assert [x.identity for x in d.discover()] == [GPU]
    skipped = {s.address: s.reason for s in d.explain().skipped}
    assert "boot VGA" in skipped[VGA]
    d = driver(tmp_path, k, {"class": "0300"})               # VGA only: 030000
    assert d.discover() == []
    assert not [c for c in d.explain().checks if c.name.startswith("spec 0")][0].ok


def test_address_glob_excludes_and_says_so(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {**QAT_SPEC, "address": "3b:*.*"})
    assert [x.identity for x in d.discover()] == [QAT_A]
    assert [(s.address, "address" in s.reason) for s in d.explain().skipped] == [(QAT_B, True)]


def test_protected_driver_and_vf_skips(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(QAT_B, 1)
    d = driver(tmp_path, k, {"class": "0604"}, protected_drivers=["pcieport"])
    assert d.discover() == []
    assert "protected_drivers" in d.explain().skipped[0].reason
    d = driver(tmp_path, k, {"vendor_id": "8086", "product_id": "4941"})
    assert d.discover() == []
    assert d.explain().skipped[0].address == "0000:3d:00.1"
    assert "VF of 0000:3d:00.0" in d.explain().skipped[0].reason


def test_names_are_display_only(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, GPU_SPEC)
    ids = tmp_path / "pci.ids"
    ids.write_text("10de  NVIDIA Corporation\n\t1eb8  TU104GL [Tesla T4]\n")
    from acceld.hw.names import PciNames
    d.names = PciNames(str(ids))
    [dev] = d.discover()
    assert dict(dev.vendor_board_info) == {"vendor_name": "NVIDIA Corporation",
                                           "product_name": "TU104GL [Tesla T4]"}
    assert dev.vendor == "10de"                              # logic keys on ids


# -- explain -----------------------------------------------------------------------------

def test_no_spec_is_an_empty_inventory_with_a_reason(tmp_path):
    d = driver(tmp_path, host(tmp_path))
    assert d.discover() == []
    ex = d.explain()
    assert ex.found == 0 and ex.expected is None
    [cfg] = [c for c in ex.checks if c.name == "device_spec"]
    assert not cfg.ok and "no [generic_driver] device_spec" in cfg.detail


def test_checks_iommu_vfio_expected_vs_found(tmp_path):
    k = host(tmp_path, iommu=False, vfio=False)
    d = driver(tmp_path, k, {**QAT_SPEC, "count": 3}, {**GPU_SPEC, "num_vfs": 2})
    d.discover()
    ex = d.explain()
    checks = {c.name: c for c in ex.checks}
    assert not checks["iommu"].ok and "intel_iommu=on" in checks["iommu"].detail
    assert not checks["vfio-pci"].ok and "modprobe vfio-pci" in checks["vfio-pci"].detail
    spec0 = checks["spec 0 (vendor_id=8086 product_id=4940)"]
    assert not spec0.ok and spec0.detail == f"expected 3, found 2: {QAT_A}, {QAT_B}"
    assert checks["spec 1 (vendor_id=10de product_id=1eb8)"].ok
    assert not checks[f"{GPU} sriov"].ok and "not SR-IOV" in checks[f"{GPU} sriov"].detail
    assert checks[f"{QAT_A} qat"].ok
    assert (ex.expected, ex.found) == (3, 3)
    assert ex.to_dict()["checks"][0]["name"] == "device_spec"


def test_sriov_check_reports_missing_vfs(tmp_path):
    d = driver(tmp_path, host(tmp_path), {**QAT_SPEC, "num_vfs": 4, "address": QAT_A})
    [dev] = d.discover()
    assert handles(dev) == []            # VFs are coming: the PF is not offered meanwhile
    check = {c.name: c for c in d.explain().checks}[f"{QAT_A} sriov"]
    assert not check.ok and check.detail == "0 of 4 configured VFs present; install creates them"


# -- health ------------------------------------------------------------------------------

def test_health(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(QAT_A, 2)
    d = driver(tmp_path, k, QAT_SPEC, GPU_SPEC)
    d.discover()
    assert {i: h.status for i, h in d.health().items()} == \
        {QAT_A: HEALTH_OK, QAT_B: HEALTH_OK, GPU: HEALTH_OK}
    k.builder.set_aer_fatal(GPU, 2)
    k.write(k.device_path(QAT_B, "qat", "state"), "down")
    k.builder.remove_pci("0000:3b:00.2")
    h = d.health()
    assert h[GPU].status == HEALTH_FAILED and "2 fatal AER" in h[GPU].reasons[0]
    assert h[QAT_B].status == HEALTH_DEGRADED and "QAT state is down" in h[QAT_B].reasons[0]
    assert h[QAT_A].status == HEALTH_DEGRADED and "0000:3b:00.2" in h[QAT_A].reasons[0]
    k.builder.remove_pci(QAT_A)
    assert d.health()[QAT_A] .status == HEALTH_FAILED
    assert "gone" in d.health()[QAT_A].reasons[0]


def test_health_config_space_all_ones_and_without_discovery(tmp_path):
    k = host(tmp_path)
    with open(k.path(k.device_path(GPU, "config")), "r+b") as f:
        f.write(b"\xff\xff\xff\xff")
    h = driver(tmp_path, k, GPU_SPEC).health()              # no discover() first
    assert h[GPU].status == HEALTH_FAILED and "all-ones" in h[GPU].reasons[0]


# -- install / uninstall -------------------------------------------------------------------

def test_install_binds_pf_to_vfio_and_uninstall_restores(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, GPU_SPEC)
    d.install(GPU)
    assert k.driver_of(GPU) == "vfio-pci"
    assert state(tmp_path) == {GPU: {"handles": {GPU: "nvidia"}, "installed": True}}
    writes = len(k.writes)
    d.install(GPU)                                           # idempotent: nothing to do
    assert len(k.writes) == writes
    d.uninstall(GPU)
    gpu = k.pci_device(GPU)
    assert gpu.driver == "nvidia" and gpu.driver_override is None
    assert state(tmp_path) == {}
    writes = len(k.writes)
    d.uninstall(GPU)
    assert len(k.writes) == writes


def test_install_creates_vfs_on_vfio_and_uninstall_removes_them(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 4})
    d.install(QAT_A)
    numvfs = f"/sys/bus/pci/devices/{QAT_A}/sriov_numvfs"
    autoprobe = f"/sys/bus/pci/devices/{QAT_A}/sriov_drivers_autoprobe"
    assert k.writes[:2] == [(autoprobe, "0"), (numvfs, "4")]
    vfs = k.virtfns(QAT_A)
    assert len(vfs) == 4 and {k.driver_of(v) for v in vfs} == {"vfio-pci"}
    assert k.driver_of(QAT_A) == "qat_4xxx"                  # the PF keeps its driver
    [a, _b] = d.discover()
    assert handles(a) == vfs
    entry = state(tmp_path)[QAT_A]
    assert entry["original_numvfs"] == 0 and entry["original_autoprobe"] is True
    assert entry["handles"] == dict.fromkeys(vfs)           # unbound before (autoprobe 0)
    d.uninstall(QAT_A)
    pf = k.pci_device(QAT_A)
    assert pf.sriov_numvfs == 0 and pf.virtfns == () and pf.sriov_drivers_autoprobe is True
    assert state(tmp_path) == {}


def test_install_resumes_after_a_crash(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 2})
    d.install(QAT_A)
    vf = k.virtfns(QAT_A)[0]
    k.unbind(vf)                                           # the half-done state
    d.install(QAT_A)
    assert k.driver_of(vf) == "vfio-pci"
    assert state(tmp_path)[QAT_A]["original_numvfs"] == 0   # originals not overwritten


def test_install_changes_an_existing_vf_count_via_zero(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(QAT_A, 2)
    d = driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 3, "vfio": False})
    d.install(QAT_A)
    assert [v for p, v in k.writes_to("sriov_numvfs")][-2:] == ["0", "3"]
    assert {k.driver_of(v) for v in k.virtfns(QAT_A)} == {"4xxxvf"}   # vfio false
    d.uninstall(QAT_A)
    assert len(k.virtfns(QAT_A)) == 2                        # back to what it was


# -- failure paths ----------------------------------------------------------------------

def test_busy_vf_count(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(QAT_A, 2, autoprobe=False)
    vf = k.virtfns(QAT_A)[0]
    k.bind_driver(vf, "vfio-pci")
    k.mark_in_use(vf)
    d = driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 4})
    with pytest.raises(DriverError, match="VF is in use"):
        d.install(QAT_A)
    assert len(k.virtfns(QAT_A)) == 2


def test_iommu_off_and_vfio_missing(tmp_path):
    d = driver(tmp_path, host(tmp_path, iommu=False), GPU_SPEC)
    with pytest.raises(DriverError, match="IOMMU is off"):
        d.install(GPU)
    d = driver(tmp_path / "b", host(tmp_path / "b", vfio=False), GPU_SPEC)
    with pytest.raises(DriverError, match="vfio-pci is not loaded"):
        d.install(GPU)
    with pytest.raises(DriverError, match="vfio-pci is not loaded"):
        d.prepare(GPU, pci.to_attach_info(GPU))


def test_device_gone(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, GPU_SPEC)
    d.install(GPU)
    k.builder.remove_pci(GPU)
    for op in (d.install, d.uninstall, d.attach_host, d.detach_host):
        with pytest.raises(DriverError, match="is gone"):
            op(GPU)
    with pytest.raises(DriverError, match="is gone"):
        d.prepare(GPU, pci.to_attach_info(GPU))
    d.release(GPU, pci.to_attach_info(GPU))                 # nothing left to release
    assert GPU in state(tmp_path)                           # kept until it comes back


def test_not_managed_and_bad_vf_counts(tmp_path):
    k = host(tmp_path)
    with pytest.raises(DriverError, match="not a device this driver manages"):
        driver(tmp_path, k, GPU_SPEC).install(QAT_A)
    with pytest.raises(DriverError, match="not a PCI address"):
        driver(tmp_path, k, GPU_SPEC).install("gpu0")
    with pytest.raises(DriverError, match="above sriov_totalvfs=16"):
        driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 17}).install(QAT_A)
    with pytest.raises(DriverError, match="not SR-IOV capable"):
        driver(tmp_path, k, {**GPU_SPEC, "num_vfs": 1}).install(GPU)
    k.builder.unbind(QAT_B)
    with pytest.raises(DriverError, match="no driver is bound to the PF"):
        driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 1}).install(QAT_B)


@pytest.mark.parametrize("spec,message", [
    ("{not json", "entry 1 is not valid JSON"),
    ('["vendor_id"]', "must be a JSON object"),
    ('{"vendor_id": "10de", "colour": "red"}', "unknown field 'colour'"),
    ('{"vendor_id": "10dex"}', "field 'vendor_id'"),
    ('{"vendor_id": "10de", "device_type": "TPU"}', "field 'device_type'"),
    ('{"vendor_id": "10de", "num_vfs": -1}', "field 'num_vfs'"),
    ('{"vendor_id": "10de", "traits": ["lower"]}', "field 'traits/0'"),
    ('{"vendor_id": "10de", "vfio": "yes"}', "field 'vfio'"),
    ('{"device_type": "GPU"}', "needs at least one of vendor_id"),
    ('{"address": "3b:zz.*"}', "field 'address'"),
])
def test_bad_spec_fails_loading_naming_the_field(tmp_path, spec, message):
    conf = make_conf(generic_driver={"device_spec": ['{"class": "03"}', spec]})
    with pytest.raises(DriverError, match=message) as exc:
        GenericDriver(DriverContext(conf=conf, host="h", state_dir=str(tmp_path)))
    assert "[generic_driver] device_spec entry" in str(exc.value)


# -- prepare / release / host ---------------------------------------------------------------

def test_prepare_release_pf_handle(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, GPU_SPEC)
    info = pci.to_attach_info(GPU)
    assert d.prepare(GPU, info) == info
    assert k.driver_of(GPU) == "vfio-pci"
    writes = len(k.writes)
    d.prepare(GPU, info)
    assert len(k.writes) == writes
    d.release(GPU, info)
    assert k.driver_of(GPU) == "nvidia" and state(tmp_path) == {}
    d.release(GPU, info)
    assert k.driver_of(GPU) == "nvidia"


def test_prepare_release_vf_handle(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(QAT_A, 2)
    d = driver(tmp_path, k, {**QAT_SPEC, "vfio": False})
    vf = k.virtfns(QAT_A)[1]
    info = {**pci.to_attach_info(vf)}
    d.prepare(QAT_A, info)
    assert k.driver_of(vf) == "vfio-pci" and k.driver_of(k.virtfns(QAT_A)[0]) == "4xxxvf"
    d.release(QAT_A, info)
    assert k.driver_of(vf) == "4xxxvf" and k.pci_device(vf).driver_override is None
    with pytest.raises(DriverError, match="not an attach handle of 0000:3b:00.0"):
        d.prepare(QAT_A, pci.to_attach_info(QAT_B))
    with pytest.raises(DriverError, match="bad PCI attach_info"):
        d.prepare(QAT_A, {"bus": "3b"})


def test_release_keeps_installed_handles_on_vfio(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 2})
    d.install(QAT_A)
    vf = k.virtfns(QAT_A)[0]
    d.prepare(QAT_A, pci.to_attach_info(vf))
    d.release(QAT_A, pci.to_attach_info(vf))
    assert k.driver_of(vf) == "vfio-pci"


def test_attach_and_detach_host(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, GPU_SPEC)
    d.install(GPU)
    d.attach_host(GPU)
    assert k.driver_of(GPU) == "nvidia"
    d.detach_host(GPU)
    assert k.driver_of(GPU) == "vfio-pci"
    d.uninstall(GPU)
    assert k.driver_of(GPU) == "nvidia"


def test_attach_host_of_created_vfs_lets_the_kernel_choose(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {**QAT_SPEC, "num_vfs": 2, "address": QAT_A})
    d.install(QAT_A)
    d.attach_host(QAT_A)
    assert {k.driver_of(v) for v in k.virtfns(QAT_A)} == {"4xxxvf"}


# -- backends and loading ------------------------------------------------------------------

def test_single_and_multi_backend(tmp_path):
    k = host(tmp_path)
    single = driver(tmp_path, k, {**QAT_SPEC, "backend": "qat"})
    single.discover()
    assert single.backends() == {"qat": {"devices": [QAT_A, QAT_B],
                                         "services": ["sym", "asym"]}}
    multi = driver(tmp_path, k, {**QAT_SPEC, "address": QAT_A, "backend": "crypto",
                                 "services": "sym"},
                   {**QAT_SPEC, "address": QAT_B, "backend": "compression", "services": "dc"},
                   GPU_SPEC)
    devices = multi.discover()
    assert multi.backends() == {"compression": {"devices": [QAT_B], "services": ["dc"]},
                                "crypto": {"devices": [QAT_A], "services": ["sym"]},
                                "gpus": {"devices": [GPU], "services": []}}
    attrs = {d.identity: dict(d.deployables[0].attributes) for d in devices}
    assert attrs[QAT_B]["backend"] == "compression" and attrs[QAT_B]["services"] == "dc"


def test_loads_with_only_conf_host_and_state_dir(tmp_path):
    conf = make_conf()
    d = GenericDriver(DriverContext(conf=conf, host="h", state_dir=str(tmp_path)))
    assert isinstance(d.sysfs, Sysfs) and d.sysfs.root == "/"
    assert d.discover() == []                                # no spec: nothing, no error
    assert entry_points(group="acceld.drivers")["generic"].load() is GenericDriver
    assert not os.path.exists(tmp_path / "generic-state.json")


def _doc_specs(name: str, option: str) -> list[list[str]]:
    """The ``option = {...}`` lines of each ini block in docs/drivers/<name>.md."""
    text = open(os.path.join(os.path.dirname(__file__), "../../../docs/drivers", name)).read()
    blocks = text.split("```ini")[1:]
    return [[line.split("=", 1)[1].strip() for line in block.split("```")[0].splitlines()
             if line.startswith(f"{option} =")] for block in blocks]


def test_documented_examples_load():
    from acceld.agent.drivers.pcidev import load_specs
    blocks = [b for b in _doc_specs("generic.md", "device_spec") if b]
    assert len(blocks) == 3
    for block in blocks:
        assert load_specs(block, "generic_driver", "device_spec")
    blocks = [b for b in _doc_specs("sriov.md", "pf_spec") if b]
    assert len(blocks) == 3
    for block in blocks:
        assert load_specs(block, "sriov_driver", "pf_spec")
