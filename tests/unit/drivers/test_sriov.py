"""The SR-IOV driver on FakeKernel trees: NIC VFs with physical networks, QAT, NVMe."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import pytest

from acceld.agent import fileutil
from acceld.agent.drivers.base import (
    HEALTH_DEGRADED,
    HEALTH_OK,
    DriverContext,
    DriverError,
)
from acceld.agent.drivers.sriov import SriovDriver
from acceld.hw import pci
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.helpers import make_conf

NIC0 = "0000:5e:00.0"
NIC1 = "0000:5e:00.1"
QAT = "0000:3b:00.0"
NVME = "0000:00:02.0"
PLAIN = "0000:02:00.0"          # a NIC without SR-IOV


def host(tmp_path) -> FakeKernel:
    b = FakeSysfsBuilder(tmp_path / "root", vf_device_ids={"4940": "4941", "1017": "1018"})
    b.driver("vfio-pci").driver("iavf").driver("4xxxvf", module="qat_4xxx")
    # a dual-port NIC: the VFs sit after both PFs (offsets as the card's SR-IOV capability)
    for addr, offset in ((NIC0, 8), (NIC1, 15)):
        b.pci(addr, "15b3", "1017", "0x020000", numa=0, driver="mlx5_core", totalvfs=8,
              vf_driver="mlx5_core", sriov_offset=offset)
    b.pci(PLAIN, "8086", "1533", "0x020000", driver="igb")
    b.pci(QAT, "8086", "4940", "0x0b4000", numa=1, driver="qat_4xxx", totalvfs=16,
          vf_driver="4xxxvf", attrs={"qat/state": "up", "qat/cfg_services": "dc"})
    b.pci(NVME, "1b36", "0010", "0x010802", driver="nvme", totalvfs=2, vf_driver="nvme")
    return b.kernel()


def driver(tmp_path, kernel, *specs) -> SriovDriver:
    conf = make_conf(sriov_driver={"pf_spec": [json.dumps(s) for s in specs]})
    return SriovDriver(DriverContext(conf=conf, host="host1",
                                     state_dir=str(tmp_path / "state"), sysfs=kernel))


def infos(device) -> list[dict[str, str]]:
    return [dict(h.attach_info) for h in device.deployables[0].attach_handles]


def test_nic_vfs_carry_physical_network(tmp_path):
    k = host(tmp_path)
    k.set_numvfs(NIC0, 2)
    d = driver(tmp_path, k,
               {"address": NIC0, "physical_network": "physnet1", "device_type": "NIC"},
               {"address": NIC1, "physical_network": "physnet2", "device_type": "NIC",
                "traits": ["CUSTOM_PHYSNET2"]})
    nic0, nic1 = d.discover()
    assert infos(nic0) == [{**pci.to_attach_info("0000:5e:01.0"), "physical_network": "physnet1"},
                           {**pci.to_attach_info("0000:5e:01.1"), "physical_network": "physnet1"}]
    assert nic1.deployables[0].num_accelerators == 0 and infos(nic1) == []   # no VFs, no PF
    attrs = dict(nic1.deployables[0].attributes)
    assert attrs["physical_network"] == "physnet2" and attrs["trait0"] == "CUSTOM_PHYSNET2"
    assert attrs["rc"] == "CUSTOM_NIC" and nic0.type == "NIC"


def test_non_sriov_pf_is_skipped_with_reason(tmp_path):
    d = driver(tmp_path, host(tmp_path), {"class": "02", "physical_network": "physnet1"})
    assert [x.identity for x in d.discover()] == [NIC0, NIC1]
    [skip] = d.explain().skipped
    assert skip.address == PLAIN and "not SR-IOV capable" in skip.reason


def test_install_creates_vfs_on_their_own_driver_by_default(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {"address": NIC0, "physical_network": "physnet1", "num_vfs": 4})
    d.install(NIC0)
    vfs = k.virtfns(NIC0)
    assert len(vfs) == 4 and {k.driver_of(v) for v in vfs} == {"mlx5_core"}
    assert not k.writes_to("sriov_drivers_autoprobe")          # autoprobe left alone
    [nic] = d.discover()
    assert [str(pci.from_attach_info(i)) for i in infos(nic)] == vfs
    d.install(NIC0)                                            # idempotent
    assert len(k.writes_to("sriov_numvfs")) == 1
    d.uninstall(NIC0)
    assert k.virtfns(NIC0) == []


def test_qat_vfs_to_vfio_with_autoprobe_off(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {"vendor_id": "8086", "product_id": "4940", "num_vfs": 3,
                             "vfio": True, "device_type": "QAT", "backend": "qat"})
    d.install(QAT)
    assert k.writes[0] == (f"/sys/bus/pci/devices/{QAT}/sriov_drivers_autoprobe", "0")
    vfs = k.virtfns(QAT)
    assert {k.driver_of(v) for v in vfs} == {"vfio-pci"}
    assert {k.pci_device(v).device for v in vfs} == {"4941"}
    [qat] = d.discover()
    attrs = dict(qat.deployables[0].attributes)
    assert attrs["services"] == "dc" and attrs["rc"] == "CUSTOM_QAT" and attrs["numa_node"] == "1"
    assert {c.name: c.ok for c in d.explain().checks}[f"{QAT} qat"] is True
    d.uninstall(QAT)
    pf = k.pci_device(QAT)
    assert pf.sriov_numvfs == 0 and pf.sriov_drivers_autoprobe is True
    state = fileutil.read_json(str(tmp_path / "state" / "sriov-state.json"))
    assert state == {}


def test_qat_down_is_degraded_and_explained(tmp_path):
    k = host(tmp_path)
    k.write(k.device_path(QAT, "qat", "state"), "down")
    d = driver(tmp_path, k, {"address": QAT})
    d.discover()
    assert d.health()[QAT].status == HEALTH_DEGRADED
    check = {c.name: c for c in d.explain().checks}[f"{QAT} qat"]
    assert not check.ok and check.detail == "qat/state is down"


def test_nvme_prepare_and_release_vf(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {"address": NVME, "device_type": "SSD", "num_vfs": 2})
    d.install(NVME)
    vf = k.virtfns(NVME)[0]
    assert k.driver_of(vf) == "nvme"
    d.prepare(NVME, pci.to_attach_info(vf))
    assert k.driver_of(vf) == "vfio-pci"
    d.release(NVME, pci.to_attach_info(vf))
    assert k.driver_of(vf) == "nvme"
    # the PF is never a handle of the SR-IOV driver
    with pytest.raises(DriverError, match="not an attach handle"):
        d.prepare(NVME, pci.to_attach_info(NVME))
    assert d.health() == {NVME: d.health()[NVME]} and d.health()[NVME].status == HEALTH_OK


def test_shrinking_with_a_vf_in_use_fails_cleanly(tmp_path):
    k = host(tmp_path)
    d = driver(tmp_path, k, {"address": NIC0, "num_vfs": 2, "physical_network": "physnet1"})
    d.install(NIC0)
    vf = k.virtfns(NIC0)[0]
    d.prepare(NIC0, pci.to_attach_info(vf))
    k.mark_in_use(vf)
    with pytest.raises(DriverError, match="in use"):
        d.uninstall(NIC0)
    assert len(k.virtfns(NIC0)) == 2
    k.mark_in_use(vf, False)
    d.uninstall(NIC0)
    assert k.virtfns(NIC0) == []


def test_a_nic_without_physical_network_is_not_reported(tmp_path):
    """Nova's port binding reads the handle's physical_network (a KeyError without it)."""
    d = driver(tmp_path, host(tmp_path), {"class": "02"})
    assert d.discover() == []
    skipped = {s.address: s.reason for s in d.explain().skipped}
    assert skipped[NIC0] == ("is a NIC but spec 0 names no physical_network: Nova binds a "
                             "port to a NIC handle only with the handle's physical network")


def test_bad_pf_spec_names_the_option(tmp_path):
    conf = make_conf(sriov_driver={"pf_spec": ['{"address": "5e:00.0", "num_vfs": "4"}']})
    with pytest.raises(DriverError, match=r"\[sriov_driver\] pf_spec entry 0: field 'num_vfs'"):
        SriovDriver(DriverContext(conf=conf, host="h", state_dir=str(tmp_path)))


def test_loads_without_collaborators(tmp_path):
    d = SriovDriver(DriverContext(conf=make_conf(), host="h", state_dir=str(tmp_path)))
    assert d.discover() == [] and not d.explain().checks[0].ok
    assert entry_points(group="acceld.drivers")["sriov"].load() is SriovDriver
