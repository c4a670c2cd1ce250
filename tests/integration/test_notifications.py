"""Versioned notifications and the usage broadcast, end to end on a real RabbitMQ.

``acceld conductor`` + ``agent`` + ``api`` (PostgreSQL, RabbitMQ) run with the fake
driver; an oslo.messaging notification listener on the ``notifications`` topic takes
everything they send while the test walks a device and an ARQ through their life
cycles, and every payload is validated against its schema (acceld.notify.payloads, as
docs/notification-schemas.json publishes it).
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import jsonschema
import oslo_messaging
import pytest

from acceld.notify import payloads
from tests import helpers
from tests.integration import procs as p

pytestmark = [pytest.mark.rabbitmq, pytest.mark.postgresql]

V2 = {"OpenStack-API-Version": "accelerator 2.3"}
NOVA = {**V2, "X-Service-Token": "nova"}     # noauth: a service token's "service" role
PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


class Received:
    """The listener's endpoint: every notification, whatever its priority."""

    def __init__(self) -> None:
        self.all: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.arrived: queue.Queue[str] = queue.Queue()
        for priority in PRIORITIES:
            setattr(self, priority, self._taker(priority))

    def _taker(self, priority: str) -> Any:
        def take(ctxt: dict[str, Any], publisher_id: str, event_type: str,
                 payload: dict[str, Any], metadata: dict[str, Any]) -> None:
            with self._lock:
                self.all.append({"priority": priority, "publisher_id": publisher_id,
                                 "event_type": event_type, "payload": payload})
        return take

    def of(self, event_type: str) -> list[dict[str, Any]]:
        with self._lock:
            return [n for n in self.all if n["event_type"] == event_type]


@pytest.fixture
def listener(isolated_rabbit_url: str) -> Iterator[Received]:
    """Listening before acceld starts: the topic's queues exist before the first send."""
    conf = helpers.make_conf(DEFAULT={"transport_url": isolated_rabbit_url})
    transport = oslo_messaging.get_notification_transport(conf)
    received = Received()
    server = oslo_messaging.get_notification_listener(
        transport, [oslo_messaging.Target(topic="notifications")], [received],
        executor="threading")
    server.start()
    try:
        yield received
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


def _call(api: p.Api, method: str, path: str, body: Any = None, status: int = 200,
          headers: dict[str, str] = V2) -> Any:
    resp = api.send(method, path, body, headers=headers)
    assert resp.status_code == status, f"{method} {path}: {resp.status_code} {resp.text}"
    return resp.json() if resp.content else None


def test_notifications_on_rabbitmq_match_their_schemas(acceld_procs, make_db_url,
                                                       isolated_rabbit_url, listener):
    dep = p.start_three_process(acceld_procs, db_url=make_db_url("postgresql"),
                                transport_url=isolated_rabbit_url, host=p.unique_host(),
                                device_count=4, notifications={"usage_period": 0.5})
    inventory = p.wait_inventory(dep, 4)
    gpu = next(r for r in inventory if r["device_type"] == "GPU")
    assert dep.api.set_state(gpu["uuid"], "ready").json()["state"] == "ready"
    rp = next(d["rp_uuid"] for d in _call(dep.api, "GET", "/v2/deployables")["deployables"]
              if d["device_id"] == _device_id(dep.api, gpu["uuid"]))

    _call(dep.api, "POST", "/v2/device_profiles",
          [{"name": "notified", "groups": [{"resources:PGPU": "1"}]}], status=201)
    (arq,) = _call(dep.api, "POST", "/v2/accelerator_requests",
                   {"device_profile_name": "notified"}, status=201)["arqs"]
    instance = str(uuid.uuid4())
    _call(dep.api, "PATCH", "/v2/accelerator_requests",
          helpers.bind_patch(arq["uuid"], dep.host, rp, instance), status=202, headers=NOVA)
    _call(dep.api, "PATCH", "/v2/accelerator_requests",
          {arq["uuid"]: [{"op": "remove", "path": "/hostname"}]}, status=202, headers=NOVA)
    _call(dep.api, "DELETE", f"/v2/accelerator_requests/{arq['uuid']}", status=204,
          headers=NOVA)
    p.write_control(dep.control_file, device_count=4, fail=True)   # the driver fails

    wanted = {"acceld.device.discovered": 4, "acceld.device.state_change": 2,
              "acceld.arq.created": 1, "acceld.arq.bound": 1, "acceld.arq.unbound": 1,
              "acceld.arq.deleted": 1, "acceld.driver.failure": 1, "acceld.device.usage": 2}
    p.wait_until(lambda: all(len(listener.of(e)) >= n for e, n in wanted.items()), 20,
                 f"the notifications {wanted}")

    for note in listener.all:
        event = payloads.EVENTS[note["event_type"]]
        jsonschema.validate(note["payload"], event.payload.schema())
        assert note["priority"] == event.priority
        assert note["publisher_id"].split(":")[0] in event.publisher
        assert note["publisher_id"].endswith(f":{dep.host}")

    data = [n["payload"]["acceld_object.data"] for n in listener.of("acceld.device.discovered")]
    assert sorted(d["uuid"] for d in data) == sorted(r["uuid"] for r in inventory)
    assert [(n["payload"]["acceld_object.data"]["previous_state"],
             n["payload"]["acceld_object.data"]["state"])
            for n in listener.of("acceld.device.state_change")] == [
        ("inactive", "installing"), ("installing", "ready")]
    arq_notes = {e: listener.of(e)[0]["payload"]["acceld_object.data"] for e in (
        "acceld.arq.created", "acceld.arq.bound", "acceld.arq.unbound", "acceld.arq.deleted")}
    assert {d["uuid"] for d in arq_notes.values()} == {arq["uuid"]}
    assert arq_notes["acceld.arq.bound"]["instance_uuid"] == instance
    assert arq_notes["acceld.arq.bound"]["device_rp_uuid"] == rp
    assert arq_notes["acceld.arq.unbound"]["state"] == "Unbound"
    assert listener.of("acceld.driver.failure")[0]["publisher_id"] == f"acceld-agent:{dep.host}"

    usage = [n["payload"]["acceld_object.data"] for n in listener.of("acceld.device.usage")]
    first = usage[0]
    assert (first["host"], first["period_s"]) == (dep.host, 0.5)
    assert sorted(d["type"] for d in first["devices"]) == ["FPGA", "GPU", "NIC", "QAT"]
    gpu_metrics = next(d["metrics"] for d in first["devices"] if d["type"] == "GPU")
    assert set(gpu_metrics) == set(payloads.METRICS)


def _device_id(api: p.Api, device_uuid: str) -> int:
    """The v2 device's id (what its deployables point at)."""
    return int(_call(api, "GET", f"/v2/devices/{device_uuid}")["id"])
