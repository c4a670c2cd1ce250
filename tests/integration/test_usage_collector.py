"""`acceld metrics-collector`'s collector on the real RabbitMQ: usage notifications
published with an oslo.messaging Notifier (driver messagingv2, as the agents publish
them) become device gauges on its HTTP ``/metrics``, parsed with prometheus-client's
parser; other event types are ignored, a malformed payload is counted and dropped, and a
device its host stops listing leaves."""

from __future__ import annotations

import urllib.request
import uuid

import oslo_messaging
import pytest
from prometheus_client.parser import text_string_to_metric_families

from acceld import wiring
from acceld.collector import usage
from tests.helpers import make_conf
from tests.stack import wait_for


def _payload(host: str, devices: list[dict], version: str = "1.0") -> dict:
    return {"acceld_object.name": "DeviceUsagePayload",
            "acceld_object.namespace": "acceld",
            "acceld_object.version": version,
            "acceld_object.data": {"host": host, "period_s": 10.0,
                                   "sampled_at": "2026-11-26T14:00:00Z",
                                   "devices": devices}}


GPU = {"driver": "fake", "identity": "0000:3b:00.0", "type": "GPU",
       "metrics": {"utilization_percent": 42.0, "memory_used_bytes": 123,
                   "memory_total_bytes": 456, "temperature_celsius": 55.0,
                   "power_watts": 120.5, "ecc_corrected_total": 3,
                   "ecc_uncorrected_total": 0}}
QAT = {"driver": "fake", "identity": "0000:3d:00.0", "type": "QAT",
       "metrics": {"utilization_percent": 7.5}}


@pytest.fixture
def running(isolated_rabbit_url):
    topic = f"notifications-{uuid.uuid4().hex[:8]}"
    conf = make_conf(DEFAULT={"transport_url": isolated_rabbit_url},
                     metrics={"collector_port": 0},
                     oslo_messaging_notifications={"topics": [topic]})
    collector = wiring.UsageCollector(conf)
    collector.start()
    transport = oslo_messaging.get_notification_transport(conf)
    notifier = oslo_messaging.Notifier(transport, publisher_id="acceld-agent:hostA",
                                       driver="messagingv2", topics=[topic])
    try:
        yield collector, notifier
    finally:
        collector.stop()
        transport.cleanup()


def _scrape(port: int) -> dict[str, dict[tuple, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = s.labels
            key = (labels.get("host"), labels.get("identity")) if "host" in labels else (
                labels.get("outcome"),)
            out.setdefault(s.name, {})[key] = s.value
    return out


def test_usage_notifications_become_device_gauges(running):
    collector, notifier = running
    seen = {}

    def published_and_seen() -> bool:
        notifier.info({}, usage.EVENT_TYPE, _payload("hostA", [GPU, QAT]))
        seen.update(_scrape(collector.port))
        return ("hostA", "0000:3b:00.0") in seen.get("acceld_device_utilization_ratio", {})

    wait_for(published_and_seen, timeout=60, interval=0.5)
    gpu = ("hostA", "0000:3b:00.0")
    assert seen["acceld_device_utilization_ratio"][gpu] == pytest.approx(0.42)
    assert seen["acceld_device_memory_used_bytes"][gpu] == 123
    assert seen["acceld_device_memory_total_bytes"][gpu] == 456
    assert seen["acceld_device_temperature_celsius"][gpu] == 55.0
    assert seen["acceld_device_power_watts"][gpu] == 120.5
    assert seen["acceld_device_ecc_corrected_errors_total"][gpu] == 3
    assert seen["acceld_device_usage_sampled_timestamp_seconds"][gpu] == 1795701600.0
    # QAT measures only its utilisation: no other gauge for it
    qat = ("hostA", "0000:3d:00.0")
    assert seen["acceld_device_utilization_ratio"][qat] == pytest.approx(0.075)
    assert qat not in seen["acceld_device_memory_used_bytes"]

    # another event type, then a malformed usage payload, then hostA without its QAT:
    # once the last is seen, the two before it have been taken (one queue, in order)
    notifier.info({}, "acceld.device.health", _payload("hostZ", [GPU]))
    notifier.info({}, usage.EVENT_TYPE, _payload("hostB", [GPU], version="2.0"))
    notifier.info({}, usage.EVENT_TYPE, _payload("hostA", [GPU]))
    wait_for(lambda: qat not in _scrape(collector.port)["acceld_device_utilization_ratio"],
             timeout=30, interval=0.2)
    final = _scrape(collector.port)
    assert set(final["acceld_device_utilization_ratio"]) == {gpu}
    assert final["acceld_usage_notifications_total"][("rejected",)] == 1
    assert final["acceld_usage_notifications_total"][("accepted",)] >= 2
