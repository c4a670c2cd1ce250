"""The OpenAPI document (acceld/api/openapi.py): valid OpenAPI 3.1, one operation per
route, the schemas the router validates each request with, served as docs/openapi.json holds it."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import jsonschema
import pytest
import webob
from openapi_spec_validator import validate as validate_openapi

from acceld import validation
from acceld.api import errors, openapi, router, util
from acceld.api.schemas import v1, v2

DOC_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_document_is_valid_openapi_3_1():
    doc = openapi.document()
    assert doc["openapi"].startswith("3.1")
    validate_openapi(doc)


def test_docs_openapi_json_is_up_to_date():
    assert DOC_FILE.read_text(encoding="utf-8") == openapi.text(), (
        "docs/openapi.json is stale: regenerate it with "
        "`.venv/bin/python -m acceld.api.openapi > docs/openapi.json`")


def test_every_route_and_method_is_an_operation_and_nothing_else():
    # (the document must not drop or add any operation of the route table)
    doc = openapi.document()
    assert {(path, method.upper()) for path, item in doc["paths"].items()
            for method in item} == \
        {(path, method) for path, ops in router.OPERATIONS.items() for method in ops}


# -- the route table is where requests are validated ------------------------------------

PATH_VALUES = {"uuid": "8e45a2ea-5364-4b0d-a252-bf8becaa606e", "acc_spec": "acc_specs",
               "name": "fake", "name_or_uuid": "fake"}


def _operations():
    for path, methods in router.OPERATIONS.items():
        for method, op in methods.items():
            yield pytest.param(path, method, op, id=f"{method} {path}")


def _url(path: str, query: str = "") -> str:
    return re.sub(r"{(\w+)}", lambda m: PATH_VALUES[m.group(1)], path) + query


@pytest.mark.parametrize("path, method, op", list(_operations()))
def test_each_handler_takes_what_the_router_gives_it(path, method, op):
    """The path parameters, ``body`` where the operation has a body schema and ``query``
    where its query schema names parameters: no more (a handler cannot ask for an input
    its operation does not validate) and no less."""
    given = dict.fromkeys(re.findall(r"{(\w+)}", path), "x")
    if op.body is not None:
        given["body"] = {}
    if op.query is not None and "properties" in op.query:
        given["query"] = {}
    inspect.signature(op.handler).bind(None, **given)
    taken = set(inspect.signature(op.handler).parameters) - {"req"}
    assert taken <= set(given) | {"uuid"}     # update_arqs serves with and without {uuid}


@pytest.fixture
def recording_app(sqlite_db, monkeypatch):
    """The API with every handler replaced by one that records its arguments."""
    from acceld.api import deploy, reply
    from tests import helpers
    calls: list[dict] = []

    def record(req, **kwargs):
        calls.append(kwargs)
        return reply.empty_response(204)

    for methods in router.OPERATIONS.values():
        for method, op in methods.items():
            monkeypatch.setitem(methods, method, dataclasses.replace(op, handler=record))
    return deploy.make_app(helpers.make_conf(), sqlite_db, conductor=None), calls


def _send(app, method, url, body=None, **headers):
    req = webob.Request.blank(url, method=method, headers=headers)
    if body is not None:
        req.body, req.content_type = body, "application/json"
    return req.get_response(app)


@pytest.mark.parametrize("path, method, op", [
    p for p in _operations() if p.values[2].query is not None])
def test_the_router_refuses_a_query_its_schema_refuses_before_the_handler(
        recording_app, path, method, op):
    app, calls = recording_app
    resp = _send(app, method, _url(path, "?no_such_parameter=1"), b"{}")
    assert resp.status_int == 400, resp.body
    assert json.loads(resp.body)["errors"][0]["detail"].startswith("Invalid query")
    assert calls == []


@pytest.mark.parametrize("path, method, op", [
    p for p in _operations() if p.values[2].body is not None])
def test_the_router_refuses_a_body_its_schema_refuses_before_the_handler(
        recording_app, path, method, op):
    app, calls = recording_app
    assert not validation.conforms("text", op.body)
    resp = _send(app, method, _url(path), b'"text"')
    assert resp.status_int == 400, resp.body
    assert "'text' is not of type" in json.loads(resp.body)["errors"][0]["detail"]
    assert calls == []


def test_the_handler_gets_the_validated_query_and_body(recording_app):
    app, calls = recording_app
    assert _send(app, "GET", "/v2/devices?type=GPU&limit=2").status_int == 204
    assert _send(app, "GET", "/v2/devices/" + PATH_VALUES["uuid"].upper()).status_int == 204
    bare = {"deployable_id": 1, "key": "k", "value": "v"}
    for body in (bare, {"attribute": bare}):       # the Op's wrapper is taken off
        assert _send(app, "POST", "/v2/attributes", json.dumps(body).encode()).status_int \
            == 204
    assert _send(app, "POST", "/v1/discover").status_int == 204      # optional: {}
    assert calls == [{"query": {"type": "GPU", "limit": "2"}}, {"uuid": PATH_VALUES["uuid"]},
                     {"body": bare}, {"body": bare}, {"body": {}}]


def test_the_policy_is_checked_before_the_request_is_validated(recording_app):
    """An unauthorised caller is told 403, whatever its request holds."""
    app, calls = recording_app
    member = {"X-Auth-Token": "user1:proj1"}
    for method, url, body in (("POST", "/v2/device_profiles?x=1", b'"text"'),
                              ("PUT", "/v1/accelerators/" + PATH_VALUES["uuid"] + "/specs",
                               b'"text"')):
        assert _send(app, method, url, body, **member).status_int == 403
    assert calls == []


def test_an_unknown_sub_resource_is_a_404_before_the_body_is_read(recording_app):
    app, calls = recording_app
    resp = _send(app, "PUT", "/v1/accelerators/" + PATH_VALUES["uuid"] + "/specs", b'"text"')
    assert resp.status_int == 404
    assert json.loads(resp.body)["errors"][0]["detail"] == \
        "Unknown accelerator sub-resource 'specs'."
    assert calls == []


@pytest.mark.parametrize("body, detail", [
    ([], "Only one device profile allowed per POST request for now."),
    ([{"name": "a"}, {"name": "b"}], "Only one device profile allowed per POST request for now."),
    ({"name": "a"}, "Invalid body: {'name': 'a'} is not of type 'array'"),
    ([{"name": "a"}], "Invalid body: 'groups' is a required property"),
    ([{"name": "a b", "groups": [{"resources:GPU": "1"}]}], "Invalid body field 'name': "),
])
def test_a_profile_post_is_worded_as_cyborg_words_it(body, detail):
    """One list of one profile: another count is Cyborg's sentence, and a field of the
    profile is named as within it (not "0/name")."""
    with pytest.raises(errors.HTTPError) as info:
        util.validate(body, v2.ONE_PROFILE, "body")
    assert info.value.status == 400
    assert info.value.detail.startswith(detail)


# -- what the document says is what the schemas say ---------------------------------------

def test_query_parameters_are_the_query_schema_properties():
    doc = openapi.document()
    op = doc["paths"]["/v1/accelerators"]["get"]
    query = {p["name"]: p for p in op["parameters"] if p.get("in") == "query"}
    assert set(query) == set(v1.LIST_QUERY["properties"])
    assert query["marker"]["schema"] is not None
    assert query["marker"]["schema"] == v1.LIST_QUERY["properties"]["marker"]
    deleted = doc["paths"]["/v2/device_profiles"]["delete"]["parameters"]
    assert [(p["name"], p["required"]) for p in deleted if p.get("in") == "query"] == \
        [("value", True)]


def test_v2_operations_take_the_microversion_and_answer_its_headers():
    doc = openapi.document()
    op = doc["paths"]["/v2/devices"]["get"]
    assert {"$ref": "#/components/parameters/Microversion"} in op["parameters"]
    assert "OpenStack-API-Maximum-Version" in op["responses"]["200"]["headers"]
    assert op["responses"]["406"]["$ref"] == "#/components/responses/V2Error"
    versions = doc["components"]["parameters"]["Microversion"]["schema"]["enum"]
    assert "accelerator 2.3" in versions and "accelerator latest" in versions
    assert "406" not in doc["paths"]["/v1/accelerators"]["get"]["responses"]


def test_public_routes_need_no_token_and_the_others_may_answer_401():
    doc = openapi.document()
    for path in ("/", "/v2", "/openapi.json"):
        assert doc["paths"][path]["get"]["security"] == []
        assert "401" not in doc["paths"][path]["get"]["responses"]
    assert "security" not in doc["paths"]["/v2/devices"]["get"]
    assert "401" in doc["paths"]["/v2/devices"]["get"]["responses"]
    assert {"token": []} in doc["security"]


def test_the_error_schema_describes_the_error_renderer():
    doc = openapi.document()
    env = webob.Request.blank("/").environ
    env["openstack.request_id"] = "req-1"
    body = json.loads(errors.render(env, 409, "busy", "acceld.x").body)
    jsonschema.validate(body, doc["components"]["schemas"]["Error"])
    body["errors"][0].pop("detail")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, doc["components"]["schemas"]["Error"])


def test_request_body_schemas_validate_as_the_handler_does():
    """The body the document describes for POST /v2/attributes (bare, or wrapped as
    openstacksdk sends it) is what the handler accepts."""
    doc = openapi.document()
    schema = doc["paths"]["/v2/attributes"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    bare = {"deployable_id": 1, "key": "k", "value": "v"}
    for body in (bare, {"attribute": bare}):
        jsonschema.validate(body, schema)
        assert validation.conforms(body if "key" in body else body["attribute"], v2.ATTRIBUTE)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"attribute": {"key": "k"}}, schema)


@pytest.mark.parametrize("path", ["/openapi.json", "/accelerator/openapi.json"])
def test_the_api_serves_the_document_without_authentication(path, sqlite_db):
    from acceld.api import deploy
    from tests import helpers
    app = deploy.make_app(helpers.make_conf(), sqlite_db, conductor=None)
    req = webob.Request.blank(path, headers={"X-Auth-Token": "a-token-noauth-refuses"})
    resp = req.get_response(app)
    assert resp.status_int == 200
    assert resp.content_type == "application/json"
    assert resp.body == openapi.body()
    assert json.loads(resp.body)["openapi"] == openapi.OPENAPI_VERSION


def test_the_router_refuses_a_route_without_a_policy_rule(monkeypatch):
    """Policy is checked by the router for every route but the public ones: a route added
    without a documented rule stops the app from being built, never serves unchecked."""
    router.Router()                                  # the real table is complete
    unguarded = dict(router.OPERATIONS,
                     **{"/v1/unguarded": {"GET": router.Op(lambda req: None, 200, None)}})
    monkeypatch.setattr(router, "OPERATIONS", unguarded)
    with pytest.raises(RuntimeError, match=r"routes without a policy rule: \[\('/v1/unguarded'"):
        router.Router()
