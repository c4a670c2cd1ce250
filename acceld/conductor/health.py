"""Device health life cycle and drain, as the conductor runs them (docs/health.md).

An operator's quarantine, release, reset, drain or undrain, and a report's verdicts
(``diff.HealthRules``), are each one ``objects.health`` transition; :meth:`announce` is
what follows every committed change (the host's Placement providers resynced at once:
a quarantined, resetting, failed or drained device is reserved). A reset runs the
device's driver's reset hook on its agent, on a thread, and records the outcome
(healthy again, or failed); the request waits ``[health] reset_wait`` for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from oslo_config import cfg

from acceld import diff, exception, notify, reports, states
from acceld.db.api import Database
from acceld.objects import health
from acceld.rpc import AgentClient

LOG = logging.getLogger(__name__)


def rules(conf: cfg.ConfigOpts) -> diff.HealthRules:
    """The report rules of ``[health]``."""
    group = conf.health
    return diff.HealthRules(
        deltas=((reports.COUNTER_ECC, group.suspect_ecc_delta),
                (reports.COUNTER_XID, group.suspect_xid_delta)),
        driver_health=group.suspect_on_driver_health,
        target=states.LIFECYCLE_QUARANTINED if group.auto_quarantine
        else states.LIFECYCLE_SUSPECT)


class DeviceHealth:
    """``host_changed(host)``: the host's Placement providers need a sync."""

    def __init__(self, db: Database, agents: AgentClient,
                 host_changed: Callable[[str], None], reset_wait: float,
                 notifier: notify.Notifier = notify.DISABLED) -> None:
        self._db = db
        self._notifier = notifier
        self._agents = agents
        self._host_changed = host_changed
        self._reset_wait = reset_wait

    def announce(self, transitions: Iterable[health.Transition]) -> None:
        """What follows every committed change: logged, notified (``acceld.device.
        health_change``, with the guests holding the device), and the host resynced."""
        hosts = set()
        for t in transitions:
            if not t.changed:
                continue
            LOG.info("device %s on %s: %s %s -> %s (%s: %s)", t.uuid, t.host,
                     t.what, t.before, t.after, t.actor, t.reason or "no reason given")
            self._notifier.emit("acceld.device.health_change", t)
            if t.host:
                hosts.add(t.host)
        for host in sorted(hosts):
            self._host_changed(host)

    def act(self, uuid: str, action: str, reason: str) -> dict[str, Any]:
        """quarantine | release | reset: the device's health view after, with the
        transition (``bound``: the guests a quarantine leaves running). A reset is
        refused while anything holds the device."""
        if action not in states.HEALTH_ACTIONS:
            raise exception.InvalidInput(
                f"action must be one of {', '.join(sorted(states.HEALTH_ACTIONS))}")
        target, sources = states.HEALTH_ACTIONS[action]
        done = health.transition(self._db, uuid, target, reason=reason, allowed=sources,
                                 refuse_held="reset it" if action == "reset" else None)
        self.announce([done])
        if action == "reset" and done.changed:
            finished = threading.Event()
            threading.Thread(target=self._reset, args=(uuid, finished),
                             name=f"reset-{uuid}", daemon=True).start()
            finished.wait(self._reset_wait)
        return dict(health.status(self._db, uuid), transition=done.to_dict())

    def _reset(self, uuid: str, finished: threading.Event) -> None:
        try:
            host, driver, identity = health.identity(self._db, uuid)
            if not (host and driver and identity):
                result = {"ok": False, "error": f"device {uuid} is on no agent's host"}
            else:
                result = self._agents.reset_device(host, driver, identity)
        except exception.AccelDError as exc:
            result = {"ok": False, "error": str(exc)}
        ok, error = bool(result.get("ok")), result.get("error")
        outcome = states.RESET_OUTCOME[0 if ok else 1]
        try:
            done = health.transition(
                self._db, uuid, outcome, actor=health.BY_CONDUCTOR,
                allowed=frozenset({states.LIFECYCLE_RESETTING}),
                reason="reset by its driver" if ok else f"reset failed: {error}")
            self.announce([done])
        except exception.AccelDError as exc:   # e.g. the device vanished meanwhile
            LOG.warning("outcome of the reset of %s not recorded: %s", uuid, exc)
        finally:
            finished.set()

    def maintenance(self, uuid: str, change: str, reason: str) -> dict[str, Any]:
        """drain | undrain: the device's view after, with the transition (``bound``: the
        binds a drain leaves alone; the device reads ``drained`` once they are gone)."""
        if change not in states.MAINTENANCE_TRANSITIONS:
            raise exception.InvalidInput(
                f"change must be one of {', '.join(sorted(states.MAINTENANCE_TRANSITIONS))}")
        done = health.transition(self._db, uuid, change, reason=reason)
        self.announce([done])
        return dict(health.status(self._db, uuid), transition=done.to_dict())
