"""[conductor] options: heartbeat coalescing and liveness."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "conductor"

OPTS = [
    cfg.FloatOpt("save_interval", default=10.0, min=0.05,
                 help="Seconds between two flushes of coalesced heartbeats to the database "
                      "(the seed's save-out rate). A service seen for the first time is "
                      "written at once."),
    cfg.IntOpt("service_down_time", default=90, min=1,
               help="A service whose last heartbeat is older than this many seconds is "
                    "shown as not alive."),
    cfg.FloatOpt("operation_timeout", default=120.0, min=1,
                 help="Seconds after which an install/uninstall that the agent has not "
                      "answered is sent again."),
    cfg.FloatOpt("operation_wait", default=10.0, min=0,
                 help="Seconds a state change request waits for the agent's install or "
                      "uninstall before answering with the transient state."),
    cfg.FloatOpt("periodic_interval", default=15.0, min=0.05,
                 help="Seconds between two runs of the conductor's periodic tasks."),
]
