"""Versioned notifications and the usage broadcast, end to end on a real RabbitMQ.

acceld's conductor, agent (fake driver) and API run as ``acceld conductor|agent|api``
build them (``acceld.wiring``: each with its own notifier, publisher ``<service>:<host>``)
on oslo.messaging over RabbitMQ, in this process (three processes would add tens of
seconds of start-up on a loaded machine and test nothing more here). An oslo.messaging
notification listener on the ``notifications`` topic takes everything they send while
the test walks a device and an ARQ through their life cycles, and every payload is
validated against its schema (acceld.notify.payloads, as docs/notification-schemas.json
publishes it).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import jsonschema
import oslo_messaging
import pytest
import webob

from acceld import rpc, wiring
from acceld.db import migration
from acceld.notify import payloads
from tests import helpers
from tests.stack import wait_for

pytestmark = pytest.mark.rabbitmq

V2 = {"OpenStack-API-Version": "accelerator 2.3"}
NOVA = {**V2, "X-Service-Token": "nova"}     # noauth: a service token's "service" role
PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


class Received:
    """The listener's endpoint: every notification, whatever its priority."""

    def __init__(self) -> None:
        self.all: list[dict[str, Any]] = []
        self._lock = threading.Lock()
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


class Acceld:
    """Conductor + agent + API of one host on the bus at ``url``, as ``acceld conductor``,
    ``acceld agent`` and ``acceld api`` build them."""

    def __init__(self, url: str, db_url: str) -> None:
        self.host = f"itest-{uuid.uuid4().hex[:10]}"
        self.conf = helpers.make_conf(
            DEFAULT={"transport_url": url, "host": self.host, "rpc_timeout": 5},
            agent={"report_interval": 0.5, "retry_interval": 0.2},
            conductor={"operation_wait": 5.0},
            fake_driver={"device_count": 4},
            notifications={"usage_period": 0.5},
            oslo_messaging_notifications={"driver": ["messagingv2"]},
            database={"connection": db_url})
        self.control_file = os.path.join(self.conf.state_path, "fake-control.json")
        self.conf.set_override("control_file", self.control_file, group="fake_driver")
        self.db = wiring.database(self.conf, services=True)
        migration.upgrade(self.db)
        self.transport = rpc.MessagingTransport(self.conf)
        self.conductor, self._cond_server = wiring.start_conductor(self.conf, self.db,
                                                                   self.transport)
        self.agent, self._agent_server = wiring.start_agent(self.conf, self.transport)
        self.app = wiring.api_app(self.conf, self.db, self.transport)

    def fail_driver(self) -> None:
        with open(self.control_file, "w", encoding="utf-8") as f:
            json.dump({"device_count": 4, "fail": True}, f)

    def stop(self) -> None:
        for stop in (self.agent.stop, self._agent_server.stop, self._cond_server.stop,
                     self.conductor.stop, self.transport.close):
            stop()


@pytest.fixture
def acceld(isolated_rabbit_url: str, make_db_url: Any, listener: Received) -> Iterator[Acceld]:
    """Started after the listener: the topic's queues exist before the first send."""
    running = Acceld(isolated_rabbit_url, make_db_url("sqlite"))
    try:
        yield running
    finally:
        running.stop()


def _call(app: Any, method: str, path: str, body: Any = None, status: int = 200,
          headers: dict[str, str] = V2) -> Any:
    req = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        req.content_type = "application/json"
        req.body = json.dumps(body).encode()
    resp = req.get_response(app)
    assert resp.status_int == status, f"{method} {path}: {resp.status} {resp.text}"
    return resp.json if resp.body else None


def _inventory(app: Any) -> list[dict[str, Any]] | None:
    found = _call(app, "GET", "/v1/accelerators")["accelerator"]
    return found if len(found) == 4 else None


def test_notifications_on_rabbitmq_match_their_schemas(acceld: Acceld,
                                                       listener: Received) -> None:
    app = acceld.app
    inventory = wait_for(lambda: _inventory(app), timeout=20)
    gpu = next(r for r in inventory if r["device_type"] == "GPU")
    assert _call(app, "PUT", f"/v1/accelerators/{gpu['uuid']}/state",
                 {"state": "ready"})["state"] == "ready"
    # the fake driver's first device is its GPU, deployable <host>_fake_3b
    rp = next(d["rp_uuid"] for d in _call(app, "GET", "/v2/deployables")["deployables"]
              if d["name"] == f"{acceld.host}_fake_3b")

    _call(app, "POST", "/v2/device_profiles",
          [{"name": "notified", "groups": [{"resources:PGPU": "1"}]}], status=201)
    (arq,) = _call(app, "POST", "/v2/accelerator_requests",
                   {"device_profile_name": "notified"}, status=201)["arqs"]
    instance = str(uuid.uuid4())
    _call(app, "PATCH", "/v2/accelerator_requests",
          helpers.bind_patch(arq["uuid"], acceld.host, rp, instance), status=202,
          headers=NOVA)
    # a quarantine of the bound GPU (its guest is told, in holders) and its release
    health = f"/v1/accelerators/{gpu['uuid']}/health"
    _call(app, "POST", health, {"action": "quarantine", "reason": "ECC errors"})
    _call(app, "POST", health, {"action": "release"})
    _call(app, "PATCH", "/v2/accelerator_requests",
          {arq["uuid"]: [{"op": "remove", "path": "/hostname"}]}, status=202, headers=NOVA)
    _call(app, "DELETE", f"/v2/accelerator_requests/{arq['uuid']}", status=204,
          headers=NOVA)
    acceld.fail_driver()

    wanted = {"acceld.device.discovered": 4, "acceld.device.state_change": 2,
              "acceld.arq.created": 1, "acceld.arq.bound": 1, "acceld.arq.unbound": 1,
              "acceld.arq.deleted": 1, "acceld.driver.failure": 1, "acceld.device.usage": 2,
              "acceld.device.health_change": 2}
    wait_for(lambda: all(len(listener.of(e)) >= n for e, n in wanted.items()), timeout=20)

    for note in listener.all:
        event = payloads.EVENTS[note["event_type"]]
        jsonschema.validate(note["payload"], event.payload.schema())
        assert note["priority"] == event.priority
        assert note["publisher_id"].split(":")[0] in event.publisher
        assert note["publisher_id"].endswith(f":{acceld.host}")

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
    assert listener.of("acceld.driver.failure")[0]["publisher_id"] == f"acceld-agent:{acceld.host}"

    steps = [n["payload"]["acceld_object.data"]
             for n in listener.of("acceld.device.health_change")]
    assert [(d["uuid"], d["before"], d["after"]) for d in steps] == [
        (gpu["uuid"], "healthy", "quarantined"), (gpu["uuid"], "quarantined", "healthy")]
    assert steps[0]["reason"] == "ECC errors"
    assert steps[0]["holders"] == [{"accelerator_request": arq["uuid"],
                                    "instance_uuid": instance, "state": "Bound"}]
    lines = _call(app, "GET", f"/v1/ledger?device_uuid={gpu['uuid']}")["ledger"]
    assert [(r["kind"], r["from_state"], r["to_state"]) for r in lines
            if r["kind"] == "health"] == [("health", "healthy", "quarantined"),
                                          ("health", "quarantined", "healthy")]

    usage = [n["payload"]["acceld_object.data"] for n in listener.of("acceld.device.usage")]
    first = usage[0]
    assert (first["host"], first["period_s"]) == (acceld.host, 0.5)
    assert sorted(d["type"] for d in first["devices"]) == ["FPGA", "GPU", "NIC", "QAT"]
    gpu_metrics = next(d["metrics"] for d in first["devices"] if d["type"] == "GPU")
    assert set(gpu_metrics) == set(payloads.METRICS)

