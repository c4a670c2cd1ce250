"""The hypervisor seam of the agent: the guests of this host, and live attach/detach of
an ARQ's device. A hypervisor only carries the device XML (:mod:`acceld.virt.devicexml`)
to the guest and finds it again by its alias; its errors are ``exception.GuestNotFound``
and ``exception.HypervisorError``."""

from __future__ import annotations

import dataclasses
from typing import Protocol

#: :meth:`Hypervisor.detach` outcomes: the guest released the device (libvirt's
#: device-removed event came); the unplug was asked for but the guest has not answered
#: within the timeout (the device is still in place); no device with that alias was there.
REMOVED, PENDING, ABSENT = "removed", "pending", "absent"


@dataclasses.dataclass(frozen=True)
class Guest:
    """A domain of this host: its UUID (Nova's instance UUID), name, whether it runs,
    and the aliases of the devices acceld attached (live definition when it runs,
    persistent otherwise)."""

    uuid: str
    name: str
    running: bool
    aliases: tuple[str, ...] = ()


class Hypervisor(Protocol):
    def guests(self) -> list[Guest]:
        """Every domain of this host, running or defined."""

    def guest(self, instance_uuid: str) -> Guest:
        """One domain, or GuestNotFound."""

    def attach(self, instance_uuid: str, device_xml: str) -> None:
        """Adds the device to the live definition (when the guest runs) and to the
        persistent one; GuestNotFound, or HypervisorError with the hypervisor's reason.
        Attaching an alias that is already there is a no-op (idempotent re-send)."""

    def detach(self, instance_uuid: str, alias: str, timeout: float) -> str:
        """Asks the guest to release the device named ``alias`` from both definitions;
        waits up to ``timeout`` s for the device-removed event. Returns REMOVED,
        PENDING (asked, not yet released: call again to wait more) or ABSENT."""

    def close(self) -> None: ...
