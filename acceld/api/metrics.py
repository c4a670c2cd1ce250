"""The API's Prometheus metrics (``GET /metrics``, docs/metrics.md): the fleet gauges,
read from the database at each scrape in a fixed three aggregate statements
(``objects.fleet``), and the request counter and latency histogram the pipeline's head
(``deploy.Front``) records for every request.

Each app has a registry of its own (never prometheus-client's global one). Several API
processes (``[api] processes``, or the workers of uWSGI or gunicorn) each count their own
requests; when ``PROMETHEUS_MULTIPROC_DIR`` names a directory at import, prometheus-client's
multiprocess mode keeps the counts in files there and a scrape, whichever process answers
it, sums every process's (``acceld serve`` and ``acceld api`` make such a directory for
their processes; see docs/metrics.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from acceld import states
from acceld.db.api import Database
from acceld.objects import fleet

# prometheus-client's switch for multiprocess mode, read once by it at its import
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST
# the ``route`` of a request answered before routing or routed nowhere (401, 404, 414, 431)
UNROUTED = "unrouted"
# the ``method`` of a request whose method no route has: a bounded set of label values
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"
# seconds; an API answer takes milliseconds, a bind that waits on an agent seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)

# _created series (the time a series was first seen) are of no use for these counters and
# double the families a scrape carries; they are off in every process that serves them.
disable_created_metrics()


class FleetCollector(Collector):
    """The fleet gauges, computed when a scrape collects them (nothing is cached: a
    scrape sees the database as it is)."""

    def __init__(self, db: Database, down_time: int) -> None:
        self._db, self._down_time = db, down_time

    def describe(self) -> list[Metric]:
        return []        # registering must not read the database

    def collect(self) -> Iterator[Metric]:
        counts = fleet.fleet_counts(self._db, self._down_time)
        labels = ["type", "state", "health"]
        devices = GaugeMetricFamily("acceld_devices", "Devices by type, state and health.",
                                    labels=labels)
        deployables = GaugeMetricFamily(
            "acceld_deployables", "Deployables by their device's type, state and health.",
            labels=labels)
        accelerators = GaugeMetricFamily(
            "acceld_accelerators",
            "Accelerators the deployables offer (num_accelerators summed) by their device's "
            "type, state and health.", labels=labels)
        for group in counts.devices:
            values = [group.type, group.state, group.health]
            devices.add_metric(values, group.devices)
            deployables.add_metric(values, group.deployables)
            accelerators.add_metric(values, group.accelerators)
        arqs = GaugeMetricFamily("acceld_accelerator_requests",
                                 "Accelerator requests by state.", labels=["state"])
        for state in sorted(set(states.ARQ_STATES) | set(counts.arqs)):
            arqs.add_metric([state], counts.arqs.get(state, 0))
        services = GaugeMetricFamily(
            "acceld_services", "Services (one row per host and binary) by binary and "
            "liveness (a heartbeat within [conductor] service_down_time).",
            labels=["binary", "alive"])
        for (binary, alive), count in sorted(counts.services.items()):
            services.add_metric([binary, "true" if alive else "false"], count)
        yield from (devices, deployables, accelerators, arqs, services)


class ApiMetrics:
    """One app's registry: its request metrics and the fleet collector over ``db``."""

    def __init__(self, db: Database, down_time: int) -> None:
        self.registry = CollectorRegistry()
        directory = os.environ.get(MULTIPROC_ENV)
        # in multiprocess mode the values live in the directory's files, which the
        # multiprocess collector reads; the metrics themselves are then in no registry
        own = None if directory else self.registry
        self._requests = Counter(
            "acceld_api_requests", "API requests answered, by method, route template and "
            "status.", ["method", "route", "status"], registry=own)
        self._latency = Histogram(
            "acceld_api_request_duration_seconds", "Time from a request's arrival at the "
            "app to the end of its answer, by method and route template.",
            ["method", "route"], registry=own, buckets=LATENCY_BUCKETS)
        if directory:
            multiprocess.MultiProcessCollector(self.registry, path=directory)
        self.registry.register(FleetCollector(db, down_time))

    def observe(self, method: str, route: str | None, status: str, seconds: float) -> None:
        """Count one answered request (``status``: its three digits)."""
        if method not in METHODS:
            method = OTHER_METHOD
        route = route or UNROUTED
        self._requests.labels(method, route, status).inc()
        self._latency.labels(method, route).observe(seconds)

    def exposition(self) -> bytes:
        """The text exposition of everything: what ``GET /metrics`` answers."""
        return generate_latest(self.registry)
