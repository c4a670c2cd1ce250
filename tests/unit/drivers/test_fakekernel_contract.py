"""The kernel contract (tests/contract/kernel_contract.py) against FakeKernel.

The same contract ran against a real 6.1 kernel (QEMU NVMe SR-IOV PF + mtty); passing it
here is what lets the driver tests trust FakeKernel. The negative tests prove the contract
can fail: a fake that forgets a kernel rule is caught.
"""

from __future__ import annotations

import errno

import pytest

from tests.contract import kernel_contract
from tests.contract.kernel_contract import ContractError, run_contract
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder

PF = "0000:00:02.0"


def _qemu_like(tmp_path, kernel_cls=FakeKernel) -> FakeKernel:
    """The QEMU guest of the real-kernel run: NVMe PF 1b36:0010 with 2 VFs, mtty."""
    b = FakeSysfsBuilder(tmp_path).driver("vfio-pci").driver("nvme")
    b.pci("0000:00:00.0", "8086", "29c0", "0x060000")
    b.pci(PF, "1b36", "0010", "0x010802", driver="nvme", totalvfs=2, vf_driver="nvme")
    b.virtual_mdev_parent("mtty", {"mtty-1": ("Single port serial", 24),
                                   "mtty-2": ("Dual port serial", 12)})
    return kernel_cls(b)


def test_contract_passes_on_fake_kernel(tmp_path):
    kernel = _qemu_like(tmp_path)
    steps = run_contract(kernel, PF, mdev_parent="mtty")
    assert steps == ["sriov-erange", "attribute-errnos", "sriov-create", "sriov-ebusy",
                     "sriov-resize-via-0", "bind-errnos", "vfio-bind", "vfio-rebind",
                     "override-missing-driver",
                     "restore-unbound", "sriov-disable", "mdev-create", "mdev-duplicate",
                     "mdev-remove"]
    pf = kernel.pci_device(PF)
    assert pf.sriov_numvfs == 0 and pf.sriov_drivers_autoprobe is True
    assert kernel.mdev_types("mtty")["mtty-1"].available_instances == 24
    assert ("/sys/bus/pci/devices/0000:00:02.0/sriov_numvfs", "1") in kernel.writes


def test_contract_with_pci_mdev_parent(tmp_path):
    kernel = _qemu_like(tmp_path)
    kernel.builder.pci("0000:3b:00.0", "10de", "1eb8", "0x030200", driver="nvidia",
                       mdev_types={"nvidia-222": ("GRID T4-1B", 0), "nvidia-223": ("T4-2B", 8)})
    assert run_contract(kernel, PF, "0000:3b:00.0")[-1] == "mdev-remove"
    # the type with no free instance is skipped, the other one is used
    assert kernel.writes_to("nvidia-223/create") and not kernel.writes_to("nvidia-222/create")
    assert kernel.mdev_types("0000:3b:00.0")["nvidia-223"].available_instances == 8


class _NoEbusyKernel(FakeKernel):
    """A broken fake that lets N -> M through (a real kernel refuses)."""

    def write(self, host_path, value):
        if host_path.endswith("sriov_numvfs") and value not in ("0",) and \
                (self.read_int(host_path) or 0) > 0:
            super().write(host_path, "0")
        super().write(host_path, value)


class _NoEexistKernel(FakeKernel):
    """A broken fake that accepts a duplicate mdev UUID silently."""

    def write(self, host_path, value):
        if host_path.endswith("/create") and self.mdev_exists(value):
            self.writes.append((host_path, value))
            return
        super().write(host_path, value)


def test_contract_catches_missing_ebusy(tmp_path):
    with pytest.raises(ContractError, match="2 -> 1"):
        run_contract(_qemu_like(tmp_path, _NoEbusyKernel), PF)


def test_contract_catches_missing_eexist(tmp_path):
    with pytest.raises(ContractError, match="duplicate mdev create"):
        run_contract(_qemu_like(tmp_path, _NoEexistKernel), PF, "mtty")


def test_contract_requires_pf_driver_and_vfio(tmp_path):
    kernel = _qemu_like(tmp_path)
    kernel.builder.unbind(PF)
    with pytest.raises(ContractError, match="PF driver"):
        run_contract(kernel, PF)
    kernel.builder.bind(PF, "nvme")
    kernel.builder.remove_driver("vfio-pci")
    with pytest.raises(ContractError, match="vfio-pci"):
        run_contract(kernel, PF)


def test_cli_refuses_real_root_without_flag(capsys):
    assert kernel_contract.main(["--pf", PF]) == 2
    assert "--i-know-this-writes-sysfs" in capsys.readouterr().err


def test_cli_on_static_tree_reports_failure(tmp_path, capsys):
    _qemu_like(tmp_path)
    # A plain Sysfs over the tree writes files without kernel reactions: the contract
    # must notice (no ERANGE), not report OK.
    assert kernel_contract.main(["--pf", PF, "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "CONTRACT FAILED" in err and "sriov_numvfs above totalvfs" in err


# -- FakeKernel semantics the contract cannot reach on a real kernel without a guest ----

QAT = "0000:3b:00.0"


def _qat(tmp_path, **kw) -> FakeKernel:
    b = FakeSysfsBuilder(tmp_path, vf_device_ids={"4940": "4941"})
    b.driver("vfio-pci").driver("4xxxvf")
    b.pci(QAT, "8086", "4940", "0x0b4000", numa=1, driver="qat_4xxx", totalvfs=4,
          vf_driver="4xxxvf", attrs={"qat/state": "up", "qat/cfg_services": "sym;asym"}, **kw)
    return b.kernel()


def _errno_of(action) -> int:
    with pytest.raises(OSError) as exc:
        action()
    return exc.value.errno


def test_vfs_get_vf_device_id_numa_groups_and_vf_driver(tmp_path):
    k = _qat(tmp_path)
    k.write(f"/sys/bus/pci/devices/{QAT}/sriov_numvfs", "2")
    vfs = [k.pci_device(a) for a in k.virtfns(QAT)]
    assert [v.address for v in vfs] == ["0000:3b:00.1", "0000:3b:00.2"]
    assert {v.device for v in vfs} == {"4941"} and {v.numa_node for v in vfs} == {1}
    assert {v.driver for v in vfs} == {"4xxxvf"}                   # autoprobe on
    assert len({v.iommu_group for v in vfs} | {k.pci_device(QAT).iommu_group}) == 3
    assert "PCI_ID=8086:4941" in k.read(k.device_path(vfs[0].address, "uevent"))


def test_numvfs_errors(tmp_path):
    k = _qat(tmp_path)
    path = f"/sys/bus/pci/devices/{QAT}/sriov_numvfs"
    assert _errno_of(lambda: k.write(path, "five")) == errno.EINVAL
    assert _errno_of(lambda: k.write(path, "5")) == errno.ERANGE
    k.write(path, "2")
    assert _errno_of(lambda: k.write(path, "3")) == errno.EBUSY
    k.write(path, "0")
    k.builder.unbind(QAT)
    assert _errno_of(lambda: k.write(path, "1")) == errno.ENOENT     # no PF driver


def test_busy_vf_blocks_shrinking(tmp_path):
    k = _qat(tmp_path)
    k.set_numvfs(QAT, 2, autoprobe=False)
    vf = k.virtfns(QAT)[1]
    k.bind_driver(vf, "vfio-pci")
    k.mark_in_use(vf)
    assert _errno_of(lambda: k.set_numvfs(QAT, 0)) == errno.EBUSY
    assert len(k.virtfns(QAT)) == 2
    k.mark_in_use(vf, False)
    k.set_numvfs(QAT, 0)
    assert k.virtfns(QAT) == [] and k.pci_device(vf) is None
    # the removed VF's driver link went with it
    assert [e for e in k.listdir("/sys/bus/pci/drivers/vfio-pci") if e.startswith("0000:")] \
        == []


def test_autoprobe_off_leaves_vfs_unbound(tmp_path):
    k = _qat(tmp_path)
    autoprobe = f"/sys/bus/pci/devices/{QAT}/sriov_drivers_autoprobe"
    assert _errno_of(lambda: k.write(autoprobe, "maybe")) == errno.EINVAL
    k.write(autoprobe, "y")
    assert k.read(autoprobe) == "1"
    k.write(autoprobe, "0")
    k.write(f"/sys/bus/pci/devices/{QAT}/sriov_numvfs", "1")
    assert k.driver_of(k.virtfns(QAT)[0]) is None


def test_driver_files(tmp_path):
    k = _qat(tmp_path)
    assert _errno_of(lambda: k.write("/sys/bus/pci/drivers/vfio-pci/unbind", QAT)) \
        == errno.ENODEV
    # no override and no id match: ENODEV comes before "already bound" (as on 6.1)
    assert _errno_of(lambda: k.write("/sys/bus/pci/drivers/vfio-pci/bind", QAT)) \
        == errno.ENODEV
    assert _errno_of(lambda: k.write("/sys/bus/pci/drivers/qat_4xxx/bind", QAT)) \
        == errno.EBUSY                                                # matches, but bound
    k.write("/sys/bus/pci/drivers/qat_4xxx/unbind", QAT)
    # vfio-pci has no id table: bind without an override is refused
    assert _errno_of(lambda: k.write("/sys/bus/pci/drivers/vfio-pci/bind", QAT)) \
        == errno.ENODEV
    k.write(f"/sys/bus/pci/devices/{QAT}/driver_override", "vfio-pci\n")
    k.write("/sys/bus/pci/drivers/vfio-pci/bind", QAT)
    assert k.driver_of(QAT) == "vfio-pci"
    k.write(f"/sys/bus/pci/devices/{QAT}/driver_override", "")     # never reaches the kernel
    assert k.read(k.device_path(QAT, "driver_override")) == "vfio-pci"
    k.write(f"/sys/bus/pci/devices/{QAT}/driver_override", "\n")
    assert k.read(k.device_path(QAT, "driver_override")) == "(null)"
    assert _errno_of(lambda: k.write("/sys/bus/pci/drivers_probe", "0000:99:00.0")) \
        == errno.ENODEV


def test_read_only_and_missing_files(tmp_path):
    k = _qat(tmp_path)
    assert _errno_of(lambda: k.write(k.device_path(QAT, "vendor"), "0x1234")) == errno.EACCES
    assert _errno_of(lambda: k.write(k.device_path(QAT, "sriov_totalvfs"), "9")) \
        == errno.EACCES
    assert _errno_of(lambda: k.write(k.device_path(QAT, "nope"), "1")) == errno.ENOENT
    assert k.read(k.device_path(QAT, "vendor")) == "0x8086"


def test_mdev_semantics(tmp_path):
    b = FakeSysfsBuilder(tmp_path)
    b.pci("0000:af:00.0", "10de", "1eb8", "0x030200", driver="nvidia",
          mdev_types={"nvidia-222": ("T4-1B", 1)})
    k = b.kernel()
    create = "/sys/class/mdev_bus/0000:af:00.0/mdev_supported_types/nvidia-222/create"
    uid = "11111111-2222-4333-8444-555555555555"
    assert _errno_of(lambda: k.write(create, "not-a-uuid")) == errno.EINVAL
    k.write(create, uid)
    assert k.mdev_types("0000:af:00.0")["nvidia-222"].available_instances == 0
    assert _errno_of(lambda: k.write(create, uid)) == errno.EEXIST
    assert _errno_of(lambda: k.write(create, "11111111-2222-4333-8444-000000000000")) \
        == errno.ENOSPC
    group = k.link_name(f"/sys/bus/mdev/devices/{uid}/iommu_group")
    assert group is not None and k.exists("/sys/kernel/iommu_groups", group)
    assert _errno_of(lambda: k.write(f"/sys/bus/mdev/devices/{uid}/remove", "x")) == errno.EINVAL
    k.write(f"/sys/bus/mdev/devices/{uid}/remove", "0")              # 0: nothing happens
    assert k.mdev_exists(uid)
    k.write(f"/sys/bus/mdev/devices/{uid}/remove", "1")
    assert not k.mdev_exists(uid) and not k.exists("/sys/kernel/iommu_groups", group)
    assert k.mdev_types("0000:af:00.0")["nvidia-222"].available_instances == 1


def test_nvidia_current_vgpu_type(tmp_path):
    b = FakeSysfsBuilder(tmp_path)
    b.driver("nvidia")
    b.pci("0000:01:00.0", "10de", "2331", "0x030200", driver="nvidia", totalvfs=2,
          vf_driver="nvidia", vf_nvidia_vgpu_types={1057: "NVIDIA H100-1-10C"})
    k = b.kernel()
    k.set_numvfs("0000:01:00.0", 2)
    vf = k.virtfns("0000:01:00.0")[0]
    assert k.pci_device(vf).driver == "nvidia"
    assert _errno_of(lambda: k.set_current_vgpu_type(vf, 9)) == errno.EINVAL
    k.set_current_vgpu_type(vf, 1057)
    assert k.pci_device(vf).nvidia_current_vgpu_type == "1057"
    assert _errno_of(lambda: k.set_current_vgpu_type(vf, 1057)) == errno.EBUSY
    k.set_current_vgpu_type(vf, 0)
    assert k.pci_device(vf).nvidia_current_vgpu_type == "0"


def test_qat_state_and_services(tmp_path):
    k = _qat(tmp_path)
    services = k.device_path(QAT, "qat", "cfg_services")
    state = k.device_path(QAT, "qat", "state")
    assert _errno_of(lambda: k.write(services, "dc")) == errno.EBUSY      # only while down
    assert _errno_of(lambda: k.write(state, "up")) == errno.EINVAL        # already up
    k.write(state, "down")
    k.write(services, "dc")
    k.write(state, "up")
    assert k.read(services) == "dc" and k.read(state) == "up"


def test_pci_remove_file_unplugs(tmp_path):
    k = _qat(tmp_path)
    k.write(k.device_path(QAT, "remove"), "1")
    assert k.pci_device(QAT) is None and k.pci_addresses() == []
    assert k.writes[-1] == (f"/sys/bus/pci/devices/{QAT}/remove", "1")


def test_vf_address_collision_fails_like_device_add(tmp_path):
    b = FakeSysfsBuilder(tmp_path)
    b.pci("0000:5e:00.0", "15b3", "1017", "0x020000", driver="mlx5_core", totalvfs=2)
    b.pci("0000:5e:00.1", "15b3", "1017", "0x020000", driver="mlx5_core")
    k = b.kernel()
    assert _errno_of(lambda: k.set_numvfs("0000:5e:00.0", 2)) == errno.EEXIST
    assert k.pci_device("0000:5e:00.1").physfn is None and k.virtfns("0000:5e:00.0") == []
