"""Build the WSGI pipeline: [proxy headers] -> :class:`Front` (request id, the app's
state, authentication) -> router."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi

from acceld import policies
from acceld.api import auth, request_id, router, util
from acceld.db.api import Database
from acceld.rpc import ConductorClient


class Front:
    """The head of the pipeline, in one call: a request id for every request
    (``request_id``), the app's state in the environ, then the public routes (version
    discovery) to the router as they are, and every other request through
    authentication: noauth's conventions here, or keystonemiddleware's ``auth_token`` (a
    WSGI app of its own, whose own answers get the request id header on the way out).
    These were four nested middlewares; each cost a call and a frame on every request.
    """

    def __init__(self, app: auth.WSGIApp, state: util.AppState,
                 keystone: auth.WSGIApp | None) -> None:
        self._app, self._state, self._keystone = app, state, keystone

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        req_id = request_id.begin(environ)
        environ["acceld.app"] = self._state
        if auth.is_public(environ):
            return self._app(environ, start_response)
        if self._keystone is not None:
            return self._keystone(environ, request_id.adding_header(start_response, req_id))
        refusal = auth.noauth(environ)
        if refusal is not None:
            return refusal(environ, request_id.adding_header(start_response, req_id))
        return self._app(environ, start_response)


def make_app(conf: cfg.ConfigOpts, db: Database, conductor: ConductorClient) -> Any:
    state = util.AppState(conf=conf, db=db, conductor=conductor,
                          enforcer=policies.make_enforcer(conf))
    routes = router.Router()
    app: Any = Front(routes, state, auth.keystone(routes, conf))
    # The proxy-header middleware does nothing unless enabled; it is webob-based and
    # costs a little on every request, so it is only in the pipeline when it acts.
    conf.register_opts(http_proxy_to_wsgi.OPTS, group="oslo_middleware")
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
