"""acceld.notify: the payload builders against their schemas, the event table, the docs
generated from them, and the Notifier's promises (never raises, never blocks, nothing
sent without a bus)."""

from __future__ import annotations

import datetime
import json
import re
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from acceld import notify
from acceld.agent.drivers.base import DriverContext
from acceld.agent.drivers.fake import FakeDriver
from acceld.notify import payloads
from tests import helpers

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _valid(payload: payloads.Payload) -> dict[str, Any]:
    body = json.loads(json.dumps(payload.to_primitive()))       # as it crosses the bus
    jsonschema.validate(body, type(payload).schema())
    return body


def _usage(**metrics: float) -> payloads.DeviceUsagePayload:
    return payloads.DeviceUsagePayload(
        host="h1", period_s=10, sampled_at="2026-11-26T14:00:00Z",
        devices=(payloads.DeviceUsage("fake", "0000:3b:00.0", "GPU", metrics),))


def test_the_usage_payload_is_the_contract() -> None:
    body = _valid(_usage(**payloads.usage_metrics({
        "utilization_gpu_percent": 42, "memory_used_bytes": 123, "memory_total_bytes": 456,
        "temperature_c": 55, "power_w": 120.5, "ecc_corrected_total": 3.0,
        "ecc_uncorrected_total": 0.0, "functions_loaded": 1.0})))
    assert body == {
        "acceld_object.name": "DeviceUsagePayload", "acceld_object.namespace": "acceld",
        "acceld_object.version": "1.0",
        "acceld_object.data": {
            "host": "h1", "period_s": 10.0, "sampled_at": "2026-11-26T14:00:00Z",
            "devices": [{"driver": "fake", "identity": "0000:3b:00.0", "type": "GPU",
                         "metrics": {"utilization_percent": 42.0, "memory_used_bytes": 123.0,
                                     "memory_total_bytes": 456.0,
                                     "temperature_celsius": 55.0, "power_watts": 120.5,
                                     "ecc_corrected_total": 3, "ecc_uncorrected_total": 0}}]}}


@pytest.mark.parametrize("metrics", [{"utilization_percent": 101.0}, {"power_watts": -1.0},
                                     {"ecc_corrected_total": 1.5}, {"fan_rpm": "fast"}])
def test_the_usage_schema_refuses_what_the_contract_does_not_say(metrics) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _valid(_usage(**metrics))


def test_a_metric_a_later_minor_version_adds_still_validates() -> None:
    _valid(_usage(fan_rpm=1000.0))      # the contract: metrics may be added, not renamed


def test_a_newer_minor_version_still_validates_an_older_major_does_not() -> None:
    body = _valid(payloads.DriverPayload("h", "fake", "1", "failed", "boom"))
    schema = payloads.DriverPayload.schema()
    jsonschema.validate({**body, "acceld_object.version": "1.7"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**body, "acceld_object.version": "2.0"}, schema)


ARQ = {"uuid": "6f4c0a0e-0b7e-4b8e-9d53-8a1d0c8f8d11", "state": "Bound",
       "device_profile_name": "p", "device_profile_group_id": 0, "project_id": "proj",
       "instance_uuid": "2c3b7d40-0a52-4a0f-9d2e-1f7f9c9c1a01", "hostname": "h1",
       "device_rp_uuid": "9a0c7b9e-0c1d-4f53-8f0b-9d0e0f7b1c22",
       "attach_handle_uuid": "1b2c3d4e-0000-4000-8000-000000000001",
       "attach_handle_type": "PCI", "attach_handle_info": {"bus": "3b"},
       "created_at": None, "updated_at": None}


AT = datetime.datetime(2026, 5, 1, 12, 30, 15, 123456)


def test_every_builder_makes_a_valid_payload() -> None:
    op = {"op_id": "op-1", "host": "h1", "driver": "fake", "identity": "0000:3c:00.0",
          "deployable_uuid": "d1", "device_uuid": "v1", "image_ref": "img"}
    built = [
        _usage(utilization_percent=1.0),
        payloads.DevicePayload(uuid="u1", host="h1", driver="fake", identity="0000:3b:00.0",
                               type="GPU", vendor="10de", model="20b5", name="h1-gpu"),
        payloads.DeviceStatePayload.of({
            "uuid": "u1", "name": "h1-gpu", "host": "h1", "driver": "fake",
            "device_type": "GPU", "state": "error", "health": "ok",
            "last_error": "install failed"}, "installing"),
        payloads.ArqPayload.of(ARQ),
        payloads.ArqDeletedPayload(uuid=ARQ["uuid"], instance_uuid=None),
        payloads.ProgramPayload.of(op),
        payloads.ProgramPayload.of(op, ok=False, error="timed out"),
        payloads.DriverPayload("h1", "nvidia", "", "failed", "cannot load"),
        payloads.DeviceHealthPayload(
            uuid="u1", host="h1", what="lifecycle", before="healthy", after="quarantined",
            reason="ECC", actor="operator", at=AT, holders=(
                {"accelerator_request": ARQ["uuid"], "instance_uuid": None,
                 "state": "Bound"}, {"attached_to": "i1", "attach_type": "instance"})),
    ]
    assert {type(p) for p in built} == set(payloads.payload_classes())
    for payload in built:
        _valid(payload)
    assert payloads.ArqPayload.of(ARQ).data()["attach_handle_uuid"] == ARQ["attach_handle_uuid"]
    assert built[-1].data()["at"] == "2026-05-01T12:30:15Z"     # naive UTC, to the second


def test_the_event_table_is_consistent() -> None:
    for name, event in payloads.EVENTS.items():
        assert re.fullmatch(r"acceld(\.[a-z_]+){2,3}", name), name
        assert event.priority in notify.PRIORITIES
        assert event.when and event.publisher.startswith("acceld-")
    for cls in payloads.payload_classes():
        jsonschema.Draft202012Validator.check_schema(cls.schema())
        assert re.fullmatch(r"[0-9]+\.[0-9]+", cls.VERSION)
        assert f"{cls.NAME} {cls.VERSION}" in payloads.__doc__


def test_docs_hold_the_current_schemas_and_every_event() -> None:
    assert (DOCS / "notification-schemas.json").read_text() == payloads.render_schemas(), (
        "docs/notification-schemas.json is stale: regenerate it with "
        "`python -m acceld.notify > docs/notification-schemas.json`")
    text = (DOCS / "notifications.md").read_text()
    for name in payloads.EVENTS:
        assert f"`{name}`" in text, name


def test_the_fake_drivers_figures_move_and_fit_the_schema(tmp_path) -> None:
    conf = helpers.make_conf(fake_driver={"device_count": 8})
    now = [1000.0]
    drv = FakeDriver(DriverContext(conf=conf, host="h1", state_dir=str(tmp_path),
                                   clock=lambda: now[0]))
    first = drv.stats()
    assert sorted(first) == sorted(d.identity for d in drv.discover())
    assert drv.stats() == first                  # deterministic per device and time
    now[0] += 45.0
    later = drv.stats()
    assert any(later[i]["utilization_percent"] != first[i]["utilization_percent"]
               for i in first)
    types = {d.identity: d.type for d in drv.discover()}
    _valid(payloads.DeviceUsagePayload(
        host="h1", period_s=10.0, sampled_at=payloads.timestamp(),
        devices=tuple(payloads.DeviceUsage("fake", i, types[i], payloads.usage_metrics(s))
                      for i, s in later.items())))
    gpu = next(i for i, t in types.items() if t == "GPU")
    assert set(payloads.usage_metrics(later[gpu])) == set(payloads.METRICS)


class _Broker:
    """An oslo.messaging notifier stand-in: records sends, can block or fail."""

    def __init__(self, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.gate, self.fail = gate, fail

    def is_enabled(self) -> bool:
        return True

    def info(self, ctxt: dict[str, Any], event_type: str, payload: dict[str, Any]) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise ConnectionError("broker gone")
        self.sent.append((event_type, payload))

    error = info


def test_emit_does_not_block_on_a_slow_broker_and_drops_beyond_the_queue() -> None:
    gate = threading.Event()
    broker = _Broker(gate)
    notifier = notify.Notifier(broker, "acceld-agent:h1", max_queued=2)
    payload = payloads.DriverPayload("h1", "fake", "1", "failed", "x")
    for _ in range(5):                                  # the broker holds the first
        notifier.emit("acceld.driver.failure", payload)
    gate.set()
    assert notifier.flush(5)
    assert 2 <= len(broker.sent) <= 3                   # one in flight, two queued
    assert broker.sent[0] == ("acceld.driver.failure", payload.to_primitive())


def test_emit_never_raises() -> None:
    broker = _Broker(fail=True)
    notifier = notify.Notifier(broker, "acceld-agent:h1")
    payload = payloads.DriverPayload("h1", "fake", "1", "failed", "x")
    notifier.emit("acceld.driver.failure", payload)            # the send fails: logged
    notifier.emit("acceld.driver.failure", object())           # bad: logged
    assert notifier.flush(5)
    broker.fail = False
    notifier.emit("acceld.driver.failure", payload)
    assert notifier.flush(5) and len(broker.sent) == 1


def test_nothing_is_sent_until_a_driver_is_named(caplog) -> None:
    """Off by default, bus or not, as in OpenStack; a broker driver without a broker
    sends nothing and says so; ``log`` needs no broker."""
    bus = {"transport_url": "rabbit://u:p@127.0.0.1:1/"}
    assert not notify.make_notifier(helpers.make_conf(), "acceld-agent").enabled
    assert not notify.make_notifier(helpers.make_conf(DEFAULT=bus), "acceld-agent").enabled
    noop = helpers.make_conf(DEFAULT=bus, oslo_messaging_notifications={"driver": ["noop"]})
    assert not notify.make_notifier(noop, "acceld-agent").enabled
    nowhere = helpers.make_conf(oslo_messaging_notifications={"driver": ["messagingv2"]})
    assert not notify.make_notifier(nowhere, "acceld-agent", "h1").enabled
    assert "driver = messagingv2 needs a broker" in caplog.text
    assert "acceld-agent:h1 sends no notifications" in caplog.text
    logged = helpers.make_conf(oslo_messaging_notifications={"driver": ["log"]})
    notifier = notify.make_notifier(logged, "acceld-conductor", "h1")
    assert notifier.enabled and notifier.publisher_id == "acceld-conductor:h1"
    notifier.close()
    brokered = helpers.make_conf(DEFAULT=bus,
                                 oslo_messaging_notifications={"driver": ["messagingv2"]})
    notifier = notify.make_notifier(brokered, "acceld-agent", "h1")
    assert notifier.enabled                 # (nothing emitted: no connection is opened)
    notifier.close()
