"""One kernel contract, run against FakeKernel in CI and unchanged against a real kernel.

Why: the drivers are tested on FakeKernel trees; this contract is what keeps FakeKernel
honest. It exercises SR-IOV, vfio-pci binding and the mdev life cycle through the public
:class:`acceld.hw.sysfs.Sysfs` API only, so the same steps run on both.

Against FakeKernel: ``tests/unit/drivers/test_fakekernel_contract.py`` calls
:func:`run_contract`.

Against a real kernel (root needed; it WRITES sysfs: it creates and destroys VFs on the
PF, binds a VF to vfio-pci and creates/removes an mdev). Use a disposable machine, e.g.
the QEMU q35 guest with an emulated NVMe SR-IOV PF, intel-iommu and the mtty sample::

    modprobe vfio-pci; modprobe mtty            # in the guest
    python -m tests.contract.kernel_contract --pf 0000:00:02.0 --mdev-parent mtty \\
        --i-know-this-writes-sysfs

It prints ``CONTRACT OK`` and exits 0, or prints the first broken expectation and exits
1. Verified: all 14 steps pass on Debian's 6.1.0-56-amd64 kernel in QEMU 7.2 (TCG, q35,
intel-iommu, NVMe PF 1b36:0010 with sriov_max_vfs=2 at 00:04.0, mtty built from
linux-source-6.1), exactly as they do against FakeKernel.

It refuses to run against ``/`` without ``--i-know-this-writes-sysfs``. ``--root`` points
it at a copied tree instead (writes are then plain file writes, so most steps fail:
that mode is only for checking the refusal and the argument handling).

Requirements on the PF: SR-IOV with ``sriov_totalvfs >= 2``, a PF driver bound (the kernel
refuses ``sriov_numvfs`` otherwise) and no VFs in use. The VFs' own driver may or may not
claim them; the contract turns autoprobe off while it runs and restores it afterwards.
"""

from __future__ import annotations

import argparse
import errno
import sys
import uuid as uuidlib
from collections.abc import Callable

from acceld.hw import pci
from acceld.hw.sysfs import BindError, Sysfs

VFIO = "vfio-pci"
NO_SUCH_DRIVER = "acceld-contract-no-such-driver"


class ContractError(AssertionError):
    """The kernel (or fake) did not behave as the contract expects."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def _expect_errno(code: int, action: Callable[[], object], what: str) -> None:
    try:
        action()
    except OSError as exc:
        _expect(exc.errno == code, f"{what}: expected {errno.errorcode[code]}, got "
                f"{errno.errorcode.get(exc.errno or 0, exc.errno)} ({exc})")
        return
    raise ContractError(f"{what}: expected {errno.errorcode[code]}, but it succeeded")


def run_contract(sysfs: Sysfs, pf_address: str, mdev_parent: str | None = None,
                 log: Callable[[str], None] = lambda _msg: None) -> list[str]:
    """Run every step; returns the names of the steps that passed (raises ContractError
    at the first broken expectation). The PF is left with 0 VFs and its autoprobe
    setting restored."""
    steps: list[str] = []
    pf = pci.normalize(pf_address)
    dev = sysfs.pci_device(pf)
    _expect(dev is not None, f"PF {pf} does not exist")
    assert dev is not None
    _expect(dev.sriov_totalvfs is not None and dev.sriov_totalvfs >= 2,
            f"{pf} needs sriov_totalvfs >= 2, has {dev.sriov_totalvfs}")
    _expect(dev.driver is not None, f"{pf} needs a PF driver bound to configure SR-IOV")
    _expect(sysfs.driver_loaded(VFIO), "vfio-pci must be loaded")
    autoprobe = dev.sriov_drivers_autoprobe
    try:
        sysfs.set_numvfs(pf, 0)
        _sriov(sysfs, pf, dev.sriov_totalvfs or 0, steps, log)
        _vfio(sysfs, pf, steps, log)
    finally:
        sysfs.set_numvfs(pf, 0, autoprobe=autoprobe)
    _expect(sysfs.virtfns(pf) == [], "VFs still present after sriov_numvfs=0")
    steps.append("sriov-disable")
    log("sriov-disable: ok")
    if mdev_parent is not None:
        _mdev(sysfs, mdev_parent, steps, log)
    return steps


def _sriov(sysfs: Sysfs, pf: str, total: int, steps: list[str],
           log: Callable[[str], None]) -> None:
    numvfs = sysfs.device_path(pf, "sriov_numvfs")
    _expect_errno(errno.ERANGE, lambda: sysfs.write(numvfs, str(total + 1)),
                  "sriov_numvfs above totalvfs")
    steps.append("sriov-erange")
    _expect_errno(errno.EINVAL, lambda: sysfs.write(numvfs, "two"), "sriov_numvfs 'two'")
    _expect_errno(errno.EACCES, lambda: sysfs.write(sysfs.device_path(pf, "vendor"), "0x1"),
                  "writing the read-only vendor attribute")
    _expect_errno(errno.EINVAL, lambda: sysfs.write(
        sysfs.device_path(pf, "sriov_drivers_autoprobe"), "maybe"), "autoprobe 'maybe'")
    steps.append("attribute-errnos")
    sysfs.set_numvfs(pf, 2, autoprobe=False)
    vfs = sysfs.virtfns(pf)
    _expect(len(vfs) == 2, f"expected 2 VFs, found {vfs}")
    _expect(sysfs.read_int(numvfs) == 2, "sriov_numvfs does not read back 2")
    for vf in vfs:
        info = sysfs.pci_device(vf)
        _expect(info is not None and info.physfn == pf, f"{vf} has no physfn -> {pf}")
        assert info is not None
        _expect(info.driver is None, f"{vf} was probed although autoprobe is 0")
        if sysfs.iommu_enabled():
            _expect(info.iommu_group is not None, f"{vf} has no IOMMU group")
    if sysfs.iommu_enabled():
        groups = {sysfs.pci_device(vf).iommu_group for vf in vfs}  # type: ignore[union-attr]
        _expect(len(groups) == 2, f"VFs share an IOMMU group: {groups}")
    steps.append("sriov-create")
    log(f"sriov-create: {vfs}")
    _expect_errno(errno.EBUSY, lambda: sysfs.write(numvfs, "1"), "sriov_numvfs 2 -> 1")
    _expect(len(sysfs.virtfns(pf)) == 2, "a refused 2 -> 1 changed the VFs")
    steps.append("sriov-ebusy")
    sysfs.set_numvfs(pf, 1)
    _expect(len(sysfs.virtfns(pf)) == 1, "shrinking via 0 did not leave 1 VF")
    sysfs.set_numvfs(pf, 2)
    _expect(len(sysfs.virtfns(pf)) == 2, "growing via 0 did not give 2 VFs")
    steps.append("sriov-resize-via-0")
    log("sriov-resize: ok")


def _vfio(sysfs: Sysfs, pf: str, steps: list[str], log: Callable[[str], None]) -> None:
    vf = sysfs.virtfns(pf)[0]
    bind = f"/sys/bus/pci/drivers/{VFIO}/bind"
    # vfio-pci has no id table: without an override it matches nothing (ENODEV), and
    # that check comes before "already bound" for the PF too
    _expect_errno(errno.ENODEV, lambda: sysfs.write(bind, vf), "vfio-pci bind, no override")
    _expect_errno(errno.ENODEV, lambda: sysfs.write(bind, pf), "vfio-pci bind of bound PF")
    _expect_errno(errno.ENODEV, lambda: sysfs.write(f"/sys/bus/pci/drivers/{VFIO}/unbind",
                                                     pf), "unbind from a driver not bound")
    steps.append("bind-errnos")
    sysfs.bind_driver(vf, VFIO)
    _expect(sysfs.driver_of(vf) == VFIO, f"{vf} not on vfio-pci after bind")
    info = sysfs.pci_device(vf)
    _expect(info is not None and info.driver_override == VFIO, "driver_override not kept")
    sysfs.bind_driver(vf, VFIO)  # idempotent
    steps.append("vfio-bind")
    sysfs.unbind(vf)
    _expect(sysfs.driver_of(vf) is None, f"{vf} still bound after unbind")
    sysfs.write("/sys/bus/pci/drivers_probe", vf)
    _expect(sysfs.driver_of(vf) == VFIO, "drivers_probe ignored driver_override")
    steps.append("vfio-rebind")
    sysfs.unbind(vf)
    sysfs.set_driver_override(vf, NO_SUCH_DRIVER)
    sysfs.write("/sys/bus/pci/drivers_probe", vf)
    _expect(sysfs.driver_of(vf) is None, "bound although the override names no driver")
    try:
        sysfs.bind_driver(vf, NO_SUCH_DRIVER)
    except BindError:
        pass
    else:
        raise ContractError("bind_driver to a missing driver did not fail")
    steps.append("override-missing-driver")
    override = sysfs.device_path(vf, "driver_override")
    sysfs.write(override, "")           # a zero-length write never reaches the kernel
    _expect(sysfs.read(override) == NO_SUCH_DRIVER, "an empty write changed the override")
    sysfs.restore_driver(vf, None)      # writes "\n", which clears it
    info = sysfs.pci_device(vf)
    _expect(info is not None and info.driver is None and info.driver_override is None,
            f"restore_driver(None) left {info}")
    steps.append("restore-unbound")
    log("vfio: ok")


def _mdev(sysfs: Sysfs, parent: str, steps: list[str], log: Callable[[str], None]) -> None:
    types = sysfs.mdev_types(parent)
    usable = [t for t in types.values() if (t.available_instances or 0) > 0]
    _expect(bool(usable), f"mdev parent {parent} has no type with free instances: {types}")
    mtype = usable[0]
    before = mtype.available_instances or 0
    uid = str(uuidlib.uuid4())
    _expect(sysfs.mdev_create(parent, mtype.type_id, uid), "mdev_create returned False")
    try:
        _expect(sysfs.mdev_exists(uid), f"mdev {uid} missing after create")
        _expect(sysfs.mdev_type_of(uid) == mtype.type_id, "mdev_type link is wrong")
        _expect(uid in sysfs.mdev_devices(parent, mtype.type_id), "not listed in devices/")
        after = sysfs.mdev_types(parent)[mtype.type_id].available_instances
        _expect(after is not None and after < before,
                f"available_instances {before} -> {after} after create")
        steps.append("mdev-create")
        create = f"/sys/class/mdev_bus/{parent}/mdev_supported_types/{mtype.type_id}/create"
        _expect_errno(errno.EEXIST, lambda: sysfs.write(create, uid), "duplicate mdev create")
        _expect_errno(errno.EINVAL, lambda: sysfs.write(create, "not-a-uuid"),
                      "mdev create with a bad UUID")
        remove = f"/sys/bus/mdev/devices/{uid}/remove"
        _expect_errno(errno.EINVAL, lambda: sysfs.write(remove, "x"), "mdev remove 'x'")
        sysfs.write(remove, "0")
        _expect(sysfs.mdev_exists(uid), "writing 0 to remove removed the mdev")
        _expect(not sysfs.mdev_create(parent, mtype.type_id, uid), "duplicate not idempotent")
        steps.append("mdev-duplicate")
    finally:
        sysfs.mdev_remove(uid)
    _expect(not sysfs.mdev_exists(uid), f"mdev {uid} still there after remove")
    restored = sysfs.mdev_types(parent)[mtype.type_id].available_instances
    _expect(restored == before, f"available_instances {restored}, expected {before}")
    _expect(not sysfs.mdev_remove(uid), "second remove should report already gone")
    steps.append("mdev-remove")
    log("mdev: ok")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.contract.kernel_contract",
        description="Run the kernel contract against a real kernel (writes sysfs!).")
    parser.add_argument("--pf", required=True, help="SR-IOV PF address, e.g. 0000:00:02.0")
    parser.add_argument("--mdev-parent", help="an mdev parent in /sys/class/mdev_bus")
    parser.add_argument("--root", default="/", help="sysfs root (default /)")
    parser.add_argument("--i-know-this-writes-sysfs", action="store_true",
                        dest="confirmed", help="required to run against /")
    args = parser.parse_args(argv)
    if args.root == "/" and not args.confirmed:
        print("refusing to write the host's /sys without --i-know-this-writes-sysfs",
              file=sys.stderr)
        return 2
    if args.root == "/":
        from acceld.hw import privileged

        # Same path checks as the privsep daemon, without starting one: we are root.
        sysfs = Sysfs("/", writer=privileged.write_checked)
    else:
        sysfs = Sysfs(args.root)
    try:
        steps = run_contract(sysfs, args.pf, args.mdev_parent, log=print)
    except (ContractError, OSError, BindError) as exc:
        print(f"CONTRACT FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"CONTRACT OK ({len(steps)} steps: {', '.join(steps)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
