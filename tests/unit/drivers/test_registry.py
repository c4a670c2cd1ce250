"""Drivers are plugins (stevedore, namespace ``acceld.drivers``): loading one by name, a
clear error for an unknown name, and a driver of another package that brings its own
options without any change to acceld."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from acceld import exception
from acceld.agent.drivers import registry
from acceld.agent.drivers.base import DriverContext
from acceld.agent.drivers.fake import FakeDriver
from tests.helpers import make_conf


def test_a_driver_loads_by_its_entry_point_name(tmp_path):
    driver = registry.load("fake", DriverContext(make_conf(), "host1", str(tmp_path)))
    assert isinstance(driver, FakeDriver)
    assert {"fake", "fpga", "generic", "nvidia_gpu", "sriov"} <= set(registry.available())


def test_an_unknown_driver_names_itself_and_the_installed_ones(tmp_path):
    with pytest.raises(exception.DriverNotFound) as info:
        registry.load("no_such", DriverContext(make_conf(), "host1", str(tmp_path)))
    message = str(info.value)
    assert "'no_such' is not installed" in message
    assert "known: " in message and "fake" in message and "nvidia_gpu" in message


def test_every_installed_driver_registers_its_own_group():
    conf = make_conf()
    for group in ("fake_driver", "fpga_driver", "generic_driver", "nvidia_driver",
                  "sriov_driver"):
        assert group in conf, group


PLUGIN = '''
from oslo_config import cfg

from acceld.agent.drivers.base import BaseDriver


class ExtraDriver(BaseDriver):
    name = "extra"
    version = "0.1"
    conf_group = "extra_driver"
    conf_opts = [cfg.IntOpt("widgets", default=3, help="How many widgets.")]

    def discover(self):
        return []
'''

CHECK = '''
import json
from acceld import conf
from acceld.agent.drivers import registry
from acceld.agent.drivers.base import DriverContext
from acceld.conf import opts

c = conf.load([], overrides={"extra_driver": {"widgets": 5}})
driver = registry.load("extra", DriverContext(c, "h", "."))
print(json.dumps({"widgets": c.extra_driver.widgets, "name": driver.name,
                  "listed": "extra_driver" in {g for g, _ in opts.list_opts()},
                  "available": registry.available()}))
'''


def test_a_driver_of_another_package_brings_its_options(tmp_path):
    """Installing a driver (its module and one ``acceld.drivers`` entry point) is all it
    takes: its group is registered, settable, listed for the sample and loadable."""
    (tmp_path / "extra_acceld_driver.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "extra_acceld_driver-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-acceld-driver\n"
                                   "Version: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[acceld.drivers]\nextra = extra_acceld_driver:ExtraDriver\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["widgets"] == 5 and result["name"] == "extra" and result["listed"]
    assert "extra" in result["available"] and "fake" in result["available"]
