"""The OpenAPI document (acceld/api/openapi.py): valid OpenAPI 3.1, one operation per
route, the schemas its handler validates with, served as docs/openapi.json holds it."""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import webob
from openapi_spec_validator import validate as validate_openapi

from acceld.api import openapi, router, util
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
    # (router.ROUTES is derived from the one table, OPERATIONS; the document must not
    # drop or add any of its operations)
    doc = openapi.document()
    assert {(path, method.upper()) for path, item in doc["paths"].items()
            for method in item} == \
        {(path, method) for path, methods in router.ROUTES.items() for method in methods}


# -- the map names the schemas the handlers validate with ------------------------------------

_SCHEMA_MODULES = {"schema": (v1, v2)}


def _calls(func: object) -> dict[str, list[str]]:
    """The schema constants a handler passes to ``util.query`` ("query"), to
    ``util.json_body`` ("json_body") and to ``util.validate``/``util.conforms``
    ("validate"), in its own body and in the helpers of its module it calls."""
    module = inspect.getmodule(func)
    found: dict[str, list[str]] = {"query": [], "json_body": [], "validate": []}
    seen: set[str] = set()

    def visit(fn: object) -> None:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            if (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                    and callee.value.id == "util" and len(node.args) >= 2):
                kind = {"query": "query", "json_body": "json_body", "validate": "validate",
                        "conforms": "validate"}.get(callee.attr)
                arg = node.args[1]
                if kind and isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
                    found[kind].append(arg.attr)
                elif kind == "json_body" and isinstance(arg, ast.Constant):
                    found[kind].append(repr(arg.value))
            elif isinstance(callee, ast.Name) and callee.id not in seen:
                helper = getattr(module, callee.id, None)
                if inspect.isfunction(helper) and helper.__module__ == module.__name__:
                    seen.add(callee.id)
                    visit(helper)

    visit(func)
    return found


def _name(module: object, schema: dict | None) -> str | None:
    if schema is None:
        return None
    names = [name for name, value in vars(module).items() if value is schema]
    assert names, f"a schema of the map is not a constant of {module.__name__}"
    return names[0]


def _operations():
    for path, methods in router.ROUTES.items():
        for method, handler in methods.items():
            yield pytest.param(path, method, handler, id=f"{method} {path}")


@pytest.mark.parametrize("path, method, handler", list(_operations()))
def test_the_map_names_the_schemas_the_handler_validates_with(path, method, handler):
    op = openapi.OPERATIONS[path][method]
    module = v2 if path.startswith("/v2") else v1
    calls = _calls(handler)
    # the query schema is the one util.query gets (None: the handler reads no query)
    assert calls["query"] == ([_name(module, op.query)] if op.query is not None else [])
    # the body schema is the one util.json_body gets, or, where json_body takes anything
    # (None, ANY_JSON) and the handler then validates, the one it validates a body with
    if op.body is None:
        assert calls["json_body"] == []
        return
    assert len(calls["json_body"]) == 1
    body = _name(module, op.body)
    if calls["json_body"] != [body]:
        assert calls["json_body"][0] in ("None", "ANY_JSON")
        assert body in calls["validate"]


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
    from acceld.api import errors
    body = json.loads(errors.render(webob.Request(env), 409, "busy", "acceld.x").body)
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
        assert util.conforms(body if "key" in body else body["attribute"], v2.ATTRIBUTE)
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
    unguarded = dict(router.ROUTES, **{"/v1/unguarded": {"GET": lambda req: None}})
    monkeypatch.setattr(router, "ROUTES", unguarded)
    with pytest.raises(RuntimeError, match=r"routes without a policy rule: \[\('/v1/unguarded'"):
        router.Router()
