"""The latest usage sample of each device, from the agents' ``acceld.device.usage``
notifications (acceld.notify.payloads.DeviceUsagePayload), kept in memory and exported
as gauges.

Nothing is read from or written to the database: a scrape reads this process's memory.
Each notification carries every device of one host, so a device its host no longer
reports leaves at once; a device whose host falls silent leaves after ``[metrics]
stale_periods`` of that host's periods; at most ``[metrics] max_devices`` are kept (the
one heard of least recently leaves first).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from acceld import validation
from acceld.notify import payloads

LOG = logging.getLogger(__name__)

EVENT_TYPE = "acceld.device.usage"
EVENT_TYPE_PATTERN = r"^acceld\.device\.usage$"     # the listener's filter
# the publishers' own schema of the payload (one home: acceld.notify.payloads)
_SCHEMA = payloads.DeviceUsagePayload.schema()


@dataclasses.dataclass(frozen=True)
class Gauge:
    """How one key of a device's ``metrics`` is exported: the metric's name, its kind,
    the factor from the payload's unit to the metric's, and its help."""

    name: str
    kind: str          # "gauge" or "counter" (a count the device keeps, never lowered)
    factor: float
    help: str


EXPORTED: dict[str, Gauge] = {
    "utilization_percent": Gauge("acceld_device_utilization_ratio", "gauge", 0.01,
                                 "Share of the device busy (0 to 1)."),
    "memory_used_bytes": Gauge("acceld_device_memory_used_bytes", "gauge", 1,
                               "Device memory in use."),
    "memory_total_bytes": Gauge("acceld_device_memory_total_bytes", "gauge", 1,
                                "Device memory in all."),
    "temperature_celsius": Gauge("acceld_device_temperature_celsius", "gauge", 1,
                                 "Device temperature."),
    "power_watts": Gauge("acceld_device_power_watts", "gauge", 1, "Device power draw."),
    "ecc_corrected_total": Gauge("acceld_device_ecc_corrected_errors", "counter", 1,
                                 "Corrected ECC errors the device has counted."),
    "ecc_uncorrected_total": Gauge("acceld_device_ecc_uncorrected_errors", "counter", 1,
                                   "Uncorrected ECC errors the device has counted."),
}
LABELS = ["host", "driver", "identity", "type"]


@dataclasses.dataclass(frozen=True)
class Sample:
    type: str
    metrics: dict[str, float]
    sampled_at: float        # seconds since the epoch, the agent's clock
    heard: float             # this process's monotonic clock
    period: float


Key = tuple[str, str, str]   # host, driver, identity


class UsageStore:
    """The latest sample per device, bounded; thread-safe (the listener writes, scrapes
    read)."""

    def __init__(self, max_devices: int, stale_periods: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max, self._stale, self._clock = max_devices, stale_periods, clock
        self._lock = threading.Lock()
        self._samples: collections.OrderedDict[Key, Sample] = collections.OrderedDict()
        self._by_host: dict[str, set[Key]] = {}
        self.accepted = self.rejected = 0

    def accept(self, payload: Any) -> bool:
        """Record one notification's payload; False (and nothing recorded) when it is not
        a valid usage payload of a version this understands."""
        problem = validation.first_problem(payload, _SCHEMA)
        if problem is None:
            data = payload["acceld_object.data"]
            try:   # the schema's pattern ends in "Z": an aware time, never a naive one
                sampled = datetime.datetime.fromisoformat(data["sampled_at"])
            except ValueError as exc:
                problem = str(exc)
        if problem is not None:
            with self._lock:
                self.rejected += 1
            LOG.warning("usage notification refused: %s", problem)
            return False
        self._record(data, sampled.timestamp())
        return True

    def _record(self, data: dict[str, Any], sampled_at: float) -> None:
        host, period, now = data["host"], float(data["period_s"]), self._clock()
        fresh = {(host, d["driver"], d["identity"]):
                 Sample(d["type"], d["metrics"], sampled_at, now, period)
                 for d in data["devices"]}
        with self._lock:
            self.accepted += 1
            for key in self._by_host.pop(host, set()) - fresh.keys():
                del self._samples[key]          # no longer reported by its host
            for key, sample in fresh.items():
                self._samples.pop(key, None)
                self._samples[key] = sample     # the most recently heard last
            self._by_host[host] = set(fresh)
            while len(self._samples) > self._max:
                self._forget(next(iter(self._samples)))

    def _forget(self, key: Key) -> None:
        del self._samples[key]
        keys = self._by_host[key[0]]
        keys.discard(key)
        if not keys:
            del self._by_host[key[0]]

    def current(self) -> list[tuple[Key, Sample]]:
        """Every device's latest sample, after dropping the stale ones."""
        now = self._clock()
        with self._lock:
            stale = [key for key, s in self._samples.items()
                     if now - s.heard > self._stale * s.period]
            for key in stale:
                self._forget(key)
            return list(self._samples.items())


class UsageCollector(Collector):
    """The store's samples as metric families, at each scrape."""

    def __init__(self, store: UsageStore) -> None:
        self._store = store

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        samples = self._store.current()
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for key, spec in EXPORTED.items():
            kind = GaugeMetricFamily if spec.kind == "gauge" else CounterMetricFamily
            families[key] = kind(spec.name, spec.help, labels=LABELS)
        sampled = GaugeMetricFamily("acceld_device_usage_sampled_timestamp_seconds",
                                    "When the agent took the device's latest sample.",
                                    labels=LABELS)
        for (host, driver, identity), sample in samples:
            values = [host, driver, identity, sample.type]
            sampled.add_metric(values, sample.sampled_at)
            for key, value in sample.metrics.items():
                spec = EXPORTED.get(key)
                if spec is not None:
                    families[key].add_metric(values, value * spec.factor)
        notes = CounterMetricFamily("acceld_usage_notifications",
                                    "Usage notifications received, by outcome.",
                                    labels=["outcome"])
        notes.add_metric(["accepted"], self._store.accepted)
        notes.add_metric(["rejected"], self._store.rejected)
        yield from (*families.values(), sampled, notes)


class UsageEndpoint:
    """The oslo.messaging notification endpoint: INFO notifications of
    :data:`EVENT_TYPE` into the store (other events are filtered out before they reach
    it; each is acknowledged, a malformed one too: resending it would not mend it)."""

    def __init__(self, store: UsageStore, filter_rule: Any) -> None:
        self._store = store
        self.filter_rule = filter_rule

    def info(self, ctxt: Any, publisher_id: str, event_type: str, payload: Any,
             metadata: Any) -> None:
        if not self._store.accept(payload):
            LOG.warning("usage notification from %s dropped", publisher_id)


def registry(store: UsageStore) -> CollectorRegistry:
    """A registry of its own with the store's collector."""
    reg = CollectorRegistry()
    reg.register(UsageCollector(store))
    return reg
