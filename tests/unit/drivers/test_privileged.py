"""The privsep surface: path and program checks (called directly, no daemon), and the
command runners built on it."""

from __future__ import annotations

import os
import sys

import pytest

from acceld.hw import privileged
from acceld.hw import runner as runner_mod
from acceld.hw.runner import Result, SubprocessRunner
from tests.fakes.runner import RecordingRunner


@pytest.fixture
def fake_sys(tmp_path):
    root = tmp_path / "sys"
    (root / "bus/pci/devices/0000:3b:00.0").mkdir(parents=True)
    attr = root / "bus/pci/devices/0000:3b:00.0/sriov_numvfs"
    attr.write_text("0\n")
    outside = tmp_path / "etc-passwd"
    outside.write_text("root:x:0:0\n")
    (root / "escape").symlink_to(outside)
    (root / "inner").symlink_to(attr)
    return root


def test_sysfs_path_checks(fake_sys, tmp_path):
    attr = str(fake_sys / "bus/pci/devices/0000:3b:00.0/sriov_numvfs")
    assert privileged.check_sysfs_path(attr, str(fake_sys)) == attr
    assert privileged.check_sysfs_path(str(fake_sys / "inner"), str(fake_sys)) == attr
    bad = [("relative/path", "absolute"),
           (str(fake_sys / "bus/../bus/pci/devices/0000:3b:00.0/sriov_numvfs"), "'..'"),
           (str(fake_sys / "escape"), "outside"),         # a symlink leading out
           (str(tmp_path / "etc-passwd"), "outside"),
           (str(fake_sys / "bus"), "directory"),
           (str(fake_sys), "outside"),
           (attr + "\0x", "NUL")]
    for path, message in bad:
        with pytest.raises(ValueError, match=message):
            privileged.check_sysfs_path(path, str(fake_sys))


def test_real_sys_is_the_default_root():
    with pytest.raises(ValueError, match="outside /sys"):
        privileged.check_sysfs_path("/etc/hostname")
    with pytest.raises(ValueError, match="outside /sys"):
        privileged.check_sysfs_path("/proc/sys/kernel/hostname")


def test_write_checked_writes_existing_files_only(fake_sys, tmp_path):
    attr = fake_sys / "bus/pci/devices/0000:3b:00.0/sriov_numvfs"
    privileged.write_checked(str(attr), "4", str(fake_sys))
    assert attr.read_text() == "4\n"       # one write() at offset 0, as echo -n does
    with pytest.raises(FileNotFoundError):
        privileged.write_checked(str(fake_sys / "new_file"), "1", str(fake_sys))
    assert not (fake_sys / "new_file").exists()
    with pytest.raises(ValueError, match="outside"):
        privileged.write_checked(str(fake_sys / "escape"), "x", str(fake_sys))
    assert (tmp_path / "etc-passwd").read_text() == "root:x:0:0\n"
    with pytest.raises(ValueError, match="NUL"):
        privileged.write_checked(str(attr), "1\0", str(fake_sys))
    with pytest.raises(ValueError):
        privileged.write_checked(str(attr), "x" * 5000, str(fake_sys))


def test_argv_allowlist(tmp_path):
    for argv in (["bash", "-c", "id"], ["sh"], ["/bin/sh", "-c", "x"], ["python3"],
                 ["./nvidia-smi"], ["../xbutil"], ["/usr/lib/../bin/nvidia-smi"], [],
                 "nvidia-smi", ["nvidia-smi", 1], ["nvidia-smi", "a\0b"]):
        with pytest.raises(ValueError):
            privileged.check_argv(argv)
    # an allowed name on a path the caller controls is not trusted
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    if os.geteuid() == 0:
        fake.chmod(0o777)       # root owns it here: make it world-writable instead
    with pytest.raises(ValueError, match="owned by root"):
        privileged.check_argv([str(fake), "-q"])
    with pytest.raises(FileNotFoundError):
        privileged.check_argv(["/nonexistent-dir/sriov-manage", "-e", "ALL"])


def test_allowed_name_is_resolved_on_path(monkeypatch, tmp_path):
    monkeypatch.setattr(privileged, "ALLOWED_PROGRAMS", frozenset({"echo", "sleep"}))
    resolved = privileged.check_argv(["echo", "hi; rm -rf /"])
    assert os.path.basename(resolved[0]) == "echo" and os.path.isabs(resolved[0])
    assert resolved[1] == "hi; rm -rf /"            # one argument, never a shell


def test_execute_checked(monkeypatch):
    monkeypatch.setattr(privileged, "ALLOWED_PROGRAMS",
                        frozenset({"echo", "sleep", "xbutil-missing"}))
    assert privileged.execute_checked(["echo", "$HOME", "`id`"], 5) == \
        (0, "$HOME `id`\n", "", False)
    rc, _out, err, timed_out = privileged.execute_checked(["sleep", "5"], 0.2)
    assert (rc, timed_out) == (124, True) and "timed out" in err
    assert privileged.execute_checked(["xbutil-missing"], 5)[0] == 127
    with pytest.raises(ValueError, match="not allowed"):
        privileged.execute_checked(["bash", "-c", "true"], 5)
    with pytest.raises(ValueError, match="timeout"):
        privileged.execute_checked(["echo"], 0)


def test_entrypoints_belong_to_the_privsep_context():
    assert privileged.default.is_entrypoint(privileged.sysfs_write)
    assert privileged.default.is_entrypoint(privileged.execute)
    assert not privileged.default.is_entrypoint(privileged.write_checked)
    assert privileged.ALLOWED_PROGRAMS == {"fpgaconf", "xbutil", "xbmgmt", "sriov-manage",
                                           "nvidia-smi", "mdevctl"}


def test_subprocess_runner_plain():
    r = SubprocessRunner()
    ok = r.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
               10)
    assert ok == Result(0, "out\n", "err\n") and ok.ok
    assert r.run(["/nonexistent/tool"], 5).rc == runner_mod.RC_NOT_FOUND
    slow = r.run([sys.executable, "-c", "import time; time.sleep(5)"], 0.3)
    assert slow.timed_out and slow.rc == runner_mod.RC_TIMEOUT and not slow.ok
    with pytest.raises(ValueError):
        r.run([], 5)


def test_subprocess_runner_privileged_goes_through_privsep(monkeypatch):
    calls = []

    def fake_execute(argv, timeout):
        calls.append((argv, timeout))
        return 0, "done", "", False
    monkeypatch.setattr(privileged, "execute", fake_execute)
    assert SubprocessRunner(privileged=True).run(["xbutil", "examine"], 30) == \
        Result(0, "done", "")
    assert SubprocessRunner().run(["nvidia-smi", "-L"], 7, privileged=True).stdout == "done"
    assert calls == [(["xbutil", "examine"], 30), (["nvidia-smi", "-L"], 7)]


def test_recording_runner():
    rr = RecordingRunner()
    rr.script(["xbutil", "examine"], Result(0, "{}"))
    rr.script(["fpgaconf"], [Result(1, stderr="busy"), Result(0)])
    rr.script(["xbutil", "examine", "-d", "0000:3b:00.1"], lambda argv: Result(0, argv[-1]))
    assert rr.run(["xbutil", "examine", "-f", "JSON"], 10).stdout == "{}"
    assert rr.run(["xbutil", "examine", "-d", "0000:3b:00.1"], 10).stdout == "0000:3b:00.1"
    assert [rr.run(["fpgaconf", "x.gbs"], 60).rc for _ in range(3)] == [1, 0, 0]
    assert rr.run(["nvidia-smi"], 5, privileged=True).rc == 127      # not scripted
    assert rr.calls[-1].privileged is True and rr.calls[0].timeout == 10
    assert rr.argvs()[0] == ["xbutil", "examine", "-f", "JSON"]
    assert isinstance(rr, runner_mod.CommandRunner)
