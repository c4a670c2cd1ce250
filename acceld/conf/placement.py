"""[placement] options: keystoneauth session/auth/adapter, plus how acceld syncs.

Placement sync is on when an auth plugin is configured (``auth_type``); with no
``[placement]`` section the embedded default runs without Placement.
"""

from __future__ import annotations

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

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
    conf.register_opts(OPTS, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP, include_deprecated=False)
    conf.set_default("service_type", "placement", group=GROUP)
    conf.set_default("valid_interfaces", ["internal", "public"], group=GROUP)


def register_plugin_opts(conf: cfg.ConfigOpts, auth_type: str) -> None:
    """Register the options of auth plugin ``auth_type`` (e.g. admin_token's endpoint)."""
    for opt in ks_loading.get_auth_plugin_conf_options(auth_type):
        try:
            conf.register_opt(opt, group=GROUP)
        except cfg.DuplicateOptError:
            pass


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    auth = ks_loading.get_auth_common_conf_options()
    adapter = ks_loading.get_adapter_conf_options(include_deprecated=False)
    session = ks_loading.get_session_conf_options()
    return [(GROUP, OPTS + session + auth + adapter)]


def enabled(conf: cfg.ConfigOpts) -> bool:
    return bool(conf.placement.auth_type)
