"""The WSGI pipeline: [proxy headers] -> :class:`Front` -> router."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi

from acceld import notify, policies
from acceld.api import auth, errors, microversion, request_id, router, util
from acceld.db.api import Database
from acceld.rpc import ConductorClient

ACCESS_LOG = logging.getLogger("acceld.api.access")


class Front:
    """The head of the pipeline, one call rather than nested middlewares: the request id
    (and a logging context carrying it), the access log, the 414 and 431 limits, the app's
    state, then authentication (noauth, or keystonemiddleware's, whose own answers get the
    request id header) for every route but the public ones."""

    def __init__(self, app: auth.WSGIApp, state: util.AppState,
                 keystone: auth.WSGIApp | None) -> None:
        self._app, self._state, self._keystone = app, state, keystone
        self._max_uri = state.conf.api.max_uri_length
        self._max_headers = state.conf.api.max_header_size

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        req_id = request_id.begin(environ)
        auth.begin_context(environ)
        if not ACCESS_LOG.isEnabledFor(logging.INFO):
            return self._serve(environ, start_response, req_id)
        access = _Access(environ, start_response)
        return access.finish(self._serve(environ, access.start_response, req_id))

    def _serve(self, environ: dict[str, Any], start_response: Callable[..., Any],
               req_id: str) -> Any:
        app = self._oversized(environ)     # a refusal, keystonemiddleware or the router
        if app is None:
            environ["acceld.app"] = self._state
            if auth.is_public(environ):
                return self._app(environ, start_response)
            app = self._keystone if self._keystone is not None else auth.noauth(environ)
            if app is None:
                return self._app(environ, start_response)
        return app(environ, request_id.adding_header(start_response, req_id))

    def _oversized(self, environ: dict[str, Any]) -> Any:
        """The 414 for a request target longer than ``[api] max_uri_length``, the 431 for
        header fields larger than ``[api] max_header_size`` in all; None for the rest."""
        target = environ.get("REQUEST_URI") or environ.get("RAW_URI")
        length = len(target) if target is not None else (
            len(environ.get("PATH_INFO", "")) + len(environ.get("QUERY_STRING", "")) + 1)
        if length > self._max_uri:
            return errors.render(environ, 414, f"The request target is {length} bytes long; "
                                 f"at most {self._max_uri} are accepted.", "acceld.uri_too_long")
        size = sum(len(name) + len(value) - 3 for name, value in environ.items()
                   if name.startswith("HTTP_") and isinstance(value, str))
        if size > self._max_headers:
            return errors.render(environ, 431, f"The request's header fields are {size} bytes "
                                 f"in all; at most {self._max_headers} are accepted.",
                                 "acceld.headers_too_large")
        return None


_LOGGED_TARGET = 512    # characters of the request target an access-log line shows


class _Access:
    """One access-log line per request, as nova's and placement's request log: ``127.0.0.1
    "GET /v2/devices" status: 200 len: 1234 microversion: 2.0 time: 0.0012345``, written
    when the app's iterable is done (at once for a list; for a stream, which this then
    wraps, on ``close()``); ``len`` is the ``Content-Length``, or the bytes sent."""

    __slots__ = ("environ", "started", "status", "length", "_start", "_body", "_sent")

    def __init__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> None:
        self.environ, self._start, self._sent = environ, start_response, 0
        self.started = time.perf_counter()
        self.status = self.length = None

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Any:
        self.status = status
        for name, value in headers:
            if len(name) == 14 and name.lower() == "content-length":
                self.length = value
        return self._start(status, headers, exc_info)

    def finish(self, body: Iterable[bytes]) -> Iterable[bytes]:
        if type(body) is list:
            if self.length is None:
                self.length = sum(map(len, body))
            self.log()
            return body
        self._body = body
        return self

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._body:
            self._sent += len(chunk)
            yield chunk

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            if self.length is None:
                self.length = self._sent
            self.log()

    def log(self) -> None:
        env = self.environ
        query = env.get("QUERY_STRING")
        target = env.get("SCRIPT_NAME", "") + env.get("PATH_INFO", "") + (
            "?" + query if query else "")
        if len(target) > _LOGGED_TARGET:
            target = target[:_LOGGED_TARGET] + "..."
        if not target.isprintable():    # one line per request, whatever the path holds
            target = target.encode("unicode_escape").decode("ascii")
        version = env.get(microversion.ENV_KEY)
        ACCESS_LOG.info(
            '%s "%s %s" status: %s len: %s microversion: %s time: %.7f',
            env.get("REMOTE_ADDR", "-"), env.get("REQUEST_METHOD"), target,
            self.status[:3] if self.status else "-", self.length or 0,
            version if version is not None else "-", time.perf_counter() - self.started)


def make_app(conf: cfg.ConfigOpts, db: Database, conductor: ConductorClient,
             notifier: notify.Notifier = notify.DISABLED) -> Any:
    state = util.AppState(conf=conf, db=db, conductor=conductor,
                          enforcer=policies.make_enforcer(conf), notifier=notifier)
    routes = router.Router()
    app: Any = Front(routes, state, auth.keystone(routes, conf))
    # the proxy-header middleware costs a little on every request: only when enabled
    conf.register_opts(http_proxy_to_wsgi.OPTS, group="oslo_middleware")
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
