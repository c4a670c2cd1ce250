"""Check FakeKernel-only errno claims against the real kernel (run as root in the VM)."""
import errno, os, sys
sys.path.insert(0, "/work/main")
from acceld.hw import privileged
from acceld.hw.sysfs import Sysfs
s = Sysfs("/", writer=privileged.write_checked)
PF = "0000:00:04.0"
def err(fn):
    try:
        fn(); return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, e.errno)
p = s.device_path(PF)
print("vendor write:", err(lambda: s.write(p + "/vendor", "0x1234")))
print("totalvfs write:", err(lambda: s.write(p + "/sriov_totalvfs", "1")))
print("numvfs 'five':", err(lambda: s.write(p + "/sriov_numvfs", "five")))
print("autoprobe 'maybe':", err(lambda: s.write(p + "/sriov_drivers_autoprobe", "maybe")))
print("autoprobe 'y':", err(lambda: s.write(p + "/sriov_drivers_autoprobe", "y")), s.read(p + "/sriov_drivers_autoprobe"))
print("vfio unbind of nvme dev:", err(lambda: s.write("/sys/bus/pci/drivers/vfio-pci/unbind", PF)))
print("vfio bind while bound:", err(lambda: s.write("/sys/bus/pci/drivers/vfio-pci/bind", PF)))
print("probe unknown dev:", err(lambda: s.write("/sys/bus/pci/drivers_probe", "0000:00:1e.0")))
s.set_numvfs(PF, 1, autoprobe=False)
vf = s.virtfns(PF)[0]
print("vf:", vf, "driver", s.driver_of(vf), "override", s.read(s.device_path(vf, "driver_override")))
print("vfio bind w/o override:", err(lambda: s.write("/sys/bus/pci/drivers/vfio-pci/bind", vf)))
print("override 'vfio-pci\\n':", err(lambda: s.write(s.device_path(vf, "driver_override"), "vfio-pci\n")), s.read(s.device_path(vf, "driver_override")))
print("vfio bind with override:", err(lambda: s.write("/sys/bus/pci/drivers/vfio-pci/bind", vf)), s.driver_of(vf))
print("override '' :", err(lambda: s.write(s.device_path(vf, "driver_override"), "")), s.read(s.device_path(vf, "driver_override")))
s.unbind(vf)
print("drivers_probe no override, autoprobe 0, native nvme:", err(lambda: s.write("/sys/bus/pci/drivers_probe", vf)), s.driver_of(vf))
s.unbind(vf)
s.set_numvfs(PF, 0)
s.unbind(PF)
print("numvfs with PF unbound:", err(lambda: s.write(p + "/sriov_numvfs", "1")))
print("numvfs 0 with PF unbound (no change):", err(lambda: s.write(p + "/sriov_numvfs", "0")))
s.write("/sys/bus/pci/drivers_probe", PF)
print("PF back on:", s.driver_of(PF))
import uuid
t = "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2"
print("create bad uuid:", err(lambda: s.write(t + "/create", "nope")))
u = str(uuid.uuid4()); s.write(t + "/create", u)
print("mdev group:", s.link_name("/sys/bus/mdev/devices", u, "iommu_group"), "parent", s.mdev_parent_of(u))
print("remove 'x':", err(lambda: s.write(f"/sys/bus/mdev/devices/{u}/remove", "x")))
print("remove '0':", err(lambda: s.write(f"/sys/bus/mdev/devices/{u}/remove", "0")), s.mdev_exists(u))
s.mdev_remove(u)
avail = s.mdev_types("mtty")["mtty-2"].available_instances
us = []
for i in range(avail):
    x = str(uuid.uuid4()); s.write(t + "/create", x); us.append(x)
print("exhausted create:", err(lambda: s.write(t + "/create", str(uuid.uuid4()))))
for x in us: s.mdev_remove(x)
print("EXTRA DONE")
