"""Which conductor owns each host: a consistent hash ring (tooz.hashring) over the live
members of a tooz group (``[coordination] backend_url``). Without a backend this
conductor owns every host, as a lone conductor does.

The owner of a host alone runs its periodic work (Placement syncs, re-sent operations,
hot-plug reconcile, bind deadlines) and takes its reports, so the newest-report check in
its memory sees every report of the host. A member change rebuilds the ring at once;
consistent hashing moves only the hosts of the member that came or went. A conductor that
cannot read the group for a membership timeout has been dropped by the others by then:
it keeps routing messages by its last view but runs no periodic work until it reads the
group again (docs/deploying-at-scale.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from urllib import parse

from oslo_config import cfg
from tooz import coordination, hashring

LOG = logging.getLogger(__name__)

GROUP = b"acceld-conductors"
# Points per member on the ring: enough that two members split 10,000 hosts within a
# few percent of half each (tests/unit/test_ring.py).
PARTITIONS = 2 ** 9


def make_ring(members: tuple[str, ...]) -> hashring.HashRing:
    return hashring.HashRing(members, partitions=PARTITIONS)


def owner_on(ring: hashring.HashRing, host: str) -> str:
    """The member of ``ring`` that owns ``host``."""
    return next(iter(ring.get_nodes(host.encode())))


def backend_url(group: cfg.ConfigOpts.GroupAttr) -> str:
    """``[coordination] backend_url`` with the membership timeout, unless it sets one."""
    scheme, netloc, path, query, fragment = parse.urlsplit(group.backend_url)
    if {"membership_timeout", "timeout"} & set(parse.parse_qs(query)):
        return group.backend_url
    query = "&".join(q for q in (query, f"membership_timeout={group.membership_timeout}") if q)
    return parse.urlunsplit((scheme, netloc, path, query, fragment))


class HostRing:
    def __init__(self, conf: cfg.ConfigOpts, member: str) -> None:
        """``member``: this conductor's name (its ``[DEFAULT] host``, also its RPC server
        name)."""
        self.member = member
        self._conf = conf.coordination
        self._on_change: Callable[[tuple[str, ...], tuple[str, ...]], None] | None = None
        self._lock = threading.Lock()
        self._members: tuple[str, ...] = (member,)
        self._ring = make_ring(self._members)
        self._fresh_at = time.monotonic()
        self._coordinator: coordination.CoordinationDriver | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def shared(self) -> bool:
        """Whether conductors share the hosts (a coordination backend is configured)."""
        return bool(self._conf.backend_url)

    def start(self, on_change: Callable[[tuple[str, ...], tuple[str, ...]], None] | None = None,
              ) -> None:
        """Join the group and read it once (a failure here stops the conductor's start);
        ``on_change(before, after)`` is called from the refresh thread with the members
        before and after each change."""
        self._on_change = on_change
        if not self.shared:
            return
        coordinator = coordination.get_coordinator(backend_url(self._conf), self.member.encode())
        coordinator.start(start_heart=True)
        self._coordinator = coordinator
        try:
            coordinator.create_group(GROUP).get()
        except coordination.GroupAlreadyExist:
            pass
        self._join()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="conductor-ring", daemon=True)
        self._thread.start()

    def _join(self) -> None:
        assert self._coordinator is not None
        try:
            self._coordinator.join_group(GROUP).get()
        except coordination.MemberAlreadyExist:
            pass                        # a restart within the membership timeout: still in

    def stop(self) -> None:
        """Leave the group (the others take this conductor's hosts at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        coordinator, self._coordinator = self._coordinator, None
        if coordinator is not None:
            coordinator.stop()          # leaves the group, then disconnects

    def _loop(self) -> None:
        while not self._stop.wait(self._conf.refresh_interval):
            try:
                self.refresh()
            except coordination.ToozError as exc:
                LOG.warning("could not read the conductors' group: %s", exc)
            except Exception:  # the thread must outlive any one failure
                LOG.exception("could not read the conductors' group")

    def refresh(self) -> bool:
        """Read the live members; rebuild the ring when they changed (True then)."""
        assert self._coordinator is not None
        members = {m.decode() for m in self._coordinator.get_members(GROUP).get()}
        if self.member not in members:   # dropped while cut off: join again
            LOG.warning("conductor %s was not in the conductors' group; joining again",
                        self.member)
            self._join()
            members.add(self.member)
        after = tuple(sorted(members))
        with self._lock:
            self._fresh_at = time.monotonic()
            before = self._members
            if after == before:
                return False
            self._members = after
            self._ring = make_ring(after)
        LOG.info("conductors now %s (were %s)", ", ".join(after), ", ".join(before))
        if self._on_change is not None:
            self._on_change(before, after)
        return True

    def members(self) -> tuple[str, ...]:
        with self._lock:
            return self._members

    def owner(self, host: str) -> str:
        """The conductor that owns ``host`` in this conductor's current view."""
        with self._lock:
            ring = self._ring
        return owner_on(ring, host)

    def owns(self, host: str) -> bool:
        """Whether this conductor runs ``host``'s periodic work now: it owns it, and its
        view of the group is not older than a membership timeout."""
        if not self.shared:
            return True
        with self._lock:
            stale = time.monotonic() - self._fresh_at > self._conf.membership_timeout
        return not stale and self.owner(host) == self.member

