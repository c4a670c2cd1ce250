"""What a fleet counts: reports by outcome (and the accepted ones by the conductor that
answered), heartbeats, RPC calls served, report latencies, the faults played, and when
the fleet converged."""

from __future__ import annotations

import collections
import statistics
import threading
from typing import Any

LATENCIES_KEPT = 100_000


class Stats:
    """Counters, report latencies, the faults played and the convergence times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._failures: collections.Counter[str] = collections.Counter()
        self._served: collections.Counter[str] = collections.Counter()
        self._by_conductor: collections.Counter[str] = collections.Counter()
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCIES_KEPT)
        self._faults: list[dict[str, Any]] = []
        self.first_reports_accepted_s: float | None = None
        self.converged_s: float | None = None

    def add(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def count(self, key: str) -> int:
        """One counter (``reports_accepted``, ``heartbeats_sent``, ...) without the
        snapshot's sort of the latencies: cheap enough to poll."""
        with self._lock:
            return self._counts[key]

    def failure(self, name: str) -> None:
        with self._lock:
            self._counts["reports_failed"] += 1
            self._failures[name] += 1

    def accepted_by(self, conductor: str) -> None:
        """An accepted report whose answer named ``conductor`` (the host's owner): how
        conductors that share the hosts split the reports."""
        with self._lock:
            self._by_conductor[conductor] += 1

    def served(self, method: str) -> None:
        with self._lock:
            self._served[method] += 1

    def latency(self, seconds: float) -> None:
        with self._lock:
            self._latencies.append(seconds)

    def fault(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._faults.append(record)

    def snapshot(self, elapsed: float) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
            latencies = sorted(self._latencies)
            out = {"elapsed_s": round(elapsed, 3),
                   "first_reports_accepted_s": self.first_reports_accepted_s,
                   "converged_s": self.converged_s,
                   "reports": {key: counts.get(f"reports_{key}", 0) for key in (
                       "sent", "accepted", "changed", "unchanged", "stale", "failed",
                       "dropped")},
                   "reports_failed_by_error": dict(self._failures),
                   "reports_by_conductor": dict(self._by_conductor),
                   "heartbeats": {key: counts.get(f"heartbeats_{key}", 0) for key in (
                       "sent", "failed", "dropped", "skipped", "held")},
                   "agent_restarted_sent": counts.get("agent_restarted", 0),
                   "rpc_served": dict(self._served),
                   "faults": list(self._faults)}
        out["accepted_reports_per_s"] = round(
            out["reports"]["accepted"] / elapsed, 2) if elapsed > 0 else 0.0
        out["report_latency_ms"] = _percentiles(latencies)
        return out


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 \
        else [values[0]] * 99
    return {"p50": round(cuts[49] * 1000, 2), "p95": round(cuts[94] * 1000, 2),
            "p99": round(cuts[98] * 1000, 2), "max": round(values[-1] * 1000, 2)}
