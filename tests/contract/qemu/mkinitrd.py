"""Build a newc cpio initramfs: busybox, kernel modules, /init (stdlib only)."""
import os, stat, sys
M = "k/lib/modules/6.1.0-56-amd64"
mods = [l.strip() for l in open("mods.txt") if l.strip()]
entries = []  # (name, mode, data)
def add_dir(p): entries.append((p, stat.S_IFDIR | 0o755, b""))
def add_file(p, data, mode=0o755): entries.append((p, stat.S_IFREG | mode, data))
def add_link(p, target): entries.append((p, stat.S_IFLNK | 0o777, target.encode()))
for d in ("bin", "sbin", "proc", "sys", "dev", "host", "mods", "tmp"):
    add_dir(d)
add_file("bin/busybox", open("/bin/busybox", "rb").read())
add_link("bin/sh", "busybox")
order = []
for i, m in enumerate(mods):
    name = f"mods/{i:02d}-{os.path.basename(m)}"
    add_file(name, open(m, "rb").read(), 0o644)
init = open("init.sh").read().encode()
add_file("init", init)
out = bytearray()
def pad(n): return b"\0" * ((4 - n % 4) % 4)
for ino, (name, mode, data) in enumerate(entries + [("TRAILER!!!", 0, b"")], 1):
    nb = name.encode() + b"\0"
    hdr = "070701" + "".join(f"{v:08x}" for v in (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0))
    out += hdr.encode() + nb
    out += pad(110 + len(nb))
    out += data + pad(len(data))
open("initrd.cpio", "wb").write(bytes(out))
print(len(out))
