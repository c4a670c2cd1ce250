"""The driver protocol and its injected collaborators.

A driver is small: ``discover()`` returns plain report data; ``install``/``uninstall``
prepare a device for use (bind to vfio-pci, load firmware, ...) and reverse it;
``attach_host``/``detach_host`` make a device usable by the host itself. Each operation is
idempotent: the agent may run it again after a crash.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from oslo_config import cfg

from acceld import reports


@dataclasses.dataclass(frozen=True)
class DriverContext:
    """What a driver gets instead of globals."""

    conf: cfg.ConfigOpts
    host: str
    state_dir: str        # a directory the driver may keep host-side state in


class DriverError(Exception):
    """A driver operation failed; the message says why, for the operator."""


@runtime_checkable
class Driver(Protocol):
    name: str
    version: str

    def discover(self) -> list[reports.Device]: ...

    def install(self, identity: str) -> None: ...

    def uninstall(self, identity: str) -> None: ...

    def attach_host(self, identity: str) -> None: ...

    def detach_host(self, identity: str) -> None: ...
