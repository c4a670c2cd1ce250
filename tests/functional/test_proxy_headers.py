"""``[oslo_middleware] enable_proxy_headers_parsing``: oslo.middleware's HTTPProxyToWSGI
heads the pipeline (before ``deploy.Front``), so the links of an answer carry the scheme
and host the proxy was reached at, and the answer still carries one request id."""

from __future__ import annotations

import webob
from oslo_middleware import http_proxy_to_wsgi

from acceld.api import deploy
from acceld.rpc import ConductorClient, LocalTransport
from tests import helpers


def _app(sqlite_db, enabled: bool):
    conf = helpers.make_conf()
    conf.register_opts(http_proxy_to_wsgi.OPTS, group="oslo_middleware")
    conf.set_override("enable_proxy_headers_parsing", enabled, group="oslo_middleware")
    return deploy.make_app(conf, sqlite_db, ConductorClient(LocalTransport()))


def _post(app):
    req = webob.Request.blank("/v2/device_profiles", method="POST",
                              headers={"X-Forwarded-Proto": "https",
                                       "X-Forwarded-Host": "cloud.example.org",
                                       "Content-Type": "application/json"},
                              body=b'[{"name": "dp1", "groups": [{"resources:FPGA": "1"}]}]')
    return req.get_response(app)


def test_links_follow_the_forwarded_host_when_enabled(sqlite_db) -> None:
    resp = _post(_app(sqlite_db, True))
    assert resp.status_int == 201
    assert resp.json["links"][0]["href"].startswith(
        "https://cloud.example.org/accelerator/v2/device_profiles/")
    ids = [v for k, v in resp.headerlist if k.lower() == "x-openstack-request-id"]
    assert len(ids) == 1 and ids[0].startswith("req-")


def test_forwarded_headers_are_ignored_when_disabled(sqlite_db) -> None:
    resp = _post(_app(sqlite_db, False))
    assert resp.status_int == 201
    assert resp.json["links"][0]["href"].startswith(
        "http://localhost/accelerator/v2/device_profiles/")
