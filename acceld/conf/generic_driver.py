"""[generic_driver] options: the hardware-agnostic PCI reference driver."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "generic_driver"

OPTS: list[cfg.Opt] = []


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
