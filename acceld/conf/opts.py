"""Entry point for oslo-config-generator (namespace ``acceld``): every acceld option
group, the installed drivers' included."""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import GROUP_MODULES, driver_opts


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    result: list[tuple[str | None, list[cfg.Opt]]] = []
    for module in GROUP_MODULES:
        result.extend(module.list_opts())
    result.extend(driver_opts())
    return result
