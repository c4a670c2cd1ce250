"""Configuration and policy are complete and their generators run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from acceld import conf as config
from acceld import policies
from acceld.conf import opts


def test_every_acceld_group_is_in_the_sample():
    conf = config.register_all(config.cfg.ConfigOpts())
    listed = {group for group, _opts in opts.list_opts()}
    assert {"api", "agent", "conductor", "fake_driver", None} <= listed
    for group, group_opts in opts.list_opts():
        for opt in group_opts:
            container = conf if group is None else getattr(conf, group)
            assert opt.dest in container, (group, opt.dest)


def test_config_generator_runs(tmp_path):
    out = tmp_path / "acceld.conf.sample"
    subprocess.run([sys.executable, "-m", "oslo_config.generator", "--namespace", "acceld",
                    "--output-file", str(out)], check=True, timeout=60)
    text = out.read_text()
    for section in ("[api]", "[agent]", "[conductor]", "[fake_driver]"):
        assert section in text


def test_policy_rules_are_documented_and_unique():
    names = [rule.name for rule in policies.list_rules()]
    assert len(names) == len(set(names))
    for rule in policies.V1_RULES:
        assert rule.name.startswith("acceld:") and rule.operations


def test_oslo_messaging_metrics_and_tracing_are_off_and_cannot_be_turned_on(tmp_path) -> None:
    """oslo.messaging reads the two switches from acceld's ConfigOpts on every RPC call;
    acceld declares them off and refuses a value that turns one on."""
    for group, name in config.MESSAGING_SWITCHES:
        assert config.load([])[group][name] is False
        for value, on in (("false", False), ("true", True)):
            path = tmp_path / f"{group}-{value}.conf"
            path.write_text(f"[{group}]\n{name} = {value}\n")
            conf = config.load([], config_files=[str(path)])
            if on:
                with pytest.raises(ValueError, match="does not run"):
                    conf[group][name]  # noqa: B018
            else:
                assert conf[group][name] is False


def test_waitress_queue_warnings_stay_out_of_the_log(tmp_path) -> None:
    """Waitress logs a WARNING for each request that waits for a free thread (a line per
    request under load): acceld's log levels drop them and keep waitress's errors."""
    log_file = tmp_path / "acceld.log"
    script = (
        "import logging\n"
        "from acceld import conf as config, wiring\n"
        f"conf = config.load(['--log-file', {str(log_file)!r}], config_files=[])\n"
        "wiring.setup_logging(conf)\n"
        "logging.getLogger('waitress.queue').warning('Task queue depth is 3')\n"
        "logging.getLogger('waitress.queue').error('queue broke')\n"
        "logging.getLogger('waitress').warning('other waitress warning')\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    text = log_file.read_text()
    assert "Task queue depth" not in text
    assert "queue broke" in text and "other waitress warning" in text
