"""SIGTERM and SIGINT as a :class:`threading.Event`: how a long-running acceld process
(the server commands, ``acceld-sim``) learns that it should stop."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

LOG = logging.getLogger(__name__)


def stop_event() -> threading.Event:
    """An event that SIGTERM or SIGINT sets from now on (call it in the main thread)."""
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        LOG.info("signal %d: stopping", signum)
        stop.set()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
