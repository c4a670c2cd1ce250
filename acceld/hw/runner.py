"""Running vendor command-line tools (fpgaconf, xbutil, mdevctl, ...) from an argv list,
privileged ones through the privsep daemon; a missing program gives rc 127, a timeout
rc 124 with ``timed_out=True``. Tests hand the drivers a recording runner instead.
"""

from __future__ import annotations

import dataclasses
import subprocess
from typing import Protocol, runtime_checkable

RC_NOT_FOUND = 127
RC_TIMEOUT = 124


@dataclasses.dataclass(frozen=True)
class Result:
    rc: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


@runtime_checkable
class CommandRunner(Protocol):
    def run(self, argv: list[str], timeout: float, *,
            privileged: bool | None = None) -> Result: ...


class SubprocessRunner:
    """Runs commands with subprocess; ``privileged`` is the default for :meth:`run`."""

    def __init__(self, privileged: bool = False) -> None:
        self.privileged = privileged

    def run(self, argv: list[str], timeout: float, *,
            privileged: bool | None = None) -> Result:
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("empty argv")
        if self.privileged if privileged is None else privileged:
            from acceld.hw import privileged as priv  # lazy: privsep import cost

            return Result(*priv.execute(argv, timeout))
        return run_argv(argv, timeout)


def run_argv(argv: list[str], timeout: float, limit: int | None = None) -> Result:
    """Run ``argv`` (no shell, stdin closed), its output cut to ``limit`` bytes."""
    def text(raw: bytes | str | None) -> str:
        raw = (raw or b"")[:limit]
        return raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace")
    try:
        proc = subprocess.run(argv, shell=False, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        return Result(RC_NOT_FOUND, "", str(exc))
    except subprocess.TimeoutExpired as exc:
        return Result(RC_TIMEOUT, text(exc.stdout),
                      text(exc.stderr) + f"\ntimed out after {timeout}s", True)
    return Result(proc.returncode, text(proc.stdout), text(proc.stderr))
