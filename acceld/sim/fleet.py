"""The fleet: thousands of simulated agents in one process, on a real transport.

One scheduler thread keeps a heap of timed events (a host's next report or heartbeat,
a scenario fault, the end of one). The reports are sent by a bounded pool of
``workers`` threads, at most one in flight per host, as a real agent's loop sends them;
the heartbeats by a smaller pool of their own. The first ``serve_rpc`` hosts also serve
the agent RPC topic (:mod:`acceld.sim.agent`); the others only talk to the conductor.

Tests and bench scripts use :class:`Fleet` directly: ``start()``,
``wait_converged(timeout, check)``, ``expected_inventory()``, ``stats()``, ``stop()``.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import logging
import os
import signal
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from concurrent import futures
from typing import Any

import acceld
from acceld import rpc, states
from acceld.sim import agent as agentmod
from acceld.sim import devices as devmod
from acceld.sim import scenario as scen
from acceld.sim.host import RESET_FAILS_REASON, SimHost
from acceld.sim.stats import Stats
from acceld.virt.fake import FakeHypervisor

LOG = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class FleetConfig:
    hosts: int = 10
    host_prefix: str = "sim"
    mix: tuple[tuple[str, int], ...] = devmod.DEFAULT_MIX
    report_interval: float = 30.0
    heartbeat_interval: float | None = None      # None: the report interval, as agents do
    retry_interval: float = 2.0                  # after a report that was not delivered
    workers: int = 16
    serve_rpc: int = 0                           # the first K hosts serve the agent topic
    guests: int = 2                              # simulated guests per served host
    ramp: float = 0.0                            # first reports spread over this long
    work_delay: float = 0.0                      # a served host's prepare/release takes this
    compute_ids: bool = False                    # agents report compute_node_uuid(host)

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.workers < 1 or self.serve_rpc < 0 or self.guests < 0 \
                or self.work_delay < 0:
            raise ValueError("hosts and workers must be >= 1, serve_rpc, guests and "
                             "work_delay >= 0")
        if min(self.report_interval, self.retry_interval,
               self.heartbeat_interval or self.report_interval) <= 0 or self.ramp < 0:
            raise ValueError("intervals must be > 0 and ramp >= 0")

    @property
    def beat_every(self) -> float:
        return self.heartbeat_interval or self.report_interval


def compute_node_uuid(host: str) -> str:
    """The compute node uuid a simulated host's Nova would keep (``compute_id``): fixed
    per name, so that a harness can create the provider Nova would have."""
    return str(uuidlib.uuid5(devmod.SIM_NAMESPACE, f"{host}|compute-node"))


def host_names(prefix: str, count: int) -> list[str]:
    width = max(5, len(str(count - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(count)]


@dataclasses.dataclass
class _Delivery:
    """How one host's messages travel (guarded by the fleet's lock)."""

    ticket: int = 0                  # the report event that counts (older ones are void)
    in_flight: int | None = None     # the agent life whose report is being sent
    wake: bool = False               # report again as soon as the one in flight is done
    beating: bool = False            # a heartbeat is queued or being sent
    delay: float = 0.0               # slow bus: seconds each message is held
    lost: bool = False               # lost bus: messages are dropped


class Fleet:
    """``transport``: the bus to the conductor (the caller's, closed by the caller)."""

    def __init__(self, transport: rpc.Transport, config: FleetConfig,
                 scenario: scen.Scenario | None = None) -> None:
        self.config = config
        self._transport = transport
        self._names = host_names(self.config.host_prefix, self.config.hosts)
        # one client per host, as each agent has: it learns its host's owning conductor
        # from the answers and sends there
        self._conductors = {name: rpc.ConductorClient(transport) for name in self._names}
        self._scenario = scenario or scen.Scenario()
        self._scenario.check_hosts(self._names)
        self.hosts = {name: SimHost(name, devmod.host_devices(name, self.config.mix),
                                    compute_node_uuid(name) if self.config.compute_ids
                                    else None)
                      for name in self._names}
        self._delivery = {name: _Delivery() for name in self._names}
        self._hypervisors = {name: FakeHypervisor(agentmod.guest_instances(
            name, self.config.guests)) for name in self._names[:self.config.serve_rpc]}
        self._servers: dict[str, rpc.Server] = {}     # guarded by _cond
        self._stoppers: list[threading.Thread] = []
        self._stats = Stats()
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._pending_faults = 0          # scenario events not run yet
        self._first_accepted = 0
        self._stopping = False
        self._beats_held = False          # guarded by _cond: see hold_heartbeats()
        self._started: float | None = None
        self._pool = futures.ThreadPoolExecutor(self.config.workers,
                                                thread_name_prefix="sim-send")
        # heartbeats have threads of their own (as an agent has): a backlog of reports
        # to a slow conductor must not hold them
        self._beat_pool = futures.ThreadPoolExecutor(max(2, self.config.workers // 4),
                                                     thread_name_prefix="sim-beat")
        self._thread = threading.Thread(target=self._run, name="sim-scheduler", daemon=True)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        if self._started is not None:
            raise RuntimeError("the fleet was started already")
        self._started = now = time.monotonic()
        count = len(self._names)
        for i, name in enumerate(self._names):
            self._at(now + self.config.ramp * i / count,
                     functools.partial(self._boot, name, False))
        for fault in self._scenario.faults:
            self._fault_event(now + fault.at, functools.partial(self._apply, fault))
        self._thread.start()
        LOG.info("fleet of %d hosts (%s per host) started; %d serve the agent RPC",
                 count, devmod.format_mix(self.config.mix), len(self._hypervisors))

    def stop(self) -> None:
        """Stops sending (what is in flight finishes) and serving."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._beat_pool.shutdown(wait=True, cancel_futures=True)
        with self._cond:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            _stop_server(server)
        for stopper in self._stoppers:
            stopper.join()

    def hold_heartbeats(self, held: bool, timeout: float = 30.0) -> bool:
        """While held, due heartbeats are not sent (counted as held): a benchmark
        measuring a baseline beside a started fleet keeps the fleet's beats out of it.
        Holding returns once the beats already queued or on their way have been sent
        (False if some still were after ``timeout`` s), so none lands after it."""
        with self._cond:
            self._beats_held = held
            return not held or self._cond.wait_for(
                lambda: not any(d.beating for d in self._delivery.values()), timeout)

    @property
    def elapsed(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started

    # -- results -----------------------------------------------------------------------------
    def synced(self) -> bool:
        """Every scenario event has run, every agent runs, and the conductor accepted
        the report of what each host has now."""
        with self._cond:
            if self._pending_faults:
                return False
        return all(host.synced() for host in self.hosts.values())

    def wait_converged(self, timeout: float, check: Callable[[], Any] | None = None,
                       interval: float = 0.2) -> bool:
        """Wait up to ``timeout`` s until :meth:`synced` and ``check()`` is truthy (a
        caller's look at the database, Placement or the API; its exceptions count as
        "not yet"); True when both held, their time in ``stats()["converged_s"]``."""
        deadline = time.monotonic() + timeout
        while True:
            if self.synced() and _holds(check):
                self._stats.converged_s = round(self.elapsed, 3)
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    def expected_inventory(self) -> dict[str, list[dict[str, Any]]]:
        """Host -> the devices the database should hold for it now (see
        :meth:`SimHost.expected`)."""
        return {name: self.hosts[name].expected() for name in self._names}

    def stats(self) -> dict[str, Any]:
        out = self._stats.snapshot(self.elapsed)
        out["hosts"] = {"total": len(self._names),
                        "up": sum(h.up for h in self.hosts.values()),
                        "synced": sum(h.synced() for h in self.hosts.values()),
                        "served": len(self._hypervisors)}
        out["devices_per_host"] = sum(count for _kind, count in self.config.mix)
        return out

    def count(self, key: str) -> int:
        """One of the counters behind :meth:`stats`, named as there with its group:
        ``reports_accepted``, ``reports_unchanged``, ``heartbeats_sent``, ... (cheap: a
        caller may poll it)."""
        return self._stats.count(key)

    # -- scheduling ----------------------------------------------------------------------------
    def _at(self, due: float, event: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._order), event))
            self._cond.notify()

    def _fault_event(self, due: float, event: Callable[[], None]) -> None:
        """A scenario event: the fleet is not converged until it has run."""
        def run() -> None:
            try:
                event()
            finally:
                with self._cond:
                    self._pending_faults -= 1
        with self._cond:
            self._pending_faults += 1
        self._at(due, run)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not (
                        self._heap and self._heap[0][0] <= time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                due = []
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
            for event in due:
                try:
                    event()
                except Exception:  # one event's bug must not stop the fleet
                    LOG.exception("simulator event failed")

    def _submit(self, fn: Callable[..., None], *args: Any,
                pool: futures.ThreadPoolExecutor | None = None) -> None:
        try:
            (pool or self._pool).submit(fn, *args)
        except RuntimeError:       # shut down: the fleet is stopping
            pass

    # -- agents --------------------------------------------------------------------------------
    def _boot(self, name: str, keep_journal: bool) -> None:
        """The host's agent starts: it serves its topic (if served), announces itself
        and reports at once (:meth:`_send_report`), and heartbeats from one interval on."""
        host = self.hosts[name]
        life = host.start_agent(keep_journal)
        self._schedule_report(name, 0.0, announce=True)
        self._at(time.monotonic() + self.config.beat_every,
                 functools.partial(self._heartbeat_due, name, life))

    def _halt(self, name: str) -> None:
        """The host's agent dies: nothing more is sent or answered (its RPC server is
        stopped in a thread of its own: the scheduler does not wait for it)."""
        self.hosts[name].stop_agent()
        with self._cond:
            server = self._servers.pop(name, None)
        if server is not None:
            stopper = threading.Thread(target=_stop_server, args=(server,),
                                       name=f"sim-unserve-{name}", daemon=True)
            stopper.start()
            self._stoppers.append(stopper)

    def _serve(self, name: str) -> None:
        """Serve the host's agent topic (over the same hypervisor: its guests outlive
        the agent); a failure leaves the host reporting, not answering."""
        endpoint = agentmod.AgentEndpoint(
            self.hosts[name], self._conductors[name], self._hypervisors[name],
            wake=functools.partial(self.wake, name), served=self._stats.served,
            work_delay=self.config.work_delay)
        try:
            server = self._transport.serve(rpc.AGENT_TOPIC, name, endpoint)
            server.start()
        except Exception:
            LOG.exception("%s cannot serve the agent topic", name)
            return
        with self._cond:
            self._servers[name] = server

    def wake(self, name: str) -> None:
        """Have ``name`` report now (after the report in flight, if one is)."""
        self._report_due(name, self._new_ticket(name), announce=False)

    def _schedule_report(self, name: str, delay: float, announce: bool = False) -> None:
        """The host's next report, in ``delay`` s."""
        self._at(time.monotonic() + delay, functools.partial(
            self._report_due, name, self._new_ticket(name), announce))

    def _new_ticket(self, name: str) -> int:
        """The ticket of the host's next report event: it voids every event before it."""
        with self._cond:
            self._delivery[name].ticket += 1
            return self._delivery[name].ticket

    def _report_due(self, name: str, ticket: int, announce: bool) -> None:
        host, delivery = self.hosts[name], self._delivery[name]
        with self._cond:
            if ticket != delivery.ticket or not host.up:
                return
            if delivery.in_flight == host.life:
                delivery.wake = True
                return
            delivery.in_flight = life = host.life
        self._submit(self._send_report, name, life, announce)

    def _send_report(self, name: str, life: int, announce: bool) -> None:
        host, delivery = self.hosts[name], self._delivery[name]
        try:
            if announce and name in self._hypervisors:
                self._serve(name)          # before the conductor hears of the agent
            if announce and not delivery.lost:
                self._conductors[name].agent_restarted(name)
                self._stats.add("agent_restarted")
            report, version = host.build_report()
            if delivery.lost:
                self._stats.add("reports_dropped")
                self._report_done(name, life, ok=False)
            elif delivery.delay:
                self._at(time.monotonic() + delivery.delay, functools.partial(
                    self._submit, self._deliver, name, life, report, version))
            else:
                self._deliver(name, life, report, version)
        except Exception:
            LOG.exception("report of %s could not be built", name)
            self._report_done(name, life, ok=False)

    def _deliver(self, name: str, life: int, report: dict[str, Any], version: int) -> None:
        ok = False
        started = time.monotonic()
        self._stats.add("reports_sent")
        try:
            reply = self._conductors[name].report_inventory(report)
        except Exception as exc:   # HostUnreachable, RemoteFailure, ...: tried again later
            self._stats.failure(type(exc).__name__)
            LOG.debug("report %d of %s failed: %s", report["seq"], name, exc)
        else:
            ok = True
            self._stats.latency(time.monotonic() - started)
            if reply.get("stale"):
                self._stats.add("reports_stale")
            else:
                self._stats.add("reports_accepted")
                self._stats.add("reports_changed" if reply.get("changed")
                                else "reports_unchanged")
                if reply.get("conductor"):
                    self._stats.accepted_by(reply["conductor"])
                if self.hosts[name].accepted(life, report["epoch"], version):
                    self._count_first_accepted()
        finally:
            self._report_done(name, life, ok)

    def _report_done(self, name: str, life: int, ok: bool) -> None:
        host, delivery = self.hosts[name], self._delivery[name]
        with self._cond:
            if delivery.in_flight == life:
                delivery.in_flight = None
            again, delivery.wake = delivery.wake, False
        if not host.alive(life):
            return
        interval = self.config.report_interval if ok else self.config.retry_interval
        self._schedule_report(name, 0.0 if again else interval)

    def _count_first_accepted(self) -> None:
        with self._cond:
            self._first_accepted += 1
            everyone = self._first_accepted == len(self._names)
        if everyone:
            self._stats.first_reports_accepted_s = round(self.elapsed, 3)
            LOG.info("every host's first report accepted after %.1f s", self.elapsed)

    def _heartbeat_due(self, name: str, life: int) -> None:
        host, delivery = self.hosts[name], self._delivery[name]
        if not host.alive(life):
            return
        with self._cond:
            lost, busy, delay = delivery.lost, delivery.beating, delivery.delay
            held = self._beats_held
            if not (lost or busy or held):
                delivery.beating = True       # until _beat has sent it
        if held:
            self._stats.add("heartbeats_held")
        elif lost:
            self._stats.add("heartbeats_dropped")
        elif busy:
            self._stats.add("heartbeats_skipped")
        elif delay:
            self._at(time.monotonic() + delay,
                     functools.partial(self._submit, self._beat, name, life,
                                       pool=self._beat_pool))
        else:
            self._submit(self._beat, name, life, pool=self._beat_pool)
        self._at(time.monotonic() + self.config.beat_every,
                 functools.partial(self._heartbeat_due, name, life))

    def _beat(self, name: str, life: int) -> None:
        try:
            if self.hosts[name].alive(life):
                self._conductors[name].heartbeat(name, acceld.AGENT_BINARY, acceld.__version__)
                self._stats.add("heartbeats_sent")
        except Exception as exc:
            self._stats.add("heartbeats_failed")
            LOG.debug("heartbeat of %s failed: %s", name, exc)
        finally:
            with self._cond:
                self._delivery[name].beating = False
                if self._beats_held:            # hold_heartbeats() waits for the last
                    self._cond.notify_all()

    # -- faults --------------------------------------------------------------------------------
    def _apply(self, fault: scen.Fault) -> None:
        targets = fault.targets(self._names, self._scenario.seed)
        record: dict[str, Any] = {"index": fault.index, "kind": fault.kind,
                                  "at_s": round(self.elapsed, 3), "hosts": len(targets)}
        handlers: dict[str, Callable[[scen.Fault, list[str]], dict[str, Any]]] = {
            scen.AGENT_CRASH: self._crash, scen.REBOOT: self._crash,
            scen.UNPLUG: self._unplug, scen.XID_STORM: self._health,
            scen.ECC_STORM: self._health, scen.FAILED_RESET: self._health,
            scen.SLOW_BUS: self._bus, scen.LOST_BUS: self._bus,
            scen.KILL_CONDUCTOR: self._kill_conductor}
        try:
            record.update(handlers[fault.kind](fault, targets))
        except Exception as exc:  # recorded: a scenario goes on past a fault it cannot play
            LOG.exception("fault %d (%s) failed", fault.index, fault.kind)
            record["error"] = str(exc)
        LOG.info("fault %s", record)
        self._stats.fault(record)

    def _crash(self, fault: scen.Fault, targets: list[str]) -> dict[str, Any]:
        """The agent stops (a reboot: the host too) and starts again ``down`` s later;
        a rebooted host comes back with all its devices, healthy."""
        reboot = fault.kind == scen.REBOOT
        keep = bool(fault.params.get("keep_journal"))
        hit = [name for name in targets if self.hosts[name].up]
        for name in hit:
            self._halt(name)
            self._fault_event(time.monotonic() + fault.params["down"],
                              functools.partial(self._restart, name, reboot, keep))
        return {"hosts": len(hit)}

    def _restart(self, name: str, reboot: bool, keep_journal: bool) -> None:
        if reboot:
            self.hosts[name].power_cycle()
            hv = self._hypervisors.get(name)
            for guest in hv.guests() if hv is not None else ():
                hv.redefine(guest.uuid)       # guests come back without hot-plugged devices
        self._boot(name, keep_journal)

    def _on_devices(self, fault: scen.Fault, targets: list[str],
                    apply: Callable[[SimHost, list[str]], None],
                    undo: Callable[[SimHost, list[str]], None], after: float | None) -> int:
        """``apply(host, identities)`` to the devices the fault picks on each target host
        and, unless ``after`` is None, ``undo`` the same ``after`` s later; returns the
        number of devices hit."""
        params = fault.params
        by_type = "GPU" if fault.kind in scen.HEALTH_FAULTS and not (
            params.get("device") or params.get("device_kind")) else None
        total = 0
        for name in targets:
            host = self.hosts[name]
            hit = host.pick(params.get("device_kind"), params.get("device"),
                            params["devices"], by_type)
            total += len(hit)
            apply(host, hit)
            if after is not None:
                self._fault_event(time.monotonic() + after, functools.partial(undo, host, hit))
        return total

    def _unplug(self, fault: scen.Fault, targets: list[str]) -> dict[str, Any]:
        return {"devices": self._on_devices(fault, targets, SimHost.unplug, SimHost.replug,
                                            fault.params["back_after"])}

    def _health(self, fault: scen.Fault, targets: list[str]) -> dict[str, Any]:
        params = fault.params
        status, reasons = {
            scen.XID_STORM: (states.HEALTH_FAILED, (f"critical XID {params.get('xid')}",)),
            scen.ECC_STORM: (params.get("status"), (f"{params.get('errors')} uncorrected "
                                                    "ECC errors since driver load",)),
            scen.FAILED_RESET: (states.HEALTH_FAILED, (RESET_FAILS_REASON,)),
        }[fault.kind]
        hit = self._on_devices(fault, targets,
                               lambda host, ids: host.set_health(ids, status, reasons),
                               lambda host, ids: host.clear_health(ids, reasons),
                               params.get("duration"))
        return {"devices": hit, "status": status}

    def _bus(self, fault: scen.Fault, targets: list[str]) -> dict[str, Any]:
        """Slow bus: every message of the hosts held ``delay`` s; lost: dropped."""
        lost = fault.kind == scen.LOST_BUS
        self._set_bus(targets, lost, 0.0 if lost else fault.params["delay"])
        duration = fault.params["duration"]
        if duration is not None:
            self._fault_event(time.monotonic() + duration,
                              functools.partial(self._set_bus, targets, False, 0.0))
        return {}

    def _set_bus(self, names: list[str], lost: bool, delay: float) -> None:
        with self._cond:
            for name in names:
                self._delivery[name].lost, self._delivery[name].delay = lost, delay

    def _kill_conductor(self, fault: scen.Fault, targets: list[str]) -> dict[str, Any]:
        pid = fault.params["pid"]
        if pid is None:
            with open(fault.params["pid_file"], encoding="ascii") as f:
                pid = int(f.read().strip())
        os.kill(pid, signal.SIGKILL)
        return {"pid": pid}


def _stop_server(server: rpc.Server) -> None:
    server.stop()
    wait = getattr(server, "wait", None)    # oslo.messaging's: releases its connection
    if wait is not None:
        wait()


def _holds(check: Callable[[], Any] | None) -> bool:
    if check is None:
        return True
    try:
        return bool(check())
    except Exception as exc:  # a caller's check that cannot tell yet
        LOG.debug("convergence check: %s", exc)
        return False
