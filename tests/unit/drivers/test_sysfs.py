"""The Sysfs layer: reads on fake trees, operations' write sequences, pci.ids names."""

from __future__ import annotations

import errno
import os

import pytest

from acceld.hw import names, sysfs
from acceld.hw.sysfs import IOMMU_GROUPS, MDEV_BUS, BindError, Sysfs
from tests.fakes.kernel import FakeSysfsBuilder

QAT = "0000:3b:00.0"
GPU = "0000:af:00.0"


@pytest.fixture
def builder(tmp_path):
    b = FakeSysfsBuilder(tmp_path, vf_device_ids={"4940": "4941"})
    b.driver("vfio-pci").driver("4xxxvf", module="qat_4xxx")
    b.pci(QAT, "8086", "4940", "0x0b4000", numa=1, driver="qat_4xxx", totalvfs=8,
          vf_driver="4xxxvf", subsystem_device="0002",
          attrs={"qat/state": "up", "qat/cfg_services": "sym;asym"})
    b.pci(GPU, "10de", "1eb8", "0x030200", driver="nvidia", iommu_group=40,
          mdev_types={"nvidia-222": ("GRID T4-1B", 16)}, aer_fatal=0)
    return b


def test_pci_device_snapshot(builder):
    s = Sysfs(str(builder.root))
    dev = s.pci_device("00000000:3B:00.0")
    assert dev.address == QAT and (dev.vendor, dev.device) == ("8086", "4940")
    assert dev.pci_class == "0b4000" and dev.class_code == 0x0B4000
    assert (dev.subsystem_vendor, dev.subsystem_device) == ("8086", "0002")
    assert dev.numa_node == 1 and dev.iommu_group == 0 and dev.driver == "qat_4xxx"
    assert dev.driver_override is None              # "(null)"
    assert (dev.sriov_totalvfs, dev.sriov_numvfs, dev.sriov_drivers_autoprobe) == (8, 0, True)
    assert dev.sriov_vf_device == "4941" and dev.sriov_capable and not dev.is_vf
    assert dev.mdev_supported_types == {} and dev.nvidia_creatable_vgpu_types is None


def test_gpu_numa_none_group_mdev_types(builder):
    s = Sysfs(str(builder.root))
    gpu = s.pci_device(GPU)
    assert gpu.numa_node is None                    # -1 means no affinity
    assert gpu.iommu_group == 40 and s.listdir(IOMMU_GROUPS, "40", "devices") == [GPU]
    assert gpu.sriov_totalvfs is None and gpu.sriov_numvfs is None and not gpu.sriov_capable
    t = gpu.mdev_supported_types["nvidia-222"]
    assert (t.name, t.available_instances, t.device_api) == ("GRID T4-1B", 16, "vfio-pci")
    assert s.listdir(MDEV_BUS) == [GPU]
    assert s.mdev_types(GPU)["nvidia-222"] == t
    assert s.aer_fatal_count(GPU) == 0 and s.aer_fatal_count(QAT) is None


def test_no_iommu_and_nvidia_vf_files(tmp_path):
    b = FakeSysfsBuilder(tmp_path, iommu=False)
    b.pci("0000:01:00.4", "10de", "2331", "0x030200", driver="nvidia",
          nvidia_vgpu_types={1: "NVIDIA H100-1-10C", 2: "NVIDIA H100-2-20C"})
    s = Sysfs(str(tmp_path))
    dev = s.pci_device("01:00.4")
    assert dev.iommu_group is None and not s.iommu_enabled()
    assert "1     : NVIDIA H100-1-10C" in dev.nvidia_creatable_vgpu_types
    assert dev.nvidia_current_vgpu_type == "0"


def test_listing_and_host_facts(builder):
    s = Sysfs(str(builder.root))
    assert s.pci_addresses() == [QAT, GPU]
    assert [d.address for d in s.pci_devices()] == [QAT, GPU]
    assert s.iommu_enabled()
    assert s.driver_loaded("vfio-pci") and not s.driver_loaded("mlx5_core")
    assert s.module_loaded("qat_4xxx") and s.module_loaded("vfio-pci")  # - and _ alike
    assert not s.module_loaded("nvidia_vgpu_vfio")
    assert s.driver_of(GPU) == "nvidia"


def test_reads_of_missing_things_are_none(builder):
    s = Sysfs(str(builder.root))
    assert s.pci_device("0000:99:00.0") is None
    assert s.read("/sys/nope") is None and s.read_int("/sys/nope") is None
    assert s.readlink(s.device_path(GPU, "vendor")) is None     # not a link
    assert s.link_name(s.device_path(GPU, "physfn")) is None
    assert s.listdir("/sys/nope") == []
    assert s.read_int(s.device_path(GPU, "vendor")) == 0x10DE
    assert s.read_int(s.device_path(GPU, "numa_node")) == -1


def test_vanished_device_is_left_out(builder):
    builder.remove_pci(GPU)
    s = Sysfs(str(builder.root))
    assert s.pci_addresses() == [QAT] and s.pci_device(GPU) is None
    assert s.listdir("/sys/kernel/iommu_groups/40/devices") == []


def test_path_mapping(tmp_path):
    s = Sysfs(str(tmp_path))
    assert s.path("/sys/bus/pci", "devices") == os.path.join(str(tmp_path), "sys/bus/pci/devices")
    assert s.host_path(os.path.join(str(tmp_path), "sys", "x")) == "/sys/x"
    with pytest.raises(ValueError):
        s.path("relative/path")
    with pytest.raises(ValueError):
        s.host_path("/etc/passwd")


def test_writer_injection_and_defaults(tmp_path):
    seen = []
    s = Sysfs(str(tmp_path), writer=lambda path, value: seen.append((path, value)))
    s.write("/sys/bus/pci/drivers_probe", "0000:3b:00.0")
    assert seen == [(os.path.join(str(tmp_path), "sys/bus/pci/drivers_probe"), "0000:3b:00.0")]
    # a static tree gets plain file writes; the real root goes through privsep
    (tmp_path / "sys").mkdir()
    Sysfs(str(tmp_path)).write("/sys/attr", "1")
    assert (tmp_path / "sys/attr").read_text() == "1"
    assert Sysfs("/")._writer is sysfs._privsep_writer


def test_set_numvfs_goes_through_zero_and_sets_autoprobe_first(builder):
    k = builder.kernel()
    k.set_numvfs(QAT, 2)
    k.set_numvfs(QAT, 4, autoprobe=False)
    numvfs = f"/sys/bus/pci/devices/{QAT}/sriov_numvfs"
    assert k.writes == [(numvfs, "2"),
                        (f"/sys/bus/pci/devices/{QAT}/sriov_drivers_autoprobe", "0"),
                        (numvfs, "0"), (numvfs, "4")]
    assert len(k.virtfns(QAT)) == 4
    before = len(k.writes)
    k.set_numvfs(QAT, 4, autoprobe=False)           # already there: no writes
    assert len(k.writes) == before
    with pytest.raises(OSError) as exc:
        k.set_numvfs(GPU, 1)
    assert exc.value.errno == errno.ENOTSUP


def test_bind_driver_sequence_and_idempotence(builder):
    k = builder.kernel()
    k.bind_driver(GPU, "vfio-pci")
    assert k.writes == [(f"/sys/bus/pci/devices/{GPU}/driver_override", "vfio-pci"),
                        ("/sys/bus/pci/drivers/nvidia/unbind", GPU),
                        ("/sys/bus/pci/drivers_probe", GPU)]
    assert k.driver_of(GPU) == "vfio-pci" and k.pci_device(GPU).driver_override == "vfio-pci"
    k.writes.clear()
    k.bind_driver(GPU, "vfio-pci")
    assert k.writes == []


def test_bind_to_missing_driver_raises_and_leaves_unbound(builder):
    k = builder.kernel()
    with pytest.raises(BindError, match="no driver"):
        k.bind_driver(GPU, "nouveau")
    assert k.driver_of(GPU) is None
    with pytest.raises(OSError) as exc:
        k.bind_driver("0000:99:00.0", "vfio-pci")
    assert exc.value.errno == errno.ENODEV


def test_restore_driver_and_reprobe(builder):
    k = builder.kernel()
    k.bind_driver(GPU, "vfio-pci")
    k.restore_driver(GPU, "nvidia")
    gpu = k.pci_device(GPU)
    assert gpu.driver == "nvidia" and gpu.driver_override is None
    k.restore_driver(GPU, "nvidia")                  # idempotent
    k.bind_driver(GPU, "vfio-pci")
    assert k.reprobe(GPU) == "nvidia"                # the kernel's own match
    k.restore_driver(GPU, None)
    assert k.driver_of(GPU) is None
    k.unbind(GPU)                                    # unbound: no-op


def test_mdev_create_is_idempotent_and_remove_reports(builder):
    k = builder.kernel()
    uid = "7E9A1C2B-0000-4000-8000-000000000001"
    assert k.mdev_create(GPU, "nvidia-222", uid) is True
    assert k.mdev_create(GPU, "nvidia-222", uid) is False
    assert k.mdev_exists(uid.lower()) and k.mdev_type_of(uid) == "nvidia-222"
    assert k.mdev_parent_of(uid) == GPU and k.mdev_devices(GPU, "nvidia-222") == [uid.lower()]
    assert k.mdev_remove(uid) is True and k.mdev_remove(uid) is False
    assert k.mdev_parent_of(uid) is None


def test_mdev_create_propagates_enospc(tmp_path):
    b = FakeSysfsBuilder(tmp_path)
    b.pci(GPU, "10de", "1eb8", "0x030200", driver="nvidia",
          mdev_types={"nvidia-1": ("full", 0)})
    with pytest.raises(OSError) as exc:
        b.kernel().mdev_create(GPU, "nvidia-1", "7e9a1c2b-0000-4000-8000-000000000002")
    assert exc.value.errno == errno.ENOSPC


def test_pci_names(tmp_path):
    ids = tmp_path / "pci.ids"
    ids.write_text("# comment\n8086  Intel Corporation\n\t4940  4xxx Series QAT\n"
                   "\t\t8086 0002  some subsystem\n10de  NVIDIA Corporation\n"
                   "C 00  Unclassified device\n")
    n = names.PciNames([str(tmp_path / "missing"), str(ids)])
    assert n.path == str(ids)
    assert n.vendor("0x8086") == "Intel Corporation"
    assert n.device("8086", "4940") == "4xxx Series QAT"
    assert n.device("8086", "4941") == "4941"         # unknown: the raw id
    assert n.vendor("1af4") == "1af4"
    none = names.PciNames(str(tmp_path / "missing"))
    assert none.path is None and none.vendor("10DE") == "10de"
