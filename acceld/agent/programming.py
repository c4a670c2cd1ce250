"""FPGA programming on the agent: asynchronous, journaled, with progress and a watchdog.

A program operation is journaled before anything touches the card; a worker thread
fetches and verifies the image, calls the driver's ``program`` and journals the outcome
for delivery. A watchdog fails an operation whose driver overruns the timeout (plus a
grace period), and one found in flight at agent start is reported failed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from acceld import notify
from acceld.agent import journal as jmod
from acceld.agent.drivers.base import DriverError, Programmable
from acceld.notify import payloads
from acceld.rpc import ConductorClient

LOG = logging.getLogger(__name__)

RESTART_MESSAGE = ("agent restarted while programming; state of the FPGA unknown, "
                   "re-program")
WATCHDOG_GRACE = 30.0          # seconds past the program timeout before the watchdog fires

Fetch = Callable[[cfg.ConfigOpts, str, str, str], str]


def _default_fetch(conf: cfg.ConfigOpts, image_ref: str, sha256: str, dest_dir: str) -> str:
    from acceld.agent import images  # lazy: requests/keystoneauth only when programming

    return images.fetch_image(conf, image_ref, sha256, dest_dir)


def image_dir(conf: cfg.ConfigOpts, state_dir: str) -> str:
    """Where fetched images go: ``[fpga_driver] image_dir``, else under the state dir."""
    return conf.fpga_driver.image_dir or os.path.join(state_dir, "fpga-images")


class Programmer:
    def __init__(self, conf: cfg.ConfigOpts, journal: jmod.Journal,
                 conductor: ConductorClient, driver: Callable[[str], Any],
                 on_finished: Callable[[], None], state_dir: str,
                 fetch: Fetch | None = None, grace: float = WATCHDOG_GRACE,
                 notifier: notify.Notifier = notify.DISABLED) -> None:
        self._conf = conf
        self._journal = journal
        self._conductor = conductor
        self._driver = driver                  # name -> loaded driver (raises if absent)
        self._on_finished = on_finished        # deliver outcomes and rediscover
        self._image_dir = image_dir(conf, state_dir)
        self._fetch = fetch or _default_fetch
        self._grace = grace
        self._notifier = notifier
        self._threads: list[threading.Thread] = []

    @property
    def timeout(self) -> float:
        return self._conf.fpga_driver.program_timeout

    def start(self, op: dict[str, Any]) -> None:
        """Run a journaled program operation in its own thread, guarded by a watchdog."""
        worker = threading.Thread(target=self._run, args=(op,), daemon=True,
                                  name=f"program-{op['op_id'][:8]}")
        self._threads = [t for t in self._threads if t.is_alive()] + [worker]
        worker.start()

    def recover(self, op: dict[str, Any]) -> None:
        """An operation in flight at the last stop: reported failed, its fetched image removed."""
        LOG.warning("program %s of %s was in flight at the last stop: reported failed",
                    op["op_id"], op["identity"])
        if self._journal.finish_if_inflight(op, False, RESTART_MESSAGE):
            self._notify_end(op, False, RESTART_MESSAGE)
        if os.path.isdir(self._image_dir):
            for name in os.listdir(self._image_dir):
                os.unlink(os.path.join(self._image_dir, name))

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)

    # -- the worker ------------------------------------------------------------------------
    def _progress(self, op: dict[str, Any]) -> Callable[[int, str], None]:
        last = {"at": 0.0, "percent": -1}

        def report(percent: int, message: str) -> None:
            percent = max(0, min(100, int(percent)))
            now = time.monotonic()
            # at most a few casts a second, but every change of ten points and the end
            if percent < 100 and percent - last["percent"] < 10 and now - last["at"] < 0.5:
                return
            last.update(at=now, percent=percent)
            self._conductor.program_progress(op["op_id"], percent, message[:500])
        return report

    def _run(self, op: dict[str, Any]) -> None:
        watchdog = threading.Timer(self.timeout + self._grace, self._expire, args=(op,))
        watchdog.daemon = True
        watchdog.start()
        ok, error, path = True, None, None
        self._notify("start", op)
        try:
            drv = self._driver(op["driver"])
            if not isinstance(drv, Programmable):
                raise DriverError(f"driver {op['driver']} cannot program devices")
            self._conductor.program_progress(op["op_id"], 0,
                                             f"fetching image {op['image_ref']}"[:500])
            path = self._fetch(self._conf, op["image_ref"], op["image_sha256"],
                               self._image_dir)
            self._conductor.program_progress(op["op_id"], 0, "image verified; programming")
            result = drv.program(op["identity"], path, progress=self._progress(op),
                                 timeout=self.timeout)
            LOG.info("program %s of %s done: %s", op["op_id"], op["identity"], result)
        except Exception as exc:  # every failure is an outcome for the operator
            ok, error = False, str(exc)[:2000] or exc.__class__.__name__
            LOG.warning("program %s of %s failed: %s", op["op_id"], op["identity"], error)
        finally:
            watchdog.cancel()
            if path is not None and os.path.exists(path):
                os.unlink(path)             # images are large; a retry fetches again
        if self._journal.finish_if_inflight(op, ok, error):
            self._notify_end(op, ok, error)
            self._on_finished()

    def _expire(self, op: dict[str, Any]) -> None:
        message = (f"programming did not finish within {self.timeout:.0f} s (+"
                   f"{self._grace:.0f} s grace); state of the FPGA unknown, re-program")
        if self._journal.finish_if_inflight(op, False, message):
            LOG.error("program %s of %s: %s", op["op_id"], op["identity"], message)
            self._notify_end(op, False, message)
            self._on_finished()

    def _notify_end(self, op: dict[str, Any], ok: bool, error: str | None) -> None:
        self._notify("end" if ok else "error", op, ok, error)

    def _notify(self, phase: str, op: dict[str, Any], ok: bool | None = None,
                error: str | None = None) -> None:
        if not self._notifier.enabled:
            return
        try:
            payload = payloads.ProgramPayload.of(op, ok=ok, error=error)
        except KeyError as exc:   # an operation journaled by an older agent
            LOG.warning("no program.%s notification for %s: %s missing", phase,
                        op.get("op_id"), exc)
            return
        self._notifier.emit(f"acceld.deployable.program.{phase}", payload)
