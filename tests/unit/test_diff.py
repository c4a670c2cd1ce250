"""The pure inventory diff: every reconciliation rule, no database."""

from __future__ import annotations

import dataclasses

from acceld import diff, reports, states


def _device(identity: str = "0000:3b:00.0", *, model: str = "20b5", num: int = 1,
            handles: int = 1, attrs: dict[str, str] | None = None) -> reports.Device:
    return reports.make_device(
        identity=identity, type="GPU", vendor="10de", model=model, name=f"d-{identity}",
        controlpath={"type": "PCI", "info": {"bus": "3b"}},
        deployables=[{"name": f"dep-{identity}", "num_accelerators": num,
                      "attributes": attrs or {"rc": "PGPU"},
                      "attach_handles": [{"attach_type": "PCI",
                                          "attach_info": {"function": str(i)}}
                                         for i in range(handles)]}])


def _report(*devices: reports.Device, state: str = states.DRIVER_INSTALLED,
            driver: str = "fake") -> reports.InventoryReport:
    return reports.InventoryReport(host="h", epoch="e", seq=1, drivers=(
        reports.DriverReport(name=driver, version="1", state=state,
                             devices=devices if state == states.DRIVER_INSTALLED else ()),))


def _current(*devices: reports.Device, held: frozenset[str] = frozenset(),
             health: str = states.HEALTH_OK, in_use: bool = False) -> diff.HostInventory:
    """The HostInventory a database would hold after applying ``devices``."""
    current, next_id = {}, iter(range(1, 10_000))
    for dev in devices:
        deps = {}
        for dep in dev.deployables:
            deps[dep.name] = diff.CurrentDeployable(
                id=next(next_id), num_accelerators=dep.num_accelerators,
                attributes={k: (next(next_id), v) for k, v in dep.attributes},
                handles={h.info_key: diff.CurrentHandle(next(next_id), h.attach_type, in_use)
                         for h in dep.attach_handles})
        current[("fake", dev.identity)] = diff.CurrentDevice(
            id=next(next_id), driver="fake", identity=dev.identity,
            fields=diff.device_fields(dev), health=health, held=dev.identity in held,
            cpid_id=next(next_id), deployables=deps)
    drivers = {"fake": diff.CurrentDriver("1", states.DRIVER_INSTALLED, None, len(devices))}
    return diff.HostInventory(host="h", devices=current, drivers=drivers)


def test_unchanged_report_gives_empty_plan():
    devs = (_device("a"), _device("b", handles=3))
    assert diff.diff(_current(*devs), _report(*devs)).is_empty()


def test_new_device_is_added_with_its_driver():
    plan = diff.diff(_current(_device("a")), _report(_device("a"), _device("b")))
    assert [d.identity for _drv, d in plan.add_devices] == ["b"]
    assert [d.name for d in plan.update_drivers] == ["fake"]  # device_count 1 -> 2
    assert plan.add_drivers == []
    assert not plan.delete_devices


def test_vanished_device_is_deleted_unless_held():
    cur = _current(_device("a"), _device("b"))
    plan = diff.diff(cur, _report(_device("a")))
    assert plan.delete_devices == [cur.devices[("fake", "b")].id]
    held = _current(_device("a"), _device("b"), held=frozenset({"b"}))
    plan = diff.diff(held, _report(_device("a")))
    assert plan.delete_devices == []
    assert plan.set_health == [(held.devices[("fake", "b")].id, states.HEALTH_MISSING)]


def test_failed_driver_marks_unknown_and_deletes_nothing():
    cur = _current(_device("a"), _device("b"))
    plan = diff.diff(cur, _report(state=states.DRIVER_FAILED))
    assert sorted(h for _i, h in plan.set_health) == [states.HEALTH_UNKNOWN] * 2
    assert not plan.delete_devices and not plan.add_devices


def test_recovered_device_is_ok_again():
    cur = _current(_device("a"), health=states.HEALTH_UNKNOWN)
    plan = diff.diff(cur, _report(_device("a")))
    assert plan.set_health == [(cur.devices[("fake", "a")].id, states.HEALTH_OK)]


def test_reported_health_and_reasons_are_stored():
    cur = _current(_device("a"), _device("b"))
    sick = dataclasses.replace(_device("a"), health=states.HEALTH_FAILED,
                               health_reasons=("XID 79: fell off the bus",))
    plan = diff.diff(cur, _report(sick, _device("b")))
    dev_id = cur.devices[("fake", "a")].id
    assert plan.set_health == [(dev_id, states.HEALTH_FAILED)]
    assert plan.update_devices == [(dev_id, {"health_reasons":
                                             '["XID 79: fell off the bus"]'})]
    # degraded -> ok clears the reasons too
    cur = _current(sick, health=states.HEALTH_FAILED)
    plan = diff.diff(cur, _report(_device("a")))
    assert plan.set_health == [(cur.devices[("fake", "a")].id, states.HEALTH_OK)]
    assert plan.update_devices == [(cur.devices[("fake", "a")].id, {"health_reasons": "[]"})]


def test_a_changed_explanation_or_capability_rewrites_the_driver_row():
    cur = _current(_device("a"))
    base = _report(_device("a")).drivers[0]
    assert diff.diff(cur, _report(_device("a"))).update_drivers == []
    explained = dataclasses.replace(base, explanation={"checks": [], "expected": None,
                                                       "found": 1, "skipped": []})
    capable = dataclasses.replace(base, capabilities=(reports.CAP_PROGRAM,))
    for drv in (explained, capable):
        report = reports.InventoryReport(host="h", epoch="e", seq=1, drivers=(drv,))
        assert [d.name for d in diff.diff(cur, report).update_drivers] == ["fake"]
    fields = diff.driver_fields(capable)
    assert fields["capabilities"] == '["program"]' and fields["explanation"] is None


def test_uninstalled_driver_removes_its_unheld_devices():
    cur = _current(_device("a"))
    plan = diff.diff(cur, _report(state=states.DRIVER_UNINSTALLED))
    assert plan.delete_devices == [cur.devices[("fake", "a")].id]


def test_changed_fields_update_only_what_changed():
    cur = _current(_device("a"))
    plan = diff.diff(cur, _report(_device("a", model="2330")))
    assert plan.update_devices == [(cur.devices[("fake", "a")].id, {"model": "2330"})]


def test_deployable_count_attributes_and_handles():
    cur = _current(_device("a", num=1, handles=2, attrs={"rc": "PGPU", "trait0": "X"}))
    plan = diff.diff(cur, _report(_device("a", num=3, handles=3,
                                          attrs={"rc": "VGPU", "trait1": "Y"})))
    dep = cur.devices[("fake", "a")].deployables["dep-a"]
    assert plan.update_deployables == [(dep.id, 3)]
    assert plan.update_attributes == [(dep.attributes["rc"][0], "VGPU")]
    assert plan.add_attributes == [(dep.id, "trait1", "Y")]
    assert plan.delete_attributes == [dep.attributes["trait0"][0]]
    assert [h.info_key for _d, _c, h in plan.add_handles] == ['{"function":"2"}']


def test_handle_in_use_is_never_deleted():
    cur = _current(_device("a", handles=2), in_use=True)
    plan = diff.diff(cur, _report(_device("a", handles=1)))
    assert plan.delete_handles == []


def test_duplicate_identity_in_one_report_is_added_once():
    plan = diff.diff(_current(), _report(_device("a"), _device("a")))
    assert len(plan.add_devices) == 1


def test_a_driver_new_to_the_host_is_added_and_a_known_one_updated():
    cur = _current(_device("a"))
    base = _report(_device("a"), _device("b")).drivers[0]      # "fake": 1 -> 2 devices
    other = dataclasses.replace(base, name="other", devices=())
    plan = diff.diff(cur, reports.InventoryReport(host="h", epoch="e", seq=1,
                                                  drivers=(base, other)))
    assert ([d.name for d in plan.add_drivers], [d.name for d in plan.update_drivers]) == (
        ["other"], ["fake"])


def test_driver_missing_from_report_is_forgotten():
    cur = _current()
    cur.drivers["old"] = diff.CurrentDriver("1", states.DRIVER_INSTALLED, None, 0)
    plan = diff.diff(cur, _report())
    assert plan.delete_drivers == ["old"]


def test_conductor_drops_a_late_report_older_than_an_unchanged_one(tmp_path):
    """seq 1 = A (applied), seq 3 = A (unchanged, writes nothing), seq 2 = B arrives late:
    B must not be applied."""
    from acceld.conductor.manager import ConductorManager
    from acceld.db import migration
    from acceld.db.api import Database
    from acceld.objects import accelerators
    from tests import helpers

    db = Database(f"sqlite:///{tmp_path / 'c.sqlite'}")
    migration.upgrade(db)
    mgr = ConductorManager(helpers.make_conf(), db, agents=None)

    def report(seq, *devices):
        r = _report(*devices)
        return reports.InventoryReport(host="h", epoch="e", seq=seq, drivers=r.drivers)

    mgr.report_inventory(report(1, _device("a")).to_dict())
    assert mgr.report_inventory(report(3, _device("a")).to_dict())["changed"] is False
    late = mgr.report_inventory(report(2, _device("a"), _device("b")).to_dict())
    assert late["stale"] is True
    assert [a["name"] for a in accelerators.list_accelerators(db)] == ["d-a"]


def test_conductor_drops_heartbeats_the_broker_held_too_long(tmp_path):
    import time

    from acceld.conductor.manager import ConductorManager
    from acceld.db import migration
    from acceld.db.api import Database
    from acceld.objects import services
    from tests import helpers

    db = Database(f"sqlite:///{tmp_path / 'c.sqlite'}")
    migration.upgrade(db)
    mgr = ConductorManager(helpers.make_conf(conductor={"service_down_time": 60}), db,
                           agents=None)
    mgr.heartbeat("old-host", "acceld-agent", "1", sent_at=time.time() - 600)
    mgr.heartbeat("new-host", "acceld-agent", "1", sent_at=time.time())
    assert [s["host"] for s in services.list_services(db, 60)] == ["new-host"]


# -- health life cycle (diff.HealthRules) --------------------------------------------------

_RULES = diff.HealthRules(deltas=(("ecc", 10), ("xid", 1)))


def _counted(counters: dict[str, int], health: str = states.HEALTH_OK) -> reports.Device:
    return dataclasses.replace(_device(), health=health,
                               health_counters=tuple(sorted(counters.items())))


def test_counters_rising_by_a_threshold_make_a_healthy_device_suspect():
    current = _current(_counted({"ecc": 5, "xid": 2}))
    plan = diff.diff(current, _report(_counted({"ecc": 15, "xid": 2})), _RULES)
    (dev_id, target, why), = plan.lifecycle
    assert target == states.LIFECYCLE_SUSPECT
    assert why == "ecc errors rose by 10 (from 5 to 15; threshold 10)"
    # the new counters are stored: the next report is measured from them
    assert plan.update_devices == [(dev_id, {"health_counters": '{"ecc":15,"xid":2}'})]


def test_a_rise_below_the_threshold_a_reset_counter_and_unwatched_counters_change_nothing():
    current = _current(_counted({"ecc": 5, "xid": 2}))
    for now in ({"ecc": 14, "xid": 2}, {"ecc": 0, "xid": 0}):
        assert diff.diff(current, _report(_counted(now)), _RULES).lifecycle == []
    unwatched = diff.HealthRules(deltas=(("ecc", 0),))
    assert diff.diff(current, _report(_counted({"ecc": 500})), unwatched).lifecycle == []
    assert diff.diff(current, _report(_counted({"ecc": 500}))).lifecycle == []   # no rules


def test_driver_health_turning_degraded_makes_suspect_once_and_only_a_healthy_device():
    current = _current(_device())
    plan = diff.diff(current, _report(_counted({}, states.HEALTH_DEGRADED)), _RULES)
    assert [t for _id, t, _why in plan.lifecycle] == [states.LIFECYCLE_SUSPECT]
    still = _current(_device(), health=states.HEALTH_DEGRADED)      # no new edge
    assert diff.diff(still, _report(_counted({}, states.HEALTH_DEGRADED)), _RULES).lifecycle == []
    quarantined = _current(_counted({"ecc": 0}))
    for dev in quarantined.devices.values():
        dev.lifecycle = states.LIFECYCLE_QUARANTINED
    assert diff.diff(quarantined, _report(_counted({"ecc": 99})), _RULES).lifecycle == []


def test_auto_quarantine_targets_quarantined():
    rules = dataclasses.replace(_RULES, target=states.LIFECYCLE_QUARANTINED)
    plan = diff.diff(_current(_counted({"xid": 0})), _report(_counted({"xid": 1})), rules)
    assert [t for _id, t, _why in plan.lifecycle] == [states.LIFECYCLE_QUARANTINED]
