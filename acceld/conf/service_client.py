"""keystoneauth option groups (session, auth, adapter) of the services acceld calls, on when
``auth_type`` is set; the plugin's own options (``endpoint``, ``token``, ...) exist only
once it is known, so :func:`acceld.conf.load` registers them then."""

from __future__ import annotations

import contextlib
from typing import Any

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg


def register(conf: cfg.ConfigOpts, module: Any) -> None:
    """Register the group of ``module`` (a conf module: GROUP, SERVICE_TYPE, OPTS and the
    keystoneauth CLIENT_DEFAULTS it changes)."""
    group = module.GROUP
    conf.register_opts(module.OPTS, group=group)
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group, include_deprecated=False)
    conf.set_default("service_type", module.SERVICE_TYPE, group=group)
    conf.set_default("valid_interfaces", ["internal", "public"], group=group)
    for name, value in module.CLIENT_DEFAULTS.items():
        conf.set_default(name, value, group=group)


def register_plugin_opts(conf: cfg.ConfigOpts, group: str, auth_type: str) -> None:
    """Register the options of auth plugin ``auth_type`` (e.g. admin_token's endpoint)."""
    for opt in ks_loading.get_auth_plugin_conf_options(auth_type):
        with contextlib.suppress(cfg.DuplicateOptError):
            conf.register_opt(opt, group=group)


def list_opts(module: Any) -> tuple[str, list[cfg.Opt]]:
    """The group of ``module`` for the sample config, its CLIENT_DEFAULTS shown as
    registered."""
    opts = (module.OPTS + ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
    for opt in opts:
        if opt.dest in module.CLIENT_DEFAULTS:
            opt.default = module.CLIENT_DEFAULTS[opt.dest]
    return module.GROUP, opts


def enabled(conf: cfg.ConfigOpts, group: str) -> bool:
    return bool(getattr(conf, group).auth_type)
