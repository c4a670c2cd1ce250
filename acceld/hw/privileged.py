"""The agent's only privileged code: sysfs writes and vendor tools, via oslo.privsep.

Each entrypoint re-checks its arguments inside the daemon, which must not trust its
caller: :func:`sysfs_write` writes only to existing files under ``/sys``, :func:`execute`
runs only programs on :data:`ALLOWED_PROGRAMS`. The checks are plain functions (tests).
"""

from __future__ import annotations

import dataclasses
import os
import shutil

# isort: split
import acceld.threading_backend  # noqa: F401 - its warning filters cover privsep's eventlet

# isort: split
from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

from acceld.hw import runner

# Tools the agent drives: OPAE and XRT FPGA programming, NVIDIA SR-IOV and nvidia-smi.
ALLOWED_PROGRAMS = frozenset({"fpgaconf", "xbutil", "xbmgmt", "sriov-manage", "nvidia-smi",
                              "mdevctl"})

MAX_VALUE_LENGTH = 4096
MAX_OUTPUT = 4 * 1024 * 1024

default = priv_context.PrivContext(
    "acceld",
    cfg_section="acceld_privileged",
    pypath=__name__ + ".default",
    # DAC_OVERRIDE: write root-owned sysfs attributes; SYS_ADMIN: attributes and vendor
    # tools that check it (PCI config, FPGA reconfiguration, nvidia-smi settings);
    # SYS_RAWIO: vendor tools that map device BARs.
    capabilities=[caps.CAP_DAC_OVERRIDE, caps.CAP_DAC_READ_SEARCH, caps.CAP_SYS_ADMIN,
                  caps.CAP_SYS_RAWIO],
)


def check_sysfs_path(path: str, sys_root: str = "/sys") -> str:
    """The resolved path when ``path`` is an existing file under ``sys_root``;
    ValueError for relative paths, ``..``, NUL bytes, directories and anything that
    resolves outside ``sys_root``."""
    if not isinstance(path, str) or "\0" in path:
        raise ValueError("sysfs path must be a string without NUL bytes")
    if not os.path.isabs(path):
        raise ValueError(f"sysfs path must be absolute: {path!r}")
    if ".." in path.split("/"):
        raise ValueError(f"sysfs path must not contain '..': {path!r}")
    root = os.path.realpath(sys_root)
    resolved = os.path.realpath(path)
    if os.path.commonpath([root, resolved]) != root or resolved == root:
        raise ValueError(f"refusing to write outside {sys_root}: {path!r} -> {resolved!r}")
    if os.path.isdir(resolved):
        raise ValueError(f"refusing to write to a directory: {path!r}")
    return resolved


def write_checked(path: str, value: str, sys_root: str = "/sys") -> None:
    """Check, then write ``value`` in one write() as ``echo -n`` would (never creating a file)."""
    resolved = check_sysfs_path(path, sys_root)
    if not isinstance(value, str) or "\0" in value or len(value) > MAX_VALUE_LENGTH:
        raise ValueError("sysfs value must be a string without NUL, at most "
                         f"{MAX_VALUE_LENGTH} characters")
    fd = os.open(resolved, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def check_argv(argv: list[str]) -> list[str]:
    """The argv with its program resolved: a bare name on :data:`ALLOWED_PROGRAMS`
    (looked up on PATH) or an absolute path with such a basename, owned by root and
    writable by nobody else. ValueError otherwise, and for non-string arguments."""
    if not isinstance(argv, (list, tuple)) or not argv:
        raise ValueError("argv must be a non-empty list")
    if not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise ValueError("every argument must be a string without NUL bytes")
    program = argv[0]
    if os.path.basename(program) not in ALLOWED_PROGRAMS:
        raise ValueError(f"program not allowed: {program!r}")
    if "/" not in program:
        resolved = shutil.which(program)
        if resolved is None:
            raise FileNotFoundError(f"{program} not found on PATH")
        return [resolved, *argv[1:]]
    if not os.path.isabs(program) or ".." in program.split("/"):
        raise ValueError(f"program path must be absolute without '..': {program!r}")
    try:
        st = os.stat(program)
    except FileNotFoundError:
        raise FileNotFoundError(f"{program} does not exist") from None
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise ValueError(f"program must be owned by root and not group/world-writable: "
                         f"{program!r}")
    return [program, *argv[1:]]


def execute_checked(argv: list[str], timeout: float) -> tuple[int, str, str, bool]:
    """Run an allowed program: ``(rc, stdout, stderr, timed_out)``, output capped."""
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    try:
        resolved = check_argv(argv)
    except FileNotFoundError as exc:
        return runner.RC_NOT_FOUND, "", str(exc), False
    return dataclasses.astuple(runner.run_argv(resolved, timeout, MAX_OUTPUT))


@default.entrypoint
def sysfs_write(path: str, value: str) -> None:
    """Privileged: write ``value`` to the sysfs attribute ``path`` (checked)."""
    write_checked(path, value)


@default.entrypoint
def execute(argv: list[str], timeout: float) -> tuple[int, str, str, bool]:
    """Privileged: run an allowed vendor tool (checked); see :func:`execute_checked`."""
    return execute_checked(list(argv), timeout)
