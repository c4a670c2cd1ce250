"""Hot plug: an ARQ's device, or a whole v1 accelerator's handles, attached to and
detached from a running instance (an acceld extension Nova does not know; the steps are
in docs/hot-plug.md). A failed attach undoes its steps, newest first; a detach is done
only once the guest released the device, and the reconcile keeps the records equal to
what the hosts' guests hold.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from oslo_utils import timeutils

from acceld import exception
from acceld import states as st
from acceld.clients import nova as nova_client
from acceld.clients import placement as pc
from acceld.conductor import placement_plan as pp
from acceld.conductor.binding import Binder
from acceld.db.api import Database
from acceld.objects import accelerators, arqs, device_profiles, services
from acceld.objects import placement as placement_objects
from acceld.rpc import AgentClient

LOG = logging.getLogger(__name__)

# Placement answers a stale consumer generation with 409; read and write again this often.
ALLOCATION_TRIES = 4
# Project and user of an allocation for a consumer Placement did not know, when the ARQ
# has no project either (Placement requires both).
OWNER_UNKNOWN = "acceld"


class HotPlug:
    def __init__(self, db: Database, agents: AgentClient, binder: Binder,
                 placement: pc.PlacementClient | None = None,
                 nova: nova_client.NovaClient | None = None,
                 attach_grace: float = 120.0,
                 owns: Callable[[str], bool] | None = None) -> None:
        """``attach_grace``: how long an attach may stay ``Attaching`` before the
        reconcile settles it from what the guest holds (longer than an agent call);
        ``owns(host)``: whether this conductor reconciles ``host`` (None: every host)."""
        self._db, self._agents, self._binder = db, agents, binder
        self._owns = owns or (lambda host: True)
        self._placement, self._nova = placement, nova
        self._grace = datetime.timedelta(seconds=attach_grace)
        # the ARQs and accelerators this conductor attaches, detaches or reconciles now
        self._running: set[str] = set()
        self._running_lock = threading.Lock()

    @contextlib.contextmanager
    def _turn(self, uuid: str) -> Iterator[bool]:
        """Holds ``uuid`` (an ARQ or an accelerator) as this conductor's to attach, detach
        or reconcile while the block runs; yields False, holding nothing, when it already
        was (the block must then leave it alone)."""
        with self._running_lock:
            mine = uuid not in self._running
            self._running.add(uuid)
        try:
            yield mine
        finally:
            if mine:
                with self._running_lock:
                    self._running.discard(uuid)

    @contextlib.contextmanager
    def _own_turn(self, uuid: str, what: str) -> Iterator[None]:
        """:meth:`_turn` for a request: Conflict while this conductor works on ``what``."""
        with self._turn(uuid) as mine:
            if not mine:
                raise exception.Conflict(f"acceld is attaching, detaching or reconciling "
                                         f"{what} now; try again.")
            yield

    # -- the instance's host ---------------------------------------------------------------
    def _locate(self, instance: str, owner: str | None, project_id: str | None,
                first: str | None = None) -> str:
        """The host running ``instance`` (Nova's record where ``[nova]`` is configured,
        else the agents' hypervisors), which must be ``owner``'s (None: anyone's).
        ``project_id``: the caller's (None: an admin); without Nova only an admin may name
        an instance. ``first``: the host asked first. GuestNotFound when no host has it;
        Conflict when it is there but not running."""
        hosts = services.agent_hosts(self._db)
        if self._nova is not None:
            server = self._server(instance)
            if server is None:
                raise exception.GuestNotFound(f"Nova has no instance {instance}.")
            if owner is not None and server.get("tenant_id") != owner:
                raise exception.GuestNotFound(f"Nova has no instance {instance} in project "
                                              f"{owner}.")
            hosts = [server.get("OS-EXT-SRV-ATTR:host") or ""]
        elif project_id is not None:
            raise exception.Forbidden(
                "Without Nova ([nova] unset) acceld cannot tell whose an instance is: only "
                "an admin may attach to an instance.")
        elif first in hosts:
            hosts = [first] + [h for h in hosts if h != first]
        for host in hosts:
            if self._runs(host, instance):
                return host
        raise exception.GuestNotFound(f"No host acceld manages runs instance {instance}.")

    def _server(self, instance: str) -> dict[str, Any] | None:
        """Nova's record of ``instance``; its failures as acceld errors (5xx or
        unreachable: 503; another answer: 502)."""
        assert self._nova is not None
        try:
            return self._nova.server(instance)
        except nova_client.ServerError as exc:
            raise exception.Unavailable(f"Nova could not say where instance {instance} "
                                        f"runs: {exc}") from exc
        except nova_client.NovaError as exc:
            raise exception.OperationFailed(f"Nova refused to say where instance "
                                            f"{instance} runs: {exc}") from exc

    def _runs(self, host: str, instance: str) -> bool:
        try:
            guests = self._agents.guests(host)
        except exception.HostUnreachable:
            LOG.warning("agent on %s unreachable while looking for instance %s",
                        host, instance)
            return False
        for guest in guests:
            if guest["uuid"] == instance:
                if not guest["running"]:
                    raise exception.Conflict(f"Instance {instance} is not running on "
                                             f"{host}: only a running one is attached to.")
                return True
        return False

    # -- attach ----------------------------------------------------------------------------
    def attach(self, uuid: str, instance: str, project_id: str | None) -> dict[str, Any]:
        """Attaches ARQ ``uuid`` (Initial or Unbound) to running ``instance``; the ARQ."""
        arq = arqs.get(self._db, uuid, project_id=project_id)
        if arq["state"] not in st.ARQ_TRANSITIONS[st.ARQ_BIND_STARTED]:
            raise exception.ARQBadState(
                f"ARQ {uuid} is {arq['state']}: only an Initial or Unbound ARQ can be "
                "attached to an instance.")
        group = self._group(arq)
        host = self._locate(instance, arq["project_id"], project_id)
        rp_uuid, rc = self._choose(host, group, uuid)
        with self._own_turn(uuid, f"ARQ {uuid}"):
            if not arqs.set_hot_plug_state(self._db, uuid, st.HOT_ATTACHING,
                                           expect={st.ARQ_INITIAL}):
                raise exception.ARQBadState(f"ARQ {uuid} is being attached or detached.")
            undo: list[Any] = [lambda: arqs.set_hot_plug_state(
                self._db, uuid, st.ARQ_INITIAL, expect={st.HOT_ATTACHING})]
            try:
                self._allocate(instance, rp_uuid, rc, arq["project_id"], +1)
                undo.append(lambda: self._allocate(instance, rp_uuid, rc, arq["project_id"],
                                                   -1))
                handle = self._binder.bind_one(
                    uuid, {"hostname": host, "device_rp_uuid": rp_uuid,
                           "instance_uuid": instance, "project_id": arq["project_id"]},
                    project_id, [])
                undo.append(lambda: self._binder.unbind([uuid], project_id, hot_plugged=True))
                try:
                    self._agents.attach_to_guest(
                        host, instance, uuid, handle["attach_type"],
                        arqs.attach_info_strings(handle["attach_info"]), handle["uuid"])
                except exception.Unavailable as exc:
                    undo.clear()    # the guest may hold the device: the reconcile decides
                    raise exception.Unavailable(
                        f"ARQ {uuid}: the agent of {host} did not answer the attach ({exc}); "
                        "it stays Attaching until acceld sees whether the instance holds the "
                        "device (then Attached, else released).") from exc
            except Exception:
                _undo(undo, f"the attach of ARQ {uuid}")
                raise
        if not arqs.set_hot_plug_state(self._db, uuid, st.HOT_ATTACHED,
                                       expect={st.HOT_ATTACHING}):
            LOG.warning("ARQ %s: its hot-plug state changed while it was attached to %s; "
                        "the reconcile settles it from what the guest holds", uuid, instance)
        LOG.info("ARQ %s attached live to instance %s on %s", uuid, instance, host)
        return arqs.get_hot_plug(self._db, uuid, project_id=project_id)

    def _group(self, arq: dict[str, Any]) -> dict[str, str]:
        profile = device_profiles.get(self._db, name=arq["device_profile_name"])
        group: dict[str, str] = profile["groups"][arq["device_profile_group_id"]]
        if any(key in group for key in arqs.PROGRAM_KEYS):
            raise exception.InvalidInput(
                f"ARQ {arq['uuid']}: its device profile asks for FPGA programming at bind "
                f"({', '.join(k for k in arqs.PROGRAM_KEYS if k in group)}), which a hot "
                "plug does not do; program the deployable first, then attach.")
        return group

    def _choose(self, host: str, group: dict[str, str], uuid: str) -> tuple[str, str]:
        """A provider of ``host`` that fits ``group`` and has a free handle; (rp, rc)."""
        wanted_rcs = {k.partition(":")[2] for k in group if k.startswith("resources:")}
        required = {k.partition(":")[2] for k, v in group.items()
                    if k.startswith("trait:") and v == "required"}
        forbidden = {k.partition(":")[2] for k, v in group.items()
                     if k.startswith("trait:") and v == "forbidden"}
        free = arqs.free_handles_by_provider(self._db, host)
        rows = placement_objects.host_inputs(self._db, host).rows
        for rp in pp.desired_tree(pp.DeployableRow(**row) for row in rows).values():
            fits = (rp.resource_class in wanted_rcs and free.get(rp.uuid, 0) > 0
                    and required <= rp.traits and not forbidden & rp.traits
                    and rp.inventories[rp.resource_class]["reserved"] == 0)
            if fits:
                return rp.uuid, str(rp.resource_class)
        raise exception.NoFreeAttachHandle(
            f"No device on {host} fits ARQ {uuid}'s group ({', '.join(sorted(group))}) "
            "with a free attach handle.")

    def _allocate(self, instance: str, rp_uuid: str, rc: str | None, project: str | None,
                  delta: int) -> None:
        """Adds (``delta`` 1) or takes back (-1) one ``rc`` (None: the class the device's
        provider holds) of ``rp_uuid`` in the instance's allocations, written with the
        consumer generation read (read again when it moved); no Placement: nothing."""
        if self._placement is None:
            return
        try:
            for _ in range(ALLOCATION_TRIES):
                now = self._placement.get_allocations(instance)
                allocations = {rp: dict(a["resources"])
                               for rp, a in now.get("allocations", {}).items()}
                held = allocations.setdefault(rp_uuid, {})
                cls = rc or next(iter(held), None)
                if cls is None:
                    return              # nothing held there: already taken back
                held[cls] = held.get(cls, 0) + delta
                if held[cls] <= 0:
                    del held[cls]
                # a consumer Placement did not know is the ARQ's project's (ids required)
                owner = project or OWNER_UNKNOWN
                body = {"allocations": {rp: {"resources": r}
                                        for rp, r in allocations.items() if r},
                        "consumer_generation": now.get("consumer_generation"),
                        "project_id": now.get("project_id") or owner,
                        "user_id": now.get("user_id") or owner}
                try:
                    self._placement.put_allocations(instance, body)
                    return
                except pc.GenerationConflict:
                    continue
        except pc.ServerError as exc:
            raise exception.Unavailable(f"Placement did not take the allocation change of "
                                        f"instance {instance}: {exc}") from exc
        except pc.PlacementError as exc:
            raise exception.Conflict(f"Placement refused the allocation of {rc or 'its'} "
                                     f"class on {rp_uuid} to instance {instance}: "
                                     f"{exc}") from exc
        raise exception.Conflict(f"The allocations of instance {instance} changed at each of "
                                 f"{ALLOCATION_TRIES} tries; try again.")

    # -- detach ----------------------------------------------------------------------------
    def detach(self, uuid: str, project_id: str | None) -> dict[str, Any]:
        """Asks the guest to release ARQ ``uuid``'s device; unbinds once it did. The view
        says ``Detaching`` while the guest has not answered."""
        arq = arqs.get(self._db, uuid, project_id=project_id)
        with self._own_turn(uuid, f"ARQ {uuid}"):
            if not arqs.set_hot_plug_state(self._db, uuid, st.HOT_DETACHING,
                                           expect={st.HOT_ATTACHED, st.HOT_DETACHING}):
                raise exception.ARQBadState(f"ARQ {uuid} is not attached to a running "
                                            "instance by acceld (or is being attached).")
            outcome = self._unplug(arq["hostname"], arq["instance_uuid"], uuid)
            if outcome == "pending":
                LOG.info("instance %s has not released ARQ %s's device yet",
                         arq["instance_uuid"], uuid)
                return arqs.get_hot_plug(self._db, uuid, project_id=project_id)
            self._release(uuid)
        LOG.info("ARQ %s detached from instance %s (%s)", uuid, arq["instance_uuid"], outcome)
        return arqs.get_hot_plug(self._db, uuid, project_id=project_id)

    # -- a whole v1 accelerator on an instance (PUT/DELETE /v1/accelerators/{uuid}) -------
    def attach_device(self, uuid: str, instance: str, project_id: str | None) -> None:
        """The instance found on the device's host, the handles claimed (the attachment
        ``Attaching``), then each put in the guest under its own alias (then ``Attached``);
        a failure undoes it all and is raised, but an agent that does not answer leaves it
        attaching (the reconcile completes it)."""
        host = accelerators.check_attachable(self._db, uuid, "instance")
        if host is None:
            raise exception.NotReady(f"Accelerator {uuid} is not on any host.")
        found = self._locate(instance, project_id, project_id, first=host)
        if found != host:
            raise exception.Conflict(
                f"Instance {instance} runs on host {found}, accelerator {uuid} is on host "
                f"{host}: a device is attached only to an instance of its own host.")
        with self._own_turn(uuid, f"accelerator {uuid}"):
            handles = accelerators.attach_to_instance(self._db, uuid, instance, project_id)
            undo: list[Any] = [lambda: accelerators.detach(self._db, uuid,
                                                           hot_plug=st.HOT_ATTACHING)]
            try:
                for handle in handles:
                    self._put_handle(host, instance, handle)
                    undo.append(lambda h=handle["uuid"]: self._agents.detach_from_guest(
                        host, instance, h))
            except exception.Unavailable as exc:
                # the guest may hold devices now: the records stay as asked, and the
                # reconcile attaches what the guest lacks once the attach is past its grace
                raise exception.Unavailable(
                    f"the agent of {host} did not answer the attach of accelerator {uuid} "
                    f"to instance {instance} ({exc}); it stays attached, and acceld attaches "
                    "the devices the guest lacks when the agent answers again, once the "
                    "attach is past its grace.") from exc
            except Exception:
                _undo(undo, f"the attach of accelerator {uuid} to instance {instance}")
                raise
            if not accelerators.set_hot_plug(self._db, uuid, instance, st.HOT_ATTACHED,
                                             expect={st.HOT_ATTACHING}):
                LOG.warning("accelerator %s: its attachment changed while it was attached to "
                            "%s", uuid, instance)
        LOG.info("accelerator %s attached live to instance %s on %s (%d handles)", uuid,
                 instance, host, len(undo) - 1)

    def detach_device(self, uuid: str, found: accelerators.Detach,
                      project_id: str | None) -> None:
        """The rest of the detach of an instance attachment marked Detaching
        (:func:`acceld.objects.accelerators.ask_detach`): asks the guest to release each of
        its handles, then detaches it in the records; Conflict while the guest has not
        released one (asking again waits again; the reconcile completes the detach once
        the guest released them all)."""
        with self._own_turn(uuid, f"accelerator {uuid}"):
            if found.host is not None:
                pending = [h["uuid"] for h in found.handles
                           if self._unplug(found.host, found.target, h["uuid"]) == "pending"]
                if pending:
                    raise exception.Conflict(
                        f"Detach of accelerator {uuid} from instance {found.target} is "
                        f"pending: the guest has not released {len(pending)} of its devices "
                        "yet; it stays attached. Ask again to wait again.")
            accelerators.detach(self._db, uuid, project_id, hot_plug=st.HOT_DETACHING)

    def _unplug(self, host: str, instance: str, alias: str) -> str:
        """The guest's answer to releasing the device of ``alias``."""
        try:
            return self._agents.detach_from_guest(host, instance, alias)
        except exception.GuestNotFound:
            return "absent"                 # the guest is gone, and its devices with it

    def _put_handle(self, host: str, instance: str, handle: dict[str, Any]) -> None:
        """One v1 handle into the guest, under the alias of the handle's own UUID."""
        self._agents.attach_to_guest(host, instance, handle["uuid"], handle["type"],
                                     handle["info"], handle["uuid"])

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self, host: str | None = None,
                  agent_restarted: bool = False) -> dict[str, list[str]]:
        """Hot-plugged ARQs and v1 instance attachments against what their hosts' guests
        hold (docs/hot-plug.md); a host that cannot be asked is left for the next pass.
        ``host``: that host only; ``agent_restarted``: its agent started again, so an
        attach it was running is over (no grace). An ARQ or accelerator that this conductor
        attaches or detaches now is left alone, and held while the pass acts on it.
        Returns the ARQs (and the accelerators detached: ``v1_detached``) by what was
        done."""
        done: dict[str, list[str]] = {"reattached": [], "released": [], "detached": [],
                                      "adopted": [], "v1_detached": []}
        # host -> (its hot-plugged ARQs, its v1 instance attachments): one guest list each
        by_host: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        for arq in arqs.hot_plugged(self._db, host):
            by_host.setdefault(arq["hostname"], ([], []))[0].append(arq)
        for att in accelerators.instance_attachments(self._db, host):
            by_host.setdefault(att["host"], ([], []))[1].append(att)
        for where, (held, attached) in by_host.items():
            if not self._owns(where):
                continue                  # its owner reconciles it
            try:
                guests = {g["uuid"]: g for g in self._agents.guests(where)}
            except exception.AccelDError as exc:
                LOG.warning("hot-plug reconcile skips %s: %s", where, exc)
                continue
            for att in attached:
                self._in_turn(att["uuid"], "accelerator", self._reconcile_device, att,
                              guests.get(att["instance"]), done, agent_restarted)
            for arq in held:
                self._in_turn(arq["uuid"], "ARQ", self._reconcile_one, arq,
                              guests.get(arq["instance_uuid"]), done, agent_restarted)
        return done

    def _in_turn(self, uuid: str, what: str, step: Callable[..., None], *args: Any) -> None:
        """``step(*args)`` of a pass on ARQ or accelerator (``what``) ``uuid``, unless this
        conductor works on it now; a failure is logged (the next pass tries again)."""
        with self._turn(uuid) as mine:
            if not mine:
                return
            try:
                step(*args)
            except exception.AccelDError as exc:
                LOG.warning("hot-plug reconcile of %s %s failed: %s", what, uuid, exc)

    def _reconcile_one(self, arq: dict[str, Any], guest: dict[str, Any] | None,
                       done: dict[str, list[str]], agent_restarted: bool) -> None:
        uuid = arq["uuid"]
        present = guest is not None and uuid in guest["arqs"]
        if arq["substate"] == st.HOT_ATTACHING:
            self._settle(arq, present, done, agent_restarted)
        elif guest is None:
            LOG.warning("instance %s of hot-plugged ARQ %s is gone from %s: releasing",
                        arq["instance_uuid"], uuid, arq["hostname"])
            self._release(uuid)
            done["released"].append(uuid)
        elif arq["substate"] == st.HOT_DETACHING and not present:
            self._release(uuid)
            done["detached"].append(uuid)
        elif arq["substate"] == st.HOT_ATTACHED and not present:
            bound = arqs.get(self._db, uuid, project_id=None)
            self._agents.attach_to_guest(arq["hostname"], arq["instance_uuid"], uuid,
                                         bound["attach_handle_type"],
                                         bound["attach_handle_info"],
                                         bound["attach_handle_uuid"])
            LOG.info("ARQ %s attached again to instance %s (its definition had lost it)",
                     uuid, arq["instance_uuid"])
            done["reattached"].append(uuid)

    def _reconcile_device(self, att: dict[str, Any], guest: dict[str, Any] | None,
                          done: dict[str, list[str]], agent_restarted: bool) -> None:
        """A v1 attachment, by the rule of an ARQ's (:meth:`_reconcile_one`): one being
        attached is left alone within the grace (as :meth:`_settle`); one whose instance
        the host no longer runs (deleted, moved) is detached in the records, and so is one
        whose detach was asked once the guest holds none of its handles; the handles a
        running guest lacks are attached again, never those of a detach asked."""
        uuid, substate = att["uuid"], att["hot_plug"]
        if substate == st.HOT_ATTACHING and not agent_restarted and \
                self._young(att["updated_at"]):
            return
        held = guest is not None and any(h["uuid"] in guest["arqs"] for h in att["handles"])
        if guest is None or (substate == st.HOT_DETACHING and not held):
            if guest is None:
                LOG.warning("instance %s of accelerator %s is gone from %s: detaching",
                            att["instance"], uuid, att["host"])
            # only in the substate read: a detach or attach since then is left as it is
            if accelerators.detach(self._db, uuid, hot_plug=substate):
                done["v1_detached"].append(uuid)
            return
        if substate == st.HOT_DETACHING:
            return          # the guest holds some still: as for an ARQ, not asked twice
        lacking = [h for h in att["handles"] if h["uuid"] not in guest["arqs"]]  # aliases
        # Attaching (past its grace): Attached now. Attached: still so (a detach may have
        # been asked since the read), before anything goes into the guest.
        if (lacking or substate == st.HOT_ATTACHING) and not accelerators.set_hot_plug(
                self._db, uuid, att["instance"], st.HOT_ATTACHED, expect={substate}):
            return
        for handle in lacking:
            try:
                self._put_handle(att["host"], att["instance"], handle)
                LOG.info("handle %s of accelerator %s attached again to instance %s",
                         handle["uuid"], uuid, att["instance"])
            except exception.AccelDError as exc:
                LOG.warning("could not attach handle %s of accelerator %s again: %s",
                            handle["uuid"], uuid, exc)

    def _young(self, updated_at: datetime.datetime | None) -> bool:
        """Whether an attach last written at ``updated_at`` is within the grace."""
        return updated_at is None or timeutils.utcnow() - updated_at < self._grace

    def _settle(self, arq: dict[str, Any], present: bool, done: dict[str, list[str]],
                agent_restarted: bool) -> None:
        """An attach whose outcome nobody saw (the agent did not answer, or the conductor
        stopped): once the grace is past (or the agent restarted), it is Attached if the
        guest holds the device, else released."""
        if self._young(arq["updated_at"]) and not agent_restarted:
            return
        if present:
            arqs.set_hot_plug_state(self._db, arq["uuid"], st.HOT_ATTACHED,
                                    expect={st.HOT_ATTACHING})
            done["adopted"].append(arq["uuid"])
        else:
            self._release(arq["uuid"])
            done["released"].append(arq["uuid"])

    def _release(self, uuid: str) -> None:
        """Unbinds a hot-plugged ARQ whose device no guest holds, and takes back its
        allocation (gone already when Nova deleted the instance's)."""
        arq = arqs.get(self._db, uuid, project_id=None)
        self._binder.unbind([uuid], None, hot_plugged=True)
        self._allocate(arq["instance_uuid"], arq["device_rp_uuid"], None, arq["project_id"],
                       -1)


def _undo(steps: list[Any], what: str) -> None:
    """Runs the undo steps of ``what``, newest first; a failure of one is logged, not
    raised (the failure that made the undo is the one raised)."""
    for step in reversed(steps):
        try:
            step()
        except Exception:
            LOG.exception("undoing %s failed", what)
