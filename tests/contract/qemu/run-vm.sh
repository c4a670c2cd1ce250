#!/bin/sh
# QEMU q35 + intel-iommu + NVMe SR-IOV PF + mtty; the host root is mounted read-only over 9p.
cd /tmp/h1vm && exec timeout 300 qemu-system-x86_64 -accel tcg -machine q35,kernel-irqchip=split -cpu max -smp 2 -m 1024 -nographic -no-reboot \
 -kernel k/boot/vmlinuz-6.1.0-56-amd64 -initrd initrd.cpio -append "console=ttyS0 intel_iommu=on panic=-1 quiet loglevel=3" \
 -device intel-iommu,intremap=on,caching-mode=on \
 -device nvme-subsys,id=subsys0 \
 -device nvme,serial=deadbeef,subsys=subsys0,sriov_max_vfs=2,sriov_vq_flexible=4,sriov_vi_flexible=2,max_ioqpairs=6,msix_qsize=8,addr=04.0 \
 -drive file=ns.img,if=none,id=nvm,format=raw -device nvme-ns,drive=nvm,nsid=1 \
 -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
