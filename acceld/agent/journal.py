"""The agent journal: versioned local state, written atomically on every change.

It holds what must survive a crash or an absent conductor: ``epoch`` and ``seq``
(report numbering; a new journal gets a new epoch), ``inflight`` operations with their
``kind`` (at restart a ``transition`` or handle ``release`` runs again, a handle
``prepare`` is rolled back, a ``program`` is reported failed, a ``guest_attach`` is
kept for the host reconcile), ``results`` not yet
acknowledged, recently acknowledged ids (``done``, so a re-sent operation is not re-run)
and the operator's driver overrides (``drivers``). Format versions:

* 1: initial.
* 2: operations carry a ``kind``; a version 1 journal is read with every operation a
  ``transition``.
"""

from __future__ import annotations

import copy
import os
import threading
import uuid
from typing import Any

from acceld.agent import fileutil

JOURNAL_VERSIONS = (1, 2)
JOURNAL_VERSION = JOURNAL_VERSIONS[-1]
_DONE_KEEP = 512

KIND_TRANSITION = "transition"
KIND_PREPARE = "prepare"
KIND_RELEASE = "release"
KIND_PROGRAM = "program"
KIND_GUEST_ATTACH = "guest_attach"


def kind_of(op: dict[str, Any]) -> str:
    return op.get("kind", KIND_TRANSITION)


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 journal as version 2: its operations are all transitions."""
    for op in [*data["inflight"].values(), *(r["op"] for r in data["results"].values())]:
        op.setdefault("kind", KIND_TRANSITION)
    return {**data, "version": 2}


class Journal:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "journal.json")
        self._lock = threading.RLock()
        data = fileutil.read_json(self.path)
        if data is not None and data.get("version") not in JOURNAL_VERSIONS:
            raise RuntimeError(f"journal {self.path} has unknown version {data.get('version')}")
        if data is None or data["version"] != JOURNAL_VERSION:
            data = _upgrade(data) if data is not None else {
                "version": JOURNAL_VERSION, "epoch": str(uuid.uuid4()), "seq": 0,
                "acked_seq": 0, "inflight": {}, "results": {}, "done": [], "drivers": {}}
            fileutil.write_json_atomic(self.path, data)
        self._data = data

    def _save(self) -> None:
        fileutil.write_json_atomic(self.path, self._data)

    @property
    def epoch(self) -> str:
        return self._data["epoch"]

    def next_seq(self) -> int:
        with self._lock:
            self._data["seq"] += 1
            self._save()
            return self._data["seq"]

    def ack_report(self, seq: int) -> None:
        with self._lock:
            if seq > self._data["acked_seq"]:
                self._data["acked_seq"] = seq
                self._save()

    @property
    def acked_seq(self) -> int:
        return self._data["acked_seq"]

    @property
    def seq(self) -> int:
        return self._data["seq"]

    # -- operations --------------------------------------------------------------------
    def begin(self, op: dict[str, Any]) -> bool:
        """Journal ``op`` as in flight; False when it was seen before (not to run again)."""
        with self._lock:
            if any(op["op_id"] in self._data[k] for k in ("inflight", "results", "done")):
                return False
            self._data["inflight"][op["op_id"]] = op
            self._save()
            return True

    def finish(self, op: dict[str, Any], ok: bool, error: str | None) -> None:
        with self._lock:
            self._data["inflight"].pop(op["op_id"], None)
            self._data["results"][op["op_id"]] = {"op": op, "ok": ok, "error": error}
            self._save()

    def finish_if_inflight(self, op: dict[str, Any], ok: bool, error: str | None) -> bool:
        """Like :meth:`finish`, but only for an operation still in flight (program vs watchdog)."""
        with self._lock:
            if op["op_id"] not in self._data["inflight"]:
                return False
            self.finish(op, ok, error)
            return True

    def drop(self, op_id: str) -> None:
        """Forget an in-flight operation whose outcome went back to its caller directly."""
        with self._lock:
            if self._data["inflight"].pop(op_id, None) is not None:
                self._save()

    def delivered(self, op_id: str) -> None:
        with self._lock:
            if self._data["results"].pop(op_id, None) is not None:
                done = self._data["done"]
                done.append(op_id)
                del done[:-_DONE_KEEP]
                self._save()

    def inflight(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(list(self._data["inflight"].values()))

    def results(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(list(self._data["results"].values()))

    # -- driver overrides ----------------------------------------------------------------
    def note_boot(self, boot_id: str) -> str | None:
        """Records the host's boot id; the one recorded before (None: none was)."""
        with self._lock:
            before = self._data.get("boot_id")
            if before != boot_id:
                self._data["boot_id"] = boot_id
                self._save()
            return before

    def driver_overrides(self) -> dict[str, str]:
        with self._lock:
            return dict(self._data["drivers"])

    def set_driver(self, name: str, state: str) -> None:
        with self._lock:
            self._data["drivers"][name] = state
            self._save()
