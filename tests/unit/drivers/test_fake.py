"""The fake driver's shapes: its own cycle of kinds, and upstream Cyborg's fake device
(``[fake_driver] profile = cyborg``) that Nova's functional tests assume."""

from __future__ import annotations

import json
import tempfile

import pytest

from acceld import reports
from acceld.agent.drivers.base import DriverContext, DriverError
from acceld.agent.drivers.fake import FakeDriver
from acceld.hw import pci
from tests.helpers import make_conf


def _discover(host: str = "accel_host0", **opts) -> list[reports.Device]:
    conf = make_conf(fake_driver=opts)
    with tempfile.TemporaryDirectory() as state_dir:
        return FakeDriver(DriverContext(conf, host, state_dir)).discover()


def _infos(dep: reports.Deployable) -> list[dict[str, str]]:
    return [dict(h.attach_info) for h in dep.attach_handles]


def test_the_cyborg_profile_is_upstreams_fake_device():
    [dev] = _discover(profile="cyborg", device_count=7, device_types=["GPU"], handles=3)
    assert (dev.type, dev.identity, dev.name) == ("FPGA", "0000:0c:00.0",
                                                  "accel_host0_FakeDevice")
    [dep] = dev.deployables
    assert (dep.name, dep.num_accelerators) == ("accel_host0_FakeDevice", 16)
    assert dict(dep.attributes) == {"rc": "FPGA", "trait0": "CUSTOM_FAKE_DEVICE"}
    assert {h.attach_type for h in dep.attach_handles} == {"PCI"}
    # functions 1..16 of bus 0c, eight per device number, as valid PCI addresses
    assert [str(pci.from_attach_info(i)) for i in _infos(dep)] == [
        f"0000:0c:{n // 8:02x}.{n % 8:x}" for n in range(1, 17)]
    assert _infos(dep)[9] == {"domain": "0000", "bus": "0c", "device": "01",
                              "function": "2"}


def test_every_fake_handle_is_a_valid_pci_address_in_hex():
    for dev in _discover(device_count=4, handles=12):
        for info in _infos(dev.deployables[0]):
            address = pci.from_attach_info(info)
            assert address.function <= 7
            assert pci.to_attach_info(address) == {k: v for k, v in info.items()
                                                   if k != "physical_network"}


def test_traits_and_physical_networks_are_set_per_kind():
    devices = {d.type: d for d in _discover(
        traits={"FPGA": "CUSTOM_FAKE_DEVICE CUSTOM_X"},
        physical_networks={"FPGA": "physnet2", "NIC": "physnet1"})}
    fpga = devices["FPGA"].deployables[0]
    assert dict(fpga.attributes) == {"rc": "FPGA", "trait0": "CUSTOM_FAKE_DEVICE",
                                     "trait1": "CUSTOM_X"}
    assert {i["physical_network"] for i in _infos(fpga)} == {"physnet2"}
    assert {i["physical_network"] for i in _infos(devices["NIC"].deployables[0])} == {
        "physnet1"}
    assert all("physical_network" not in i for i in _infos(devices["QAT"].deployables[0]))
    [dev] = _discover(profile="cyborg", physical_networks={"FPGA": "PHYNET1"})
    assert {i["physical_network"] for i in _infos(dev.deployables[0])} == {"PHYNET1"}


def test_the_default_shape_is_unchanged_by_default():
    devices = _discover()
    assert [d.type for d in devices] == ["GPU", "FPGA", "QAT", "NIC"]
    nic = devices[3].deployables[0]
    assert _infos(nic) == [{**pci.to_attach_info(f"0000:3e:00.{f}"),
                            "physical_network": "physnet1"} for f in (1, 2)]


def test_the_simulated_reset_counts_resets_and_fails_where_the_control_file_says(tmp_path):
    control = tmp_path / "control.json"
    conf = make_conf(fake_driver={"control_file": str(control)})
    drv = FakeDriver(DriverContext(conf, "h", str(tmp_path)))
    control.write_text(json.dumps({"health": {"0000:3b:00.0": {
        "status": "ok", "counters": {"ecc": 4, "xid": 1}}}}))
    assert drv.health()["0000:3b:00.0"].counters == (("ecc", 4), ("xid", 1))
    drv.reset("0000:3b:00.0")
    control.write_text(json.dumps({"reset_fail": ["0000:3c:00.0"]}))
    drv.reset("0000:3b:00.0")
    with pytest.raises(DriverError, match="did not come back"):
        drv.reset("0000:3c:00.0")
    with pytest.raises(DriverError, match="is not a fake device"):
        drv.reset("0000:99:00.0")
    assert json.loads((tmp_path / "fake-driver-state.json").read_text())["resets"] == {
        "0000:3b:00.0": 2}
