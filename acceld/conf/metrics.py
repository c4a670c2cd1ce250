"""[metrics] options: the usage collector (`acceld metrics-collector`), which turns the
agents' usage notifications into Prometheus gauges (docs/metrics.md)."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "metrics"

OPTS = [
    cfg.HostAddressOpt("collector_host", default="127.0.0.1",
                       help="Address `acceld metrics-collector` serves its /metrics on "
                            "(plain HTTP, no authentication: keep it on a network only "
                            "Prometheus reaches)."),
    cfg.PortOpt("collector_port", default=9666,
                help="Port `acceld metrics-collector` serves its /metrics on."),
    cfg.StrOpt("usage_pool", default="acceld-metrics-collector",
               help="The notification listener pool of the collector: its own queue on "
                    "each topic, so that the collector takes no notification from other "
                    "consumers (e.g. Ceilometer). Collectors sharing a pool share the "
                    "notifications (each sees a part): run one per pool."),
    cfg.FloatOpt("stale_periods", default=3.0, min=1.0,
                 help="A device not heard of for this many of its host's usage periods "
                      "is dropped from the gauges."),
    cfg.IntOpt("max_devices", default=100000, min=1,
               help="Most devices whose latest sample the collector keeps; beyond, the "
                    "device heard of least recently is dropped."),
]
