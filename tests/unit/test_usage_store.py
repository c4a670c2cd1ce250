"""The usage collector's store (acceld/collector/usage.py): latest sample per device,
devices leave when their host stops listing them, when their host falls silent for
``stale_periods`` periods, and beyond ``max_devices`` (least recently heard first)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from acceld.collector import usage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _dev(identity: str, util: float = 10.0) -> dict:
    return {"driver": "fake", "identity": identity, "type": "GPU",
            "metrics": {"utilization_percent": util}}


def _payload(host: str, *devices: dict, period: float = 10.0) -> dict:
    return {"acceld_object.name": "DeviceUsagePayload", "acceld_object.version": "1.3",
            "acceld_object.namespace": "acceld",
            "acceld_object.data": {"host": host, "period_s": period,
                                   "sampled_at": "2026-11-26T14:00:00Z",
                                   "devices": list(devices)}}


def _keys(store: usage.UsageStore) -> list[tuple[str, str, str]]:
    return [key for key, _sample in store.current()]


def test_the_latest_sample_wins_and_an_unlisted_device_leaves_at_once():
    store = usage.UsageStore(100, 3.0, Clock())
    assert store.accept(_payload("h1", _dev("a", 10), _dev("b", 20)))
    assert store.accept(_payload("h1", _dev("a", 30)))
    (((host, driver, identity), sample),) = store.current()
    assert (host, driver, identity, sample.metrics) == ("h1", "fake", "a",
                                                        {"utilization_percent": 30})


def test_a_silent_host_leaves_after_its_stale_periods():
    clock = Clock()
    store = usage.UsageStore(100, 3.0, clock)
    store.accept(_payload("h1", _dev("a"), period=10.0))
    store.accept(_payload("h2", _dev("a"), period=60.0))
    clock.now += 30.0
    assert _keys(store) == [("h1", "fake", "a"), ("h2", "fake", "a")]
    clock.now += 0.5                                     # h1: 30.5 s > 3 x 10 s
    assert _keys(store) == [("h2", "fake", "a")]
    clock.now += 200.0
    assert _keys(store) == []


def test_beyond_max_devices_the_least_recently_heard_leave():
    store = usage.UsageStore(3, 3.0, Clock())
    store.accept(_payload("h1", _dev("a"), _dev("b")))
    store.accept(_payload("h2", _dev("c")))
    store.accept(_payload("h1", _dev("a"), _dev("b")))   # h1 heard again
    store.accept(_payload("h3", _dev("d")))
    assert sorted(_keys(store)) == [("h1", "fake", "a"), ("h1", "fake", "b"),
                                    ("h3", "fake", "d")]


def test_invalid_payloads_are_refused_and_counted():
    store = usage.UsageStore(10, 3.0, Clock())
    bad_version = dict(_payload("h1", _dev("a")), **{"acceld_object.version": "2.0"})
    negative = _payload("h1", {**_dev("a"), "metrics": {"power_watts": -1}})
    bad_time = _payload("h1", _dev("a"))
    bad_time["acceld_object.data"]["sampled_at"] = "yesterday"
    for payload in (bad_version, negative, bad_time, "text", None):
        assert not store.accept(payload)
    assert (store.accepted, store.rejected, store.current()) == (0, 5, [])


def test_the_exposition_parses_with_units_converted():
    store = usage.UsageStore(10, 3.0, Clock())
    store.accept(_payload("h1", {"driver": "nvidia", "identity": "0000:3b:00.0",
                                 "type": "GPU", "metrics": {"utilization_percent": 50,
                                                            "ecc_uncorrected_total": 2,
                                                            "future_key": 1.0}}))
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(usage.registry(store)).decode())}
    (util,) = families["acceld_device_utilization_ratio"].samples
    assert util.value == 0.5 and util.labels == {
        "host": "h1", "driver": "nvidia", "identity": "0000:3b:00.0", "type": "GPU"}
    assert families["acceld_device_ecc_uncorrected_errors"].type == "counter"
    (ecc,) = families["acceld_device_ecc_uncorrected_errors"].samples
    assert (ecc.name, ecc.value) == ("acceld_device_ecc_uncorrected_errors_total", 2)
    assert families["acceld_device_power_watts"].samples == []
