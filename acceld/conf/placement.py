"""[placement] options: keystoneauth session/auth/adapter, plus how acceld syncs.

Placement sync is on when an auth plugin is configured (``auth_type``); with no
``[placement]`` section the embedded default runs without Placement.
"""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import service_client

GROUP = "placement"

OPTS = [
    cfg.FloatOpt("sync_interval", default=300.0, min=1,
                 help="Seconds between two full reconciliations of every host's providers "
                      "with Placement (the safety net that heals outages and manual "
                      "edits). Reports that change a host sync it at once."),
    cfg.IntOpt("sync_workers", default=8, min=1,
               help="Hosts synced concurrently."),
    cfg.IntOpt("conflict_retries", default=4, min=0,
               help="Retries of a write that lost a generation race (409)."),
    cfg.FloatOpt("compute_node_retry_max", default=300.0, min=1,
                 help="Upper bound (seconds) of the backoff between two looks for a host's "
                      "compute node provider while it does not exist yet."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    service_client.register(conf, GROUP, "placement", OPTS)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return service_client.list_opts(GROUP, OPTS)


def enabled(conf: cfg.ConfigOpts) -> bool:
    return service_client.enabled(conf, GROUP)
