"""The agent: discovery loop, driver operations, journal-backed delivery to the conductor.

It reports at start and every ``[agent] report_interval`` seconds; what the conductor
has not acknowledged stays in the journal and is retried every ``retry_interval``
seconds (full snapshots with increasing sequence numbers, outcomes with operation ids:
nothing lost or duplicated). Every host-touching step is journaled before it runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

import acceld
from acceld import exception, notify, reports, states, uuids, virt
from acceld.agent import journal as jmod
from acceld.agent import programming
from acceld.agent.drivers import registry
from acceld.agent.drivers.base import BaseDriver, Driver, DriverContext, Programmable
from acceld.agent.journal import Journal
from acceld.notify import payloads
from acceld.rpc import ConductorClient
from acceld.virt import devicexml
from acceld.virt.hypervisor import Guest, Hypervisor

LOG = logging.getLogger(__name__)


def read_compute_id(path: str) -> str:
    """The compute node uuid Nova keeps in ``path`` (its ``compute_id`` file), in
    canonical form; "" when there is no such file or it holds no uuid."""
    if not path:
        return ""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(100).strip()
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as exc:
        LOG.warning("cannot read Nova's compute node id from %s: %s", path, exc)
        return ""
    node = uuids.canonical(text)
    if node is None:
        LOG.warning("%s holds no uuid (%r); the compute node is looked up by name", path,
                    text[:40])
    return node or ""


def make_context(conf: cfg.ConfigOpts, host: str, state_dir: str,
                 **collaborators: Any) -> DriverContext:
    """The drivers' context with the real collaborators, except those given."""
    from acceld.hw.runner import SubprocessRunner
    from acceld.hw.sysfs import Sysfs

    if collaborators.get("sysfs") is None:
        collaborators["sysfs"] = Sysfs(conf.agent.sysfs_root)
    if collaborators.get("runner") is None:
        collaborators["runner"] = SubprocessRunner()
    return DriverContext(conf=conf, host=host, state_dir=state_dir,
                         **{k: v for k, v in collaborators.items() if v is not None})


def capabilities(drv: Any) -> tuple[str, ...]:
    """What a driver does beyond discovery: host work at bind, programming."""
    caps = []
    if isinstance(drv, BaseDriver) and (type(drv).prepare is not BaseDriver.prepare
                                        or type(drv).release is not BaseDriver.release):
        caps.append(reports.CAP_HOST_WORK)
    if isinstance(drv, Programmable):
        caps.append(reports.CAP_PROGRAM)
    return tuple(caps)


class AgentManager:
    def __init__(self, conf: cfg.ConfigOpts, conductor: ConductorClient,
                 host: str | None = None, journal_dir: str | None = None,
                 **collaborators: Any) -> None:
        """``collaborators``: the drivers' context's, the image fetcher (``fetch_image``)
        the ``hypervisor`` (default: :func:`acceld.virt.load`'s, on first use) and
        ``boot_id`` (a callable: the kernel's boot id, default :func:`read_boot_id`) and
        ``notifier`` (an :class:`acceld.notify.Notifier`; default: sends nothing)."""
        self._conf = conf
        self.host = host or conf.host
        self._conductor = conductor
        directory = journal_dir or conf.agent.journal_dir or os.path.join(
            conf.state_path, f"agent-{self.host}")
        self.journal = Journal(directory)
        fetch = collaborators.pop("fetch_image", None)
        self._hv: Hypervisor | None = collaborators.pop("hypervisor", None)
        self._boot_id: Callable[[], str] = collaborators.pop("boot_id", read_boot_id)
        self.notifier: notify.Notifier = collaborators.pop("notifier", None) or notify.DISABLED
        self._hv_lock = threading.Lock()
        self.context = make_context(conf, self.host, os.path.join(directory, "drivers"),
                                    **collaborators)
        self._lock = threading.RLock()          # drivers and report building
        self._drivers: dict[str, Driver | None] = {}
        self._load_errors: dict[str, str] = {}
        self._failed: set[str] = set()        # drivers whose failure was notified
        # driver -> identity -> device type, from the last discovery (for usage)
        self._types: dict[str, dict[str, str]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # one lock per attach handle: a release never overtakes the prepare it undoes
        self._handle_locks: dict[str, threading.Lock] = {}   # (setdefault is atomic)
        self._arq_locks: dict[str, threading.Lock] = {}      # guest attach/detach per ARQ
        self._programmer = programming.Programmer(
            conf, self.journal, conductor, self._driver, self._program_finished,
            directory, fetch=fetch, notifier=self.notifier)
        self._load_drivers()

    # -- drivers -----------------------------------------------------------------------
    def _load_drivers(self) -> None:
        """The enabled drivers and those installed since, less those uninstalled."""
        overrides = self.journal.driver_overrides()
        names = list(self._conf.agent.enabled_drivers)
        names += [n for n, s in overrides.items()
                  if s == states.DRIVER_INSTALLED and n not in names]
        with self._lock:
            for name in names:
                if overrides.get(name) == states.DRIVER_UNINSTALLED:
                    self._drivers[name] = None
                else:
                    self._load_one(name)

    def _load_one(self, name: str) -> None:
        try:
            self._drivers[name] = registry.load(name, self.context)
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
        with self._lock:
            drivers = tuple(self._driver_report(name, drv) for name, drv in self._drivers.items())
        return reports.InventoryReport(
            host=self.host, epoch=self.journal.epoch, seq=self.journal.next_seq(),
            drivers=drivers, agent_version=acceld.__version__,
            provider_name=self._conf.agent.resource_provider_name or self.host,
            compute_node_uuid=read_compute_id(self._conf.agent.nova_compute_id_file))

    def _driver_report(self, name: str, drv: Driver | None) -> reports.DriverReport:
        """Discovery, its explanation and health (stats would break the report's digest)."""
        if drv is None:
            self._types.pop(name, None)
            return self._noted(reports.DriverReport(
                name=name, version="", error=self._load_errors.get(name),
                state=states.DRIVER_FAILED if name in self._load_errors
                else states.DRIVER_UNINSTALLED))
        caps = capabilities(drv)
        try:
            devices = tuple(drv.discover())
        except Exception as exc:
            LOG.warning("driver %s discovery failed: %s", name, exc)
            return self._noted(reports.DriverReport(
                name=name, version=drv.version, state=states.DRIVER_FAILED,
                error=str(exc)[:2000], explanation=_explanation(drv), capabilities=caps))
        self._failed.discard(name)
        self._types[name] = {dev.identity: dev.type for dev in devices}
        health = _health(name, drv)
        devices = tuple(_with_health(dev, health.get(dev.identity)) for dev in devices)
        return reports.DriverReport(name=name, version=drv.version, devices=devices,
                                    explanation=_explanation(drv), capabilities=caps)

    def _noted(self, drv: reports.DriverReport) -> reports.DriverReport:
        """``drv``, a driver not running: its failure notified when it is new."""
        if drv.state != states.DRIVER_FAILED:
            self._failed.discard(drv.name)
        elif drv.name not in self._failed:
            self._failed.add(drv.name)
            self.notifier.emit("acceld.driver.failure", payloads.DriverPayload(
                host=self.host, driver=drv.name, version=drv.version, state=drv.state,
                error=drv.error))
        return drv

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
                if jmod.kind_of(op) == jmod.KIND_PROGRAM:
                    self._conductor.program_done(op["op_id"], item["ok"], item["error"])
                else:
                    self._conductor.operation_done(op["op_id"], op["device_uuid"],
                                                   item["ok"], item["error"])
            except exception.HostUnreachable:
                return False
            self.journal.delivered(op["op_id"])
        return True

    # -- loop ------------------------------------------------------------------------------
    def start(self) -> None:
        self.recover()
        loops = [(self._loop, "agent-loop"), (self._heartbeat, "agent-heartbeat")]
        if self.notifier.enabled and self._conf.notifications.usage_period > 0:
            loops.append((self._usage_loop, "agent-usage"))
        for target, name in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def recover(self) -> None:
        """Finish what a crash left in flight (before the first report, which then shows
        it); then the conductor compares this host's hot-plugged devices with its guests."""
        boot = self._boot_id()
        before = self.journal.note_boot(boot)
        if before is not None and before != boot:
            LOG.warning("the host rebooted since the agent last ran (boot id %s, was %s)",
                        boot, before)
        for op in self.journal.inflight():
            kind = jmod.kind_of(op)
            if kind == jmod.KIND_TRANSITION:
                LOG.warning("operation %s was in flight at the last stop; running it again",
                            op["op_id"])
                self._execute(op)
            elif kind == jmod.KIND_PROGRAM:
                self._programmer.recover(op)
                self._wake.set()              # rediscover: what is loaded now?
            elif kind == jmod.KIND_GUEST_ATTACH:
                LOG.warning("attach of ARQ %s to guest %s was in flight at the last stop; "
                            "the conductor settles it from what the guest holds",
                            op["arq_uuid"], op["instance_uuid"])
                self.journal.drop(op["op_id"])
            else:
                self._recover_handle(op)
        self._conductor.agent_restarted(self.host)

    def _recover_handle(self, op: dict[str, Any]) -> None:
        """An interrupted prepare is undone (its bind failed), a release finished."""
        LOG.warning("%s of attach handle %s was in flight at the last stop; %s",
                    op["kind"], op["handle_uuid"],
                    "rolling it back" if op["kind"] == jmod.KIND_PREPARE else "finishing it")
        try:
            self._driver(op["driver"]).release(op["identity"], op["attach_info"])
        except Exception as exc:  # logged; a later bind of the handle prepares it again
            LOG.error("release of attach handle %s at restart failed: %s",
                      op["handle_uuid"], exc)
        self.journal.drop(op["op_id"])

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._programmer.join(timeout=5)
        if self._hv is not None:
            self._hv.close()
        self.notifier.close()

    def _heartbeat(self) -> None:
        """Liveness apart from discovery, so a hung driver does not look like a dead agent."""
        while not self._stop.wait(self._conf.agent.report_interval):
            try:
                self._conductor.heartbeat(self.host, acceld.AGENT_BINARY, acceld.__version__)
            except exception.HostUnreachable:
                LOG.debug("heartbeat not delivered: conductor unreachable")

    def _usage_loop(self) -> None:
        period = self._conf.notifications.usage_period
        while not self._stop.wait(period):
            try:
                self.notifier.emit("acceld.device.usage", self.usage(period))
            except Exception:  # the next period tries again
                LOG.exception("usage of %s not published", self.host)

    def usage(self, period: float) -> payloads.DeviceUsagePayload:
        """The usage notification's payload: each running driver's ``stats()`` of the
        devices its last discovery found (one failing is left out, and logged)."""
        with self._lock:
            running = [(n, d) for n, d in self._drivers.items() if d is not None]
        devices = []
        for name, drv in running:
            types = self._types.get(name, {})
            try:
                stats = drv.stats()
            except Exception as exc:
                LOG.warning("driver %s could not read device stats: %s", name, exc)
                continue
            devices += [payloads.DeviceUsage(name, identity, types[identity], metrics)
                        for identity, values in stats.items()
                        if identity in types and (metrics := payloads.usage_metrics(values))]
        return payloads.DeviceUsagePayload(host=self.host, period_s=period,
                                           sampled_at=payloads.timestamp(),
                                           devices=tuple(devices))

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
        if self._begin(op):
            self._execute(op)

    def _begin(self, op: dict[str, Any]) -> bool:
        """Journal ``op``; False (its outcome re-delivered) when it was seen before."""
        if self.journal.begin(op):
            return True
        LOG.info("operation %s (%s) seen before; re-delivering its outcome", op["op_id"],
                 jmod.kind_of(op))
        self._wake.set()
        return False

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
        # an uninstall may name a driver this agent runs that is no longer installed; any
        # other name would be journaled and reported as a driver of this host
        if name not in registry.available() and (action != "uninstall"
                                                 or name not in self._drivers):
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
            LOG.warning("host %s of %s (%s) failed: %s", "attach" if attach else "detach",
                        identity, driver, exc)
            return {"ok": False, "error": str(exc)[:2000] or exc.__class__.__name__}
        self._wake.set()          # the device changed hands: report its new view soon
        return {"ok": True, "error": None}

    def reset_device(self, driver: str, identity: str) -> dict[str, Any]:
        """The driver's reset of one device (the conductor asks only for a quarantined
        device no guest holds); {"ok", "error"}. The device is rediscovered after."""
        try:
            self._driver(driver).reset(identity)
        except Exception as exc:
            LOG.warning("reset of %s (%s) failed: %s", identity, driver, exc)
            return {"ok": False, "error": str(exc)[:2000] or exc.__class__.__name__}
        finally:
            self._wake.set()
        LOG.info("reset of %s (%s) done", identity, driver)
        return {"ok": True, "error": None}

    # -- host work of binds: prepare/release of one attach handle ---------------------------
    def prepare_handle(self, driver: str, identity: str, attach_info: dict[str, str],
                       handle_uuid: str) -> dict[str, Any]:
        """Journaled, then the driver's ``prepare``; {"ok", "error", "attach_info"}."""
        return self._handle_work(jmod.KIND_PREPARE, driver, identity, attach_info,
                                 handle_uuid)

    def release_handle(self, driver: str, identity: str, attach_info: dict[str, str],
                       handle_uuid: str) -> dict[str, Any]:
        return self._handle_work(jmod.KIND_RELEASE, driver, identity, attach_info,
                                 handle_uuid)

    def _handle_work(self, kind: str, driver: str, identity: str,
                     attach_info: dict[str, str], handle_uuid: str) -> dict[str, Any]:
        op = {"op_id": str(uuidlib.uuid4()), "kind": kind, "driver": driver,
              "identity": identity, "attach_info": dict(attach_info),
              "handle_uuid": handle_uuid}
        with self._handle_locks.setdefault(handle_uuid, threading.Lock()):
            self.journal.begin(op)
            try:
                drv = self._driver(driver)
                work = drv.prepare if kind == jmod.KIND_PREPARE else drv.release
                info = work(identity, dict(attach_info))      # release: None
            except Exception as exc:
                error = str(exc)[:2000] or exc.__class__.__name__
                LOG.warning("%s of attach handle %s (%s %s) failed: %s", kind, handle_uuid,
                            driver, identity, error)
                return {"ok": False, "error": error, "attach_info": dict(attach_info)}
            finally:
                self.journal.drop(op["op_id"])
        LOG.info("%s of attach handle %s (%s %s) done", kind, handle_uuid, driver, identity)
        return {"ok": True, "error": None, "attach_info": dict(info or attach_info)}

    # -- live attach/detach of an ARQ's device to a guest of this host (issue 22) ---------
    def _hypervisor(self) -> Hypervisor:
        """The configured hypervisor (connected on first use); HypervisorError when none."""
        with self._hv_lock:
            if self._hv is None:
                try:
                    self._hv = virt.load(self._conf)
                except exception.AccelDError:
                    raise
                except Exception as exc:   # a failed connection is tried again next call
                    raise exception.HypervisorError(
                        f"hypervisor {virt.driver_name(self._conf)} on {self.host} is "
                        f"unavailable: {exc}") from exc
            if self._hv is None:
                raise exception.HypervisorError(
                    f"no hypervisor configured on {self.host} ([hypervisor] driver = none)")
            return self._hv

    def guests(self) -> list[dict[str, Any]]:
        """The guests of this host: {uuid, name, running, aliases, arqs (those the
        aliases name)}."""
        return [_guest_dict(g) for g in self._hypervisor().guests()]

    def attach_to_guest(self, instance_uuid: str, arq_uuid: str, attach_type: str,
                        attach_info: dict[str, str], handle_uuid: str) -> dict[str, Any]:
        """Attaches the ARQ's device live (journaled while it runs); the guest after."""
        try:
            xml = devicexml.device_xml(arq_uuid, attach_type, attach_info, handle_uuid)
        except ValueError as exc:
            raise exception.InvalidInput(str(exc)) from None
        hv = self._hypervisor()
        op = {"op_id": f"{jmod.KIND_GUEST_ATTACH}-{arq_uuid}", "kind": jmod.KIND_GUEST_ATTACH,
              "instance_uuid": instance_uuid, "arq_uuid": arq_uuid,
              "alias": devicexml.alias(arq_uuid), "attach_type": attach_type,
              "attach_info": dict(attach_info), "handle_uuid": handle_uuid}
        with self._arq_locks.setdefault(arq_uuid, threading.Lock()):
            self.journal.drop(op["op_id"])     # one an interrupted attach left: replaced
            self.journal.begin(op)
            try:
                hv.attach(instance_uuid, xml)
                guest = hv.guest(instance_uuid)
            finally:
                self.journal.drop(op["op_id"])
        LOG.info("ARQ %s attached to guest %s", arq_uuid, instance_uuid)
        return _guest_dict(guest)

    def detach_from_guest(self, instance_uuid: str, arq_uuid: str) -> str:
        """Unplugs the ARQ's device: "removed", "pending" (the guest has not released it
        within ``[hypervisor] detach_timeout``) or "absent"."""
        try:
            alias = devicexml.alias(arq_uuid)
        except ValueError as exc:
            raise exception.InvalidInput(str(exc)) from None
        hv = self._hypervisor()
        with self._arq_locks.setdefault(arq_uuid, threading.Lock()):
            outcome = hv.detach(instance_uuid, alias, self._conf.hypervisor.detach_timeout)
        LOG.info("detach of ARQ %s from guest %s: %s", arq_uuid, instance_uuid, outcome)
        return outcome

    # -- FPGA programming ------------------------------------------------------------------
    def run_program(self, op: dict[str, Any]) -> None:
        """Journal a program operation and run it in a worker thread (outcome: program_done)."""
        op = dict(op, kind=jmod.KIND_PROGRAM)
        if self._begin(op):
            self._programmer.start(op)

    def _program_finished(self) -> None:
        self.deliver_results()
        self._wake.set()          # the function loaded changes the device's traits

    # -- stats on demand -----------------------------------------------------------------
    def device_stats(self, driver: str, identity: str) -> dict[str, float]:
        stats = self._driver(driver).stats()
        return {k: float(v) for k, v in stats.get(identity, {}).items()}


def _guest_dict(guest: Guest) -> dict[str, Any]:
    return {"uuid": guest.uuid, "name": guest.name, "running": guest.running,
            "aliases": list(guest.aliases),
            "arqs": [arq for arq in map(devicexml.arq_of, guest.aliases) if arq]}


def _explanation(drv: Driver) -> dict[str, Any] | None:
    explain = getattr(drv, "explain", None)
    if explain is None:
        return None
    try:
        return explain().to_dict()
    except Exception:  # an explanation must never cost the report
        LOG.exception("driver %s could not explain its discovery", drv.name)
        return None


def _health(name: str, drv: Driver) -> dict[str, Any]:
    health = getattr(drv, "health", None)
    if health is None:
        return {}
    try:
        return dict(health())
    except Exception as exc:  # health unknown is not a failed discovery
        LOG.warning("driver %s could not read device health: %s", name, exc)
        return {}


def _with_health(dev: reports.Device, health: Any) -> reports.Device:
    if health is None:
        return dev
    status = health.status if health.status in reports.DEVICE_HEALTH else states.HEALTH_FAILED
    counters = tuple(sorted((str(name), int(count)) for name, count in
                            getattr(health, "counters", ()) if name in reports.HEALTH_COUNTERS
                            and int(count) >= 0))
    return dataclasses.replace(dev, health=status,
                               health_reasons=tuple(str(r)[:1000] for r in health.reasons),
                               health_counters=counters)


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def read_boot_id() -> str:
    """The kernel's boot id (a new one at each boot); "" where there is none."""
    try:
        with open(BOOT_ID, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""

