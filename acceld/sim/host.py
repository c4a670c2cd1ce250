"""One simulated host: its hardware (devices present, their health, the functions its
FPGAs hold), its agent's report numbering and what the conductor has accepted.

The report is built as the real agent builds it (``acceld.agent.manager``): one entry
per driver of the host, every device with its health, a new epoch per agent start
(unless the journal survived) and a sequence number per report. The drivers part is
kept until the hardware changes, so unchanged reports are identical and the
conductor's digest check skips them. Every method takes the host's lock: the
simulator's scheduler, its sender threads and (served hosts) the RPC server's threads
all reach it.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Iterable
from typing import Any

import acceld
from acceld import reports, states
from acceld.sim import devices as devmod
from acceld.sim.devices import SimDevice

# The reason a ``failed_reset`` fault gives a device: a reset of it fails too.
RESET_FAILS_REASON = "the device did not come back from a reset; the host needs a reboot"


class SimHost:
    def __init__(self, name: str, devices: list[SimDevice],
                 compute_node_uuid: str | None = None) -> None:
        """``compute_node_uuid``: what the agent finds in Nova's ``compute_id`` file
        (None: no such file; the conductor looks the compute node up by name)."""
        self.name = name
        self.devices = devices
        self.compute_node_uuid = compute_node_uuid
        self.drivers = list(dict.fromkeys(dev.driver for dev in devices))
        self._by_identity = {dev.identity: dev for dev in devices}
        self._lock = threading.RLock()
        # the hardware
        self._unplugged: set[str] = set()
        self._health: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._functions = {dev.identity: dev.function for dev in devices if dev.function}
        self._uninstalled: set[str] = set()          # drivers an operator uninstalled
        self._version = 0                            # bumped by every hardware change
        self._drivers_cache: tuple[int, list[dict[str, Any]]] | None = None
        # the agent
        self.epoch = str(uuidlib.uuid4())
        self.seq = 0
        self.life = 0                 # bumped at every stop and start of the agent
        self.up = False
        # what the conductor has
        self._accepted: tuple[str, int] | None = None    # (epoch, hardware version)

    # -- the agent -----------------------------------------------------------------------
    def start_agent(self, keep_journal: bool = False) -> int:
        """A new agent process: a new epoch with seq from 1 (the same ones when its
        journal survived); returns its life."""
        with self._lock:
            if not keep_journal:
                self.epoch, self.seq = str(uuidlib.uuid4()), 0
            self.life += 1
            self.up = True
            return self.life

    def stop_agent(self) -> None:
        """The agent is gone (a crash, a reboot): what it had queued is dropped."""
        with self._lock:
            self.life += 1
            self.up = False

    def alive(self, life: int) -> bool:
        with self._lock:
            return self.up and self.life == life

    # -- reports -------------------------------------------------------------------------
    def build_report(self) -> tuple[dict[str, Any], int]:
        """The next report (as the wire carries it) and the hardware version it shows."""
        with self._lock:
            self.seq += 1
            report = {"schema_version": reports.SCHEMA_VERSION, "host": self.name,
                      "epoch": self.epoch, "seq": self.seq,
                      "agent_version": acceld.__version__, "provider_name": self.name,
                      "drivers": self._driver_entries()}
            if self.compute_node_uuid:
                report["compute_node_uuid"] = self.compute_node_uuid
            return report, self._version

    def _driver_entries(self) -> list[dict[str, Any]]:
        if self._drivers_cache is None or self._drivers_cache[0] != self._version:
            self._drivers_cache = (self._version, [self._driver_entry(name)
                                                   for name in self.drivers])
        return self._drivers_cache[1]

    def _driver_entry(self, name: str) -> dict[str, Any]:
        if name in self._uninstalled:
            return {"name": name, "version": "", "state": states.DRIVER_UNINSTALLED,
                    "error": None, "devices": [], "explanation": None, "capabilities": []}
        found = [devmod.render(dev, *self._health.get(dev.identity, (states.HEALTH_OK, ())),
                               self._functions.get(dev.identity))
                 for dev in self.present() if dev.driver == name]
        return {"name": name, "version": devmod.DRIVER_VERSION, "state": states.DRIVER_INSTALLED,
                "error": None, "devices": found,
                "explanation": {"checks": [{"name": "simulated", "ok": True,
                                            "detail": "acceld-sim: no hardware"}],
                                "expected": None, "found": len(found), "skipped": []},
                "capabilities": list(devmod.DRIVER_CAPABILITIES.get(name, ()))}

    def accepted(self, life: int, epoch: str, version: int) -> bool:
        """The conductor took a report of ``epoch`` showing ``version``; True when it is
        this host's first accepted report."""
        with self._lock:
            if life != self.life:
                return False
            before = self._accepted
            if before is None or before[0] != epoch or before[1] < version:
                self._accepted = (epoch, version)
            return before is None

    def synced(self) -> bool:
        """The agent runs and the conductor holds what the host has now."""
        with self._lock:
            return self.up and self._accepted == (self.epoch, self._version)

    # -- the hardware ----------------------------------------------------------------------
    def present(self) -> list[SimDevice]:
        with self._lock:
            return [dev for dev in self.devices if dev.identity not in self._unplugged]

    def device(self, driver: str, identity: str) -> SimDevice | None:
        """A present device of a running driver (None: gone or not this host's)."""
        with self._lock:
            dev = self._by_identity.get(identity)
            if dev is None or dev.driver != driver or identity in self._unplugged \
                    or driver in self._uninstalled:
                return None
            return dev

    def pick(self, kind: str | None, identity: str | None, count: int,
             device_type: str | None = None) -> list[str]:
        """Up to ``count`` present devices: ``identity``, else of ``kind``, else of
        ``device_type``, else any; in the host's order."""
        with self._lock:
            found = [dev.identity for dev in self.present()
                     if (identity is None or dev.identity == identity)
                     and (kind is None or dev.kind == kind)
                     and (device_type is None or dev.type == device_type)]
            return found[:count]

    def unplug(self, identities: Iterable[str]) -> None:
        with self._lock:
            self._unplugged.update(identities)
            self._version += 1

    def replug(self, identities: Iterable[str]) -> None:
        with self._lock:
            self._unplugged.difference_update(identities)
            self._version += 1

    def set_health(self, identities: Iterable[str], status: str,
                   reasons: tuple[str, ...]) -> None:
        with self._lock:
            for identity in identities:
                self._health[identity] = (status, reasons)
            self._version += 1

    def clear_health(self, identities: Iterable[str], reasons: tuple[str, ...]) -> None:
        """Health back to ok where it still shows ``reasons`` (not a later fault's)."""
        with self._lock:
            for identity in identities:
                if self._health.get(identity, (None, None))[1] == reasons:
                    del self._health[identity]
            self._version += 1

    def reset(self, identity: str) -> str | None:
        """A simulated reset of one device: why it failed (a ``failed_reset`` fault holds
        it, or it is gone), or None; a reset that works clears the device's faults."""
        with self._lock:
            if identity in self._unplugged or identity not in self._by_identity:
                return f"device {identity} is not on {self.name}"
            if RESET_FAILS_REASON in self._health.get(identity, (None, ()))[1]:
                return f"reset of {identity} failed: {RESET_FAILS_REASON}"
            if self._health.pop(identity, None) is not None:
                self._version += 1
            return None

    def health(self, identity: str) -> str:
        with self._lock:
            return self._health.get(identity, (states.HEALTH_OK, ()))[0]

    def load_function(self, identity: str, function: str) -> None:
        with self._lock:
            self._functions[identity] = function
            self._version += 1

    def set_driver(self, name: str, installed: bool) -> None:
        with self._lock:
            (self._uninstalled.discard if installed else self._uninstalled.add)(name)
            self._version += 1

    def power_cycle(self) -> None:
        """A reboot: every device is back, healthy, with the function it boots with."""
        with self._lock:
            self._unplugged.clear()
            self._health.clear()
            self._functions = {dev.identity: dev.function for dev in self.devices
                               if dev.function}
            self._version += 1

    def expected(self) -> list[dict[str, Any]]:
        """What the database should hold for this host: per present device of a running
        driver its driver, identity, kind, type, health and deployables (name -> size)."""
        with self._lock:
            return [{"driver": dev.driver, "identity": dev.identity, "kind": dev.kind,
                     "type": dev.type, "health": self.health(dev.identity),
                     "deployables": {dep["name"]: dep["num_accelerators"]
                                     for dep in dev.body["deployables"]}}
                    for dev in self.present() if dev.driver not in self._uninstalled]
