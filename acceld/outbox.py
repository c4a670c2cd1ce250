"""A queue that one daemon thread sends, in order (a shared leaf): what must leave the
process without the sender waiting on it (the versioned notifications, Nova's bind
events)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

LOG = logging.getLogger(__name__)
_STOP = object()


class Outbox:
    """Items :meth:`put` here go to ``send`` in order from the thread :meth:`start` starts
    (named ``name``); a send that raises is logged and the next item goes on. ``maxsize``
    bounds the queue (0: unbounded)."""

    def __init__(self, name: str, send: Callable[[Any], None], maxsize: int = 0) -> None:
        self._name, self._send = name, send
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=maxsize)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            try:
                self._send(item)
            except Exception:  # logged; the next item may go through
                LOG.exception("%s: an item was not sent", self._name)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def put(self, item: Any) -> bool:
        """Queue ``item`` without waiting; False when the queue is full (not queued)."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def wait_sent(self, timeout: float) -> bool:
        """Whether everything queued was sent (or failed) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def stop(self, timeout: float) -> bool:
        """Ends the thread after what is queued; False when the queue stayed full for
        ``timeout`` seconds (what it holds is dropped with the thread)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return True
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return False
        thread.join(timeout)
        return True
