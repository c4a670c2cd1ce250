"""``[api] auth_strategy = keystone``: the real keystonemiddleware auth_token in the pipeline.

There is no Keystone here, so keystonemiddleware's own AuthTokenFixture stands in for the
token validation call; everything else (header handling, 401s, the context and policy
built from the identity headers) is the production path.
"""

from __future__ import annotations

import fixtures
import pytest
import webob
from keystonemiddleware import fixture as ksm_fixture

from acceld.api import deploy
from acceld.rpc import ConductorClient, LocalTransport
from tests import helpers


@pytest.fixture
def keystone_app(sqlite_db):
    conf = helpers.make_conf(api={"auth_strategy": "keystone"},
                             keystone_authtoken={"www_authenticate_uri":
                                                 "http://127.0.0.1:5000/v3"})
    with fixtures.Fixture() as holder:
        tokens = holder.useFixture(ksm_fixture.AuthTokenFixture())
        app = deploy.make_app(conf, sqlite_db, ConductorClient(LocalTransport()))
        yield app, tokens


def _get(app, path, token=None):
    req = webob.Request.blank(path)
    if token:
        req.headers["X-Auth-Token"] = token
    return req.get_response(app)


def test_version_document_is_public(keystone_app):
    app, _tokens = keystone_app
    resp = _get(app, "/")
    assert resp.status_int == 200
    assert {v["id"] for v in resp.json["versions"]} == {"v1", "v2"}


def test_missing_and_invalid_tokens_are_401(keystone_app):
    app, _tokens = keystone_app
    assert _get(app, "/v1/accelerators").status_int == 401
    assert _get(app, "/v1/accelerators", token="not-a-token").status_int == 401


def test_valid_tokens_get_their_roles(keystone_app):
    app, tokens = keystone_app
    admin, reader, member = "tok-admin", "tok-reader", "tok-member"
    tokens.add_token_data(token_id=admin, user_id="u1", project_id="p1", role_list=["admin"])
    tokens.add_token_data(token_id=reader, user_id="u2", project_id="p1",
                          role_list=["reader"])
    tokens.add_token_data(token_id=member, user_id="u3", project_id="p1",
                          role_list=["member", "reader"])
    assert _get(app, "/v1/accelerators", token=admin).status_int == 200
    assert _get(app, "/v1/accelerators", token=reader).status_int == 200
    assert _get(app, "/v1/services", token=admin).status_int == 200
    resp = _get(app, "/v1/services", token=member)
    assert resp.status_int == 403
    assert "acceld:service:get_all" in resp.json["errors"][0]["detail"]


def _ids(resp) -> list[str]:
    return [v for k, v in resp.headerlist if k.lower() == "x-openstack-request-id"]


def test_every_answer_carries_one_request_id(keystone_app):
    """auth_token's own 401 gets the id on the way out; acceld's answers carry their own
    (once, not again on the way out); public routes too."""
    app, tokens = keystone_app
    tokens.add_token_data(token_id="tok", user_id="u1", project_id="p1", role_list=["admin"])
    answers = [_get(app, "/v1/accelerators"), _get(app, "/v1/accelerators", token="tok"),
               _get(app, "/v2/nothing", token="tok"), _get(app, "/")]
    assert [r.status_int for r in answers] == [401, 200, 404, 200]
    ids = [_ids(r) for r in answers]
    assert all(len(one) == 1 and one[0].startswith("req-") for one in ids), ids
    assert len({one[0] for one in ids}) == 4
