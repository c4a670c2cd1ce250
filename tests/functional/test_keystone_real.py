"""``[api] auth_strategy = keystone`` against a real Keystone: real tokens all the way.

``tests/keystone_server.py`` runs OpenStack Keystone itself (its Flask app, SQLite, Fernet
keys, ``keystone-manage bootstrap``'s roles) and issues project-, domain- and
system-scoped tokens of several personas. acceld's own pipeline (``deploy.make_app``)
validates them through keystonemiddleware's ``auth_token``, which authenticates to that
Keystone as the ``acceld`` service user and calls ``GET /v3/auth/tokens`` for every new
token: nothing is faked between the token and acceld's request context and policy.

Each test runs twice: legacy (``[oslo_policy] enforce_new_defaults`` off) and new (on).
oslo.policy 6 (which nova 34 and placement 16 require) removed ``enforce_scope``:
scope_types are always enforced, and an ``enforce_scope = false`` is silently ignored.

acceld keeps a token's scope in its request context (``system_scope``, ``domain_id``), so
the rules' ``scope_types`` refuse system- and domain-scoped tokens however admin they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import webob
from oslo_policy import opts as policy_opts

from acceld.api import auth, deploy
from acceld.rpc import ConductorClient, LocalTransport
from tests import helpers, keystone_server

MODES = {"legacy": False, "new": True}   # [oslo_policy] enforce_new_defaults = value



@dataclasses.dataclass
class Api:
    app: Any
    seen: list[dict[str, Any]]            # the environ of each request that passed auth_token
    mode: str

    def call(self, method: str, path: str, token: str | None = None,
             service_token: str | None = None, json: Any = None) -> webob.Response:
        req = webob.Request.blank(path, method=method)
        if token:
            req.headers["X-Auth-Token"] = token
        if service_token:
            req.headers["X-Service-Token"] = service_token
        if json is not None:
            req.content_type = "application/json"
            req.json = json
        return req.get_response(self.app)

    def get(self, path: str, token: str | None = None, **kwargs: Any) -> webob.Response:
        return self.call("GET", path, token, **kwargs)

    @property
    def environ(self) -> dict[str, Any]:
        return self.seen[-1]

    @property
    def context(self) -> Any:
        return self.seen[-1]["acceld.context"]


@pytest.fixture(params=list(MODES))
def api(request, ks, sqlite_db, monkeypatch) -> Api:
    seen: list[dict[str, Any]] = []

    class RecordingContext(auth.KeystoneContext):
        def __call__(self, environ, start_response):
            seen.append(environ)
            return super().__call__(environ, start_response)

    monkeypatch.setattr(auth, "KeystoneContext", RecordingContext)
    conf = helpers.make_conf(api={"auth_strategy": "keystone"})
    strict = MODES[request.param]
    policy_opts.set_defaults(conf)                 # registers [oslo_policy] on acceld's conf
    conf.set_override("enforce_new_defaults", strict, group="oslo_policy")
    ks.configure_authtoken(conf)
    app = deploy.make_app(conf, sqlite_db, ConductorClient(LocalTransport()))
    return Api(app, seen, request.param)


def _identity_headers(environ: dict[str, Any]) -> dict[str, str]:
    """The identity headers keystonemiddleware set (it leaves those it cleared, e.g. the
    project headers of a system-scoped token, in the environ as None)."""
    return {k: v for k, v in environ.items()
            if v is not None and k.startswith(("HTTP_X_", "HTTP_OPENSTACK_")) and k not in (
                "HTTP_X_AUTH_TOKEN", "HTTP_X_SERVICE_TOKEN", "HTTP_X_SERVICE_CATALOG")}


# -- the basics ---------------------------------------------------------------------------

def test_member_of_project_a_lists_arqs(api, ks):
    resp = api.get("/v2/accelerator_requests", ks.token("member"))
    assert resp.status_int == 200, resp.text
    assert resp.json == {"arqs": []}
    ctx = api.context
    assert ctx.user_id == ks.personas["member"].user_id
    assert ctx.project_id == ks.projects[keystone_server.PROJECT_A]
    assert sorted(ctx.roles) == ["member", "reader"]      # Keystone's implied role
    assert not ctx.is_admin and ctx.service_roles == []


def test_no_token_and_a_bad_token_are_401(api, ks):
    for token in (None, "not-a-token", ks.token("member") + "x"):
        resp = api.get("/v2/accelerator_requests", token)
        assert resp.status_int == 401, (token, resp.text)
        assert resp.headers["WWW-Authenticate"] == f"Keystone uri=\"{ks.url}\""
    assert api.seen == []


def test_admin_tokens(api, ks):
    for token in (ks.token("admin"), ks.token("project_admin")):
        assert api.get("/v2/accelerator_requests", token).status_int == 200
        assert api.context.is_admin
        assert {"admin", "manager", "member", "reader"} <= set(api.context.roles)
        assert api.get("/v1/services", token).status_int == 200
    resp = api.get("/v1/services", ks.token("member"))
    assert resp.status_int == 403
    assert "acceld:service:get_all" in resp.json["errors"][0]["detail"]


@pytest.mark.parametrize(("persona", "method", "path", "status"), [
    ("reader", "GET", "/v2/accelerator_requests", 200),
    # the legacy defaults OR in Cyborg's project-or-admin bridge: any project token passes
    ("reader", "POST", "/v2/accelerator_requests", {"legacy": 400, "new": 403}),
    ("member", "GET", "/v2/devices", {"legacy": 200, "new": 403}),
    ("manager", "GET", "/v2/devices", 200),
    ("reader", "GET", "/v2/device_profiles", 200),
    ("member", "POST", "/v2/device_profiles", 403),
    ("project_admin", "GET", "/v2/devices", 200),
    ("member_b", "GET", "/v2/accelerator_requests", 200),
    ("service", "POST", "/v2/accelerator_requests", 400),   # the service role passes
])
def test_personas(api, ks, persona, method, path, status):
    resp = api.call(method, path, ks.token(persona), json={} if method == "POST" else None)
    expected = status[api.mode] if isinstance(status, dict) else status
    assert resp.status_int == expected, resp.text


def test_projects_see_only_their_own_arqs(api, ks, sqlite_db):
    _rp, profile = helpers.make_qat_inventory(sqlite_db, handles=1)
    made = api.call("POST", "/v2/accelerator_requests", ks.token("member"),
                    json={"device_profile_name": profile})
    assert made.status_int == 201, made.text
    uuid = made.json["arqs"][0]["uuid"]

    def listed(persona: str) -> list[str]:
        resp = api.get("/v2/accelerator_requests", ks.token(persona))
        assert resp.status_int == 200, resp.text
        return [a["uuid"] for a in resp.json["arqs"]]

    assert listed("member") == [uuid]
    assert listed("reader") == [uuid]
    assert listed("member_b") == []
    assert listed("reader_b") == []
    assert api.get(f"/v2/accelerator_requests/{uuid}", ks.token("member_b")).status_int == 404


# -- service tokens -----------------------------------------------------------------------

def test_service_token_gives_service_roles(api, ks):
    resp = api.get("/v2/accelerator_requests", ks.token("member"),
                   service_token=ks.token("service"))
    assert resp.status_int == 200, resp.text
    assert api.context.service_roles == ["service"]
    assert api.context.project_id == ks.projects[keystone_server.PROJECT_A]
    headers = _identity_headers(api.environ)
    assert headers["HTTP_X_SERVICE_IDENTITY_STATUS"] == "Confirmed"
    assert headers["HTTP_X_SERVICE_ROLES"] == "service"
    assert headers["HTTP_X_SERVICE_USER_ID"] == ks.personas["service"].user_id
    assert headers["HTTP_X_SERVICE_PROJECT_ID"] == ks.projects[keystone_server.SERVICE_PROJECT]


def test_service_token_without_the_service_role_is_refused(api, ks):
    """``service_token_roles_required``: an X-Service-Token whose user lacks ``service``
    gets the request refused by keystonemiddleware."""
    resp = api.get("/v2/accelerator_requests", ks.token("member"),
                   service_token=ks.token("member_b"))
    assert resp.status_int == 401, resp.text


# -- system and domain scope --------------------------------------------------------------

def test_system_scope_headers(api, ks):
    token = ks.issue("system_admin")
    assert token.system and token.project_id is None
    api.get("/v2/accelerator_requests", token.id)
    headers = _identity_headers(api.environ)
    assert headers["HTTP_OPENSTACK_SYSTEM_SCOPE"] == "all"
    assert "HTTP_X_PROJECT_ID" not in headers and "HTTP_X_DOMAIN_ID" not in headers
    assert headers["HTTP_X_USER_ID"] == ks.personas["system_admin"].user_id
    assert set(headers["HTTP_X_ROLES"].split(",")) == {"admin", "manager", "member", "reader"}
    # oslo.context reads it; what acceld keeps of it is the next test's matter
    assert auth.RequestContext.from_environ(api.environ).system_scope == "all"


def test_domain_scope_headers(api, ks):
    token = ks.issue("domain_admin")
    assert token.domain_id == ks.domains[keystone_server.DOMAIN]
    api.get("/v2/accelerator_requests", token.id)
    headers = _identity_headers(api.environ)
    assert headers["HTTP_X_DOMAIN_ID"] == ks.domains[keystone_server.DOMAIN]
    assert headers["HTTP_X_DOMAIN_NAME"] == keystone_server.DOMAIN
    assert "HTTP_X_PROJECT_ID" not in headers and "HTTP_OPENSTACK_SYSTEM_SCOPE" not in headers
    assert auth.RequestContext.from_environ(api.environ).domain_id == token.domain_id


def test_system_scope_reaches_acceld_context(api, ks):
    api.get("/v2/accelerator_requests", ks.token("system_reader"))
    assert api.context.system_scope == "all"


def test_domain_scope_reaches_acceld_context(api, ks):
    api.get("/v2/accelerator_requests", ks.token("domain_reader"))
    assert api.context.domain_id == ks.domains[keystone_server.DOMAIN]


@pytest.mark.parametrize("persona", ["system_admin", "domain_admin"])
def test_scope_types_refuse_non_project_tokens(api, ks, persona):
    """Every acceld rule is ``scope_types=["project"]``: scope is enforced (always, with
    oslo.policy 6), so a system- or domain-scoped token is refused (403), admin role or
    not."""
    resp = api.get("/v2/accelerator_requests", ks.token(persona))
    assert resp.status_int == 403, resp.text
    assert api.context.is_admin          # the role is there; the scope is what refuses it
