#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev
for m in /mods/*.ko; do insmod $m 2>&1 | head -2; done
sleep 2
mount -t 9p -o trans=virtio,version=9p2000.L,ro hostroot /host || echo "9P MOUNT FAILED"
mount --bind /sys /host/sys; mount --bind /proc /host/proc; mount --bind /dev /host/dev
echo "GUEST: kernel $(uname -r), iommu groups: $(ls /sys/kernel/iommu_groups | wc -l), mdev parents: $(ls /sys/class/mdev_bus)"
chroot /host /usr/bin/env PYTHONDONTWRITEBYTECODE=1 /bin/sh -c 'cd /work/main && .venv/bin/python -m tests.contract.kernel_contract --pf 0000:00:04.0 --mdev-parent mtty --i-know-this-writes-sysfs; echo "CONTRACT-RC=$?"'
poweroff -f
