"""[nova] options: keystoneauth session/auth/adapter for Nova's compute API, plus the bind
notification timeout.

acceld tells Nova that an instance's accelerator requests are resolved with the
``accelerator-request-bound`` external event (contract 3.2 step 3). The notification is
on when an auth plugin is configured (``auth_type``); with no ``[nova]`` section nothing
is sent. Nova's compute does not poll: it reads the instance's ARQs once when it starts
waiting, counts those already resolved, and waits for the events of the others (up to
its ``arq_binding_timeout``). Event delivery is therefore retried on a lost connection
or a 503 (keystoneauth's ``connect_retries`` and ``status_code_retries``, 3 by default
here).
"""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import service_client

GROUP = "nova"

OPTS = [
    cfg.FloatOpt("bind_timeout", default=60.0, min=0.1,
                 help="Seconds a bind may take before acceld gives up on it and tells Nova "
                      "the accelerator request failed (event status 'failed'), instead of "
                      "leaving Nova waiting for its own timeout."),
]


# Event delivery is retried (a lost event leaves Nova waiting for its own timeout).
RETRY_DEFAULTS = {"connect_retries": 3, "status_code_retries": 3}


def register_opts(conf: cfg.ConfigOpts) -> None:
    service_client.register(conf, GROUP, "compute", OPTS, RETRY_DEFAULTS)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return service_client.list_opts(GROUP, OPTS, RETRY_DEFAULTS)


def enabled(conf: cfg.ConfigOpts) -> bool:
    return service_client.enabled(conf, GROUP)
