"""The API's plain-WSGI pieces that replaced webob's: responses (``reply.Reply``, for
handlers and errors) and request ids (``request_id.new_id``), held to what webob and
``uuid.uuid4`` gave."""

from __future__ import annotations

import types
import uuid
from typing import Any

import pytest
import webob
import webob.exc

from acceld import jsoncodec
from acceld.api import errors, request_id, util


def _serve(app: Any, method: str = "GET") -> tuple[str, list[tuple[str, str]], bytes]:
    seen: list[Any] = []
    body = b"".join(app({"REQUEST_METHOD": method}, lambda s, h, e=None: seen.extend((s, h))))
    return seen[0], seen[1], body


def test_body_response_carries_type_length_and_extra_headers() -> None:
    status, headers, body = _serve(util.body_response(b'{"a": 1}', 201, {"ETag": '"3"'}))
    assert status == "201 Created"
    assert headers == [("Content-Type", "application/json"), ("Content-Length", "8"),
                       ("ETag", '"3"')]
    assert body == b'{"a": 1}'


def test_head_gets_the_headers_of_get_and_no_body() -> None:
    reply = util.json_response({"devices": []})
    get_status, get_headers, get_body = _serve(reply)
    status, headers, body = _serve(reply, "HEAD")
    assert (status, headers) == (get_status, get_headers)
    assert get_body == b'{"devices": []}' and body == b""
    assert dict(headers)["Content-Length"] == str(len(get_body))


@pytest.mark.parametrize(("status", "line", "length"), [
    (201, "201 Created", [("Content-Length", "0")]),
    (202, "202 Accepted", [("Content-Length", "0")]),
    (204, "204 No Content", []),          # no Content-Length where no body may be
])
def test_empty_response(status: int, line: str, length: list[tuple[str, str]]) -> None:
    got = _serve(util.empty_response(status, {"Location": "http://h/v1/x"}))
    assert got == (line, [*length, ("Location", "http://h/v1/x")], b"")


def test_request_ids_are_random_version_4_uuids() -> None:
    ids = {request_id.new_id() for _ in range(2000)}
    assert len(ids) == 2000
    for rid in ids:
        assert request_id._GLOBAL_ID.match(rid), rid     # the form callers may send back
        parsed = uuid.UUID(rid[len("req-"):])
        assert str(parsed) == rid[len("req-"):]
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
    # all four variant digits occur: the variant nibble keeps the random bits it may
    assert {rid[len("req-") + 19] for rid in ids} == set("89ab")


def test_an_error_is_a_reply_with_its_json_body_and_extra_headers() -> None:
    environ = webob.Request.blank("/v2/x", environ={"openstack.request_id": "req-1"}).environ
    status, headers, body = _serve(errors.render(environ, 413, "too big",
                                                 "acceld.body_too_large", {"Retry-After": "1"}))
    assert status == "413 Request Entity Too Large"
    assert headers == [("Content-Type", "application/json"),
                       ("Content-Length", str(len(body))), ("Retry-After", "1")]
    assert body == (b'{"errors": [{"status": 413, "code": "acceld.body_too_large", '
                    b'"title": "Request Entity Too Large", "detail": "too big", '
                    b'"request_id": "req-1"}]}')


@pytest.mark.parametrize("status", [413, 416, 422])
def test_status_lines_are_webobs_on_every_python(status: int) -> None:
    # http.HTTPStatus renamed 413 and 422 in Python 3.13 and words 416 differently
    line = _serve(util.empty_response(status))[0]
    assert line == f"{status} {webob.exc.status_map[status].title}"


class _ReadOnce:
    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        assert self.reads == 1, "the server's input was read twice"
        return self.data


def test_read_body_reads_the_input_once() -> None:
    source = _ReadOnce(b'{"a": 1}')
    api = types.SimpleNamespace(max_request_body_size=1024)
    req = webob.Request.blank("/v1/discover", method="POST", environ={
        "wsgi.input": source, "CONTENT_LENGTH": "8",
        "acceld.app": types.SimpleNamespace(api=api)})
    assert util.read_body(req) == b'{"a": 1}'
    assert req.body == b'{"a": 1}' and source.reads == 1    # webob sees it too
    req.environ["wsgi.input"] = _ReadOnce(b"")
    req.environ["wsgi.input"].reads = 1                     # any read now fails
    assert util.read_body(req) == b'{"a": 1}'               # answered, not read again


def test_the_context_carries_the_request_ids_a_caller_sent_a_good_one_of() -> None:
    """request_id.begin notes a new id, and the caller's X-OpenStack-Request-ID when it is
    well formed; the context noauth builds carries both (oslo.log shows them)."""
    from acceld.api import auth
    sent = request_id.new_id()
    for inbound, expected in ((sent, sent), ("req-not-a-uuid", None), (None, None)):
        environ = {} if inbound is None else {"HTTP_X_OPENSTACK_REQUEST_ID": inbound}
        own = request_id.begin(environ)
        assert own != sent and environ["openstack.request_id"] == own
        assert auth.noauth(environ) is None
        ctx = environ["acceld.context"]
        assert ctx.request_id == own and ctx.global_request_id == expected
        assert ctx.is_admin and ctx.project_id == auth.DEFAULT_PROJECT
    # a token noauth refuses: the pipeline's head sends the 401 with the request id
    from acceld.api import deploy, metrics
    limits = types.SimpleNamespace(max_uri_length=8192, max_header_size=65536)
    state = types.SimpleNamespace(conf=types.SimpleNamespace(api=limits),
                                  metrics=metrics.ApiMetrics(None, 60))
    front = deploy.Front(lambda environ, start: [], state, None)
    refused = {"HTTP_X_AUTH_TOKEN": "nocolon", "PATH_INFO": "/v2/devices",
               "REQUEST_METHOD": "GET"}
    seen: list[Any] = []
    front(refused, lambda s, h, e=None: seen.extend((s, h)))
    assert seen[0] == "401 Unauthorized"
    assert (request_id.HEADER, refused["openstack.request_id"]) in seen[1]


def test_a_context_for_a_request_reads_as_oslos_constructor_makes_it() -> None:
    """RequestContext.for_request sets only what a request knows; everything oslo.context
    and oslo.log read of it (policy values, the dict, the logging values, attributes) is
    what RequestContext(...) with the same arguments gives, and it is the thread's
    current context as that one would be."""
    from oslo_context import context as oslo

    from acceld.api import auth
    args = {"user_id": "u1", "project_id": "p1", "roles": ["member", "reader", "service"],
            "service_roles": ["service"], "is_admin": False, "request_id": "req-1",
            "global_request_id": "req-2"}
    for given in (args, dict(args, global_request_id=None, is_admin=True)):
        lean = auth.RequestContext.for_request(**given)
        assert oslo.get_current() is lean
        full = auth.RequestContext(**given)
        assert lean.to_policy_values() == full.to_policy_values()
        assert lean.to_dict() == full.to_dict()
        assert lean.get_logging_values() == full.get_logging_values()
        assert vars(full).keys() >= vars(lean).keys()
        for name in vars(full):
            assert getattr(lean, name) == getattr(full, name), name
        assert util.creds_key(lean) == util.creds_key(full)
    # no list is shared through the class: each context holds the lists it was given
    assert not any(isinstance(v, list) for v in vars(auth.RequestContext).values())


def test_the_policy_values_carry_is_admin() -> None:
    """Cyborg's legacy bridges test ``is_admin:True``; a process where another service
    registered an ``is_admin`` check that reads it from the values (Nova's does) must find
    it too, not a KeyError."""
    import warnings

    from acceld.api import auth
    for admin in (True, False):
        ctx = auth.RequestContext.for_request("u1", "p1", ["member"], [], admin, None, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert ctx.to_policy_values()["is_admin"] is admin


def test_json_is_written_as_json_dumps_writes_it() -> None:
    import datetime
    import json
    plain = [{"a": [1, 2.5, None, True, False], "b": "é ☃ \u0000 \"q\"", "c": {}},
             [float("nan"), float("inf"), -0.0, 10 ** 30], "plain", 7, None,
             {3: "int key", "nested": [{"x": [[]]}]}]
    dated = {"when": datetime.datetime(2026, 11, 24, 5, 1, 2),
             "aware": datetime.datetime(2026, 11, 24, 5, 1, 2, 7, tzinfo=datetime.UTC)}
    dumps = jsoncodec.encoder()
    for value in plain:
        assert dumps(value) == json.dumps(value)
    for value in [*plain, dated]:
        assert util.json_bytes(value) == json.dumps(value, default=util._default).encode()
    with pytest.raises(TypeError, match="cannot serialize"):
        util.json_bytes({"x": object()})
    with pytest.raises(TypeError):
        dumps(dated)


@pytest.mark.parametrize("body", [
    b'{"a": [1, "\\u00e9"]}', '[{"name": "\u00e9\u2603"}]'.encode(),
    '{"a": 1}'.encode("utf-16"), '{"a": 1}'.encode("utf-16-le"), '[1]'.encode("utf-32-be"),
    b'\xef\xbb\xbf{"a": 1}', b' {"a": 1}', b'"text"', b"null", b"3"])
def test_a_json_body_is_read_as_json_loads_reads_it(body: bytes) -> None:
    import json
    assert jsoncodec.loads(body) == json.loads(body)
