"""Entry point for oslo-config-generator (namespace ``acceld``): every acceld option
group, the installed drivers' included."""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import CLIENT_MODULES, PLAIN_MODULES, driver_opts, service_client


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return ([(module.GROUP, module.OPTS) for module in PLAIN_MODULES]
            + [service_client.list_opts(module) for module in CLIENT_MODULES]
            + driver_opts())
