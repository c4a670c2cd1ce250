"""[sriov_driver] options: SR-IOV functions (NIC, QAT, NVMe)."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "sriov_driver"

OPTS: list[cfg.Opt] = []


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
