"""The agent's driver context (real collaborators unless injected) and driver capabilities."""

from __future__ import annotations

import pytest

from acceld import reports
from acceld.agent import manager
from acceld.agent.drivers.base import BaseDriver, Health
from acceld.agent.drivers.fake import FakeDriver
from acceld.hw.runner import SubprocessRunner
from acceld.hw.sysfs import Sysfs
from tests.helpers import make_conf


def test_real_collaborators_by_default(tmp_path):
    conf = make_conf(agent={"sysfs_root": str(tmp_path)})
    ctx = manager.make_context(conf, "h1", str(tmp_path / "state"))
    assert isinstance(ctx.sysfs, Sysfs) and ctx.sysfs.root == str(tmp_path)
    assert isinstance(ctx.runner, SubprocessRunner)
    assert ctx.nvml is None                 # the NVIDIA driver loads NVML itself


def test_injected_collaborators_win_and_unknown_ones_are_refused(tmp_path):
    conf = make_conf()
    fake_sysfs, fake_runner = Sysfs(str(tmp_path)), object()
    ctx = manager.make_context(conf, "h1", str(tmp_path), sysfs=fake_sysfs,
                               runner=fake_runner, sleep=lambda s: None)
    assert ctx.sysfs is fake_sysfs and ctx.runner is fake_runner
    with pytest.raises(TypeError, match="toaster"):
        manager.make_context(conf, "h1", str(tmp_path), toaster=object())


def test_the_agent_uses_the_configured_sysfs_root(tmp_path):
    conf = make_conf(agent={"sysfs_root": str(tmp_path / "root")})
    agent = manager.AgentManager(conf, conductor=None, host="h1",
                                 journal_dir=str(tmp_path / "j"))
    assert agent.context.sysfs.root == str(tmp_path / "root")
    assert agent.context.state_dir == str(tmp_path / "j" / "drivers")


def test_the_agent_reports_the_compute_node_uuid_nova_keeps(tmp_path):
    path = tmp_path / "compute_id"
    conf = make_conf(agent={"nova_compute_id_file": str(path)})
    agent = manager.AgentManager(conf, conductor=None, host="h1",
                                 journal_dir=str(tmp_path / "j"))
    assert agent.build_report().compute_node_uuid == ""        # no file: none
    path.write_text("4D0C6A1E-2B7F-4C3A-8E5D-9F1A2B3C4D5E\n")
    assert agent.build_report().compute_node_uuid == "4d0c6a1e-2b7f-4c3a-8e5d-9f1a2b3c4d5e"
    path.write_text("garbage")
    assert agent.build_report().compute_node_uuid == ""        # not a uuid: none
    assert manager.read_compute_id("") == ""                   # the option emptied


class _Preparing(BaseDriver):
    def prepare(self, identity: str, attach_info: dict[str, str]) -> dict[str, str]:
        return attach_info


class _Releasing(BaseDriver):
    def release(self, identity: str, attach_info: dict[str, str]) -> None:
        return None


def test_capabilities_follow_what_a_driver_implements(tmp_path):
    ctx = manager.make_context(make_conf(), "h1", str(tmp_path))
    assert manager.capabilities(FakeDriver(ctx)) == (reports.CAP_PROGRAM,)
    assert manager.capabilities(_Preparing(ctx)) == (reports.CAP_HOST_WORK,)
    assert manager.capabilities(_Releasing(ctx)) == (reports.CAP_HOST_WORK,)
    assert manager.capabilities(BaseDriver(ctx)) == ()
    assert manager.capabilities(object()) == ()


def test_a_health_outside_the_protocol_counts_as_failed():
    dev = reports.make_device(identity="a", type="GPU", vendor="10de", model="1",
                              controlpath={"type": "PCI", "info": {}})
    assert manager._with_health(dev, None) is dev
    sick = manager._with_health(dev, Health("exploded", ("boom",)))
    assert (sick.health, sick.health_reasons) == ("failed", ("boom",))
