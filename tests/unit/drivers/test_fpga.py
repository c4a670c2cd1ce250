"""The FPGA driver against fake DFL sysfs trees and fake fpgaconf/xbutil (tests/fakes)."""

from __future__ import annotations

import os

import pytest

from acceld import reports
from acceld.agent.drivers import base, registry
from acceld.agent.drivers.base import DriverContext, DriverError
from acceld.agent.drivers.fpga import (
    FpgaDriver,
    gbs_function,
    xclbin_function,
)
from acceld.hw.runner import Result
from acceld.hw.sysfs import Sysfs
from acceld.reports import function_trait
from tests.fakes.fpga import (
    FPGACONF,
    XBUTIL,
    FakeFpgaTools,
    FpgaTree,
    make_gbs,
    make_xclbin,
)
from tests.fakes.kernel import FakeSysfsBuilder
from tests.helpers import make_conf

AFU_NLB = "d8424dc4-a4a3-c413-f89e-433683f9040b"
AFU_DMA = "331db30c-9885-41ea-9081-f88b8f655caa"
IFACE = "a5f6a2d1-c0b9-4b2d-8e1f-0c3d2b1a0f9e"
XCLBIN_A = "5d9e1c3a-8f0b-4d2e-9a61-7c3b2e4f1a09"
XCLBIN_B = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

PF = "0000:3b:00.0"
USER = "0000:af:00.1"
MGMT = "0000:af:00.0"


def _fid(uuid: str) -> str:
    return uuid.replace("-", "").lower()


_CONFS: dict[tuple, object] = {}


def _conf(**fpga_conf):
    """Parsed configs are read-only here: share them across tests (parsing is slow)."""
    key = tuple(sorted(fpga_conf.items()))
    if key not in _CONFS:
        _CONFS[key] = make_conf(fpga_driver=fpga_conf)
    return _CONFS[key]


class Hw:
    """A fake host: tree + tools + a driver factory (one state dir per test)."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.tree = FpgaTree(FakeSysfsBuilder(tmp_path / "root"))
        self.tools = FakeFpgaTools(self.tree)
        self.state_dir = str(tmp_path / "state")
        self.progress: list[tuple[int, str]] = []

    def driver(self, which=None, **fpga_conf) -> FpgaDriver:
        ctx = DriverContext(conf=_conf(**fpga_conf), host="host1",
                            state_dir=self.state_dir, sysfs=self.tree.kernel,
                            runner=self.tools.runner)
        return FpgaDriver(ctx, which=which or self.tools.which)

    def record(self, percent: int, message: str) -> None:
        self.progress.append((percent, message))

    def gbs(self, afu: str, iface: str = IFACE, name: str = "afu.gbs") -> str:
        path = str(self.tmp / name)
        make_gbs(path, afu, iface)
        return path

    def xclbin(self, uuid: str, name: str = "k.xclbin") -> str:
        path = str(self.tmp / name)
        make_xclbin(path, uuid)
        return path


@pytest.fixture
def hw(tmp_path) -> Hw:
    return Hw(tmp_path)


def _traits(device: reports.Device) -> list[str]:
    attrs = dict(device.deployables[0].attributes)
    return [v for k, v in sorted(attrs.items()) if k.startswith("trait")]


def _handles(device: reports.Device) -> list[dict[str, str]]:
    return [dict(h.attach_info) for h in device.deployables[0].attach_handles]


def _valid(devices: list[reports.Device]) -> None:
    """The devices survive the conductor's schema validation."""
    report = reports.InventoryReport(host="host1", epoch="e", seq=1, drivers=(
        reports.DriverReport(name="fpga", version="1.0.0", devices=tuple(devices)),))
    reports.InventoryReport.from_dict(report.to_dict())


# -- the protocol ------------------------------------------------------------------------


def test_driver_implements_driver_and_programmable(hw):
    driver = hw.driver()
    assert isinstance(driver, base.Driver)
    assert isinstance(driver, base.Programmable)


def test_entry_point_loads_with_only_conf_host_and_state_dir(tmp_path):
    ctx = DriverContext(conf=make_conf(), host="h", state_dir=str(tmp_path))
    driver = registry.load("fpga", ctx)
    assert isinstance(driver, FpgaDriver)
    assert isinstance(driver.sysfs, Sysfs) and driver.sysfs.root == "/"


# -- discovery: no hardware ----------------------------------------------------------------


def test_no_fpga_is_an_empty_inventory_with_a_reason(hw):
    driver = hw.driver(expected_devices=2)
    assert driver.discover() == []
    explanation = driver.explain()
    assert explanation.found == 0 and explanation.expected == 2
    assert [c.name for c in explanation.checks] == ["fpga devices"]
    assert explanation.checks[0].ok is False
    assert driver.health() == {} and driver.stats() == {}


# -- discovery: Intel DFL ------------------------------------------------------------------


def test_dfl_card_is_an_fpga_with_model_and_function_traits(hw):
    hw.tree.dfl_card(PF, "0b30", afu_id=AFU_NLB, numa=1)
    driver = hw.driver()
    devices = driver.discover()
    assert len(devices) == 1
    assert driver.explain().skipped == ()        # the FME's PR region is no device
    assert driver.explain().found == 1
    dev = devices[0]
    assert (dev.identity, dev.type, dev.vendor, dev.model) == (PF, "FPGA", "8086", "0b30")
    assert dict(dev.controlpath_info) == {"domain": "0000", "bus": "3b", "device": "00",
                                          "function": "0"}
    assert dict(dev.deployables[0].attributes)["rc"] == "FPGA"
    assert _traits(dev) == ["CUSTOM_FPGA_INTEL_PAC_N3000",
                            "CUSTOM_FPGA_FUNCTION_ID_" + _fid(AFU_NLB).upper()]
    assert _handles(dev) == [{"domain": "0000", "bus": "3b", "device": "00", "function": "0"}]
    assert dev.deployables[0].num_accelerators == 1
    assert dict(dev.std_board_info)["numa_node"] == 1
    assert dict(dev.vendor_board_info)["bitstream_id"] == "0x23000410010309"
    _valid(devices)


def test_dfl_unknown_model_uses_the_device_id(hw):
    hw.tree.dfl_card(PF, "bcce", afu_id=AFU_NLB)
    assert _traits(hw.driver().discover()[0])[0] == "CUSTOM_FPGA_INTEL_BCCE"


def test_dfl_all_zero_afu_means_nothing_loaded(hw):
    hw.tree.dfl_card(PF, afu_id=None)
    assert _traits(hw.driver().discover()[0]) == ["CUSTOM_FPGA_INTEL_PAC_N3000"]


def test_dfl_port_vfs_become_the_attach_handles(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, totalvfs=1)
    vfs = hw.tree.release_ports_to_vfs(PF, 1)
    assert vfs == ["0000:3b:00.1"]
    dev = hw.driver().discover()[0]
    assert _handles(dev) == [{"domain": "0000", "bus": "3b", "device": "00", "function": "1"}]
    assert dev.identity == PF                                # the card is still its PF
    assert function_trait(_fid(AFU_NLB)) in _traits(dev)     # read from the VF's port


def test_port_vf_in_a_guest_keeps_the_last_seen_function(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, totalvfs=1)
    [vf] = hw.tree.release_ports_to_vfs(PF, 1)
    hw.driver().discover()                           # seen while the VF is on dfl-pci
    hw.tree.vf_to_vfio(vf)                           # now passed through: port unreadable
    dev = hw.driver().discover()[0]
    assert function_trait(_fid(AFU_NLB)) in _traits(dev)
    assert _handles(dev)[0]["function"] == "1"


def test_port_vf_in_a_guest_without_memory_reports_no_function(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, totalvfs=1)
    [vf] = hw.tree.release_ports_to_vfs(PF, 1)
    hw.tree.vf_to_vfio(vf)
    dev = hw.driver().discover()[0]
    assert _traits(dev) == ["CUSTOM_FPGA_INTEL_PAC_N3000"]


def test_dfl_card_not_on_dfl_pci_is_skipped_with_the_reason(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, bound=False)
    driver = hw.driver()
    assert driver.discover() == []
    explanation = driver.explain()
    assert [(s.address, s.reason) for s in explanation.skipped] == [
        (PF, "Intel DFL FPGA bound to no driver, not dfl-pci")]
    checks = {c.name: c for c in explanation.checks}
    assert checks["dfl-pci"].ok is True                       # the driver exists
    assert checks["fpgaconf"].ok is True and checks["fpgaconf"].detail == FPGACONF


def test_explain_names_missing_fpgaconf(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    driver = hw.driver(which=lambda name: None)
    assert len(driver.discover()) == 1                  # discovery needs only sysfs
    check = {c.name: c for c in driver.explain().checks}["fpgaconf"]
    assert check.ok is False and "not found" in check.detail
    assert driver.explain().found == 1


# -- discovery: Xilinx XRT -----------------------------------------------------------------


def test_xrt_card_is_its_user_function_with_the_loaded_xclbin(hw):
    hw.tree.xrt_card("0000:af:00", "5004")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    devices = hw.driver().discover()
    [dev] = devices
    assert (dev.identity, dev.vendor, dev.model) == (USER, "10ee", "5005")
    assert dict(dev.controlpath_info)["function"] == "0"       # the management function
    assert _handles(dev) == [{"domain": "0000", "bus": "af", "device": "00", "function": "1"}]
    assert _traits(dev) == ["CUSTOM_FPGA_XILINX_U250",
                            "CUSTOM_FPGA_FUNCTION_ID_" + _fid(XCLBIN_A).upper()]
    assert dict(dev.vendor_board_info)["vbnv"] == "xilinx_u250_gen3x16_xdma_shell_4_1"
    [call] = hw.tools.runner.calls
    assert call.argv[:9] == [XBUTIL, "examine", "-d", USER, "-r", "all", "-f", "JSON", "-o"]
    assert call.privileged is False
    assert not os.path.exists(call.argv[9])                    # its temp dir is gone
    _valid(devices)


def test_xrt_without_xclbin_has_only_the_model_trait(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=None)           # XRT writes dynamic_regions ""
    assert _traits(hw.driver().discover()[0]) == ["CUSTOM_FPGA_XILINX_U250"]


def test_xrt_examine_is_shared_by_one_cycle(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    driver = hw.driver()
    driver.discover()
    driver.health()
    driver.stats()
    assert len(hw.tools.runner.calls) == 1


def test_xrt_user_function_in_a_guest_is_reported_from_memory(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    hw.driver().discover()
    hw.tree.b.driver("vfio-pci", "vfio_pci")
    hw.tree.kernel.bind_driver(USER, "vfio-pci")
    calls = len(hw.tools.runner.calls)
    driver = hw.driver()
    [dev] = driver.discover()
    assert function_trait(_fid(XCLBIN_A)) in _traits(dev)
    assert len(hw.tools.runner.calls) == calls                # nothing to examine
    assert driver.health()[USER].status == base.HEALTH_OK


def test_xrt_functions_not_on_xocl_are_skipped(hw):
    hw.tree.xrt_card("0000:af:00", user_driver=None)
    hw.tree.xrt_card("0000:d8:00", with_user=False)
    driver = hw.driver()
    assert driver.discover() == []
    assert sorted((s.address, s.reason) for s in driver.explain().skipped) == [
        (USER, "user function bound to no driver, not xocl"),
        ("0000:d8:00.0", "Xilinx function without a user function 1 on its slot")]


def test_xrt_without_xbutil_still_reports_the_card_and_says_why(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    driver = hw.driver(which=lambda name: None)
    [dev] = driver.discover()
    assert _traits(dev) == ["CUSTOM_FPGA_XILINX_U250"]
    assert hw.tools.runner.calls == []
    checks = {c.name: c for c in driver.explain().checks}
    assert checks["xbutil"].ok is False and "not found" in checks["xbutil"].detail
    health = driver.health()[USER]
    assert health.status == base.HEALTH_DEGRADED and "not found" in health.reasons[0]


def test_xrt_examine_failure_degrades_health_with_the_tools_message(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.runner.script([XBUTIL, "examine"], Result(1, "", "ERROR: device is busy"))
    driver = hw.driver()
    assert len(driver.discover()) == 1
    health = driver.health()[USER]
    assert health.status == base.HEALTH_DEGRADED
    assert "ERROR: device is busy" in health.reasons[0]


# -- health and stats ----------------------------------------------------------------------


def test_dfl_health_ok_then_degraded_then_failed(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    driver = hw.driver()
    assert driver.health() == {PF: base.Health(base.HEALTH_OK)}
    hw.tree.set_fme_error(PF, "nonfatal_errors", 0x40)
    health = driver.health()[PF]
    assert health.status == base.HEALTH_DEGRADED
    assert health.reasons == ("dfl-fme.0 errors/nonfatal_errors = 0x40",)
    hw.tree.set_fme_error(PF, "catfatal_errors", 0x1)
    health = driver.health()[PF]
    assert health.status == base.HEALTH_FAILED
    assert "dfl-fme.0 errors/catfatal_errors = 0x1" in health.reasons
    assert "dfl-fme.0 errors/nonfatal_errors = 0x40" in health.reasons


def test_dfl_port_errors_and_overheating_degrade(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, temp_c=96.0, temp_crit_c=95.0)
    hw.tree.set_port_error("dfl-port.0", 0x2)
    health = hw.driver().health()[PF]
    assert health.status == base.HEALTH_DEGRADED
    assert health.reasons == ("dfl-port.0 errors/errors = 0x2",
                              "dfl-fme.0 temperature 96 C at or above the critical 95 C")


def test_dfl_errors_on_vf_ports_count(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, totalvfs=1)
    hw.tree.release_ports_to_vfs(PF, 1)
    port = hw.tree.ports_of("0000:3b:00.1")[0]
    hw.tree.set_port_error(port, 0x8)
    assert hw.driver().health()[PF].reasons == (f"{port} errors/errors = 0x8",)


def test_xrt_hang_fails_and_uncalibrated_memory_degrades(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A, mig_calibrated=False)
    assert hw.driver().health()[USER] == base.Health(
        base.HEALTH_DEGRADED, ("memory controllers not calibrated (mig_calibrated false)",))
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A, status="HANG")
    assert hw.driver().health()[USER] == base.Health(
        base.HEALTH_FAILED, ("xbutil reports device_status HANG",))


def test_stats_from_hwmon_and_from_xbutil(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, temp_c=41.5, power_w=38.5)
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A, fpga_temp=61)
    stats = hw.driver().stats()
    assert stats[PF] == {"temperature_c": 41.5, "power_w": 38.5, "functions_loaded": 1.0}
    assert stats[USER] == {"temperature_c": 61.0, "power_w": 28.2, "functions_loaded": 1.0}


# -- programming: DFL ----------------------------------------------------------------------


def test_dfl_program_loads_the_afu_and_the_trait_changes(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    driver = hw.driver()
    before = _traits(driver.discover()[0])
    image = hw.gbs(AFU_DMA)
    result = driver.program(PF, image, progress=hw.record, timeout=30)
    assert result == {"function_id": _fid(AFU_DMA), "trait": function_trait(_fid(AFU_DMA))}
    [call] = hw.tools.runner.calls
    assert call.argv == [FPGACONF, "-B", "0x3b", "-D", "0x00", "-F", "0x0", image]
    assert call.privileged is True and call.timeout == 30
    assert [p for p, _ in hw.progress] == [0, 10, 50, 90, 100]
    after = _traits(driver.discover()[0])
    assert function_trait(_fid(AFU_NLB)) in before
    assert after == ["CUSTOM_FPGA_INTEL_PAC_N3000", function_trait(_fid(AFU_DMA))]


def test_dfl_program_outside_domain_zero_names_the_segment(hw):
    hw.tree.dfl_card("0001:5e:00.0", afu_id=AFU_NLB)
    hw.driver().program("1:5E:00.0", hw.gbs(AFU_DMA), progress=hw.record, timeout=30)
    assert hw.tools.runner.calls[0].argv[1:9] == ["--segment", "0x0001", "-B", "0x5e",
                                                  "-D", "0x00", "-F", "0x0"]


def test_dfl_program_failure_carries_the_tools_stderr(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    image = hw.gbs(AFU_DMA, iface="00000000-0000-0000-0000-00000000abcd")
    with pytest.raises(DriverError) as err:
        hw.driver().program(PF, image, progress=hw.record, timeout=30)
    assert "fpgaconf failed (rc 1)" in str(err.value)
    assert "does not match the FIM's PR interface id" in str(err.value)
    assert function_trait(_fid(AFU_NLB)) in _traits(hw.driver().discover()[0])


def test_dfl_program_scripted_failure_keeps_only_the_stderr_tail(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    hw.tools.fail("fpgaconf", rc=2, stderr="x" * 5000 + "THE END")
    with pytest.raises(DriverError) as err:
        hw.driver().program(PF, hw.gbs(AFU_DMA), progress=hw.record, timeout=30)
    assert str(err.value).endswith("THE END") and len(str(err.value)) < 700


def test_dfl_program_timeout(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    hw.tools.hang("fpgaconf")
    with pytest.raises(DriverError, match="programming timed out after 30 s"):
        hw.driver().program(PF, hw.gbs(AFU_DMA), progress=hw.record, timeout=30)
    assert [p for p, _ in hw.progress] == [0, 10, 50]


def test_dfl_program_refuses_a_non_gbs_before_running_anything(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    with pytest.raises(DriverError, match="not an OPAE green bitstream"):
        hw.driver().program(PF, hw.xclbin(XCLBIN_A), progress=hw.record, timeout=30)
    assert hw.tools.runner.calls == []


def test_dfl_program_without_fpgaconf(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    driver = hw.driver(which=lambda name: None)
    with pytest.raises(DriverError, match="fpgaconf not found"):
        driver.program(PF, hw.gbs(AFU_DMA), progress=hw.record, timeout=30)
    assert hw.tools.runner.calls == []


def test_dfl_program_with_ports_on_vfs_is_refused(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB, totalvfs=1)
    hw.tree.release_ports_to_vfs(PF, 1)
    with pytest.raises(DriverError, match="no port on its PF"):
        hw.driver().program(PF, hw.gbs(AFU_DMA), progress=hw.record, timeout=30)


def test_dfl_program_read_back_mismatch_is_an_error(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    hw.tools.runner.script([FPGACONF], Result(0, "done", ""))     # claims success only
    with pytest.raises(DriverError, match="reports AFU " + _fid(AFU_NLB)):
        hw.driver().program(PF, hw.gbs(AFU_DMA), progress=hw.record, timeout=30)


def test_program_unknown_or_malformed_identity(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    driver = hw.driver()
    with pytest.raises(DriverError, match="no FPGA 0000:3c:00.0"):
        driver.program("0000:3c:00.0", hw.gbs(AFU_DMA), progress=hw.record, timeout=30)
    with pytest.raises(DriverError, match="not an FPGA identity"):
        driver.program("fpga0", hw.gbs(AFU_DMA), progress=hw.record, timeout=30)


# -- programming: XRT ----------------------------------------------------------------------


def test_xrt_program_loads_the_xclbin_and_the_trait_changes(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    driver = hw.driver()
    assert function_trait(_fid(XCLBIN_A)) in _traits(driver.discover()[0])
    image = hw.xclbin(XCLBIN_B)
    result = driver.program(USER, image, progress=hw.record, timeout=45)
    assert result["function_id"] == _fid(XCLBIN_B)
    program = [c for c in hw.tools.runner.calls if c.argv[1] == "program"]
    assert [c.argv for c in program] == [[XBUTIL, "program", "-d", USER, "-u", image]]
    assert program[0].privileged is True and program[0].timeout == 45
    assert _traits(driver.discover()[0]) == ["CUSTOM_FPGA_XILINX_U250",
                                             function_trait(_fid(XCLBIN_B))]


def test_xrt_program_failure_and_timeout(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    hw.tools.fail("xbutil program", stderr="ERROR: xclbin on card is in use")
    with pytest.raises(DriverError, match="xbutil program failed .*in use"):
        hw.driver().program(USER, hw.xclbin(XCLBIN_B), progress=hw.record, timeout=45)
    hw.tools.hang("xbutil program")
    with pytest.raises(DriverError, match="programming timed out after 45 s"):
        hw.driver().program(USER, hw.xclbin(XCLBIN_B), progress=hw.record, timeout=45)


def test_xrt_program_refuses_a_gbs_and_a_card_in_a_guest(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    with pytest.raises(DriverError, match="not an xclbin"):
        hw.driver().program(USER, hw.gbs(AFU_DMA), progress=hw.record, timeout=45)
    hw.tree.b.driver("vfio-pci", "vfio_pci")
    hw.tree.kernel.bind_driver(USER, "vfio-pci")
    with pytest.raises(DriverError, match="bound to vfio-pci, not xocl"):
        hw.driver().program(USER, hw.xclbin(XCLBIN_B), progress=hw.record, timeout=45)


def test_xrt_program_read_back_mismatch_is_an_error(hw):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    hw.tools.runner.script([XBUTIL, "program"], Result(0, "ok", ""))   # no effect
    with pytest.raises(DriverError, match="reports " + _fid(XCLBIN_A)):
        hw.driver().program(USER, hw.xclbin(XCLBIN_B), progress=hw.record, timeout=45)


# -- image checks ----------------------------------------------------------------------------


def test_image_identity_is_read_from_the_file_headers(tmp_path):
    make_gbs(tmp_path / "a.gbs", AFU_NLB, IFACE)
    make_xclbin(tmp_path / "a.xclbin", XCLBIN_A)
    assert gbs_function(str(tmp_path / "a.gbs")) == _fid(AFU_NLB)
    assert xclbin_function(str(tmp_path / "a.xclbin")) == _fid(XCLBIN_A)


def test_broken_gbs_metadata_is_refused(tmp_path):
    from tests.fakes.fpga import GBS_GUID

    bad_json = tmp_path / "bad.gbs"
    bad_json.write_bytes(GBS_GUID + (5).to_bytes(4, "little") + b"{nope")
    with pytest.raises(DriverError, match="not JSON"):
        gbs_function(str(bad_json))
    no_afu = tmp_path / "noafu.gbs"
    no_afu.write_bytes(GBS_GUID + (2).to_bytes(4, "little") + b"{}")
    with pytest.raises(DriverError, match="no accelerator-type-uuid"):
        gbs_function(str(no_afu))
    with pytest.raises(DriverError, match="cannot read image"):
        gbs_function(str(tmp_path / "missing.gbs"))


# -- the fakes behave like the tools -------------------------------------------------------


def test_fake_xbutil_refuses_to_overwrite_its_output(hw, tmp_path):
    hw.tree.xrt_card("0000:af:00")
    hw.tools.add_xrt(USER, xclbin_uuid=XCLBIN_A)
    out = tmp_path / "exists.json"
    out.write_text("{}")
    result = hw.tools.runner.run([XBUTIL, "examine", "-d", USER, "-r", "all", "-f", "JSON",
                                  "-o", str(out)], 10)
    assert result.rc == 1 and "already exists" in result.stderr


def test_fake_fpgaconf_writes_the_ports_afu_id(hw):
    hw.tree.dfl_card(PF, afu_id=AFU_NLB)
    result = hw.tools.runner.run([FPGACONF, "-B", "0x3b", hw.gbs(AFU_DMA)], 10)
    assert result.rc == 0
    assert hw.tree.kernel.read("/sys/bus/platform/devices/dfl-port.0/afu_id") == _fid(AFU_DMA)
