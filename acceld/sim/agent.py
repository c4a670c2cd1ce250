"""The agent RPC of a served simulated host: what the conductor asks of an agent
(``acceld.rpc.AgentClient``), answered from the host's in-memory state.

The signatures are the real agent's (``acceld.agent.manager.AgentManager``); so are
the outcomes: operations and programs end in ``operation_done`` / ``program_done`` to
the conductor, a device that is gone fails what names it, and the guests are an
in-memory hypervisor's (``acceld.virt.fake``), which checks attaches as libvirt would.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from acceld import exception
from acceld.rpc import ConductorClient
from acceld.sim import devices as devmod
from acceld.sim.host import SimHost
from acceld.virt import devicexml
from acceld.virt.fake import FakeHypervisor
from acceld.virt.hypervisor import Guest

LOG = logging.getLogger(__name__)


def guest_instances(host: str, count: int) -> list[tuple[str, str]]:
    """(UUID, name) of the simulated guests of ``host``, the same at every call."""
    return [(str(uuidlib.uuid5(devmod.SIM_NAMESPACE, f"{host}|guest|{i}")), f"{host}-vm-{i}")
            for i in range(count)]


class AgentEndpoint:
    """``wake``: have the host report soon (its hardware changed or the conductor asked);
    ``served``: counts each call by method name; ``work_delay``: seconds each prepare or
    release of a handle takes (a slow driver: a bind in flight long enough to kill its
    conductor under it)."""

    def __init__(self, host: SimHost, conductor: ConductorClient, hypervisor: FakeHypervisor,
                 wake: Callable[[], None], served: Callable[[str], None],
                 work_delay: float) -> None:
        self._host = host
        self._work_delay = work_delay
        self._conductor = conductor
        self._hv = hypervisor
        self._wake = wake
        self._served = served

    def _gone(self, driver: str, identity: str) -> str | None:
        """Why ``identity`` of ``driver`` cannot be worked on (None: it can)."""
        if self._host.device(driver, identity) is None:
            return f"device {identity} ({driver}) is not on {self._host.name}"
        return None

    def discover_now(self) -> None:
        self._served("discover_now")
        self._wake()

    def run_operation(self, op: dict[str, Any]) -> None:
        """An install/uninstall: nothing to do on simulated hardware but find the device."""
        self._served("run_operation")
        error = self._gone(op["driver"], op["identity"])
        try:
            self._conductor.operation_done(op["op_id"], op["device_uuid"], error is None,
                                           error)
        except exception.HostUnreachable as exc:   # the conductor sends it again later
            LOG.warning("outcome of operation %s not delivered: %s", op["op_id"], exc)

    def run_program(self, op: dict[str, Any]) -> None:
        """Loads the function the image names (its reference's digest) into the FPGA."""
        self._served("run_program")
        error = self._gone(op["driver"], op["identity"])
        if error is None:
            self._conductor.program_progress(op["op_id"], 50, "writing the image")
            function = hashlib.sha256(op["image_ref"].encode()).hexdigest()[:32]
            self._host.load_function(op["identity"], function)
            self._wake()
        try:
            self._conductor.program_done(op["op_id"], error is None, error)
        except exception.HostUnreachable as exc:   # the conductor sends it again later
            LOG.warning("outcome of program %s not delivered: %s", op["op_id"], exc)

    def driver_action(self, name: str, action: str) -> dict[str, Any]:
        self._served("driver_action")
        if action not in ("install", "uninstall", "update"):
            return {"ok": False, "error": f"unknown action {action}"}
        if name not in self._host.drivers:
            return {"ok": False, "error": f"driver {name} is not available on {self._host.name}"}
        self._host.set_driver(name, installed=action != "uninstall")
        self._wake()
        return {"ok": True, "error": None}

    def host_attachment(self, driver: str, identity: str, attach: bool) -> dict[str, Any]:
        self._served("host_attachment")
        error = self._gone(driver, identity)
        return {"ok": error is None, "error": error}

    def reset_device(self, driver: str, identity: str) -> dict[str, Any]:
        """A simulated reset: fails for a device a ``failed_reset`` fault holds, else
        clears the device's faults (the next report shows it healthy)."""
        self._served("reset_device")
        error = self._gone(driver, identity) or self._host.reset(identity)
        self._wake()
        return {"ok": error is None, "error": error}

    def prepare_handle(self, driver: str, identity: str, attach_info: dict[str, str],
                       handle_uuid: str) -> dict[str, Any]:
        self._served("prepare_handle")
        time.sleep(self._work_delay)
        error = self._gone(driver, identity)
        return {"ok": error is None, "error": error, "attach_info": dict(attach_info)}

    def release_handle(self, driver: str, identity: str, attach_info: dict[str, str],
                       handle_uuid: str) -> dict[str, Any]:
        self._served("release_handle")
        time.sleep(self._work_delay)
        return {"ok": True, "error": None, "attach_info": dict(attach_info)}

    def device_stats(self, driver: str, identity: str) -> dict[str, float]:
        """Numbers that move with time, in the real drivers' keys; {} for a device the
        host does not have (as the real agent answers)."""
        self._served("device_stats")
        if driver not in self._host.drivers:
            raise exception.DriverNotFound(f"driver {driver} is not running on "
                                           f"{self._host.name}")
        dev = self._host.device(driver, identity)
        if dev is None:
            return {}
        rng = random.Random(f"{self._host.name}|{identity}|{int(time.time())}")
        if dev.type == "GPU":
            total = float(int(dev.body["vendor_board_info"]["memory_mib"]) << 20)
            return {"utilization_gpu_percent": float(rng.randrange(0, 101)),
                    "utilization_memory_percent": float(rng.randrange(0, 101)),
                    "memory_used_bytes": float(int(total * rng.random())),
                    "memory_total_bytes": total,
                    "temperature_celsius": float(rng.randrange(30, 85)),
                    "power_watts": round(rng.uniform(40.0, 350.0), 1)}
        if dev.type == "FPGA":
            return {"temperature_c": float(rng.randrange(35, 80)),
                    "power_w": round(rng.uniform(30.0, 120.0), 1), "functions_loaded": 1.0}
        return {}

    # -- guests (hot plug) -------------------------------------------------------------------
    def guests(self) -> list[dict[str, Any]]:
        self._served("guests")
        return [_guest_dict(g) for g in self._hv.guests()]

    def attach_to_guest(self, instance_uuid: str, arq_uuid: str, attach_type: str,
                        attach_info: dict[str, str], handle_uuid: str) -> dict[str, Any]:
        self._served("attach_to_guest")
        try:
            xml = devicexml.device_xml(arq_uuid, attach_type, attach_info, handle_uuid)
        except ValueError as exc:
            raise exception.InvalidInput(str(exc)) from None
        self._hv.attach(instance_uuid, xml)
        return _guest_dict(self._hv.guest(instance_uuid))

    def detach_from_guest(self, instance_uuid: str, arq_uuid: str) -> str:
        self._served("detach_from_guest")
        try:
            alias = devicexml.alias(arq_uuid)
        except ValueError as exc:
            raise exception.InvalidInput(str(exc)) from None
        return self._hv.detach(instance_uuid, alias, 0.0)


def _guest_dict(guest: Guest) -> dict[str, Any]:
    return {"uuid": guest.uuid, "name": guest.name, "running": guest.running,
            "aliases": list(guest.aliases),
            "arqs": [arq for arq in map(devicexml.arq_of, guest.aliases) if arq]}
