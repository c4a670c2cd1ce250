"""Report format: round trip, validation on receipt, digest, version list."""

from __future__ import annotations

import dataclasses
import json
import tempfile

import pytest

from acceld import diff, exception, reports
from acceld.agent.drivers.base import DriverContext
from acceld.agent.drivers.fake import FakeDriver
from acceld.db import models
from tests import helpers


def _fake_report(host: str = "h1", count: int = 4, seq: int = 1) -> reports.InventoryReport:
    conf = helpers.make_conf(fake_driver={"device_count": count})
    devices = FakeDriver(DriverContext(conf, host, tempfile.mkdtemp())).discover()
    return reports.InventoryReport(host=host, epoch="e1", seq=seq, drivers=(
        reports.DriverReport(name="fake", version="1.0.0", devices=tuple(devices)),))


def test_schema_versions_are_guarded():
    # Adding a version means adding a line to the module docstring's history too.
    assert reports.SCHEMA_VERSIONS == (1, 2, 3, 4, 5, 6)
    for version in reports.SCHEMA_VERSIONS:
        assert f"* {version}:" in reports.__doc__


def test_round_trip_is_exact():
    report = _fake_report()
    assert reports.InventoryReport.from_dict(report.to_dict()) == report


def test_compute_node_uuid_round_trips_and_is_content():
    report = dataclasses.replace(_fake_report(),
                                 compute_node_uuid="0b6e7a52-4b1c-4e2a-9d3f-3a6a3e0c5f11")
    assert reports.InventoryReport.from_dict(report.to_dict()) == report
    assert "compute_node_uuid" not in _fake_report().to_dict()
    assert report.content_digest() != _fake_report().content_digest()


def test_digest_ignores_numbering_but_not_content():
    a, b = _fake_report(seq=1), _fake_report(seq=7)
    assert a.content_digest() == b.content_digest()
    assert a.content_digest() != _fake_report(count=5).content_digest()


def test_fake_driver_is_deterministic_per_host():
    assert _fake_report("h1").to_dict() == _fake_report("h1").to_dict()
    assert _fake_report("h1").drivers[0].devices[0].vendor_board_info != \
        _fake_report("h2").drivers[0].devices[0].vendor_board_info
    types = [d.type for d in _fake_report(count=4).drivers[0].devices]
    assert types == ["GPU", "FPGA", "QAT", "NIC"]


@pytest.mark.parametrize("mutate,where", [
    (lambda d: d.pop("host"), "<root>"),
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d["drivers"][0]["devices"][0].update(type="TOASTER"), "drivers/0/devices/0/type"),
    (lambda d: d["drivers"][0].update(state="sleepy"), "drivers/0/state"),
    (lambda d: d.update(extra=1), "<root>"),
    (lambda d: d.update(compute_node_uuid="not-a-uuid"), "compute_node_uuid"),
    (lambda d: d["drivers"][0]["devices"][0]["deployables"][0].update(num_accelerators=-1),
     "drivers/0/devices/0/deployables/0/num_accelerators"),
])
def test_invalid_reports_are_rejected_naming_the_field(mutate, where):
    data = _fake_report().to_dict()
    mutate(data)
    with pytest.raises(exception.InvalidReport, match=where):
        reports.InventoryReport.from_dict(data)


def _v3_report() -> reports.InventoryReport:
    report = _fake_report()
    drv = report.drivers[0]
    sick = dataclasses.replace(drv.devices[0], health="degraded",
                               health_reasons=("3 retired pages",))
    drv = dataclasses.replace(
        drv, devices=(sick, *drv.devices[1:]), capabilities=(reports.CAP_HOST_WORK,),
        explanation={"checks": [{"name": "IOMMU on", "ok": False, "detail": "no groups"}],
                     "expected": 5, "found": 4,
                     "skipped": [{"address": "0000:5e:00.0", "reason": "in use by host"}]})
    return dataclasses.replace(report, drivers=(drv,))


def test_v3_health_explanation_and_capabilities_round_trip():
    report = _v3_report()
    data = report.to_dict()
    assert data["drivers"][0]["devices"][0]["health"] == {"status": "degraded",
                                                           "reasons": ["3 retired pages"]}
    assert data["drivers"][0]["capabilities"] == ["host_work"]
    assert reports.InventoryReport.from_dict(data) == report
    assert report.content_digest() != _fake_report().content_digest()


def test_a_version_2_report_without_the_new_fields_is_still_accepted():
    data = _fake_report().to_dict()
    data["schema_version"] = 2
    for drv in data["drivers"]:
        drv.pop("explanation")
        drv.pop("capabilities")
        for dev in drv["devices"]:
            dev.pop("health")
    parsed = reports.InventoryReport.from_dict(data)
    assert parsed.drivers[0].devices[0].health == "ok"
    assert parsed.drivers[0].explanation is None and parsed.drivers[0].capabilities == ()


@pytest.mark.parametrize("mutate,where", [
    (lambda d: d["drivers"][0]["devices"][0]["health"].update(status="sad"),
     "drivers/0/devices/0/health/status"),
    (lambda d: d["drivers"][0]["devices"][0]["health"].pop("status"),
     "drivers/0/devices/0/health"),
    (lambda d: d["drivers"][0].update(capabilities=["teleport"]), "drivers/0/capabilities/0"),
    (lambda d: d["drivers"][0]["explanation"].pop("found"), "drivers/0/explanation"),
    (lambda d: d["drivers"][0]["explanation"]["checks"][0].update(ok="yes"),
     "drivers/0/explanation"),
])
def test_invalid_v3_fields_are_rejected(mutate, where):
    data = _v3_report().to_dict()
    mutate(data)
    with pytest.raises(exception.InvalidReport, match=where):
        reports.InventoryReport.from_dict(data)


def test_every_capability_fits_the_stored_column():
    # driver_states.capabilities is a VARCHAR (migration 0006): the stored form of a
    # driver declaring every capability there is must fit it, and a capability added to
    # reports.CAPABILITIES is checked here with the rest.
    everything = reports.DriverReport(name="x", version="1", devices=(),
                                      capabilities=tuple(reports.CAPABILITIES))
    stored = diff.driver_fields(everything)["capabilities"]
    assert set(json.loads(stored)) == set(reports.CAPABILITIES)
    assert len(stored) <= models.CAPABILITIES_LENGTH


def test_a_handle_named_by_its_driver_keeps_its_uuid_on_the_wire():
    device = reports.make_device(
        identity="0000:3b:00.0", type="GPU", vendor="10de", model="2236",
        controlpath={"type": "PCI", "info": {}},
        deployables=[{"name": "d", "num_accelerators": 1, "attributes": {},
                      "attach_handles": [{"attach_type": "MDEV", "attach_info": {"a": "b"},
                                          "uuid": "4b20d080-1b54-4048-85b3-a6a62d165c01"}]}])
    report = reports.InventoryReport(host="h1", epoch="e1", seq=1, drivers=(
        reports.DriverReport(name="nvidia_gpu", version="1", devices=(device,)),))
    again = reports.InventoryReport.from_dict(report.to_dict())
    handle = again.drivers[0].devices[0].deployables[0].attach_handles[0]
    assert handle.uuid == "4b20d080-1b54-4048-85b3-a6a62d165c01"
