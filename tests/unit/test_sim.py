"""The simulator's hosts: the device mix, the reports they send (valid, deterministic,
unchanged while the hardware is), the hardware faults, and scenario files."""

from __future__ import annotations

import pytest

from acceld import reports, states
from acceld.sim import devices as devmod
from acceld.sim import scenario as scen
from acceld.sim.fleet import FleetConfig, compute_node_uuid, host_names
from acceld.sim.host import RESET_FAILS_REASON, SimHost
from acceld.sim.stats import Stats


def _host(name: str = "sim-00000", mix: str = "gpu_mig=2,vgpu=2,fpga=1,qat_vf=2,nic_vf=1",
          ) -> SimHost:
    host = SimHost(name, devmod.host_devices(name, devmod.parse_mix(mix)))
    host.start_agent()
    return host


def _parsed(host: SimHost) -> reports.InventoryReport:
    return reports.InventoryReport.from_dict(host.build_report()[0])


def _handles_of(report: reports.InventoryReport, rc: str) -> list[reports.AttachHandle]:
    return [h for drv in report.drivers for dev in drv.devices for dep in dev.deployables
            if dict(dep.attributes)["rc"] == rc for h in dep.attach_handles]


# -- the mix ------------------------------------------------------------------------------

def test_parse_mix_keeps_order_and_sums_repeats():
    assert devmod.parse_mix(" gpu=1, fpga=2 ,gpu=2,nic_vf=0") == (("gpu", 3), ("fpga", 2))
    assert sum(n for _k, n in devmod.DEFAULT_MIX) == 8


@pytest.mark.parametrize("text, error", [
    ("tpu=1", "unknown device kind 'tpu'"),
    ("gpu", "KIND=COUNT"),
    ("gpu=-1", "KIND=COUNT"),
    ("gpu=two", "KIND=COUNT"),
    ("gpu=40,fpga=25", "65 devices per host"),
])
def test_parse_mix_refuses(text, error):
    with pytest.raises(ValueError, match=error):
        devmod.parse_mix(text)


def test_host_names_sort_in_fleet_order():
    names = host_names("edge", 12)
    assert names[:2] == ["edge-00000", "edge-00001"] and names == sorted(names)
    assert host_names("x", 200_000)[-1] == "x-199999"


# -- devices and reports ------------------------------------------------------------------

def test_devices_are_derived_from_the_host_name():
    mix = devmod.DEFAULT_MIX
    again = devmod.host_devices("sim-00007", mix)
    assert devmod.host_devices("sim-00007", mix) == again
    other = devmod.host_devices("sim-00008", mix)
    assert [d.kind for d in other] == [d.kind for d in again]
    serials = {d.body["vendor_board_info"].get("uuid") for d in again if d.type == "GPU"}
    assert serials.isdisjoint(d.body["vendor_board_info"].get("uuid") for d in other)
    assert len({d.identity for d in again}) == len(again) == 8


def test_a_report_validates_with_each_kind_as_its_real_driver_shapes_it():
    report = _parsed(_host())
    assert report.host == report.provider_name == "sim-00000" and report.seq == 1
    drivers = {d.name: d for d in report.drivers}
    assert list(drivers) == ["nvidia_gpu", "fpga", "sriov"]
    assert drivers["nvidia_gpu"].capabilities == (reports.CAP_HOST_WORK,)
    assert drivers["fpga"].capabilities == (reports.CAP_PROGRAM,)
    assert [len(d.devices) for d in drivers.values()] == [4, 1, 3]
    handles = {dev.identity: [(dep.name, dict(dep.attributes)["rc"],
                               [h.attach_type for h in dep.attach_handles])
                              for dep in dev.deployables]
               for drv in report.drivers for dev in drv.devices}
    kinds = {d.identity: d.kind for d in devmod.host_devices("sim-00000", devmod.DEFAULT_MIX)}
    by_kind: dict[str, list] = {}
    for identity, deps in handles.items():
        by_kind.setdefault(kinds[identity], []).append(deps)
    mig = by_kind["gpu_mig"][0]
    assert [(rc, types) for _n, rc, types in mig] == [
        ("CUSTOM_NVIDIA_MIG_3G_40GB", ["MIG"]), ("CUSTOM_NVIDIA_MIG_1G_10GB", ["MIG"] * 4)]
    assert [(rc, types) for _n, rc, types in by_kind["vgpu"][0]] == [("VGPU", ["MDEV"] * 4)]
    assert [(rc, len(types)) for _n, rc, types in by_kind["qat_vf"][0]] == [("CUSTOM_QAT", 16)]
    assert [(rc, len(types)) for _n, rc, types in by_kind["nic_vf"][0]] == [("CUSTOM_NIC", 8)]
    fpga = drivers["fpga"].devices[0].deployables[0]
    assert any(v.startswith(reports.FUNCTION_TRAIT_PREFIX) for _k, v in fpga.attributes)
    nic = next(dev for dev in drivers["sriov"].devices if dev.type == "NIC")
    assert {dict(h.attach_info)["physical_network"] for h in nic.deployables[0].attach_handles} \
        == {"physnet1"}
    mdevs = [h.uuid for h in _handles_of(report, "VGPU")]
    assert None not in mdevs and len(set(mdevs)) == len(mdevs) == 8


def test_unchanged_reports_have_the_same_digest_and_the_next_seq():
    host = _host()
    first, second = _parsed(host), _parsed(host)
    assert (first.seq, second.seq) == (1, 2)
    assert first.content_digest() == second.content_digest()
    assert first.epoch == second.epoch


def test_unplug_and_replug_change_the_report_and_restore_it():
    host = _host()
    before = _parsed(host).content_digest()
    gone = host.pick("qat_vf", None, 1)
    host.unplug(gone)
    report = _parsed(host)
    assert report.content_digest() != before
    assert gone[0] not in {dev.identity for drv in report.drivers for dev in drv.devices}
    assert gone[0] not in {d["identity"] for d in host.expected()}
    assert len(host.expected()) == 7
    host.replug(gone)
    assert _parsed(host).content_digest() == before


def test_health_faults_show_in_the_report_and_clear():
    host = _host()
    before = _parsed(host).content_digest()
    gpus = host.pick(None, None, 2, "GPU")
    host.set_health(gpus, states.HEALTH_FAILED, ("critical XID 79",))
    devices = {dev.identity: dev for drv in _parsed(host).drivers for dev in drv.devices}
    assert [(devices[g].health, devices[g].health_reasons) for g in gpus] == [
        (states.HEALTH_FAILED, ("critical XID 79",))] * 2
    assert {d["identity"]: d["health"] for d in host.expected()}[gpus[0]] == "failed"
    host.clear_health(gpus, ("another fault",))        # not the reasons shown: kept
    assert host.health(gpus[0]) == states.HEALTH_FAILED
    host.clear_health(gpus, ("critical XID 79",))
    assert _parsed(host).content_digest() == before


def test_a_power_cycle_brings_every_device_back_healthy():
    host = _host()
    before = _parsed(host).content_digest()
    host.unplug(host.pick(None, None, 3))
    host.set_health(host.pick("gpu_mig", None, 1), states.HEALTH_FAILED, ("reset failed",))
    host.load_function(host.pick("fpga", None, 1)[0], "ab" * 16)
    host.power_cycle()
    assert _parsed(host).content_digest() == before


def test_an_uninstalled_driver_reports_no_devices():
    host = _host()
    host.set_driver("sriov", installed=False)
    sriov = next(d for d in _parsed(host).drivers if d.name == "sriov")
    assert (sriov.state, sriov.devices) == (states.DRIVER_UNINSTALLED, ())
    assert {d["driver"] for d in host.expected()} == {"nvidia_gpu", "fpga"}


def test_an_agent_start_is_a_new_epoch_unless_its_journal_survived():
    host = _host()
    first = _parsed(host)
    _parsed(host)
    host.stop_agent()
    assert not host.up
    host.start_agent()
    restarted = _parsed(host)
    assert restarted.epoch != first.epoch and restarted.seq == 1
    assert restarted.content_digest() == first.content_digest()
    host.stop_agent()
    host.start_agent(keep_journal=True)
    kept = _parsed(host)
    assert (kept.epoch, kept.seq) == (restarted.epoch, 2)


def test_synced_follows_what_was_accepted():
    host = _host()
    report, version = host.build_report()
    assert not host.synced()
    assert host.accepted(host.life, report["epoch"], version) is True     # the first
    assert host.synced()
    host.unplug(host.pick(None, None, 1))
    assert not host.synced()
    report, version = host.build_report()
    assert host.accepted(host.life, report["epoch"], version) is False
    assert host.synced()
    stale_life = host.life
    host.stop_agent()
    host.start_agent()
    assert not host.accepted(stale_life, report["epoch"], version)
    assert not host.synced()


def test_a_host_reports_its_compute_node_uuid_only_when_it_has_one():
    assert "compute_node_uuid" not in _host().build_report()[0]
    node = compute_node_uuid("sim-00000")
    assert node == compute_node_uuid("sim-00000") != compute_node_uuid("sim-00001")
    host = SimHost("sim-00000", devmod.host_devices("sim-00000", devmod.DEFAULT_MIX), node)
    host.start_agent()
    assert _parsed(host).compute_node_uuid == node


def test_accepted_reports_are_counted_by_the_conductor_that_answered():
    stats = Stats()
    for conductor in ("cond-a", "cond-b", "cond-a"):
        stats.add("reports_accepted")
        stats.accepted_by(conductor)
    stats.add("reports_accepted")              # an answer that named no conductor
    out = stats.snapshot(2.0)
    assert out["reports_by_conductor"] == {"cond-a": 2, "cond-b": 1}
    assert out["reports"]["accepted"] == stats.count("reports_accepted") == 4
    assert stats.count("reports_failed") == 0
    out["reports_by_conductor"]["cond-a"] = 0   # a copy: the counters are not shared
    assert stats.snapshot(2.0)["reports_by_conductor"]["cond-a"] == 2


# -- scenarios ------------------------------------------------------------------------------

EXAMPLE = {"seed": 3, "faults": [
    {"at": 20, "kind": "unplug", "hosts": ["sim-00001"], "device_kind": "gpu_mig",
     "back_after": 30},
    {"at": 10, "kind": "agent_crash", "fraction": 0.1, "down": 15},
    {"at": 10, "kind": "xid_storm", "count": 2, "xid": 48, "duration": 20},
    {"at": 40, "kind": "kill_conductor", "pid_file": "/run/acceld/conductor-1.pid"},
]}


def test_a_scenario_is_sorted_by_time_with_defaults_filled_in():
    sc = scen.parse(EXAMPLE)
    assert [(f.at, f.kind) for f in sc.faults] == [
        (10.0, "agent_crash"), (10.0, "xid_storm"), (20.0, "unplug"), (40.0, "kill_conductor")]
    crash, xid, unplug, kill = sc.faults
    assert dict(crash.params) == {"down": 15, "keep_journal": False}
    assert dict(xid.params) == {"xid": 48, "duration": 20, "devices": 1}
    assert dict(unplug.params) == {"back_after": 30, "device_kind": "gpu_mig", "devices": 1}
    assert dict(kill.params) == {"pid": None, "pid_file": "/run/acceld/conductor-1.pid"}


def test_targets_are_picked_the_same_way_for_the_same_seed():
    names = host_names("sim", 50)
    crash, xid, unplug, kill = scen.parse(EXAMPLE).faults
    assert len(crash.targets(names, 3)) == 5
    assert crash.targets(names, 3) == crash.targets(names, 3) != crash.targets(names, 4)
    assert len(xid.targets(names, 3)) == 2
    assert unplug.targets(names, 3) == ["sim-00001"]
    assert kill.targets(names, 3) == []
    tiny = scen.parse({"faults": [{"at": 0, "kind": "lost_bus", "fraction": 0.01}]}).faults[0]
    assert len(tiny.targets(names[:3], 0)) == 1          # a fraction hits at least one
    everyone = scen.parse({"faults": [{"at": 0, "kind": "reboot"}]}).faults[0]
    assert everyone.targets(names, 0) == names


@pytest.mark.parametrize("fault, error", [
    ({"at": 1, "kind": "meteor"}, "is not one of"),
    ({"kind": "reboot"}, "'at' is a required property"),
    ({"at": 1, "kind": "reboot", "xid": 3}, "does not take xid"),
    ({"at": 1, "kind": "lost_bus", "device_kind": "gpu"}, "does not take device_kind"),
    ({"at": 1, "kind": "reboot", "hosts": ["a"], "count": 2}, "one of hosts, count"),
    ({"at": 1, "kind": "unplug", "device": "0000:3b:00.0", "device_kind": "gpu"}, "not both"),
    ({"at": 1, "kind": "kill_conductor"}, "needs one of pid, pid_file"),
    ({"at": 1, "kind": "kill_conductor", "count": 1, "pid": 5}, "does not take count"),
    ({"at": 1, "kind": "ecc_storm", "status": "ok"}, "is not one of"),
    ({"at": 1, "kind": "slow_bus", "fraction": 1.5}, "greater than the maximum"),
])
def test_a_bad_scenario_is_refused_saying_why(fault, error):
    with pytest.raises(ValueError, match=error):
        scen.parse({"faults": [fault]})


def test_a_fault_naming_an_unknown_host_is_refused():
    sc = scen.parse({"faults": [{"at": 1, "kind": "reboot", "hosts": ["sim-00009"]}]})
    sc.check_hosts(host_names("sim", 10))
    with pytest.raises(ValueError, match="does not have: sim-00009"):
        sc.check_hosts(host_names("sim", 5))


def test_fleet_config_refuses_nonsense():
    with pytest.raises(ValueError):
        FleetConfig(hosts=0)
    with pytest.raises(ValueError):
        FleetConfig(report_interval=0)
    assert FleetConfig(report_interval=7).beat_every == 7
    assert FleetConfig(report_interval=7, heartbeat_interval=2).beat_every == 2


# -- the command ----------------------------------------------------------------------------

def test_the_console_script_is_the_cli_main():
    import tomllib
    from pathlib import Path

    from acceld.sim import cli
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["acceld-sim"] == "acceld.sim.cli:main"
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0


def test_the_command_refuses_a_bad_mix_and_a_missing_bus(tmp_path, capsys):
    from acceld.sim import cli
    with pytest.raises(SystemExit) as exited:
        cli.main(["--mix", "tpu=1"])
    assert exited.value.code == 2
    assert "unknown device kind 'tpu'" in capsys.readouterr().err
    empty = tmp_path / "acceld.conf"
    empty.write_text("[DEFAULT]\n")
    assert cli.main(["--config-file", str(empty), "--hosts", "2"]) == 2
    assert "no transport_url" in capsys.readouterr().err
    bad = tmp_path / "scenario.json"
    bad.write_text('{"faults": [{"at": 1, "kind": "meteor"}]}')
    assert cli.main(["--config-file", str(empty), "--scenario", str(bad)]) == 2
    assert "scenario at faults/0/kind" in capsys.readouterr().err


def test_a_simulated_reset_clears_a_fault_but_not_a_failed_reset():
    host = _host()
    first, second = (dev.identity for dev in host.present()[:2])
    host.set_health([first], states.HEALTH_FAILED, ("critical XID 79",))
    host.set_health([second], states.HEALTH_FAILED, (RESET_FAILS_REASON,))
    assert host.reset(first) is None
    assert host.health(first) == states.HEALTH_OK
    assert host.reset(second) == f"reset of {second} failed: {RESET_FAILS_REASON}"
    assert host.health(second) == states.HEALTH_FAILED
    host.unplug([first])
    assert host.reset(first) == f"device {first} is not on {host.name}"


def test_every_fleet_setting_is_an_option_of_the_command():
    from acceld.sim import cli
    args = cli.build_parser().parse_args([
        "--hosts", "3", "--host-prefix", "edge", "--mix", "gpu=1", "--report-interval", "5",
        "--heartbeat-interval", "7", "--retry-interval", "1", "--workers", "2",
        "--serve-rpc", "1", "--work-delay", "0.5", "--guests", "4", "--ramp", "9"])
    assert cli.fleet_config(args) == FleetConfig(
        hosts=3, host_prefix="edge", mix=(("gpu", 1),), report_interval=5.0,
        heartbeat_interval=7.0, retry_interval=1.0, workers=2, serve_rpc=1, work_delay=0.5,
        guests=4, ramp=9.0)
    assert cli.fleet_config(cli.build_parser().parse_args([])) == FleetConfig(hosts=100)
