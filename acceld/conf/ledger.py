"""[ledger] options: how long the allocation ledger keeps its rows (docs/ledger.md)."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "ledger"

OPTS = [
    cfg.IntOpt("retention_days", default=0, min=0,
               help="Days a ledger row is kept; older rows are deleted by the conductor's "
                    "periodic purge, except the first row of a holding still open (it "
                    "still counts device-hours). 0 keeps every row forever."),
    cfg.IntOpt("purge_batch", default=1000, min=1,
               help="Most ledger rows one periodic purge deletes (one transaction); a "
                    "backlog is worked off over later passes."),
]
