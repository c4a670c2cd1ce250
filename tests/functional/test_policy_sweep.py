"""Policy sweep: every route of ``acceld.api.router.OPERATIONS`` for every noauth persona.

The routes are read from the route table and their rules from the policy in code, so a
new route (or a new rule) cannot be left out: a route with no rule, a rule with no route
or a rule missing from :data:`ALLOWED` fails here. A request is answered 403 exactly
where the route's rule denies the persona, and never 403 (nor 401 or 5xx) elsewhere;
the requests carry bodies and ids the handlers reject after the policy check, so the
sweep changes nothing.

Personas (``acceld/api/auth.py``, noauth): admin (no token: admin, member, reader);
project member (``user1:proj1``: member, reader); project manager (``mgr1:proj1`` with
``X-Roles: manager``: manager, member, reader); service (``nova:service`` plus
``X-Service-Token``: member, reader, service). noauth cannot make a reader without the
member role, so the reader-only persona is checked against the policy alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import webob
from oslo_config import cfg

from acceld import policies
from acceld.api import auth, router
from tests.functional.gabbi_fixtures import RunningStack

UNKNOWN_UUID = "0b7f3e2c-6a3a-4f59-9f0c-1d2e3f405060"
PATH_VALUES = {"uuid": UNKNOWN_UUID, "acc_spec": "acc_specs", "name": "fake",
               "name_or_uuid": UNKNOWN_UUID}

# Routes that have no policy rule: version discovery, the API description, the fleet
# view's files.
UNPROTECTED = {("GET", "/"), ("GET", "/v1"), ("GET", "/v2"), ("GET", "/openapi.json"),
               ("GET", "/ui"), ("GET", "/ui/fleet.js"), ("GET", "/ui/fleet.css")}

PERSONAS: dict[str, dict[str, str]] = {
    "admin": {},
    "member": {"X-Auth-Token": "user1:proj1"},
    "manager": {"X-Auth-Token": "mgr1:proj1", "X-Roles": "manager"},
    "service": {"X-Auth-Token": "nova:service", "X-Service-Token": "x"},
}
PERSONA_ROLES = {
    "admin": ["admin", "member", "reader"],
    "member": ["member", "reader"],
    "manager": ["manager", "member", "reader"],
    "service": ["member", "reader", "service"],
    "reader": ["reader"],
}

# Who each rule lets in: the persona matrix the policy in code is meant to implement.
ALLOWED: dict[str, set[str]] = {
    "acceld:accelerator:get_all": {"admin", "member", "manager", "service", "reader"},
    "acceld:accelerator:get_one": {"admin", "member", "manager", "service", "reader"},
    "acceld:accelerator:create": {"admin"},
    "acceld:accelerator:update": {"admin"},
    "acceld:accelerator:set_state": {"admin"},
    "acceld:accelerator:health_get": {"admin"},
    "acceld:accelerator:health": {"admin"},
    "acceld:accelerator:maintenance": {"admin"},
    "acceld:accelerator:attach": {"admin", "service"},
    "acceld:accelerator:detach": {"admin", "service"},
    "acceld:service:get_all": {"admin"},
    "acceld:driver:get_all": {"admin"},
    "acceld:driver:action": {"admin"},
    "acceld:accelerator:stats": {"admin"},
    "acceld:backend:get_all": {"admin"},
    "acceld:discover": {"admin"},
    "acceld:placement:get": {"admin"},
    "acceld:placement:sync": {"admin"},
    "acceld:ledger:get_all": {"admin"},
    "acceld:usage:get": {"admin"},
    "acceld:metrics:get": {"admin"},
    # Cyborg v2, new defaults: inventory reads are for managers, profile reads for readers.
    "cyborg:device:get_all": {"admin", "manager"},
    "cyborg:device:get_one": {"admin", "manager"},
    "cyborg:device:enable": {"admin"},
    "cyborg:device:disable": {"admin"},
    "cyborg:deployable:get_all": {"admin", "manager"},
    "cyborg:deployable:get_one": {"admin", "manager"},
    "cyborg:deployable:program": {"admin"},
    "acceld:deployable:program_status": {"admin", "manager"},
    "cyborg:attribute:get_all": {"admin", "manager"},
    "cyborg:attribute:get_one": {"admin", "manager"},
    "cyborg:attribute:create": {"admin"},
    "cyborg:attribute:delete": {"admin"},
    "cyborg:device_profile:get_all": {"admin", "member", "manager", "service", "reader"},
    "cyborg:device_profile:get_one": {"admin", "member", "manager", "service", "reader"},
    "cyborg:device_profile:create": {"admin"},
    "cyborg:device_profile:delete": {"admin"},
    # Accelerator requests: any project member or a service (readers may only read).
    "cyborg:arq:create": {"admin", "member", "manager", "service"},
    "cyborg:arq:get_all": {"admin", "member", "manager", "service", "reader"},
    "cyborg:arq:get_one": {"admin", "member", "manager", "service", "reader"},
    "cyborg:arq:update": {"admin", "member", "manager", "service"},
    "cyborg:arq:delete": {"admin", "member", "manager", "service"},
    "acceld:guest:get_all": {"admin"},
    "acceld:arq:hot_plug_get": {"admin", "member", "manager", "service", "reader"},
    "acceld:arq:hot_plug": {"admin", "member", "manager", "service"},
    "acceld:device_profile:availability": {"admin", "manager"},
    "acceld:arq:dry_run": {"admin", "member", "manager", "service"},
}


def _fill(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], template)


def _rule_id(rule: str) -> str:
    """gabbi's pytest plugin (loaded by test_gabbi) breaks on ':' in any test id."""
    return rule.replace(":", ".")


ROUTE_CASES = sorted((method, path) for path, ops in router.OPERATIONS.items()
                     for method in ops)


def _rule_for(method: str, path: str) -> str | None:
    """The rule whose documented operation is this route (with the same path values)."""
    url = _fill(path)
    names = [rule.name for rule in policies.ROUTE_RULES for op in rule.operations
             if op["method"] == method and _fill(op["path"]) == url]
    assert len(names) <= 1, f"{method} {path} has several rules: {names}"
    return names[0] if names else None


@pytest.fixture(scope="module")
def app() -> Iterator[object]:
    running = RunningStack()
    try:
        yield running.stack.app
    finally:
        running.stop()


def _request(app: object, method: str, path: str, headers: dict[str, str]) -> webob.Response:
    req = webob.Request.blank(_fill(path), method=method, headers=headers)
    if method in ("POST", "PUT", "PATCH"):
        # Valid JSON that every body schema rejects after the policy check (or, for
        # discover, that only asks the agents to look again).
        req.content_type = "application/json"
        req.body = b"{}"
    return req.get_response(app)


# -- the tables agree with each other ----------------------------------------------------------

def test_every_route_has_a_rule() -> None:
    missing = [f"{m} {p}" for m, p in ROUTE_CASES
               if (m, p) not in UNPROTECTED and _rule_for(m, p) is None]
    assert not missing, f"routes without a policy rule: {missing}"


def test_every_rule_has_a_route() -> None:
    routed = {(m, _fill(p)) for m, p in ROUTE_CASES}
    orphans = [f"{rule.name}: {op['method']} {op['path']}" for rule in policies.ROUTE_RULES
               for op in rule.operations if (op["method"], _fill(op["path"])) not in routed]
    assert not orphans, f"rules documenting operations no route serves: {orphans}"


def test_allowed_table_names_every_rule() -> None:
    assert set(ALLOWED) == {rule.name for rule in policies.ROUTE_RULES}


@pytest.mark.parametrize("persona", sorted(PERSONA_ROLES))
@pytest.mark.parametrize("rule", sorted(ALLOWED), ids=_rule_id)
def test_policy_in_code_matches_the_persona_matrix(rule: str, persona: str) -> None:
    conf = cfg.ConfigOpts()
    conf([], project="acceld")
    enforcer = policies.make_enforcer(conf)
    roles = PERSONA_ROLES[persona]
    ctx = auth.RequestContext(user_id="u", project_id="p", roles=roles,
                              is_admin="admin" in roles)
    allowed = enforcer.authorize(rule, {"project_id": "p", "user_id": "u"},
                                 ctx.to_policy_values(), do_raise=False)
    assert allowed == (persona in ALLOWED[rule])


# -- the HTTP sweep ------------------------------------------------------------------------------

@pytest.mark.parametrize("persona", sorted(PERSONAS))
@pytest.mark.parametrize(("method", "path"), ROUTE_CASES,
                         ids=[f"{m} {p}" for m, p in ROUTE_CASES])
def test_route_policy(app: object, method: str, path: str, persona: str) -> None:
    resp = _request(app, method, path, PERSONAS[persona])
    rule = _rule_for(method, path)
    if rule is not None and persona not in ALLOWED[rule]:
        assert resp.status_int == 403, f"{persona} {method} {path}: {resp.status} {resp.text}"
        error = json.loads(resp.text)["errors"][0]
        assert error["status"] == 403
        assert error["code"] == "acceld.forbidden"
        assert rule in error["detail"]
    else:
        assert resp.status_int not in (401, 403), \
            f"{persona} {method} {path}: {resp.status} {resp.text}"
        assert resp.status_int < 500, f"{persona} {method} {path}: {resp.status} {resp.text}"


@pytest.mark.parametrize(("method", "path"),
                         [c for c in ROUTE_CASES if c not in UNPROTECTED],
                         ids=[f"{m} {p}" for m, p in ROUTE_CASES if (m, p) not in UNPROTECTED])
def test_route_malformed_token_is_401(app: object, method: str, path: str) -> None:
    resp = _request(app, method, path, {"X-Auth-Token": "nocolon"})
    assert resp.status_int == 401, f"{method} {path}: {resp.status} {resp.text}"
    error = json.loads(resp.text)["errors"][0]
    assert (error["status"], error["code"]) == (401, "acceld.unauthorized")
