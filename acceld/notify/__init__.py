"""Versioned notifications: acceld's one oslo.messaging Notifier (a shared leaf).

Each process builds one :class:`Notifier` with :func:`make_notifier` (in ``wiring``) and
hands it to the services that emit. The public surface, for every emitter::

    notifier.emit(event_type: str, payload: payloads.Payload) -> None

``event_type`` is one of :data:`acceld.notify.payloads.EVENTS` (``acceld.arq.bound``,
...), sent at that table's priority (one of :data:`PRIORITIES`; "info" for a type it
lacks), and ``payload`` an instance of the payload class that table names for it (a frozen
dataclass whose ``to_primitive()`` is the OpenStack-style envelope:
``acceld_object.name``, ``.namespace`` ("acceld"), ``.version``, ``.data``). A new kind
of notification adds its payload class and its event types to
:mod:`acceld.notify.payloads` (where the tests and docs/notification-schemas.json find
their JSON schemas) and calls ``emit``.
``notifier.enabled`` says whether anything is sent at all, so that an emitter can skip
building a payload that costs a read.

Emitting never fails nor blocks the operation that emits: ``emit`` puts the message on
a bounded queue (``[notifications] max_queued``) that one daemon thread sends through
oslo.messaging; a full queue drops the newest and counts them in the log, and a send
that fails is logged. Whether and where notifications go is oslo.messaging's
``[oslo_messaging_notifications]`` group, as in every OpenStack service: nothing is sent
until ``driver`` names a driver (``messagingv2`` for a broker, ``log``); they go to its
``transport_url``, else ``[DEFAULT] transport_url``, on its ``topics``. A broker driver
with neither URL (``acceld serve`` on its in-process bus) sends nothing, with a warning.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from oslo_config import cfg

import acceld.threading_backend  # noqa: F401 - must precede oslo.messaging
from acceld.notify import payloads
from acceld.outbox import Outbox

LOG = logging.getLogger(__name__)

PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")
BROKER_DRIVERS = frozenset({"messaging", "messagingv2"})
# oslo.messaging's Notifier needs a transport even for the log driver, which never
# sends on it; its in-memory "fake" driver opens no connection and starts nothing.
NO_BUS_URL = "fake:"
_DROP_LOG_EVERY = 60.0       # seconds between two "dropped" warnings


class Notifier:
    """Sends payloads as ``publisher_id`` through ``notifier`` (an oslo.messaging
    Notifier, or None: nothing is sent) from a thread of its own, started lazily."""

    def __init__(self, notifier: Any, publisher_id: str, max_queued: int = 1000) -> None:
        self._notifier = notifier
        self.publisher_id = publisher_id
        self.enabled = notifier is not None and notifier.is_enabled()
        self._outbox = Outbox("notifications", self._send, maxsize=max_queued)
        self._lock = threading.Lock()
        self._dropped = 0
        self._dropped_logged_at = 0.0

    def emit(self, event_type: str, payload: payloads.Payload) -> None:
        """Queue one notification; never raises (a bad call is logged and dropped)."""
        if not self.enabled:
            return
        event = payloads.EVENTS.get(event_type)
        try:
            message = (event_type, payload.to_primitive(),
                       "info" if event is None else event.priority)
        except Exception:  # a notification must never cost the operation
            LOG.exception("notification %s not built", event_type)
            return
        self._outbox.start()
        if not self._outbox.put(message):
            self._note_dropped(event_type)

    def _note_dropped(self, event_type: str) -> None:
        with self._lock:
            self._dropped += 1
            now = time.monotonic()
            if now - self._dropped_logged_at < _DROP_LOG_EVERY:
                return
            self._dropped_logged_at, dropped, self._dropped = now, self._dropped, 0
        LOG.warning("notification queue full (the broker is away or slow): %d "
                    "notification(s) dropped, the last %s", dropped, event_type)

    def _send(self, message: tuple[str, dict[str, Any], str]) -> None:
        event_type, payload, priority = message
        try:
            getattr(self._notifier, priority)({}, event_type, payload)
        except Exception:  # logged; the next one may reach the broker
            LOG.exception("notification %s not sent", event_type)

    def flush(self, timeout: float = 5.0) -> bool:
        """Whether everything queued was handed to the driver within ``timeout``."""
        return self._outbox.wait_sent(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for up to ``timeout`` seconds), stop the thread and
        close the transport's connections."""
        self.enabled = False
        self._outbox.wait_sent(timeout)
        if not self._outbox.stop(timeout):
            LOG.warning("notifications still queued at close are dropped")
        if self._notifier is not None:
            self._notifier.transport.cleanup()
            self._notifier = None


#: The notifier of code run without a configuration (tests of one piece): sends nothing.
DISABLED = Notifier(None, "acceld")


def make_notifier(conf: cfg.ConfigOpts, service: str, host: str | None = None) -> Notifier:
    """The notifier of one service (``acceld-agent``, ``acceld-conductor``, ...) of
    ``host`` (default ``[DEFAULT] host``): publisher id ``<service>:<host>``."""
    publisher = f"{service}:{host or conf.host}"
    group = conf.oslo_messaging_notifications
    drivers = [d for d in group.driver if d and d != "noop"]
    bus = bool(group.transport_url or conf.transport_url)
    if drivers and not bus and BROKER_DRIVERS.intersection(drivers):
        LOG.warning("[oslo_messaging_notifications] driver = %s needs a broker, and neither "
                    "[oslo_messaging_notifications] transport_url nor [DEFAULT] "
                    "transport_url is set: %s sends no notifications",
                    ", ".join(drivers), publisher)
        drivers = []
    if not drivers:
        return Notifier(None, publisher)
    import oslo_messaging

    transport = oslo_messaging.get_notification_transport(
        conf, url=None if bus else NO_BUS_URL)
    # drivers, topics and retries: oslo.messaging reads them from the same group
    notifier = oslo_messaging.Notifier(transport, publisher_id=publisher)
    return Notifier(notifier, publisher, max_queued=conf.notifications.max_queued)
