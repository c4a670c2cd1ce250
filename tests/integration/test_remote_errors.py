"""What a client sees of a conductor failure, over both transports (the in-process bus of
``acceld serve`` and oslo.messaging on a real RabbitMQ, ``acceld api`` + ``acceld
conductor``): a domain error keeps its status and message; any other exception is a 503
that names the service and the method and carries no traceback, SQL or exception text
of the conductor; a conductor nobody runs is a 503 too.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest
import webob

from acceld import exception, rpc
from acceld.api import deploy
from tests import helpers

SECRET = "SELECT password FROM users WHERE name = 'admin'"


class DatabaseBroke(Exception):
    """An exception of a module oslo.messaging does not rebuild (a RemoteError there)."""


class FailingConductor:
    """A conductor endpoint: the v1 create fails as a bug would (with a builtin exception,
    which oslo.messaging rebuilds, for a name starting with "builtin", else with one it
    does not), set-state with a domain error."""

    def create_accelerator(self, name: str, uuid: str | None) -> dict:
        if name.startswith("builtin"):
            raise RuntimeError(f"(pymysql.err.ProgrammingError) {SECRET}")
        raise DatabaseBroke(f"(pymysql.err.ProgrammingError) {SECRET}")

    def set_state(self, uuid: str, state: str) -> dict:
        raise exception.InvalidStateTransition(f"Accelerator {uuid} is installing: "
                                               f"cannot go {state}.")


@pytest.fixture(params=[pytest.param("local", id="local"),
                        pytest.param("rabbit", id="rabbit", marks=pytest.mark.rabbitmq)])
def transport(request: pytest.FixtureRequest) -> Iterator[rpc.Transport]:
    if request.param == "local":
        t: rpc.Transport = rpc.LocalTransport()
    else:
        conf = helpers.make_conf(DEFAULT={
            "transport_url": request.getfixturevalue("isolated_rabbit_url"),
            "rpc_timeout": 5})
        t = rpc.MessagingTransport(conf)
    yield t
    t.close()


@pytest.fixture
def app(transport, sqlite_db):
    conf = helpers.make_conf(api={"auth_strategy": "noauth"})
    return deploy.make_app(conf, sqlite_db, rpc.ConductorClient(transport))


def _call(app, method: str, path: str, body: dict) -> webob.Response:
    req = webob.Request.blank(path, method=method, headers={"X-Auth-Token": "admin"})
    req.content_type = "application/json"
    req.body = json.dumps(body).encode()
    return req.get_response(app)


def _served(transport: rpc.Transport) -> rpc.Server:
    server = transport.serve(rpc.CONDUCTOR_TOPIC, f"cond-{uuid.uuid4().hex[:8]}",
                             FailingConductor())
    server.start()
    return server


@pytest.mark.parametrize("name", ["builtin", "other"])
def test_a_conductor_failure_is_a_clean_503(app, transport, name):
    server = _served(transport)
    try:
        resp = _call(app, "POST", "/v1/accelerators", {"name": name})
    finally:
        server.stop()
    assert resp.status_int == 503, resp.text
    (err,) = resp.json["errors"]
    assert err["code"] == "acceld.remote.failed"
    # the service (with its server name where the server words it) and the method
    assert re.fullmatch(rf"{rpc.CONDUCTOR_TOPIC}\.\S+ failed to complete "
                        r"create_accelerator; the cause is in its log\.", err["detail"])
    for leak in ("SELECT", "Traceback", "pymysql", "RuntimeError", "DatabaseBroke", 'File "'):
        assert leak not in resp.text


def test_a_domain_error_keeps_its_status_and_message(app, transport):
    server = _served(transport)
    uuid_ = str(uuid.uuid4())
    try:
        resp = _call(app, "PUT", f"/v1/accelerators/{uuid_}/state", {"state": "ready"})
    finally:
        server.stop()
    assert resp.status_int == 409, resp.text
    (err,) = resp.json["errors"]
    assert err["detail"] == f"Accelerator {uuid_} is installing: cannot go ready."
    assert "Traceback" not in resp.text


def test_no_conductor_is_a_503_naming_no_internals(app):
    resp = _call(app, "POST", "/v1/accelerators", {"name": "x"})
    assert resp.status_int == 503, resp.text
    (err,) = resp.json["errors"]
    assert err["code"] == "acceld.host.unreachable"
    assert rpc.CONDUCTOR_TOPIC in err["detail"] and "Traceback" not in resp.text
