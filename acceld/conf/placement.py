"""[placement] options: keystoneauth session/auth/adapter (on when ``auth_type`` is set;
each request retried on a failed connection and on 429/502/503/504), plus how acceld
syncs: a failed host is retried with backoff; the full pass is only a safety net."""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import service_client

GROUP = "placement"
SERVICE_TYPE = "placement"

OPTS = [
    cfg.FloatOpt("sync_interval", default=300.0, min=1,
                 help="Seconds between two full reconciliations of every host's providers "
                      "with Placement (the safety net that heals manual edits). Each costs "
                      "Placement one GET per host, plus two per provider Placement changed "
                      "since acceld's last sync of it (an edit, an allocation). Reports "
                      "that change a host sync it at once; a failed sync is retried "
                      "within retry_max_delay."),
    cfg.IntOpt("sync_workers", default=8, min=1,
               help="Hosts synced concurrently."),
    cfg.IntOpt("conflict_retries", default=4, min=0,
               help="Retries of a write that lost a generation race (409)."),
    cfg.FloatOpt("retry_initial_delay", default=1.0, min=0.001,
                 help="Seconds before the first retry of a host whose sync failed; each "
                      "further failure doubles it (up to retry_max_delay), and each delay "
                      "is drawn between half and all of that (jitter)."),
    cfg.FloatOpt("retry_max_delay", default=20.0, min=0.001,
                 help="Upper bound (seconds) of the delay between two retries of a host "
                      "whose sync failed (Placement unreachable, 5xx, ...): with the "
                      "default, a host converges within about 25 s of Placement answering "
                      "again."),
    cfg.FloatOpt("compute_node_retry_max", default=300.0, min=0.001,
                 help="Upper bound (seconds) of the delay between two looks for a host's "
                      "compute node provider while it does not exist yet (Nova creates "
                      "it when nova-compute first starts on the host)."),
]

# keystoneauth defaults changed for Placement: every request is retried on a failed
# connection and on a retriable status, and none waits for ever.
CLIENT_DEFAULTS = {"connect_retries": 3, "status_code_retries": 3,
                   "retriable_status_codes": [429, 502, 503, 504], "timeout": 30}


def enabled(conf: cfg.ConfigOpts) -> bool:
    return service_client.enabled(conf, GROUP)
