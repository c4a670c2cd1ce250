"""Nova's ``accelerator-request-bound`` external events (contract 3.2 step 3, 10 item 4).

A loopback HTTP server stands in for Nova's compute API; acceld's ``[nova]`` points at it
with the ``admin_token`` plugin. Every body it receives is validated against the schema
Nova 34.0.0 itself applies to ``POST /os-server-external-events`` at 2.82.
"""

from __future__ import annotations

import http.server
import json
import threading
import uuid as uuidlib
import warnings
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

with warnings.catch_warnings():  # nova's imports pull in eventlet (not patched: no warning)
    warnings.simplefilter("ignore")
    from nova.api.openstack.compute.schemas import server_external_events as nova_schema

from acceld import exception
from acceld.clients import nova
from acceld.conductor.binding import Binder
from acceld.db.api import Database
from acceld.objects import arqs
from tests import helpers
from tests.stack import Stack, wait_for

PROJECT = "proj1"


class Receiver:
    """Nova's API endpoint on 127.0.0.1: records each request, answers ``reply``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: tuple[int, Any] = (200, None)   # None: echo the events, code 200
        self.hold: threading.Event | None = None    # set: answer (each waits at most 10 s)
        self.answered = 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 10

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.requests.append({"path": self.path, "body": body,
                                          "headers": dict(self.headers)})
                if receiver.hold is not None:
                    receiver.hold.wait(10)
                status, reply = receiver.reply
                if reply is None:
                    reply = {"events": [dict(e, code=200) for e in body["events"]]}
                data = json.dumps(reply).encode()
                receiver.answered += 1      # before the client can have the answer
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v2.1"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def events(self) -> list[list[dict[str, str]]]:
        """Each request's events, after checking it is what Nova 34.0.0 accepts."""
        out = []
        for req in self.requests:
            assert req["path"] == "/v2.1/os-server-external-events"
            assert req["headers"]["OpenStack-API-Version"] == "compute 2.82"
            assert req["headers"]["X-Auth-Token"] == "x"
            jsonschema.validate(req["body"], nova_schema.create_v282,
                                format_checker=jsonschema.FormatChecker())
            out.append(req["body"]["events"])
        return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _nova_conf(url: str, **extra: Any) -> dict[str, Any]:
    # retries as configured by default, without their production back-off
    return {"auth_type": "admin_token", "endpoint": url, "token": "x",
            "connect_retry_delay": 0.01, "status_code_retry_delay": 0.01, **extra}


def _patch(uuids: list[str], rp_uuid: str, instance: str) -> dict[str, dict[str, str]]:
    return {u: {"hostname": "host1", "device_rp_uuid": rp_uuid, "instance_uuid": instance,
                "project_id": PROJECT} for u in uuids}


def _stack(db: Database, receiver: Receiver | None) -> Stack:
    groups = {"nova": _nova_conf(receiver.url)} if receiver is not None else {}
    return Stack(db, hosts=(), **groups)


def _sent(stack: Stack) -> None:
    """The conductor sends Nova's events from a thread of its own: wait until it did."""
    assert stack.conductor._binder.wait_sent(timeout=10)


def test_all_bound_sends_one_request_completed_per_arq(db: Database,
                                                       receiver: Receiver) -> None:
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=2, units=2)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        instance = str(uuidlib.uuid4())
        stack.conductor.arq_bind(_patch(uuids, rp_uuid, instance), PROJECT)
        _sent(stack)
        events = receiver.events()
        assert len(events) == 1
        assert sorted(events[0], key=lambda e: e["tag"]) == [
            {"name": "accelerator-request-bound", "server_uuid": instance, "tag": u,
             "status": "completed"} for u in sorted(uuids)]
    finally:
        stack.stop()


def test_a_bind_does_not_wait_on_novas_answer(db: Database, receiver: Receiver) -> None:
    """Nova's API holds the events request; the bind has answered all the same, and the
    event still reaches Nova once it answers (a stop sends what was resolved)."""
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        receiver.hold = threading.Event()
        stack.conductor.arq_bind(_patch(uuids, rp_uuid, str(uuidlib.uuid4())), PROJECT)
        # had the bind waited for Nova, the held request would have been answered (after
        # its 10 s) before the bind returned
        assert receiver.answered == 0
        assert arqs.get(db, uuids[0], project_id=None)["state"] == "Bound"
        wait_for(lambda: receiver.requests, timeout=10)
        receiver.hold.set()
    finally:
        stack.stop()
    assert receiver.answered == 1
    assert [e["tag"] for e in receiver.events()[0]] == uuids


def test_one_bind_failed_is_failed(db: Database, receiver: Receiver) -> None:
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=2)   # one handle short
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        instance = str(uuidlib.uuid4())
        with pytest.raises(exception.NoFreeAttachHandle):
            stack.conductor.arq_bind(_patch(uuids, rp_uuid, instance), PROJECT)
        states = {u: arqs.get(db, u, project_id=None)["state"] for u in uuids}
        assert sorted(states.values()) == ["BindFailed", "Bound"]
        _sent(stack)
        events = receiver.events()
        assert len(events) == 1
        assert {e["tag"]: e["status"] for e in events[0]} == {
            u: "completed" if s == "Bound" else "failed" for u, s in states.items()}
        assert {e["server_uuid"] for e in events[0]} == {instance}
    finally:
        stack.stop()


def test_multi_status_with_422_is_tolerated(db: Database, receiver: Receiver,
                                            caplog: pytest.LogCaptureFixture) -> None:
    stack = _stack(db, receiver)
    try:
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=2, units=2)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        instance = str(uuidlib.uuid4())
        receiver.reply = (207, {"events": [
            {"name": "accelerator-request-bound", "server_uuid": instance, "tag": u,
             "status": "completed", "code": 422} for u in uuids]})
        with caplog.at_level("INFO", logger="acceld.clients.nova"):
            stack.conductor.arq_bind(_patch(uuids, rp_uuid, instance), PROJECT)
            _sent(stack)
        assert len(receiver.events()) == 1
        assert "422" in caplog.text
        assert "could not tell Nova" not in caplog.text
        assert all(arqs.get(db, u, project_id=None)["state"] == "Bound" for u in uuids)
    finally:
        stack.stop()


def test_client_errors_are_typed(receiver: Receiver) -> None:
    conf = helpers.make_conf(nova=_nova_conf(receiver.url))
    client = nova.NovaClient(nova.make_adapter(conf))
    event = nova.BoundEvent(str(uuidlib.uuid4()), str(uuidlib.uuid4()), nova.COMPLETED)
    receiver.reply = (207, {"events": [{"server_uuid": event.server_uuid,
                                        "tag": event.arq_uuid, "code": 404}]})
    with pytest.raises(nova.ClientError):
        client.send_external_events([event])
    receiver.reply = (503, {})
    with pytest.raises(nova.ServerError):
        client.send_external_events([event])
    receiver.reply = (404, {})
    with pytest.raises(nova.ClientError):
        client.send_external_events([event])
    # the 503 was sent again three times ([nova] status_code_retries); the 4xx were not
    assert len(receiver.events()) == 1 + 4 + 1
    gone = Receiver()
    gone.close()
    unreachable = nova.NovaClient(nova.make_adapter(
        helpers.make_conf(nova=_nova_conf(gone.url))))
    with pytest.raises(nova.ServerError):
        unreachable.send_external_events([event])


class _StuckWork:
    """Host work that blocks until released: a bind that does not finish in time."""

    def __init__(self) -> None:
        self.release_bind = threading.Event()
        self.released: list[str] = []

    def prepare(self, handle: dict[str, Any]) -> None:
        assert self.release_bind.wait(30)

    def release(self, handle: dict[str, Any]) -> None:
        self.released.append(handle["uuid"])


def test_bind_timeout_sends_failed(db: Database, receiver: Receiver) -> None:
    conf = helpers.make_conf(nova=_nova_conf(receiver.url))
    work = _StuckWork()
    binder = Binder(db, host_work=work, notifier=nova.NovaClient(nova.make_adapter(conf)),
                    bind_timeout=0.3)
    binder.start_watch()
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    instance = str(uuidlib.uuid4())
    errors: list[BaseException] = []

    def bind() -> None:
        try:
            binder.bind(_patch([uuid], rp_uuid, instance), PROJECT)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    thread = threading.Thread(target=bind, daemon=True)
    thread.start()
    try:
        wait_for(lambda: receiver.requests, timeout=10)
        assert receiver.events() == [[{"name": "accelerator-request-bound",
                                       "server_uuid": instance, "tag": uuid,
                                       "status": "failed"}]]
        assert arqs.get(db, uuid, project_id=None)["state"] == "BindFailed"
    finally:
        work.release_bind.set()
        thread.join(30)
        binder.stop_watch()
    # the late bind loses its CAS, frees its handle, and Nova hears nothing more
    assert len(errors) == 1 and isinstance(errors[0], exception.AccelDError)
    assert arqs.get(db, uuid, project_id=None)["state"] == "BindFailed"
    assert len(work.released) == 1
    assert len(receiver.requests) == 1


def test_no_notification_without_nova(db: Database, receiver: Receiver) -> None:
    stack = _stack(db, None)
    try:
        assert not stack.conf.nova.auth_type
        rp_uuid, profile = helpers.make_qat_inventory(db, handles=1, units=1)
        uuids = [a["uuid"] for a in arqs.create(db, profile, PROJECT)]
        stack.conductor.arq_bind(_patch(uuids, rp_uuid, str(uuidlib.uuid4())), PROJECT)
        assert arqs.get(db, uuids[0], project_id=None)["state"] == "Bound"
        assert receiver.requests == []
    finally:
        stack.stop()
