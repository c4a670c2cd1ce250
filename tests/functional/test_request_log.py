"""Logging is oslo.log's: every line logged while a request is served carries that
request's id (its oslo.context context is current from the head of the pipeline on), a
public route's and a refused request's included, and the access line is in the OpenStack
services' form behind oslo.log's context part."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
import webob
from oslo_log import formatters

from acceld.api import deploy
from acceld.rpc import ConductorClient, LocalTransport
from tests import helpers


@pytest.fixture
def served(sqlite_db) -> Iterator[tuple[object, io.StringIO]]:
    """The API and a stream that gets what oslo.log's formatter writes of its lines."""
    conf = helpers.make_conf()
    app = deploy.make_app(conf, sqlite_db, ConductorClient(LocalTransport()))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatters.ContextFormatter(project="acceld", config=conf,
                                                     datefmt=conf.log_date_format))
    logger = logging.getLogger("acceld.api")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield app, stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _lines(stream: io.StringIO, req_id: str) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if req_id in line]


@pytest.mark.parametrize(("path", "token", "status", "identity"), [
    ("/v2/devices", "admin", 200, "admin default"),      # an authenticated caller
    ("/v2", "nocolon", 200, "- -"),                      # a public route: no caller
    ("/v2/devices", "nocolon", 401, "- -"),              # refused by noauth
])
def test_the_access_line_carries_the_request_id(served, path, token, status, identity):
    app, stream = served
    resp = webob.Request.blank(path, headers={"X-Auth-Token": token},
                               environ={"REMOTE_ADDR": "127.0.0.1"}).get_response(app)
    assert resp.status_int == status
    req_id = resp.headers["x-openstack-request-id"]
    [line] = _lines(stream, req_id)
    assert f" INFO acceld.api.access [None {req_id} {identity} " in line, line
    assert f'] 127.0.0.1 "GET {path}" status: {status} len: ' in line, line


def test_a_line_logged_inside_a_request_carries_its_id(served):
    app, stream = served
    # the deprecated bare version is logged by the microversion negotiation, mid-request
    resp = webob.Request.blank("/v2/devices", headers={
        "OpenStack-API-Version": "2.1"}).get_response(app)
    assert resp.status_int == 200
    req_id = resp.headers["x-openstack-request-id"]
    lines = _lines(stream, req_id)
    assert len(lines) == 2, lines
    assert "WARNING acceld.api.microversion" in lines[0] and "without a service type" in lines[0]
    # a global request id sent by the caller is the first field of the context part
    caller = "req-0f4c5d0e-1111-4222-8333-944445555666"
    resp = webob.Request.blank("/v2/devices", headers={
        "X-OpenStack-Request-ID": caller}).get_response(app)
    [line] = _lines(stream, resp.headers["x-openstack-request-id"])
    assert f"[{caller} {resp.headers['x-openstack-request-id']} admin default" in line
