"""Running vendor command-line tools (fpgaconf, xbutil, xbmgmt, sriov-manage, nvidia-smi).

Drivers get a :class:`CommandRunner` in their context instead of calling subprocess, so
tests hand them ``tests.fakes.runner.RecordingRunner`` (scripted results, recorded argv).
The real :class:`SubprocessRunner` always passes an argv list (never a shell) and sends
privileged commands through the privsep daemon (``acceld.hw.privileged.execute``),
which checks the program against its allowlist.

Conventions: a program that does not exist gives rc 127; a timeout gives rc 124 and
``timed_out=True`` (as coreutils ``timeout`` does), so callers handle one Result type.
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
    """Runs commands with subprocess (argv list, no shell, stdin closed).

    ``privileged``: the default for :meth:`run`; True sends the command to the privsep
    daemon, whose allowlist decides.
    """

    def __init__(self, privileged: bool = False) -> None:
        self.privileged = privileged

    def run(self, argv: list[str], timeout: float, *,
            privileged: bool | None = None) -> Result:
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("empty argv")
        if self.privileged if privileged is None else privileged:
            from acceld.hw import privileged as priv  # lazy: privsep import cost

            rc, out, err, timed_out = priv.execute(argv, timeout)
            return Result(rc, out, err, timed_out)
        try:
            proc = subprocess.run(argv, shell=False, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError as exc:
            return Result(RC_NOT_FOUND, "", str(exc))
        except subprocess.TimeoutExpired as exc:
            return Result(RC_TIMEOUT, _text(exc.stdout),
                          _text(exc.stderr) + f"\ntimed out after {timeout}s", True)
        return Result(proc.returncode, _text(proc.stdout), _text(proc.stderr))


def _text(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace")
