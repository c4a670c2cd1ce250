"""Binding and unbinding accelerator requests: orchestration over ``objects.arqs`` (no SQL).

A bind is ``arqs.bind`` -> host work or programming (contract 6.3) -> ``finish_bind``; a
failure makes it BindFailed and frees the handle. Once every ARQ of an instance is
resolved, Nova gets one ``accelerator-request-bound`` request (contract 3.2); binds not
resolved within ``bind_timeout`` are failed and reported. What Nova waits on is kept in
the database (``objects.bind_waits``), so that when a conductor dies another one that
owns the ARQs' host finishes its waits at their deadline; whoever takes a wait's row
tells Nova, so no event is sent twice.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from oslo_utils import timeutils

from acceld import exception, notify, uuids
from acceld import states as st
from acceld.clients import nova
from acceld.db.api import Database
from acceld.notify import payloads
from acceld.objects import arqs, bind_waits, hostwork
from acceld.outbox import Outbox
from acceld.rpc import AgentClient

if TYPE_CHECKING:
    from sqlalchemy import Connection

LOG = logging.getLogger(__name__)


class HostWork:
    """Host-side work of a bind (``prepare``) or an unbind (``release``) of a handle dict.
    ``needs(handle, conn)``, asked inside the bind's or unbind's transaction, lets a handle
    without host work skip both; an implementation without it does both for every handle.
    This one does nothing (a Binder without agents: tests of the binding itself)."""

    def needs(self, handle: dict[str, Any], conn: Any = None) -> bool:
        return False

    def prepare(self, handle: dict[str, Any]) -> None:
        return None

    def release(self, handle: dict[str, Any]) -> None:
        return None


class AgentHostWork(HostWork):
    """:class:`HostWork` through the agents: the driver's ``prepare``/``release`` (create
    the mdev, bind the VF to vfio-pci, ...) on the handle's host, for the handles that
    need it (``objects.hostwork``); a failure is an ``AccelDError``."""

    def __init__(self, db: Database, agents: AgentClient) -> None:
        self._db = db
        self._agents = agents

    def needs(self, handle: dict[str, Any], conn: Connection | None = None) -> bool:
        return hostwork.needs_host_work(self._db if conn is None else conn, handle)

    def _run(self, verb: str, handle: dict[str, Any]) -> dict[str, Any] | None:
        """``verb`` of ``handle`` on its host's agent (None: none needed), or
        OperationFailed, also for a handle that needs host work on an unknown host."""
        target = hostwork.target_for(handle, self._db)
        if not hostwork.requires_host_work(handle, target):
            return None
        if target is None:
            raise exception.OperationFailed(
                f"attach handle {handle['uuid']} needs host work, but its device's host is "
                f"not known")
        call = self._agents.prepare_handle if verb == "prepare" else \
            self._agents.release_handle
        result = call(target.host, target.driver, target.identity, handle["attach_info"],
                      handle["uuid"])
        if not result.get("ok"):
            raise exception.OperationFailed(
                f"{verb} of attach handle {handle['uuid']} on {target.host} failed: "
                f"{result.get('error')}")
        return {**result, "driver": target.driver}

    def prepare(self, handle: dict[str, Any]) -> None:
        result = self._run("prepare", handle)
        if result is not None and result.get("attach_info") != handle["attach_info"]:
            # The handle's identity is its attach_info: drivers fix it at discovery
            # (e.g. a deterministic mdev uuid), so prepare must not change it.
            LOG.warning("driver %s changed the attach_info of handle %s at prepare; "
                        "keeping the reported one", result["driver"], handle["uuid"])

    def release(self, handle: dict[str, Any]) -> None:
        self._run("release", handle)


class Binder:
    def __init__(self, db: Database, host_work: HostWork | None = None,
                 notifier: nova.NovaClient | None = None, bind_timeout: float = 60.0,
                 program: Callable[[str, dict[str, str]], None] | None = None,
                 program_timeout: float = 0.0,
                 owns: Callable[[str], bool] | None = None,
                 events: notify.Notifier = notify.DISABLED) -> None:
        """``program(arq_uuid, request)`` queues a bind's program operation; its outcome
        comes to :meth:`program_done`. ``owns(host)``: whether this conductor finishes
        the overdue waits of binds on ``host`` (None: every host's). ``events`` sends
        the ARQs' versioned notifications (bound, bind_failed, unbound)."""
        self._db = db
        self._events = events
        self._host = host_work or HostWork()
        self._notifier = notifier
        self._bind_timeout = bind_timeout
        self._program = program
        self._program_timeout = program_timeout
        self._owns = owns or (lambda host: True)
        # instance uuid -> the wait this Binder wrote for it (its row in bind_waits), so
        # that the bind that resolves it needs no read of the row
        self._mine: dict[str, bind_waits.Wait] = {}
        self._mine_lock = threading.Lock()
        self._watch_stop = threading.Event()
        self._watch: threading.Thread | None = None
        # (instance, events) for Nova, sent from the outbox's thread once started
        self._outbox = Outbox("nova-events", lambda item: self._deliver(*item))

    def bind(self, patch: dict[str, dict[str, str]], project_id: str | None) -> None:
        """``patch``: ARQ uuid -> bind fields; InstanceHasARQs (no hot add) refuses it all."""
        by_instance: dict[str, list[str]] = {}
        hosts: dict[str, str] = {}
        for uuid, fields in patch.items():
            by_instance.setdefault(fields["instance_uuid"], []).append(uuid)
            hosts.setdefault(fields["instance_uuid"], fields["hostname"])
        expected = self._expect(by_instance, hosts)
        unbound = sorted(by_instance)
        errors: list[exception.AccelDError] = []
        try:
            for uuid, fields in patch.items():
                try:
                    self.bind_one(uuid, fields, project_id, unbound)
                except exception.AccelDError as exc:
                    if isinstance(exc, exception.InstanceHasARQs):
                        self._forget(expected)      # refused: nothing changed
                        raise
                    LOG.warning("bind of ARQ %s failed: %s", uuid, exc)
                    errors.append(exc)
                unbound = []
        finally:
            for instance in by_instance:
                self._notify_if_resolved(instance, look_up=False)
        if errors:
            raise errors[0]

    # -- Nova notification --------------------------------------------------------------
    @staticmethod
    def _deadline(seconds: float) -> datetime.datetime:
        """``seconds`` from now, as the database keeps a deadline (naive UTC)."""
        return bind_waits.stored_deadline(
            timeutils.utcnow() + datetime.timedelta(seconds=seconds))

    def _expect(self, by_instance: dict[str, list[str]],
                hosts: dict[str, str]) -> dict[str, bind_waits.Wait]:
        """Nova now waits to hear about these instances' ARQs (on ``hosts``): their
        waits, written as one request's (a newer request's replace them)."""
        if self._notifier is None:
            return {}
        token, deadline = uuids.random_uuid(), self._deadline(self._bind_timeout)
        waits = {instance: bind_waits.Wait(instance, token, hosts[instance], arq_uuids,
                                           deadline)
                 for instance, arq_uuids in by_instance.items()}
        bind_waits.expect(self._db, waits.values())
        with self._mine_lock:
            self._mine.update(waits)
        return waits

    def _extend(self, instance: str, seconds: float) -> None:
        """``instance``'s binds may take ``seconds`` more from now (an FPGA programs)."""
        with self._mine_lock:
            wait = self._mine.get(instance)
        if wait is None:
            return
        deadline = self._deadline(seconds)
        if bind_waits.extend(self._db, instance, wait.token, deadline):
            with self._mine_lock:
                if self._mine.get(instance) is wait:
                    self._mine[instance] = wait._replace(deadline=deadline)

    def _forget(self, waits: dict[str, bind_waits.Wait]) -> None:
        """Drops ``waits`` (a refused request), not another request's newer ones."""
        if not waits:
            return
        self._drop_mine(waits.values())
        try:
            bind_waits.forget(self._db, next(iter(waits.values())).token)
        except Exception:  # the refusal is the answer; the rows end at their deadline
            LOG.exception("could not drop the waits of a refused bind request")

    def _drop_mine(self, waits: Iterable[bind_waits.Wait]) -> None:
        """Forgets this Binder's copies of ``waits`` (not newer ones of their instances)."""
        with self._mine_lock:
            for wait in waits:
                if self._mine.get(wait.instance) is wait:
                    del self._mine[wait.instance]

    def _notify_if_resolved(self, instance: str, look_up: bool = True) -> None:
        """Tells Nova when every ARQ of ``instance``'s wait is resolved. The wait is this
        Binder's (known without a read) or, ``look_up``, one another conductor began
        (a bind's own call has none to look up: its wait was refused, or has ended)."""
        if self._notifier is None:
            return
        with self._mine_lock:
            wait = self._mine.get(instance)
        if wait is None and not look_up:
            return
        try:
            if wait is None:
                wait = bind_waits.find(self._db, instance)
                if wait is None:
                    return                  # Nova waits on nothing: a hot plug, or told
            states = arqs.states_of(self._db, wait.arq_uuids)
        except Exception:  # the timeout will tell Nova
            LOG.exception("could not read the ARQs of instance %s", instance)
            return
        if any(s is not None and s not in st.ARQ_RESOLVED for s in states.values()):
            return  # still binding (or unbound meanwhile): left to the timeout
        if self._take(wait):
            self._send(instance, states)

    def _take(self, wait: bind_waits.Wait) -> bool:
        """Ends ``wait``: True when this caller removed its row (it alone tells Nova)."""
        self._drop_mine([wait])
        try:
            return bind_waits.take(self._db, wait.instance, wait.token)
        except Exception:  # the row stays: the timeout, here or elsewhere, ends it
            LOG.exception("could not end the wait of instance %s", wait.instance)
            return False

    def expire_overdue(self, now: datetime.datetime | None = None) -> list[str]:
        """Fails the binds past their deadline (naive UTC ``now``) on the hosts this
        conductor owns, whichever conductor began them, and tells Nova; returns the
        instances it told. Without a notifier there is no one to tell: none."""
        if self._notifier is None:
            return []
        now = timeutils.utcnow() if now is None else now
        told = []
        for wait in bind_waits.overdue(self._db, now):
            if not self._owns(wait.host):
                continue
            LOG.warning("binding of the ARQs of instance %s did not finish by %s (UTC)",
                        wait.instance, wait.deadline)
            states = self._fail_unresolved(wait)
            if self._take(wait):
                self._send(wait.instance, states)
                told.append(wait.instance)
        self._drop_overdue(now)
        return told

    def _fail_unresolved(self, wait: bind_waits.Wait) -> dict[str, str | None]:
        """Fails ``wait``'s ARQs still binding; every ARQ's state then (None: failed).
        The host side of each freed handle is released here: the conductor that began
        the bind may be dead (a live one whose late finish fails its CAS releases it too;
        release is idempotent)."""
        freed: list[dict[str, Any]] = []
        try:
            for uuid, state in arqs.states_of(self._db, wait.arq_uuids).items():
                if state in (st.ARQ_INITIAL, st.ARQ_BIND_STARTED):
                    # a late claim or finish of the bind then fails its CAS (and frees
                    # the handle): the ARQ stays as Nova was told, failed
                    freed += arqs.fail_bind(self._db, uuid)
                    self._announce("acceld.arq.bind_failed", uuid, st.ARQ_BIND_FAILED)
            states = arqs.states_of(self._db, wait.arq_uuids)
        except Exception:
            LOG.exception("could not fail the binds of instance %s", wait.instance)
            states = {}
        for handle in freed:
            self._release(handle)
        return {uuid: states.get(uuid) for uuid in wait.arq_uuids}

    def _drop_overdue(self, now: datetime.datetime) -> None:
        """Forgets this Binder's copies of waits past their deadline: another conductor
        may have ended them; a late resolution reads the row instead."""
        with self._mine_lock:
            for instance in [i for i, w in self._mine.items() if w.deadline <= now]:
                del self._mine[instance]

    def _send(self, instance: str, states: dict[str, str | None]) -> None:
        """Tells Nova, from the sender thread once :meth:`start_watch` started it."""
        assert self._notifier is not None
        events = [nova.BoundEvent(server_uuid=instance, arq_uuid=uuid,
                                  status=nova.COMPLETED if state == st.ARQ_BOUND
                                  else nova.FAILED)
                  for uuid, state in states.items()]
        if self._outbox.started:
            self._outbox.put((instance, events))
        else:
            self._deliver(instance, events)

    def _deliver(self, instance: str, events: list[nova.BoundEvent]) -> None:
        assert self._notifier is not None
        try:
            self._notifier.send_external_events(events)
        except nova.NovaError as exc:
            LOG.warning("could not tell Nova that the ARQs of instance %s are resolved: %s",
                        instance, exc)
        except Exception:
            LOG.exception("could not tell Nova that the ARQs of instance %s are resolved",
                          instance)

    def start_watch(self) -> None:
        """Threads that expire overdue binds and send Nova its events (with a notifier)."""
        if self._notifier is None or self._watch is not None:
            return
        interval = min(1.0, self._bind_timeout / 4)
        self._outbox.start()

        def loop() -> None:
            while not self._watch_stop.wait(interval):
                try:
                    self.expire_overdue()
                except Exception:
                    LOG.exception("bind timeout check failed")

        self._watch = threading.Thread(target=loop, name="bind-timeouts", daemon=True)
        self._watch.start()

    def stop_watch(self) -> None:
        """Stops both threads, after sending the events already resolved."""
        self._watch_stop.set()
        if self._watch is not None:
            self._watch.join(timeout=10)
            self._watch = None
        self._outbox.stop(timeout=30)

    def wait_sent(self, timeout: float = 10.0) -> bool:
        """Whether every event given to the sender went out (or failed) in ``timeout``."""
        return self._outbox.wait_sent(timeout)

    def _needs_host_work(self, conn: Any, handle: dict[str, Any]) -> bool:
        """Whether a bind is more than its claim: host work, or programming (``program``)."""
        programs = self._program is not None and handle.get("deployable_id") is not None \
            and (handle.get("target") or {}).get("program")
        handle["program"] = arqs.program_request(
            conn, handle["arq_uuid"], handle["deployable_id"]) if programs else None
        return handle["program"] is not None or self._host_needs(conn, handle)

    def _host_needs(self, conn: Any, handle: dict[str, Any]) -> bool:
        """Whether binding or freeing ``handle`` takes host work (``conn`` None: own read)."""
        needs = getattr(self._host, "needs", None)
        return True if needs is None else bool(needs(handle, conn=conn))

    def _announce(self, event: str, uuid: str, state: str) -> None:
        """The notification ``event`` of ARQ ``uuid`` as it is now, when it is in
        ``state`` (what the change that sends it left; a later change sends its own)."""
        if not self._events.enabled:
            return
        try:
            record = arqs.get(self._db, uuid, project_id=None)
        except Exception as exc:  # deleted meanwhile, or the database away: none to send
            LOG.debug("no %s notification for ARQ %s: %s", event, uuid, exc)
            return
        if record["state"] == state:
            self._events.emit(event, payloads.ArqPayload.of(record))

    def bind_one(self, uuid: str, fields: dict[str, str], project_id: str | None,
                 unbound_instances: list[str]) -> dict[str, Any]:
        """Binds one ARQ; the handle it holds (its programming may still run). A hot plug
        (conductor/hotplug.py) calls it with no ``unbound_instances``: the running instance
        may hold ARQs already, and no event goes to Nova (none waits)."""
        try:
            return self._bind_one(uuid, fields, project_id, unbound_instances)
        except (exception.ARQBadState, exception.ARQNotFound):
            raise                           # refused: the ARQ did not change
        except Exception:
            self._announce("acceld.arq.bind_failed", uuid, st.ARQ_BIND_FAILED)
            raise

    def _bind_one(self, uuid: str, fields: dict[str, str], project_id: str | None,
                  unbound_instances: list[str]) -> dict[str, Any]:
        handle, bound = arqs.bind(self._db, uuid, hostname=fields["hostname"],
                                  device_rp_uuid=fields["device_rp_uuid"],
                                  instance_uuid=fields["instance_uuid"],
                                  owner=fields["project_id"], project_id=project_id,
                                  needs_host_work=self._needs_host_work,
                                  unbound_instances=unbound_instances,
                                  user_id=fields.get("user_id"))
        if bound:
            LOG.info("ARQ %s bound to %s on %s", uuid, handle["uuid"], fields["hostname"])
            self._announce("acceld.arq.bound", uuid, st.ARQ_BOUND)
            return handle
        try:
            if self._start_programming(uuid, handle, fields["instance_uuid"]):
                return handle               # program_done finishes it
            self._host.prepare(handle)
        except Exception:
            for freed in arqs.fail_bind(self._db, uuid):
                self._release(freed)
            raise
        try:
            arqs.finish_bind(self._db, uuid)
        except exception.AccelDError:
            self._release(handle)  # an unbind or a delete won; it freed the handle row
            raise
        LOG.info("ARQ %s bound to %s on %s", uuid, handle["uuid"], fields["hostname"])
        self._announce("acceld.arq.bound", uuid, st.ARQ_BOUND)
        return handle

    def _start_programming(self, uuid: str, handle: dict[str, Any], instance: str) -> bool:
        """Queue the program operation the bind needs, if any (True: one was queued)."""
        request = handle.pop("program", None)
        if request is None:
            return False
        if "error" in request:
            raise exception.InvalidInput(f"ARQ {uuid}: {request['error']}.")
        assert self._program is not None
        self._program(uuid, request)
        self._extend(instance, self._program_timeout)
        LOG.info("ARQ %s waits for %s to be loaded into deployable %s", uuid,
                 request["image_ref"], request["deployable_uuid"])
        return True

    def program_done(self, uuid: str, ok: bool, error: str | None) -> None:
        """A bind's programming ended: host work and Bound, or BindFailed; Nova is told."""
        held = arqs.held_handle(self._db, uuid)
        if held is None:
            return
        instance, handle = held
        try:
            if not ok:
                raise exception.OperationFailed(f"programming the deployable of ARQ {uuid} "
                                                f"failed: {error}")
            if self._host_needs(None, handle):
                self._host.prepare(handle)
            arqs.finish_bind(self._db, uuid)
            LOG.info("ARQ %s bound to %s (programmed)", uuid, handle["uuid"])
            self._announce("acceld.arq.bound", uuid, st.ARQ_BOUND)
        except Exception as exc:  # every failure ends the bind: BindFailed, handle freed
            LOG.warning("bind of ARQ %s failed: %s", uuid, exc)
            for freed in arqs.fail_bind(self._db, uuid):
                self._release(freed)
            self._announce("acceld.arq.bind_failed", uuid, st.ARQ_BIND_FAILED)
        if instance:
            self._notify_if_resolved(instance)

    def unbind(self, uuids: list[str], project_id: str | None,
               hot_plugged: bool = False) -> None:
        """``hot_plugged``: the detach of a hot plug (conductor/hotplug.py), which alone
        unbinds an ARQ attached live."""
        errors: list[exception.AccelDError] = []
        for uuid in uuids:
            try:
                for freed in arqs.unbind(self._db, uuid, project_id=project_id,
                                         needs_host_work=self._host_needs,
                                         hot_plugged=hot_plugged):
                    self._release(freed)
                self._announce("acceld.arq.unbound", uuid, st.ARQ_UNBOUND)
            except exception.AccelDError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def release_all(self, handles: list[dict[str, Any]]) -> None:
        """Host clean-up of handles freed elsewhere (an ARQ delete in the API)."""
        for handle in handles:
            self._release(handle)

    def _release(self, handle: dict[str, Any]) -> None:
        try:
            self._host.release(handle)
        except Exception:  # the handle row is free already; host clean-up is best effort
            LOG.exception("host clean-up of attach handle %s failed", handle["uuid"])

