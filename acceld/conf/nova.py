"""[nova] options: keystoneauth session/auth/adapter for Nova's compute API (on when
``auth_type`` is set), plus the bind timeout. Nova's compute waits for acceld's
``accelerator-request-bound`` events (it does not poll), so their delivery is retried."""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import service_client

GROUP = "nova"
SERVICE_TYPE = "compute"

OPTS = [
    cfg.FloatOpt("bind_timeout", default=60.0, min=0.1,
                 help="Seconds a bind may take before acceld gives up on it and tells Nova "
                      "the accelerator request failed (event status 'failed'), instead of "
                      "leaving Nova waiting for its own timeout. The deadline is kept in "
                      "the database as a UTC time, and any conductor owning the host "
                      "ends the bind there: the conductors' clocks must agree (NTP)."),
]

CLIENT_DEFAULTS = {"connect_retries": 3, "status_code_retries": 3}


def enabled(conf: cfg.ConfigOpts) -> bool:
    return service_client.enabled(conf, GROUP)
