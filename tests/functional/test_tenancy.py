"""Tenancy with real Keystone tokens: no project sees or moves another's requests, and a
token's scope is honoured, under the legacy and the new policy defaults.

Keystone itself runs (``tests/keystone_server.py``); acceld validates its tokens through
keystonemiddleware (``[api] auth_strategy = keystone``) in front of a real conductor and
agent (``tests.stack.Stack``). Two modes: ``new`` (``[oslo_policy]
enforce_new_defaults = true``, acceld's default) and ``legacy`` (``false``, what upstream
Cyborg forces: its deprecated project-or-admin bridges are ORed in). oslo.policy 6 has no
``enforce_scope`` any more: scope types are always enforced, so system- and
domain-scoped tokens are refused in both modes.

* The sweep (SQLite: policy does not touch the database) sends every route of the route
  table as every persona and expects 403 exactly where the persona matrix of the mode
  says so.
* The data tests (SQLite, PostgreSQL, MariaDB) check what policy cannot: a project's
  ARQs and v1 attachments are invisible to, and cannot be moved by, another project; a
  bind by another project's token (an admin's evacuate) does not move the ARQ; v1 shows
  instance and ARQ identifiers of a project only to it and to admins; a v1 attach to an
  instance takes only the caller's project's instance (Nova's compute API on loopback
  says whose), and without Nova only an admin's.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
import webob
from oslo_policy import opts as policy_opts

from acceld import rpc
from acceld import states as st
from acceld.api import auth, deploy
from acceld.conf.hypervisor import DEMO_INSTANCES
from acceld.db import migration
from acceld.db.api import Database
from tests import helpers, keystone_server
from tests.functional import test_policy_sweep as sweep
from tests.nova_events import Receiver
from tests.stack import Stack

MODES = {"legacy": False, "new": True}       # [oslo_policy] enforce_new_defaults
HOST = "host1"
DEMO_INSTANCE = DEMO_INSTANCES[0].partition(":")[0]   # a guest of the agent's fake hypervisor

# Keystone persona -> (persona of the policy matrix, extra token): the matrix persona
# whose roles the token carries (Keystone's implied roles included).
PROJECT_PERSONAS = {
    "admin": "admin", "project_admin": "admin", "manager": "manager", "member": "member",
    "reader": "reader", "member_b": "member", "nova": "service",
}
OTHER_SCOPES = ("system_admin", "system_reader", "domain_admin", "domain_member")

# The rules whose base rule carries upstream's deprecated project-or-admin bridge: under
# the legacy defaults every project token passes them.
LEGACY_OPEN = {
    "acceld:accelerator:get_all", "acceld:accelerator:get_one",
    "cyborg:device:get_all", "cyborg:device:get_one", "cyborg:deployable:get_all",
    "cyborg:deployable:get_one", "acceld:deployable:program_status",
    "cyborg:attribute:get_all", "cyborg:attribute:get_one",
    "cyborg:device_profile:get_all", "cyborg:device_profile:get_one",
    "cyborg:arq:create", "cyborg:arq:get_all", "cyborg:arq:get_one", "cyborg:arq:update",
    "cyborg:arq:delete", "acceld:arq:hot_plug_get", "acceld:arq:hot_plug",
    "acceld:device_profile:availability", "acceld:arq:dry_run",
}


def allowed(rule: str, persona: str, mode: str) -> bool:
    """Whether ``persona`` (a Keystone persona) passes ``rule`` in ``mode``."""
    if persona in OTHER_SCOPES:
        return False                        # every rule is project-scoped
    if mode == "legacy" and rule in LEGACY_OPEN:
        return True
    return PROJECT_PERSONAS[persona] in sweep.ALLOWED[rule]


class Cloud:
    """acceld behind keystonemiddleware, and the tokens of every persona."""

    def __init__(self, stack: Stack, ks: keystone_server.KeystoneServer, mode: str) -> None:
        self.stack, self.ks, self.mode = stack, ks, mode
        self.nova: Receiver | None = None     # Nova's compute API, where configured
        conf = stack.conf
        conf.set_override("auth_strategy", "keystone", group="api")
        policy_opts.set_defaults(conf)
        conf.set_override("enforce_new_defaults", MODES[mode], group="oslo_policy")
        ks.configure_authtoken(conf)
        self.app = deploy.make_app(conf, stack.db, rpc.ConductorClient(stack.transport))

    def headers(self, persona: str | None) -> dict[str, str]:
        """``nova``: project A's member with Nova's service token; ``nova_b``: project
        B's; ``nova_admin``: the admin project's admin (an admin's evacuate)."""
        if persona is None:
            return {}
        user = {"nova": "member", "nova_b": "member_b", "nova_admin": "admin"}.get(persona)
        if user is not None:
            return {"X-Auth-Token": self.ks.token(user),
                    "X-Service-Token": self.ks.token("service")}
        return {"X-Auth-Token": self.ks.token(persona)}

    def call(self, persona: str | None, method: str, path: str,
             body: Any = None) -> webob.Response:
        req = webob.Request.blank(path, method=method, headers=self.headers(persona))
        if body is not None:
            req.content_type = "application/json"
            req.json = body
        return req.get_response(self.app)

    def project(self, name: str) -> str:
        return self.ks.projects[name]


def _cloud(db: Database, ks: keystone_server.KeystoneServer, mode: str) -> Iterator[Cloud]:
    with Stack.reported(db, hosts=(HOST,), device_count=4) as stack:
        yield Cloud(stack, ks, mode)


@pytest.fixture(params=list(MODES))
def cloud(request, db, ks) -> Iterator[Cloud]:
    """Every backend, both modes."""
    yield from _cloud(db, ks, request.param)


@pytest.fixture(scope="module", params=list(MODES))
def sweep_cloud(request, ks, tmp_path_factory) -> Iterator[Cloud]:
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('tenancy') / 'acceld.sqlite'}")
    migration.upgrade(db)
    try:
        yield from _cloud(db, ks, request.param)
    finally:
        db.dispose()


# -- every route, every persona, both modes ------------------------------------------------

SWEEP_PERSONAS = sorted((*PROJECT_PERSONAS, *OTHER_SCOPES))
PROTECTED = [c for c in sweep.ROUTE_CASES if c not in sweep.UNPROTECTED]


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
def test_every_route_for_every_persona(sweep_cloud: Cloud, method: str, path: str) -> None:
    rule = sweep._rule_for(method, path)
    assert rule is not None
    wrong = []
    for persona in SWEEP_PERSONAS:
        headers = sweep_cloud.headers(persona)
        resp = sweep._request(sweep_cloud.app, method, path, headers)
        expected_403 = not allowed(rule, persona, sweep_cloud.mode)
        if resp.status_int in (401, 500) or (resp.status_int == 403) != expected_403:
            wrong.append(f"{persona}: {resp.status} {resp.text[:200]}")
        elif expected_403:
            assert rule in resp.json["errors"][0]["detail"]
    assert not wrong, f"{sweep_cloud.mode} {method} {path} ({rule}):\n" + "\n".join(wrong)


def test_the_version_documents_answer_every_scope(sweep_cloud: Cloud) -> None:
    """No rule guards them: any valid token of any scope reads them, and Cyborg's
    discovery documents (``/``, ``/v2``), the OpenAPI document and the fleet view's files
    need none at all."""
    for method, path in sorted(sweep.UNPROTECTED):
        for persona in ("member", *OTHER_SCOPES):
            assert sweep_cloud.call(persona, method, path).status_int == 200, (persona, path)
        public = auth.is_public({"PATH_INFO": path})
        assert sweep_cloud.call(None, method, path).status_int == (200 if public else 401)


# -- the data: ARQs ---------------------------------------------------------------------------

def _ready_qat(cloud: Cloud) -> tuple[str, str, str]:
    """(device uuid, its rp_uuid, a profile asking for it), readied by the admin."""
    dev = next(d for d in cloud.call("admin", "GET", "/v2/devices").json["devices"]
               if d["type"] == "QAT")
    rp = next(d["rp_uuid"] for d in cloud.call("admin", "GET", "/v2/deployables").json[
        "deployables"] if d["name"] == f"{HOST}_fake_3d")
    assert cloud.call("admin", "PUT", f"/v1/accelerators/{dev['uuid']}/state",
                      {"state": "ready"}).json["state"] == "ready"
    name = f"qat-{uuidlib.uuid4().hex[:6]}"
    assert cloud.call("admin", "POST", "/v2/device_profiles", [
        {"name": name, "groups": [{"resources:CUSTOM_QAT": "1"}]}]).status_int == 201
    return dev["uuid"], rp, name


def _bind(cloud: Cloud, persona: str, arq: str, rp: str, instance: str) -> webob.Response:
    return cloud.call(persona, "PATCH", "/v2/accelerator_requests",
                      helpers.bind_patch(arq, HOST, rp, instance))


def _arq(cloud: Cloud, uuid: str) -> dict[str, Any]:
    resp = cloud.call("admin", "GET", f"/v2/accelerator_requests/{uuid}")
    assert resp.status_int == 200, resp.text
    return resp.json


def test_another_project_neither_sees_nor_moves_a_projects_arqs(cloud: Cloud) -> None:
    dev, rp, profile = _ready_qat(cloud)
    made = cloud.call("member", "POST", "/v2/accelerator_requests",
                      {"device_profile_name": profile})
    assert made.status_int == 201, made.text
    arq = made.json["arqs"][0]["uuid"]
    project_a = cloud.project(keystone_server.PROJECT_A)
    assert made.json["arqs"][0]["project_id"] == project_a
    instance = str(uuidlib.uuid4())

    assert cloud.call("member_b", "GET", "/v2/accelerator_requests").json["arqs"] == []
    assert cloud.call("member_b", "GET", f"/v2/accelerator_requests/{arq}").status_int == 404
    assert cloud.call("member_b", "DELETE",
                      f"/v2/accelerator_requests?arqs={arq}").status_int == 404
    assert _bind(cloud, "nova_b", arq, rp, instance).status_int == 404
    assert _arq(cloud, arq)["state"] == "Initial"

    # Nova binds with an admin's token of another project (evacuate, rebuild): the ARQ
    # stays project A's, so A's own delete later finds it
    assert _bind(cloud, "nova_admin", arq, rp, instance).status_int == 202
    bound = _arq(cloud, arq)
    assert (bound["state"], bound["project_id"]) == ("Bound", project_a)
    listed = cloud.call("member", "GET", f"/v2/accelerator_requests?instance={instance}")
    assert [a["uuid"] for a in listed.json["arqs"]] == [arq]

    # project B's instance delete (with Nova's service token) removes nothing of A's
    assert cloud.call("nova_b", "DELETE",
                      f"/v2/accelerator_requests?instance={instance}").status_int == 204
    assert _arq(cloud, arq)["state"] == "Bound"
    assert cloud.call("nova_b", "PATCH", "/v2/accelerator_requests", {arq: [
        {"op": "remove", "path": "/hostname"}]}).status_int == 404
    assert _arq(cloud, arq)["state"] == "Bound"

    # v1: the ARQ and its instance are shown to project A and admins only
    def allocations(persona: str) -> list[dict[str, str]]:
        resp = cloud.call(persona, "GET", f"/v1/accelerators/{dev}")
        assert resp.status_int == 200, resp.text
        return resp.json["allocations"]

    mine = [{"accelerator_request": arq, "instance_uuid": instance}]
    assert allocations("admin") == mine and allocations("member") == mine
    assert allocations("member_b") == [] and allocations("reader_b") == []

    def by_instance(persona: str) -> list[str]:
        resp = cloud.call(persona, "GET", f"/v1/accelerators?instance_uuid={instance}")
        return [a["uuid"] for a in resp.json["accelerator"]]

    assert by_instance("member") == [dev] and by_instance("admin") == [dev]
    assert by_instance("member_b") == []

    # A's instance delete frees the device
    assert cloud.call("nova", "DELETE",
                      f"/v2/accelerator_requests?instance={instance}").status_int == 204
    assert cloud.call("admin", "GET", f"/v2/accelerator_requests/{arq}").status_int == 404
    assert allocations("admin") == []


@pytest.fixture(params=list(MODES))
def nova_cloud(request, db, ks) -> Iterator[Cloud]:
    """Every backend, both modes, with Nova's compute API (``[nova]``): it says whose an
    instance is and where it runs."""
    nova = Receiver()
    try:
        with Stack.reported(db, hosts=(HOST,), device_count=4,
                            nova=nova.acceld_config()) as stack:
            cloud = Cloud(stack, ks, request.param)
            cloud.nova = nova
            yield cloud
    finally:
        nova.close()


def _guest_aliases(cloud: Cloud, instance: str) -> list[str]:
    (guest,) = [g for g in rpc.AgentClient(cloud.stack.transport, timeout=10).guests(HOST)
                if g["uuid"] == instance]
    return list(guest["aliases"])


def test_a_v1_attachment_is_shown_and_undone_by_its_project_only(nova_cloud: Cloud) -> None:
    cloud, nova = nova_cloud, nova_cloud.nova
    assert nova is not None
    dev, _rp, _profile = _ready_qat(cloud)
    instance = DEMO_INSTANCE                   # project A's, on HOST (Nova says so)
    nova.add(instance, cloud.project(keystone_server.PROJECT_A), HOST)
    refused = cloud.call("nova_b", "PUT", f"/v1/accelerators/{dev}",
                         {"instance_uuid": instance})
    assert refused.status_int == 404, refused.text   # not project B's instance
    assert refused.json["errors"][0]["code"] == "acceld.guest.not_found"
    resp = cloud.call("nova", "PUT", f"/v1/accelerators/{dev}", {"instance_uuid": instance})
    assert resp.status_int == 200, resp.text
    assert resp.json["attached_to"] == {
        "type": "instance", "id": instance, "hot_plug": st.HOT_ATTACHED}
    assert len(_guest_aliases(cloud, instance)) == 4      # each handle of the QAT

    def attached(persona: str) -> dict[str, Any]:
        return cloud.call(persona, "GET", f"/v1/accelerators/{dev}").json["attached_to"]

    assert attached("member") == attached("admin") == {
        "type": "instance", "id": instance, "hot_plug": st.HOT_ATTACHED}
    assert attached("member_b") == {"type": "instance", "id": None, "hot_plug": st.HOT_ATTACHED}
    listed = cloud.call("member_b", "GET", f"/v1/accelerators?instance_uuid={instance}")
    assert listed.json["accelerator"] == []

    refused = cloud.call("nova_b", "DELETE", f"/v1/accelerators/{dev}")
    assert refused.status_int == 403, refused.text
    assert refused.json["errors"][0]["code"] == "acceld.forbidden.other_project"
    assert attached("admin") == {"type": "instance", "id": instance, "hot_plug": st.HOT_ATTACHED}
    assert len(_guest_aliases(cloud, instance)) == 4      # B's refusal unplugged nothing
    assert cloud.call("nova", "DELETE", f"/v1/accelerators/{dev}").status_int == 204
    assert attached("admin") is None
    assert _guest_aliases(cloud, instance) == []


def test_without_nova_only_an_admin_attaches_to_an_instance(cloud: Cloud) -> None:
    """No ``[nova]``: nothing says whose an instance is, so a project's request (Nova's
    service token with a member's) is refused and an admin's goes through."""
    dev, _rp, _profile = _ready_qat(cloud)
    resp = cloud.call("nova", "PUT", f"/v1/accelerators/{dev}",
                      {"instance_uuid": DEMO_INSTANCE})
    assert resp.status_int == 403, resp.text
    assert "only an admin may attach to an instance" in resp.json["errors"][0]["detail"]
    assert cloud.call("admin", "GET", f"/v1/accelerators/{dev}").json["attached_to"] is None
    resp = cloud.call("admin", "PUT", f"/v1/accelerators/{dev}",
                      {"instance_uuid": DEMO_INSTANCE})
    assert resp.status_int == 200, resp.text
    assert cloud.call("admin", "DELETE", f"/v1/accelerators/{dev}").status_int == 204
