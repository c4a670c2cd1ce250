"""[health] options: when the conductor takes a device out of ``healthy`` from its
agent's reports (docs/health.md)."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "health"

OPTS = [
    cfg.IntOpt("suspect_ecc_delta", default=10, min=0,
               help="A healthy device whose ECC error counter rose by at least this many "
                    "since the previous report becomes suspect (0: ECC counts are not "
                    "watched). Only drivers that count ECC errors report them."),
    cfg.IntOpt("suspect_xid_delta", default=1, min=0,
               help="A healthy device whose critical XID counter rose by at least this "
                    "many since the previous report becomes suspect (0: not watched)."),
    cfg.BoolOpt("suspect_on_driver_health", default=True,
                help="Whether a healthy device whose driver now reports it degraded or "
                     "failed becomes suspect."),
    cfg.BoolOpt("auto_quarantine", default=False,
                help="Quarantine a device at once (reserved in Placement, no new binds) "
                     "where it would become suspect, instead of leaving the decision to "
                     "an operator."),
    cfg.FloatOpt("reset_wait", default=10.0, min=0,
                 help="Seconds a reset request waits for the agent's reset before "
                      "answering with the device still resetting (the reset goes on; "
                      "'acceld device-reset --wait' follows it)."),
]
