"""[coordination] options: the tooz group through which conductors share the hosts."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "coordination"

OPTS = [
    cfg.StrOpt("backend_url", default="", secret=True,
               help="tooz backend of the conductors' group, e.g. "
                    "redis://127.0.0.1:6379 or etcd3+http://127.0.0.1:2379. Each "
                    "conductor owns the hosts a consistent hash ring over the live members "
                    "gives it (docs/deploying-at-scale.md). Empty: no group; this conductor "
                    "owns every host (run one conductor only)."),
    cfg.IntOpt("membership_timeout", default=10, min=2,
               help="Seconds after its last beat that a conductor which stopped beating "
                    "(killed, cut off) leaves the group; its hosts move to the others "
                    "then. Passed to the backend as its membership timeout unless the URL "
                    "sets one."),
    cfg.FloatOpt("refresh_interval", default=1.0, min=0.05,
                 help="Seconds between two reads of the group's members (the ring is "
                      "rebuilt when they change)."),
]
