"""The driver protocol (:class:`BaseDriver`) and its injected collaborators.

Every driver operation is idempotent: the agent may run it again after a crash. A
driver class names its own option group (``conf_group``, ``conf_opts``), which acceld
registers and lists for oslo-config-generator; sysfs, runner, NVML and clock come in the
:class:`DriverContext`, so tests hand in fakes.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from oslo_config import cfg

from acceld import reports
from acceld.agent import fileutil
from acceld.hw import pci
from acceld.hw.runner import SubprocessRunner
from acceld.hw.sysfs import BindError, Sysfs

# Health of one device, as drivers report it (worst first).
HEALTH_FAILED = "failed"
HEALTH_DEGRADED = "degraded"
HEALTH_OK = "ok"
HEALTH_STATES = (HEALTH_FAILED, HEALTH_DEGRADED, HEALTH_OK)


@dataclasses.dataclass(frozen=True)
class DriverContext:
    """What a driver gets instead of globals (None: the real one)."""

    conf: cfg.ConfigOpts
    host: str
    state_dir: str        # a directory the driver may keep host-side state in
    sysfs: Any = None
    runner: Any = None
    nvml: Any = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


class DriverError(Exception):
    """A driver operation failed; the message says why, for the operator."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One precondition a driver looked at during discovery (IOMMU on, ...)."""

    name: str
    ok: bool
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Skipped:

    address: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why the last discovery found what it found: shown by ``driver-list --long``."""

    checks: tuple[Check, ...] = ()
    expected: int | None = None     # devices the configuration asks for, if it says
    found: int = 0
    skipped: tuple[Skipped, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"checks": [dataclasses.asdict(c) for c in self.checks],
                "expected": self.expected, "found": self.found,
                "skipped": [dataclasses.asdict(s) for s in self.skipped]}


@dataclasses.dataclass(frozen=True)
class Health:
    status: str = HEALTH_OK             # one of HEALTH_STATES
    reasons: tuple[str, ...] = ()
    # cumulative error counters ({"ecc": n, "xid": n}; reports.HEALTH_COUNTERS): the
    # conductor compares successive ones and marks a device whose errors rise suspect
    counters: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, failed: list[str], degraded: list[str]) -> Health:
        """Failed (with every reason) when anything failed, else degraded, else ok."""
        if failed:
            return cls(HEALTH_FAILED, tuple(failed + degraded))
        return cls(HEALTH_DEGRADED, tuple(degraded)) if degraded else cls()


ProgressFn = Callable[[int, str], None]    # (percent 0-100, message)


@runtime_checkable
class Programmable(Protocol):
    """Drivers that load images: ``program`` blocks until loaded, calling ``progress``."""

    def program(self, identity: str, image_path: str, *, progress: ProgressFn,
                timeout: float) -> dict[str, str]: ...


class BaseDriver:
    """The driver protocol, with defaults for all but ``discover``."""

    name = "base"
    version = "0"
    conf_group = ""                     # the driver's option group, e.g. "fake_driver"
    conf_opts: Sequence[cfg.Opt] = ()   # the options of that group
    state_file = ""                     # its JSON state in state_dir ("": <name>-state.json)

    @classmethod
    def list_opts(cls) -> list[tuple[str, list[cfg.Opt]]]:
        """The driver's options by group (what ``acceld.conf`` registers and lists)."""
        return [(cls.conf_group, list(cls.conf_opts))] if cls.conf_opts else []

    def __init__(self, ctx: DriverContext) -> None:
        self.ctx = ctx
        self.conf: Any = getattr(ctx.conf, self.conf_group, None)
        self.sysfs: Sysfs = ctx.sysfs if ctx.sysfs is not None else Sysfs("/")
        self.runner: Any = ctx.runner if ctx.runner is not None else SubprocessRunner()
        self._explanation = Explanation()
        self._state_path = os.path.join(ctx.state_dir, self.state_file or f"{self.name}-state.json")

    def discover(self) -> list[reports.Device]:
        raise NotImplementedError

    def _state(self) -> dict[str, Any]:
        return fileutil.read_json(self._state_path) or {}

    def _save_state(self, state: dict[str, Any]) -> None:
        fileutil.write_json_atomic(self._state_path, state)

    def explain(self) -> Explanation:
        return self._explanation

    def health(self) -> dict[str, Health]:
        return {}

    def stats(self) -> dict[str, dict[str, float]]:
        return {}

    def _nothing(self, identity: str, *attach_info: dict[str, str]) -> None:
        return None

    # nothing to do by default
    install = uninstall = attach_host = detach_host = release = _nothing

    def prepare(self, identity: str, attach_info: dict[str, str]) -> dict[str, str]:
        return dict(attach_info)

    def reset(self, identity: str) -> None:
        """Reset the device (a function-level or bus reset) so that it comes back clean;
        the agent runs it only for a quarantined device no guest holds. Blocks until the
        device is back; DriverError when it is not. Drivers that cannot reset say so."""
        raise DriverError(f"the {self.name} driver cannot reset a device")


def pci_address(identity: str, what: str = "a PCI address") -> str:
    """``identity`` normalised; DriverError when it is not a PCI address."""
    try:
        return pci.normalize(identity)
    except ValueError:
        raise DriverError(f"{identity!r} is not {what}") from None


def attach_address(attach_info: dict[str, str]) -> str:
    """The PCI address a handle's attach_info names; DriverError when it is malformed."""
    try:
        return str(pci.from_attach_info(attach_info))
    except ValueError as exc:
        raise DriverError(f"bad PCI attach_info {attach_info!r}: {exc}") from None


_SYSFS_HINTS = {errno.EBUSY: "the device is busy", errno.ENODEV: "the device is gone"}


def sysfs_op(what: str, fn: Callable[[], Any], hints: dict[int, str] | None = None) -> None:
    """Run a sysfs operation, turning kernel errors into operator messages."""
    try:
        fn()
    except BindError as exc:
        raise DriverError(f"{what}: {exc}") from exc
    except OSError as exc:
        hint = {**_SYSFS_HINTS, **(hints or {})}.get(exc.errno or 0, "")
        raise DriverError(f"{what}: {exc.strerror or exc}" + (f" ({hint})" if hint else "")
                          ) from exc


def pci_handle(address: str, **extra: str) -> dict[str, Any]:
    """A PCI attach handle of ``address`` (``extra`` joins its attach_info)."""
    return {"attach_type": "PCI", "attach_info": {**pci.to_attach_info(address), **extra}}


def deployable(name: str, rc: str, traits: Sequence[str],
               handles: list[dict[str, Any]], **attributes: str) -> dict[str, Any]:
    return {"name": name, "num_accelerators": len(handles),
            "attributes": {"rc": rc, **{f"trait{i}": t for i, t in enumerate(traits)},
                           **attributes}, "attach_handles": handles}


Driver = BaseDriver     # what the agent runs
