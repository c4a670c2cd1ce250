"""Build the WSGI pipeline: request id -> CORS-free proxy headers -> auth -> router."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi

from acceld import policies
from acceld.api import auth, request_id, router, util
from acceld.db.api import Database
from acceld.rpc import ConductorClient


class _Inject:
    def __init__(self, app: Any, state: util.AppState) -> None:
        self._app, self._state = app, state

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        environ["acceld.app"] = self._state
        return self._app(environ, start_response)


def make_app(conf: cfg.ConfigOpts, db: Database, conductor: ConductorClient) -> Any:
    state = util.AppState(conf=conf, db=db, conductor=conductor,
                          enforcer=policies.make_enforcer(conf))
    app: Any = router.Router()
    app = auth.wrap(app, conf)
    app = _Inject(app, state)
    # The proxy-header middleware does nothing unless enabled; it is webob-based and
    # costs a little on every request, so it is only in the pipeline when it acts.
    conf.register_opts(http_proxy_to_wsgi.OPTS, group="oslo_middleware")
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    app = request_id.RequestId(app)
    return app
