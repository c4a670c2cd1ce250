"""The Placement syncer (I/O): reads what Placement has, applies ``placement_plan``'s plan,
records each host's sync state, and schedules and retries syncs.

A change-triggered sync trusts the digests it last wrote; a full sync reads every
provider whose generation moved since the host's last successful sync (Placement bumps it
on any change), and a host not in sync whole. A provider with allocations is never
deleted nor lowered below use (a recorded conflict, retried every pass). A failed sync is
retried whole after :func:`backoff_delay`.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

from oslo_config import cfg

from acceld.clients import placement as pc
from acceld.conductor import placement_plan as pp
from acceld.db.api import Database
from acceld.objects import placement as po

LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class SyncResult:
    host: str
    steps: list[dict[str, Any]]
    in_sync: bool
    error: str | None = None
    conflicts: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class _HostSync:
    """One host's reconciliation (short-lived; holds the generations it learned)."""

    def __init__(self, client: pc.PlacementClient, known: set[str], known_lock: threading.Lock,
                 retries: int) -> None:
        self._c, self._known, self._known_lock, self._retries = (client, known, known_lock,
                                                                 retries)
        self.generations: dict[str, int] = {}
        # providers known to hold what the plan says: read, unmoved or written whole
        self.checked: set[str] = set()
        self.conflicts: list[dict[str, Any]] = []

    def read(self, compute: str, full: bool, ours: set[str],
             unmoved: dict[str, int]) -> dict[str, pp.ActualProvider]:
        """acceld's providers under ``compute``. ``ours`` are uuids known to be acceld's
        (wanted or last written); Placement is asked which others carry the owner trait
        only when the tree holds others (another service's, or a stale one of acceld's).
        A full read reads the inventories and traits of each provider, but those whose
        generation is still the one in ``unmoved`` (Placement bumps it on any change).
        NotFound when Placement has no provider ``compute``."""
        tree = self._c.tree(compute)
        if not any(rp.uuid == compute for rp in tree):
            raise pc.NotFound(f"compute node provider {compute} is not in Placement", 404)
        tree = [rp for rp in tree if rp.uuid != compute]
        if any(rp.uuid not in ours for rp in tree):
            owned = {rp.uuid for rp in self._c.tree(compute, required=pp.OWNER_TRAIT)}
            tree = [rp for rp in tree if rp.uuid in ours or rp.uuid in owned]
        actual = {}
        for rp in tree:
            if unmoved.get(rp.uuid) == rp.generation:
                actual[rp.uuid] = pp.ActualProvider(rp.uuid, rp.generation)
                self.checked.add(rp.uuid)
            elif full:
                _gen, inv = self._c.get_inventories(rp.uuid)
                gen, traits = self._c.get_traits(rp.uuid)
                actual[rp.uuid] = pp.ActualProvider(rp.uuid, gen, inv, frozenset(traits))
                self.checked.add(rp.uuid)
            else:
                actual[rp.uuid] = pp.ActualProvider(rp.uuid, rp.generation)
        self.generations.update((u, a.generation) for u, a in actual.items())
        return actual

    def _ensure_names(self, plan: pp.Plan) -> None:
        if not (plan.custom_classes | plan.custom_traits) - self._known:
            return
        with self._known_lock:  # one writer per name, even when a storm starts at once
            for names, ensure in ((plan.custom_classes, self._c.ensure_resource_class),
                                  (plan.custom_traits, self._c.ensure_trait)):
                for name in sorted(names - self._known):
                    ensure(name)
                    self._known.add(name)

    def _with_generation(self, uuid: str, write: Any) -> None:
        for attempt in range(self._retries + 1):
            try:
                self.generations[uuid] = write(self.generations[uuid])
                return
            except pc.GenerationConflict:
                if attempt == self._retries:
                    raise
                LOG.info("generation of provider %s moved; retrying", uuid)
                self.generations[uuid] = self._c.get_provider(uuid).generation

    def apply(self, compute: str, plan: pp.Plan) -> None:
        if plan.is_empty():
            return
        self._ensure_names(plan)
        created = set()
        for want in plan.create:
            try:
                self.generations[want.uuid] = self._c.create_provider(want.uuid, want.name,
                                                                      compute).generation
                created.add(want.uuid)
            except pc.AlreadyExists:
                self.generations[want.uuid] = self._adopt(want, compute)
            except pc.NotFound as exc:     # the parent: a host's first sync does not read
                raise pc.NotFound(f"compute node provider {compute} is not in Placement",
                                  404) from exc
        for want in plan.set_inventories:
            inventories = dict(want.inventories)
            if want.uuid not in created:
                # Placement accepts a total below usage (it only warns); acceld does not.
                inventories, held = pp.clamp_to_usage(inventories,
                                                      self._c.usages(want.uuid))
                for line in held:
                    self._conflict(want.uuid, want.name, f"inventory in use ({line})")
            try:
                self._with_generation(want.uuid, lambda g, w=want, inv=inventories:
                                      self._c.set_inventories(w.uuid, g, inv))
            except pc.InventoryInUse as exc:
                self._conflict(want.uuid, want.name, f"inventory in use ({exc})")
        for want in plan.set_traits:
            self._with_generation(want.uuid, lambda g, w=want: self._c.set_traits(
                w.uuid, g, set(w.traits)))
        # an unread provider is written whole (inventories and traits)
        self.checked.update(w.uuid for w in plan.set_traits)
        for uuid in plan.delete:
            try:
                self._c.delete_provider(uuid)
            except pc.ProviderInUse as exc:
                self._conflict(uuid, None, f"provider has allocations ({exc})")
            except pc.NotFound:
                pass

    def _adopt(self, want: pp.DesiredProvider, compute: str) -> int:
        """The generation of ``want``'s provider made by a create whose answer was lost."""
        try:
            rp = self._c.get_provider(want.uuid)
        except pc.NotFound:
            rp = None
        if rp is None or rp.name != want.name or rp.parent_provider_uuid != compute:
            raise pc.AlreadyExists(f"provider {want.name!r} ({want.uuid}) exists in Placement "
                                   "with another uuid, name or parent", 409,
                                   "placement.duplicate_name")
        return rp.generation

    def _conflict(self, uuid: str, name: str | None, what: str) -> None:
        LOG.warning("Placement provider %s (%s): %s; kept until its allocations are gone",
                    uuid, name or "no longer reported", what)
        self.conflicts.append({"provider": uuid, "name": name, "reason": what})


class PlacementSyncer:
    def __init__(self, conf: cfg.ConfigOpts, db: Database, client: pc.PlacementClient,
                 owns: Callable[[str], bool] | None = None) -> None:
        """``owns(host)``: whether this conductor syncs ``host`` now (None: every host);
        a sync of a host it does not own is never queued, nor a retry of one."""
        self._conf, self._db, self.client = conf, db, client
        self._owns = owns or (lambda host: True)
        self._known: set[str] = set()          # custom classes/traits known to exist
        self._known_lock = threading.Lock()
        self._pool = futures.ThreadPoolExecutor(max_workers=conf.placement.sync_workers,
                                                thread_name_prefix="placement-sync")
        self._lock = threading.Lock()
        self._wanted: dict[str, bool] = {}     # host -> full sync requested, not started
        self._pending: dict[str, futures.Future] = {}  # host -> its queued or running sync
        self._retries: dict[str, Retry] = {}   # hosts whose last sync failed
        self._wake = threading.Condition(self._lock)
        self._retry_thread: threading.Thread | None = None
        self._closed = False

    # -- scheduling ------------------------------------------------------------------------
    def schedule(self, host: str, full: bool = False) -> None:
        """Queue a sync of ``host`` (merged with a queued or running one; not while retrying)."""
        with self._lock:
            if not self._held(host):
                self._enqueue(host, full)

    def _held(self, host: str) -> bool:
        """With ``self._lock`` held: no sync may be queued (closed, or a retry is planned)."""
        retry = self._retries.get(host)
        return self._closed or (retry is not None and retry.due is not None)

    def _claim(self, host: str) -> bool:
        """With ``self._lock`` held: whether this conductor syncs ``host`` now; if not, its
        retry is forgotten (its owner syncs it)."""
        if self._owns(host):
            return True
        self._retries.pop(host, None)
        return False

    def _enqueue(self, host: str, full: bool) -> None:
        """``schedule`` with ``self._lock`` held: a request while the host's sync is queued
        joins it; one while it runs starts the next when it ends."""
        if not self._claim(host):
            return
        self._wanted[host] = self._wanted.get(host, False) or full
        if host not in self._pending:
            self._pending[host] = self._pool.submit(self._run, host)

    def schedule_all(self) -> None:
        """The periodic safety net: a full sync of every host, on the pool."""
        for host in po.hosts(self._db):
            self.schedule(host, full=True)

    def schedule_unsynced(self) -> None:
        """A full sync of every host not known to be in sync (at start)."""
        for row in po.list_states(self._db):
            if not row["in_sync"]:
                self.schedule(row["host"], full=True)

    def _run(self, host: str) -> None:
        with self._lock:
            full = self._wanted.pop(host, False)
            owned = self._claim(host)    # the ring may have moved it since it was queued
        try:
            if owned:
                self.sync_host(host, full=full)
        except Exception:  # e.g. the database: the retry tries again
            LOG.exception("Placement sync of %s failed", host)
            self._settle(host, failed=True)
        finally:
            with self._lock:
                del self._pending[host]
                if host in self._wanted and not self._held(host):
                    self._pending[host] = self._pool.submit(self._run, host)

    def retries(self) -> dict[str, Retry]:
        """The hosts whose last sync failed, with when they are tried again."""
        with self._lock:
            return {h: dataclasses.replace(r) for h, r in self._retries.items()}

    def _settle(self, host: str, failed: bool, cap: float | None = None) -> float | None:
        """Record how a sync ended; a failure plans and returns the next try's delay."""
        with self._lock:
            if not failed:
                self._retries.pop(host, None)
                return None
            if self._closed:
                return None
            failures = self._retries[host].failures + 1 if host in self._retries else 1
            delay = backoff_delay(failures, self._conf.placement.retry_initial_delay,
                                  cap or self._conf.placement.retry_max_delay, random.random())
            self._retries[host] = Retry(failures, time.monotonic() + delay)
            if self._retry_thread is None:
                self._retry_thread = threading.Thread(target=self._retry_loop, daemon=True,
                                                      name="placement-retry")
                self._retry_thread.start()
            self._wake.notify()
        LOG.info("Placement sync of %s is tried again in %.1f s (failure %d)", host, delay,
                 failures)
        return delay

    def _retry_loop(self) -> None:
        """One thread for every host's retry: queues the due ones, sleeps to the next."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                waits = []
                for host, retry in self._retries.items():
                    if retry.due is None:
                        continue
                    if retry.due <= now:
                        retry.due = None            # running; _settle plans the next
                        self._enqueue(host, True)
                    else:
                        waits.append(retry.due - now)
                self._wake.wait(min(waits) if waits else None)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no sync is queued or running (not for planned retries)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = list(self._pending.values())
            if not busy:
                return True
            futures.wait(busy, timeout=max(0.0, deadline - time.monotonic()))
        return False

    def close(self) -> None:
        """Stop retrying and wait for the syncs that run; nothing is queued afterwards."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            thread = self._retry_thread
        if thread is not None:
            thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- one host ----------------------------------------------------------------------------
    def sync_host(self, host: str, full: bool = False, dry_run: bool = False) -> SyncResult:
        inputs = po.host_inputs(self._db, host)
        state = inputs.state
        # the uuid Nova gave the host's compute node, else the provider found last time
        compute = inputs.compute_node_uuid or (state.compute_rp_uuid if state else None)
        # what the last successful sync wrote under that node is trusted where Placement
        # has not changed it since (a host not in sync is read whole)
        trusted = state if state is not None and state.in_sync \
            and state.compute_rp_uuid == compute else None
        desired = pp.desired_tree(pp.DeployableRow(**row) for row in inputs.rows)
        digests = {u: p.digest() for u, p in desired.items()}
        if not full and not dry_run and trusted is not None \
                and trusted.provider_digests == digests:
            self._settle(host, failed=False)
            return SyncResult(host, [], True)
        full = full or trusted is None
        work = _HostSync(self.client, self._known, self._known_lock,
                         self._conf.placement.conflict_retries)
        plan = pp.Plan()
        try:
            if compute is None:
                found = self.client.find_provider(inputs.provider_name)
                if found is None:
                    LOG.warning("compute node provider %r of host %s is not in Placement "
                                "yet", inputs.provider_name, host)
                    return self._record(host, None, {}, [], [], "compute node provider "
                                        f"{inputs.provider_name!r} not found", dry_run,
                                        retry_cap=self._conf.placement.compute_node_retry_max)
                compute = found.uuid
            if state is None and not dry_run:
                # never synced: nothing of the host's is in Placement as far as acceld
                # knows, so its providers are created without a read (one found there
                # is adopted; a stale one is left to the periodic full sync)
                actual = {}
            else:
                actual = work.read(compute, full, set(desired) | set(
                    state.provider_digests if state else ()),
                    trusted.provider_generations if trusted else {})
            plan = pp.plan(desired, actual, trusted.provider_digests if trusted else {})
            if dry_run:
                return SyncResult(host, plan.describe(), plan.is_empty())
            work.apply(compute, plan)
        except pc.PlacementError as exc:
            LOG.warning("Placement sync of %s failed: %s", host, exc)
            gone = isinstance(exc, pc.NotFound)
            if gone:
                compute = None  # the compute node provider went away: look it up again
            return self._record(host, compute, state.provider_digests if state else {},
                                plan.describe(), work.conflicts, str(exc), dry_run,
                                retry_cap=self._conf.placement.compute_node_retry_max
                                if gone else None)
        synced = {u: d for u, d in digests.items()
                  if u not in {c["provider"] for c in work.conflicts}}
        return self._record(host, compute, synced, plan.describe(), work.conflicts,
                            None, dry_run, {u: work.generations[u] for u in work.checked
                                            if u in synced})

    def _record(self, host: str, compute: str | None, digests: dict[str, str],
                steps: list[dict[str, Any]], conflicts: list[dict[str, Any]],
                error: str | None, dry_run: bool, generations: dict[str, int] | None = None,
                retry_cap: float | None = None) -> SyncResult:
        """``generations``: each provider's after a sync that ended (none after a failure:
        the next sync reads the host whole)."""
        in_sync = error is None and not conflicts
        if not dry_run:
            retry_in = self._settle(host, error is not None, retry_cap)
            po.save_state(self._db, host, compute_rp_uuid=compute, provider_digests=digests,
                          provider_generations=generations or {}, in_sync=in_sync,
                          error=error, conflicts=conflicts, synced=error is None,
                          retry_in=retry_in)
        return SyncResult(host, steps, in_sync, error, conflicts)


@dataclasses.dataclass
class Retry:
    """A host's failures in a row and the monotonic time of its next try (None: running)."""

    failures: int
    due: float | None


def backoff_delay(failures: int, initial: float, cap: float, jitter: float) -> float:
    """``initial`` doubled per further failure, at most ``cap``, less a random half."""
    ceiling = min(cap, initial * 2.0 ** min(failures - 1, 64))
    return ceiling * (0.5 + jitter / 2)
