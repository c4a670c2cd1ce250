"""Request bodies: at most ``[api] max_request_body_size`` bytes (a 413 naming the limit,
before a declared length is read at all), read once from the server's input and still
readable afterwards (acceld.api.util.read_body)."""

from __future__ import annotations

import io
import json

import pytest
import webob

from acceld.api import deploy
from acceld.db.api import Database
from acceld.rpc import ConductorClient, LocalTransport
from tests import helpers

LIMIT = 1024


class _Unreadable(io.RawIOBase):
    """A server input that fails the test if anything reads it."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001
        raise AssertionError("the body was read")


@pytest.fixture
def app(sqlite_db: Database):
    conf = helpers.make_conf(api={"auth_strategy": "noauth",
                                  "max_request_body_size": LIMIT})
    return deploy.make_app(conf, sqlite_db, ConductorClient(LocalTransport()))


def _post(app, path: str, body: bytes, **environ) -> webob.Response:
    req = webob.Request.blank(path, method="POST", headers={"X-Auth-Token": "admin"})
    req.body = body
    req.content_type = "application/json"
    req.environ.update(environ)
    return req.get_response(app)


def _profile(name: str, size: int) -> bytes:
    """A valid one-profile body padded with spaces to ``size`` bytes."""
    body = json.dumps([{"name": name, "groups": [{"resources:FPGA": "1"}]}]).encode()
    return body + b" " * (size - len(body))


def test_a_body_at_the_limit_is_accepted(app) -> None:
    resp = _post(app, "/v2/device_profiles", _profile("at-limit", LIMIT))
    assert resp.status_int == 201, resp.text
    assert resp.json["name"] == "at-limit"


def test_a_declared_length_over_the_limit_is_413_before_reading(app) -> None:
    resp = _post(app, "/v2/device_profiles", b"", CONTENT_LENGTH=str(LIMIT + 1),
                 **{"wsgi.input": _Unreadable(), "webob.is_body_seekable": False})
    assert resp.status_int == 413, resp.text
    error = resp.json["errors"][0]
    assert error["code"] == "acceld.body_too_large"
    assert str(LIMIT) in error["detail"] and "max_request_body_size" in error["detail"]


def test_a_chunked_body_over_the_limit_is_413(app) -> None:
    body = _profile("chunked", LIMIT + 100)
    req = webob.Request.blank("/v2/device_profiles", method="POST",
                              headers={"X-Auth-Token": "admin",
                                       "Content-Type": "application/json",
                                       "Transfer-Encoding": "chunked"})
    req.environ["wsgi.input"] = io.BytesIO(body)
    req.environ.pop("CONTENT_LENGTH", None)
    req.environ["webob.is_body_seekable"] = False
    req.environ["wsgi.input_terminated"] = True     # a server that decodes chunks says so
    assert req.get_response(app).status_int == 413
    # the same under the limit goes through
    small = _profile("chunked", LIMIT - 10)
    req.environ["wsgi.input"] = io.BytesIO(small)
    req.environ.pop("CONTENT_LENGTH", None)
    resp = req.get_response(app)
    assert resp.status_int == 201, resp.text


def test_a_content_length_that_is_not_a_number_is_400(app) -> None:
    resp = _post(app, "/v2/device_profiles", b"[]", CONTENT_LENGTH="abc")
    assert resp.status_int == 400
    assert "Content-Length" in resp.json["errors"][0]["detail"]
