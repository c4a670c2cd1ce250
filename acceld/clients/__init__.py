"""Typed clients of the services acceld talks to, over injected keystoneauth adapters."""

from __future__ import annotations

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

import acceld


def make_adapter(conf: cfg.ConfigOpts, group: str) -> ks_adapter.Adapter:
    """The keystoneauth adapter of ``[group]``'s session, auth and adapter options. Its
    User-Agent names this host, so the other service's logs show which acceld process
    (which of several conductors) called."""
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group, auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=session, auth=auth,
        user_agent=f"acceld/{acceld.__version__} ({conf.host})")
