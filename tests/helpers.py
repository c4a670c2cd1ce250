"""Test helpers shared by the suites (no fixtures here; plain functions)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from oslo_config import cfg

from acceld import conf as config


def make_conf(**groups: dict[str, Any]) -> cfg.ConfigOpts:
    """A parsed ConfigOpts with overrides: make_conf(DEFAULT={...}, agent={...})."""
    overrides: dict[str, dict[str, Any]] = {"DEFAULT": {"state_path": tempfile.mkdtemp(
        prefix="acceld-test-")}}
    for group, values in groups.items():
        overrides.setdefault(group, {}).update(values)
    return config.load([], config_files=[], overrides=overrides)


def state_dir(conf: cfg.ConfigOpts) -> str:
    return os.path.join(conf.state_path)
