"""The agent: discovery loop, driver operations, journal-backed delivery to the conductor.

On start it finishes any operation a crash left in flight, then reports at once and every
``[agent] report_interval`` seconds. Anything the conductor has not acknowledged (the
latest report, operation outcomes) stays in the journal and is delivered every
``[agent] retry_interval`` seconds until the conductor is back; because reports are full
snapshots with increasing sequence numbers and outcomes carry operation ids, catching up
neither loses nor duplicates anything.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from oslo_config import cfg

import acceld
from acceld import exception, reports, states
from acceld.agent.drivers import registry
from acceld.agent.drivers.base import Driver, DriverContext
from acceld.agent.journal import Journal
from acceld.rpc import ConductorClient

LOG = logging.getLogger(__name__)


class AgentManager:
    def __init__(self, conf: cfg.ConfigOpts, conductor: ConductorClient,
                 host: str | None = None, journal_dir: str | None = None) -> None:
        self._conf = conf
        self.host = host or conf.host
        self._conductor = conductor
        directory = journal_dir or conf.agent.journal_dir or os.path.join(
            conf.state_path, f"agent-{self.host}")
        self.journal = Journal(directory)
        self._ctx = DriverContext(conf=conf, host=self.host,
                                  state_dir=os.path.join(directory, "drivers"))
        self._lock = threading.RLock()          # drivers and report building
        self._drivers: dict[str, Driver | None] = {}
        self._load_errors: dict[str, str] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._load_drivers()

    # -- drivers -----------------------------------------------------------------------
    def _wanted_drivers(self) -> list[str]:
        overrides = self.journal.driver_overrides()
        names = list(self._conf.agent.enabled_drivers)
        names += [n for n, s in overrides.items()
                  if s == states.DRIVER_INSTALLED and n not in names]
        return names

    def _load_drivers(self) -> None:
        overrides = self.journal.driver_overrides()
        with self._lock:
            for name in self._wanted_drivers():
                if overrides.get(name) == states.DRIVER_UNINSTALLED:
                    self._drivers[name] = None
                    continue
                self._load_one(name)

    def _load_one(self, name: str) -> None:
        try:
            self._drivers[name] = registry.load(name, self._ctx)
            self._load_errors.pop(name, None)
        except Exception as exc:  # a broken driver must not stop the others
            LOG.error("cannot load driver %s: %s", name, exc)
            self._drivers[name] = None
            self._load_errors[name] = str(exc)

    def _driver(self, name: str) -> Driver:
        drv = self._drivers.get(name)
        if drv is None:
            raise exception.DriverNotFound(f"driver {name} is not running on {self.host}")
        return drv

    # -- reporting -----------------------------------------------------------------------
    def build_report(self) -> reports.InventoryReport:
        drivers = []
        with self._lock:
            for name, drv in self._drivers.items():
                if drv is None:
                    state = (states.DRIVER_FAILED if name in self._load_errors
                             else states.DRIVER_UNINSTALLED)
                    drivers.append(reports.DriverReport(
                        name=name, version="", state=state,
                        error=self._load_errors.get(name)))
                    continue
                try:
                    devices = tuple(drv.discover())
                    drivers.append(reports.DriverReport(name=name, version=drv.version,
                                                        devices=devices))
                except Exception as exc:
                    LOG.warning("driver %s discovery failed: %s", name, exc)
                    drivers.append(reports.DriverReport(name=name, version=drv.version,
                                                        state=states.DRIVER_FAILED,
                                                        error=str(exc)[:2000]))
        return reports.InventoryReport(
            host=self.host, epoch=self.journal.epoch, seq=self.journal.next_seq(),
            drivers=tuple(drivers), agent_version=acceld.__version__,
            provider_name=self._conf.agent.resource_provider_name or self.host)

    def report_once(self) -> bool:
        """Discover and send a full report; True when the conductor took it."""
        report = self.build_report()
        try:
            self._conductor.report_inventory(report.to_dict())
        except exception.HostUnreachable as exc:
            LOG.warning("conductor unreachable, report %d kept: %s", report.seq, exc)
            return False
        self.journal.ack_report(report.seq)
        return True

    def deliver_results(self) -> bool:
        """Send journaled outcomes; True when nothing is left to deliver."""
        for item in self.journal.results():
            op = item["op"]
            try:
                self._conductor.operation_done(op["op_id"], op["device_uuid"], item["ok"],
                                               item["error"])
            except exception.HostUnreachable:
                return False
            self.journal.delivered(op["op_id"])
        return True

    # -- loop ------------------------------------------------------------------------------
    def start(self) -> None:
        for op in self.journal.inflight():
            LOG.warning("operation %s was in flight at the last stop; running it again",
                        op["op_id"])
            self._execute(op)
        for target, name in ((self._loop, "agent-loop"), (self._heartbeat, "agent-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _heartbeat(self) -> None:
        """Liveness independent of discovery, so a hung driver does not look like a dead
        agent; every report counts as a heartbeat too."""
        while not self._stop.wait(self._conf.agent.report_interval):
            try:
                self._conductor.heartbeat(self.host, "acceld-agent", acceld.__version__)
            except exception.HostUnreachable:
                LOG.debug("heartbeat not delivered: conductor unreachable")

    def _loop(self) -> None:
        interval = self._conf.agent.report_interval
        retry = min(self._conf.agent.retry_interval, interval)
        while not self._stop.is_set():
            try:
                caught_up = self.report_once() & self.deliver_results()
            except Exception:
                LOG.exception("agent cycle failed")
                caught_up = False
            self._wake.wait(interval if caught_up else retry)
            self._wake.clear()

    # -- conductor -> agent endpoints ------------------------------------------------------
    def discover_now(self) -> None:
        self._wake.set()

    def run_operation(self, op: dict[str, Any]) -> None:
        if not self.journal.begin(op):
            LOG.info("operation %s seen before; re-delivering its outcome", op["op_id"])
            self._wake.set()
            return
        self._execute(op)

    def _execute(self, op: dict[str, Any]) -> None:
        ok, error = True, None
        try:
            drv = self._driver(op["driver"])
            getattr(drv, op["operation"])(op["identity"])
        except Exception as exc:
            ok, error = False, str(exc)[:2000] or exc.__class__.__name__
            LOG.warning("operation %s (%s %s) failed: %s", op["op_id"], op["operation"],
                        op["identity"], error)
        self.journal.finish(op, ok, error)
        self.deliver_results()

    def driver_action(self, name: str, action: str) -> dict[str, Any]:
        if action not in ("install", "uninstall", "update"):
            return {"ok": False, "error": f"unknown action {action}"}
        if action != "uninstall" and name not in registry.available():
            return {"ok": False, "error": f"driver {name} is not available on {self.host}"}
        with self._lock:
            if action == "uninstall":
                self.journal.set_driver(name, states.DRIVER_UNINSTALLED)
                self._drivers[name] = None
                self._load_errors.pop(name, None)
            else:
                self.journal.set_driver(name, states.DRIVER_INSTALLED)
                self._load_one(name)
        self._wake.set()
        error = self._load_errors.get(name)
        return {"ok": error is None, "error": error}

    def host_attachment(self, driver: str, identity: str, attach: bool) -> dict[str, Any]:
        try:
            drv = self._driver(driver)
            (drv.attach_host if attach else drv.detach_host)(identity)
        except Exception as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "error": None}
