"""Conductor RPC endpoints: thin; each is one domain call (objects/) plus host dispatch.

Host work (install/uninstall, FPGA programming) is cast to the agent with an operation
id; the agent journals and runs it and reports the outcome (``operation_done``,
``program_done``) until the conductor has it; the id makes the outcome idempotent. A
periodic task re-sends operations not answered in time and flushes coalesced heartbeats.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from typing import Any

from oslo_config import cfg
from oslo_utils import timeutils

import acceld
from acceld import exception, notify, reports
from acceld.clients.nova import NovaClient
from acceld.conductor import binding, hotplug
from acceld.conductor import health as device_health
from acceld.conductor.placement_syncer import PlacementSyncer
from acceld.conductor.ring import HostRing, make_ring, owner_on
from acceld.db.api import Database
from acceld.notify import payloads
from acceld.objects import accelerators, arqs, holders, inventory, ledger, services
from acceld.objects import placement as placement_objects
from acceld.objects import program as program_objects
from acceld.rpc import AgentClient, ConductorClient

LOG = logging.getLogger(__name__)

# A bind that programs an FPGA waits for the agent's outcome up to [fpga_driver]
# program_timeout plus this (the agent's own watchdog fires 30 s past the timeout).
PROGRAM_GRACE = 60.0
# The ring key whose owner purges the ledger (one conductor of several; any one will do).
LEDGER_PURGER = "acceld-ledger-purge"
# What a conductor hands to the owner of the host it concerns (``forwarded``): the
# owner's memory (newest report, waiters, hot plug's per-device turns) or periodic work
# is involved.
FORWARDED = ("report_inventory", "host_changed", "agent_restarted", "set_state",
             "placement_sync", "attach", "detach", "hot_detach")


class HeartbeatBuffer:
    """Coalesces heartbeats in memory; the first sighting of a service is flushed at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], tuple[str, datetime.datetime]] = {}
        self._known: set[tuple[str, str]] = set()

    def note(self, host: str, binary: str, version: str) -> bool:
        """Record a beat; True when this service was not known to this conductor yet."""
        with self._lock:
            self._pending[(host, binary)] = (version, timeutils.utcnow())
            new = (host, binary) not in self._known
            self._known.add((host, binary))
            return new

    def drain(self) -> list[tuple[str, str, str, datetime.datetime]]:
        """The beats noted since the last drain: (host, binary, version, seen at)."""
        with self._lock:
            beats = [(h, b, v, t) for (h, b), (v, t) in self._pending.items()]
            self._pending.clear()
            return beats


class ConductorManager:
    def __init__(self, conf: cfg.ConfigOpts, db: Database, agents: AgentClient,
                 placement: PlacementSyncer | None = None,
                 nova: NovaClient | None = None, ring: HostRing | None = None,
                 peers: ConductorClient | None = None,
                 notifier: notify.Notifier = notify.DISABLED) -> None:
        """``ring``: which conductor owns each host (None: this one owns every host);
        ``peers``: the other conductors, to forward what concerns their hosts;
        ``notifier``: sends the versioned notifications."""
        self._conf = conf
        self.notifier = notifier
        self._db = db
        self._agents = agents
        self.placement = placement
        self._host = conf.host
        self.ring = ring or HostRing(conf, conf.host)
        self._peers = peers
        self._beats = HeartbeatBuffer()
        self._lock = threading.Lock()                  # guards _latest and _waiters
        self._latest: dict[str, tuple[str, int]] = {}   # host -> newest (epoch, seq) seen
        self._waiters: dict[str, threading.Event] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # one Binder for every bind: it tracks the binds Nova waits on (None: no events)
        self._binder = binding.Binder(
            db, host_work=binding.AgentHostWork(db, agents), notifier=nova,
            bind_timeout=conf.nova.bind_timeout,
            program=lambda arq, req: self._program(req["deployable_uuid"], req["image_ref"],
                                                   "", arq),   # a bind has no digest
            program_timeout=conf.fpga_driver.program_timeout + PROGRAM_GRACE,
            owns=self.ring.owns, events=notifier)
        self._hot = hotplug.HotPlug(db, agents, self._binder,
                                    placement=None if placement is None else placement.client,
                                    nova=nova, attach_grace=2 * conf.rpc_timeout,
                                    owns=self.ring.owns)
        self._health_rules = device_health.rules(conf)
        self._health = device_health.DeviceHealth(db, agents, self.host_changed,
                                                  conf.health.reset_wait, self.notifier)

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        self.ring.start(on_change=self._ring_changed)
        self._beats.note(self._host, acceld.CONDUCTOR_BINARY, acceld.__version__)
        self.flush_heartbeats()
        if self.placement is not None:
            self.placement.schedule_unsynced()
        self._thread = threading.Thread(target=self._periodic, name="conductor-periodic",
                                        daemon=True)
        self._thread.start()
        self._binder.start_watch()

    def stop(self) -> None:
        self._stop.set()
        self._binder.stop_watch()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush_heartbeats()
        if self.placement is not None:
            self.placement.close()
        self.ring.stop()
        self.notifier.close()

    def _periodic(self) -> None:
        period = min(self._conf.conductor.save_interval, self._conf.conductor.periodic_interval)
        if self.placement is not None:
            period = min(period, self._conf.placement.sync_interval)
        last_redrive = last_sync = time.monotonic()
        while not self._stop.wait(period):
            self._beats.note(self._host, acceld.CONDUCTOR_BINARY, acceld.__version__)
            try:
                self.flush_heartbeats()
                if time.monotonic() - last_redrive >= self._conf.conductor.periodic_interval:
                    last_redrive = time.monotonic()
                    self.redrive_operations()
                    self.reconcile_hot_plug()
                    self.purge_ledger()
                if self.placement is not None and \
                        time.monotonic() - last_sync >= self._conf.placement.sync_interval:
                    last_sync = time.monotonic()
                    self.placement.schedule_all()
            except Exception:  # the loop must survive a database outage
                LOG.exception("conductor periodic task failed")

    def purge_ledger(self, now: datetime.datetime | None = None) -> int:
        """Deletes one bounded batch of ledger rows past ``[ledger] retention_days``
        (naive UTC ``now``); the count. Only the conductor owning :data:`LEDGER_PURGER` on
        the ring purges (the purge is idempotent anyway); 0 days keeps every row."""
        days = self._conf.ledger.retention_days
        if not days or not self.ring.owns(LEDGER_PURGER):
            return 0
        before = (now or timeutils.utcnow()) - datetime.timedelta(days=days)
        purged = ledger.purge(self._db, before, self._conf.ledger.purge_batch)
        if purged:
            LOG.info("purged %d ledger rows older than %s (UTC)", purged, before)
        return purged

    def flush_heartbeats(self) -> None:
        """Write the coalesced beats, each agent's with the conductor owning its host."""
        by_owner: dict[str | None, list[tuple[str, str, str, datetime.datetime]]] = {}
        for beat in self._beats.drain():
            owner = None if beat[1] == acceld.CONDUCTOR_BINARY else self.ring.owner(beat[0])
            by_owner.setdefault(owner, []).append(beat)
        for owner, beats in by_owner.items():
            services.record_heartbeats(self._db, beats, conductor=owner)

    def _beat(self, host: str, binary: str, version: str) -> None:
        if self._beats.note(host, binary, version):
            self.flush_heartbeats()

    # -- hosts shared with other conductors -------------------------------------------
    def _elsewhere(self, host: str) -> str | None:
        """The conductor owning ``host`` when it is not this one (None: this one)."""
        if self._peers is None or not self.ring.shared:
            return None
        owner = self.ring.owner(host)
        return None if owner == self._host else owner

    def forwarded(self, operation: str, arguments: dict[str, Any]) -> Any:
        """Another conductor found that ``operation`` concerns a host of this one: run it
        here, whatever this conductor's own view of the ring."""
        if operation not in FORWARDED:
            raise exception.InvalidInput(f"{operation} is not forwarded between conductors.")
        return getattr(self, f"_{operation}")(**arguments)

    def _ring_changed(self, before: tuple[str, ...], after: tuple[str, ...]) -> None:
        """Members came or went: a full Placement sync of each host this conductor gained
        (its earlier owner may have died mid-sync); the periodic pass re-sends their
        operations and checks their binds and guests."""
        if self.placement is None:
            return
        earlier = make_ring(before)
        gained = [h for h in placement_objects.hosts(self._db)
                  if self.ring.owns(h) and owner_on(earlier, h) != self._host]
        LOG.info("conductor %s now owns %d more host(s)", self._host, len(gained))
        for host in gained:
            self.placement.schedule(host, full=True)

    # -- agent -> conductor ------------------------------------------------------------
    def _is_newest(self, report: reports.InventoryReport) -> bool:
        """False for a report older than one already seen (unchanged ones store no seq)."""
        with self._lock:
            seen = self._latest.get(report.host)
            if seen is not None and seen[0] == report.epoch and seen[1] >= report.seq:
                return False
            self._latest[report.host] = (report.epoch, report.seq)
            return True

    def report_inventory(self, report: dict[str, Any]) -> dict[str, Any]:
        """A report, taken by the owner of its host; the answer names that owner."""
        owner = self._elsewhere(str(report.get("host", "")))
        if owner is not None:
            return self._peers.forward(owner, "report_inventory", {"report": report})
        return self._report_inventory(report)

    def _report_inventory(self, report: dict[str, Any]) -> dict[str, Any]:
        parsed = reports.InventoryReport.from_dict(report)
        # Liveness is the heartbeats' (the agent beats apart from its reports): an
        # unchanged report writes nothing; a changed one stamps its service row itself.
        if not self._is_newest(parsed):
            return {"seq": parsed.seq, "changed": False, "stale": True,
                    "conductor": self._host}
        result = inventory.apply_report(self._db, parsed, self._health_rules,
                                        describe=self.notifier.enabled)
        for event, devices in (("acceld.device.discovered", result.discovered),
                               ("acceld.device.removed", result.removed)):
            for device in devices:
                self.notifier.emit(event, payloads.DevicePayload(**device))
        self._health.announce(result.transitions)
        if result.changed:
            LOG.info("inventory of %s changed: %d device(s)", parsed.host,
                     len(result.changed_devices))
            self.host_changed(parsed.host)
        return {"seq": parsed.seq, "changed": result.changed, "stale": result.stale,
                "conductor": self._host}

    def heartbeat(self, host: str, binary: str, version: str,
                  sent_at: float | None = None) -> None:
        if sent_at is not None and \
                time.time() - sent_at > self._conf.conductor.service_down_time:
            LOG.debug("dropping a heartbeat of %s %s sent %.0f s ago", binary, host,
                      time.time() - sent_at)
            return
        self._beat(host, binary, version)

    def operation_done(self, op_id: str, device_uuid: str, ok: bool,
                       error: str | None) -> dict[str, Any]:
        before = self._state_now(device_uuid)
        recorded = accelerators.finish_transition(self._db, device_uuid, op_id, ok, error)
        if recorded:
            self._state_changed(device_uuid, before)
            LOG.info("operation %s on %s %s", op_id, device_uuid,
                     "succeeded" if ok else "failed")
            self._placement_changed(device_uuid)
        with self._lock:
            event = self._waiters.pop(op_id, None)
        if event is not None:
            event.set()
        return {"recorded": recorded}

    # -- API -> conductor --------------------------------------------------------------
    def create_accelerator(self, name: str, uuid: str | None) -> dict[str, Any]:
        """Declare an accelerator (adopted by a device reported under its name)."""
        record = accelerators.create_accelerator(self._db, name, uuid)
        self.discover(None)
        return _jsonable(record)

    def set_state(self, uuid: str, state: str) -> dict[str, Any]:
        """Run by the owner of the device's host: its agent answers there."""
        owner = self._device_owner(uuid)
        if owner is not None:
            return self._peers.forward(owner, "set_state", {"uuid": uuid, "state": state})
        return self._set_state(uuid, state)

    def _device_owner(self, uuid: str) -> str | None:
        """The conductor owning accelerator ``uuid``'s host when it is not this one (read
        only while conductors share the hosts)."""
        if self._peers is None or not self.ring.shared:
            return None
        host = accelerators.attachment(self._db, uuid)[2]
        return self._elsewhere(host) if host else None

    def _state_now(self, uuid: str) -> str | None:
        """The device's state now, read only when a state change would be notified."""
        if not self.notifier.enabled:
            return None
        try:
            return str(accelerators.get_accelerator(self._db, uuid)["state"])
        except exception.AccelDError:
            return None

    def _state_changed(self, uuid: str, before: str | None,
                       record: dict[str, Any] | None = None) -> None:
        """acceld.device.state_change, from the state ``before`` to the one now."""
        if before is None:
            return
        try:
            record = record or accelerators.get_accelerator(self._db, uuid)
        except exception.AccelDError:
            return
        if record["state"] != before:
            self.notifier.emit("acceld.device.state_change",
                               payloads.DeviceStatePayload.of(record, before))

    def _set_state(self, uuid: str, state: str) -> dict[str, Any]:
        before = self._state_now(uuid)
        record, op = accelerators.begin_transition(self._db, uuid, state)
        if op is None:
            return _jsonable(record)
        self._state_changed(uuid, before, record)
        self._placement_changed(uuid)  # installing/uninstalling: reserved at once
        event = threading.Event()
        with self._lock:
            self._waiters[op.op_id] = event
        self._cast(self._agents.run_operation, dataclasses.asdict(op))
        event.wait(self._conf.conductor.operation_wait)
        with self._lock:
            self._waiters.pop(op.op_id, None)
        return _jsonable(accelerators.get_accelerator(self._db, uuid))

    def _placement_changed(self, device_uuid: str) -> None:
        """A device's schedulability changed: its host's providers need a sync (by the
        host's owner)."""
        if self.placement is not None:
            host = accelerators.attachment(self._db, device_uuid)[2]
            if host:
                self.host_changed(host)

    def host_changed(self, host: str) -> None:
        owner = self._elsewhere(host)
        if owner is not None:
            self._peers.forward(owner, "host_changed", {"host": host}, cast=True)
        else:
            self._host_changed(host)

    def _host_changed(self, host: str) -> None:
        if self.placement is not None:
            self.placement.schedule(host)

    def placement_sync(self, host: str | None, dry_run: bool) -> list[dict[str, Any]]:
        """Reconcile (or, with ``dry_run``, only plan) one host or all, reading Placement."""
        if self.placement is None:
            raise exception.InvalidInput("Placement is not configured ([placement] "
                                         "auth_type is unset).")
        by_owner: dict[str | None, list[str]] = {}
        for h in [host] if host else placement_objects.hosts(self._db):
            by_owner.setdefault(self._elsewhere(h), []).append(h)
        results = self._placement_sync(by_owner.pop(None, []), dry_run)
        for owner, hosts in by_owner.items():
            results += self._peers.forward(owner, "placement_sync",
                                           {"hosts": hosts, "dry_run": dry_run})
        return results

    def _placement_sync(self, hosts: list[str], dry_run: bool) -> list[dict[str, Any]]:
        assert self.placement is not None
        return [_jsonable(dataclasses.asdict(self.placement.sync_host(h, full=True,
                                                                        dry_run=dry_run)))
                for h in hosts]

    def _cast(self, run: Any, op: dict[str, Any]) -> None:
        """Sends ``op`` to its host's agent; one unreachable gets it again later."""
        try:
            run(op["host"], op)
        except exception.HostUnreachable:
            LOG.warning("agent on %s unreachable; operation %s will be sent again",
                        op["host"], op["op_id"])

    def redrive_operations(self) -> None:
        timeout = datetime.timedelta(seconds=self._conf.conductor.operation_timeout)
        cutoff = timeutils.utcnow() - timeout
        for op in accelerators.stalled_operations(self._db, cutoff):
            if not self.ring.owns(op.host):
                continue
            LOG.info("sending operation %s (%s %s) again", op.op_id, op.operation,
                     op.device_uuid)
            accelerators.touch_operation(self._db, op.op_id)
            self._cast(self._agents.run_operation, dataclasses.asdict(op))
        for prog in program_objects.stalled(self._db, cutoff):
            if not self.ring.owns(prog["host"]):
                continue
            LOG.info("sending program operation %s (%s) again", prog["op_id"],
                     prog["deployable_uuid"])
            program_objects.touch(self._db, prog["op_id"])
            self._cast(self._agents.run_program, prog)

    # -- FPGA programming ---------------------------------------------------------------
    def program_deployable(self, deployable_uuid: str, image_ref: str,
                           image_sha256: str) -> dict[str, Any]:
        """Queue a program operation and send it to the device's agent; the queued one."""
        return _jsonable(self._program(deployable_uuid, image_ref, image_sha256))

    def _program(self, deployable_uuid: str, image_ref: str, image_sha256: str,
                 arq_uuid: str | None = None) -> dict[str, Any]:
        record = program_objects.begin(self._db, deployable_uuid, image_ref, image_sha256,
                                       arq_uuid=arq_uuid)
        op = record.pop("agent_op")
        LOG.info("program operation %s: deployable %s on %s, image %s (for ARQ %s)",
                 op["op_id"], deployable_uuid, op["host"], image_ref, arq_uuid)
        self._cast(self._agents.run_program, op)
        return record

    def program_progress(self, op_id: str, progress: int, message: str) -> None:
        program_objects.progress(self._db, op_id, progress, message)

    def program_done(self, op_id: str, ok: bool, error: str | None) -> dict[str, Any]:
        recorded = program_objects.finish(self._db, op_id, ok, error)
        if recorded is not None:
            LOG.info("program operation %s %s%s", op_id, "succeeded" if ok else "failed",
                     "" if ok else f": {error}")
            if recorded.arq_uuid is not None:
                self._binder.program_done(recorded.arq_uuid, ok, error)
        return {"recorded": recorded is not None}

    # -- device health life cycle and drain (docs/health.md) -----------------------------
    def device_health(self, uuid: str, action: str, reason: str = "") -> dict[str, Any]:
        """quarantine | release | reset one device; its health view after."""
        return self._health.act(uuid, action, reason)

    def device_maintenance(self, uuid: str, change: str, reason: str = "") -> dict[str, Any]:
        """drain | undrain one device; its health view after, with the binds it keeps."""
        return self._health.maintenance(uuid, change, reason)

    # -- stats on demand ------------------------------------------------------------------
    def device_stats(self, uuid: str) -> dict[str, Any]:
        """The current numbers of one device, read from its agent now."""
        record = accelerators.get_accelerator(self._db, uuid)
        if not record["host"] or not record["driver"]:
            raise exception.NotReady(f"Accelerator {uuid} is not on any host.")
        stats = self._agents.device_stats(record["host"], record["driver"],
                                          accelerators.identity_of(self._db, uuid))
        return {"uuid": uuid, "host": record["host"], "stats": stats}

    def attach(self, uuid: str, attach_type: str, target: str,
               project_id: str | None = None) -> dict[str, Any]:
        """``project_id``: whose request it is (None: an admin's), and whose view. An
        instance must run on the accelerator's host; its handles are attached live. Run by
        the owner of the device's host, as its detach and the hot-plug reconcile are (one
        conductor's turns keep them apart)."""
        owner = self._device_owner(uuid)
        if owner is not None:
            return self._peers.forward(owner, "attach", {
                "uuid": uuid, "attach_type": attach_type, "target": target,
                "project_id": project_id})
        return self._attach(uuid, attach_type, target, project_id)

    def _attach(self, uuid: str, attach_type: str, target: str,
                project_id: str | None) -> dict[str, Any]:
        if attach_type == "instance":
            self._hot.attach_device(uuid, target, project_id)
        else:
            record = accelerators.attach(self._db, uuid, attach_type, target, project_id)
            try:
                self._host_attachment(record, True)
            except exception.AccelDError:
                accelerators.detach(self._db, uuid)
                raise
        return _jsonable(accelerators.get_accelerator(self._db, uuid, project_id))

    def detach(self, uuid: str, project_id: str | None = None) -> None:
        """A host attachment as the driver undoes it; an instance attachment once the
        guest released every handle (Conflict while it has not: asking again waits
        again, and the reconcile completes the detach once the guest released them). Run
        by the owner of the device's host."""
        owner = self._device_owner(uuid)
        if owner is not None:
            self._peers.forward(owner, "detach", {"uuid": uuid, "project_id": project_id})
            return
        self._detach(uuid, project_id)

    def _detach(self, uuid: str, project_id: str | None) -> None:
        found = accelerators.ask_detach(self._db, uuid, project_id)
        if found.attach_type == "instance":
            self._hot.detach_device(uuid, found, project_id)
            return
        if found.attach_type == "host":
            self._host_attachment(accelerators.get_accelerator(self._db, uuid), False)
        accelerators.detach(self._db, uuid, project_id)

    def _host_attachment(self, record: dict[str, Any], attach: bool) -> None:
        identity = accelerators.identity_of(self._db, record["uuid"])
        result = self._agents.host_attachment(record["host"], record["driver"], identity,
                                              attach)
        if not result.get("ok"):
            raise exception.OperationFailed(
                f"host {'attach' if attach else 'detach'} of {record['uuid']} failed on "
                f"{record['host']}: {result.get('error')}")

    def hot_attach(self, uuid: str, instance_uuid: str,
                   project_id: str | None = None) -> dict[str, Any]:
        return _jsonable(self._hot.attach(uuid, instance_uuid, project_id))

    def hot_detach(self, uuid: str, project_id: str | None = None) -> dict[str, Any]:
        """Run by the owner of the ARQ's host, whose reconcile would otherwise release the
        ARQ beside it (an attach needs no owner: its Attaching and grace keep the
        reconcile off)."""
        if self._peers is not None and self.ring.shared:
            host = arqs.get(self._db, uuid, project_id=project_id)["hostname"]
            owner = self._elsewhere(host) if host else None
            if owner is not None:
                return self._peers.forward(owner, "hot_detach",
                                           {"uuid": uuid, "project_id": project_id})
        return self._hot_detach(uuid, project_id)

    def _hot_detach(self, uuid: str, project_id: str | None) -> dict[str, Any]:
        return _jsonable(self._hot.detach(uuid, project_id))

    def guests(self, host: str | None) -> dict[str, Any]:
        """The guests of one agent host or all (what hot plug attaches to), and the hosts
        that did not answer."""
        found: list[dict[str, Any]] = []
        unreachable: list[str] = []
        for h in [host] if host else services.agent_hosts(self._db):
            try:
                found += [{"host": h, **g} for g in self._agents.guests(h)]
            except exception.AccelDError as exc:
                LOG.warning("could not list the guests of %s: %s", h, exc)
                unreachable.append(h)
        return {"guests": found, "unreachable": unreachable}

    def reconcile_hot_plug(self) -> dict[str, list[str]]:
        """Hot-plugged ARQs and v1 instance attachments against their hosts' guests (also
        run by the periodic task)."""
        return self._hot.reconcile()

    def agent_restarted(self, host: str) -> dict[str, list[str]] | None:
        """An agent started: its host's hot-plugged ARQs are compared with its guests now,
        and an attach it was running when it stopped is settled without waiting (by the
        owner of the host)."""
        owner = self._elsewhere(host)
        if owner is not None:
            self._peers.forward(owner, "agent_restarted", {"host": host}, cast=True)
            return None
        return self._agent_restarted(host)

    def _agent_restarted(self, host: str) -> dict[str, list[str]]:
        return self._hot.reconcile(host, agent_restarted=True)

    def discover(self, host: str | None) -> list[str]:
        hosts = [host] if host else services.agent_hosts(self._db)
        reached = []
        for h in hosts:
            try:
                self._agents.discover_now(h)
                reached.append(h)
            except exception.HostUnreachable:
                LOG.warning("agent on %s unreachable for discovery", h)
        return reached

    def driver_action(self, name: str, action: str, host: str | None) -> list[dict[str, Any]]:
        hosts = [host] if host else services.agent_hosts(self._db)
        if action == "uninstall":
            holders.refuse_driver_removal(self._db, name, hosts)
        results = []
        for h in hosts:
            try:
                res = self._agents.driver_action(h, name, action)
                results.append({"host": h, "driver": name, "ok": bool(res.get("ok")),
                                "error": res.get("error")})
            except exception.AccelDError as exc:
                results.append({"host": h, "driver": name, "ok": False, "error": str(exc)})
        return results

    # -- accelerator requests (Cyborg v2) ---------------------------------------------
    def arq_bind(self, patch: dict[str, dict[str, str]],
                 project_id: str | None = None) -> None:
        """Bind ARQs (``binding.Binder.bind``); ``project_id`` None: any project's."""
        self._binder.bind(patch, project_id)

    def arq_unbind(self, uuids: list[str], project_id: str | None = None) -> None:
        """Unbind ARQs (handles freed, host cleared); raises the first error."""
        self._binder.unbind(uuids, project_id)

    def release_handles(self, handles: list[dict[str, Any]]) -> None:
        """Host clean-up of the handles an ARQ delete freed (best effort, logged)."""
        self._binder.release_all(handles)


def _jsonable(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key, value in out.items():
        if isinstance(value, datetime.datetime):
            out[key] = value.replace(tzinfo=datetime.UTC).isoformat()
    return out
