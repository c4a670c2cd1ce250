"""Authentication strategies and the request context.

``noauth`` (embedded default and tests, like Placement's noauth2): no token or
``X-Auth-Token: admin`` -> admin of project ``default``; ``X-Auth-Token: user:project`` ->
that user with the member and reader roles plus any ``X-Roles``; ``X-Service-Token`` adds
the ``service`` role. ``keystone``: keystonemiddleware ``auth_token`` validates the token
and sets the identity headers this module reads. ``PUBLIC_PATHS`` (version discovery)
stay public in both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import webob
from oslo_config import cfg
from oslo_context import context

from acceld.api import errors

DEFAULT_PROJECT = "default"
# Version discovery, also under the ``/accelerator`` mount prefix the router strips.
PUBLIC_PATHS = ("/", "", "/v2", "/accelerator", "/accelerator/v2")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class RequestContext(context.RequestContext):
    pass


def _split_roles(value: str | None) -> list[str]:
    return [r.strip() for r in (value or "").split(",") if r.strip()]


def _set_context(environ: dict[str, Any], user: str | None, project: str | None,
                 roles: list[str], service_roles: list[str]) -> None:
    environ["acceld.context"] = RequestContext(
        user_id=user, project_id=project, roles=list(dict.fromkeys(roles + service_roles)),
        service_roles=service_roles, is_admin="admin" in roles,
        request_id=environ.get("openstack.request_id"))


class NoAuth:
    """Trusts the X-Auth-Token conventions above; never expose it beyond loopback."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        token = environ.get("HTTP_X_AUTH_TOKEN")
        if token in (None, "", "admin"):
            user, project, roles = "admin", DEFAULT_PROJECT, ["admin", "member", "reader"]
        elif ":" in token and all(token.split(":", 1)):
            user, project = token.split(":", 1)
            roles = ["member", "reader"]
        else:
            resp = errors.render(webob.Request(environ), 401, "noauth expects X-Auth-Token "
                                 "'admin' or '<user>:<project>'.", "acceld.unauthorized")
            return resp(environ, start_response)
        service_roles = ["service"] if environ.get("HTTP_X_SERVICE_TOKEN") else []
        _set_context(environ, user, project, roles + _split_roles(environ.get("HTTP_X_ROLES")),
                     service_roles)
        return self._app(environ, start_response)


class KeystoneContext:
    """Builds the context from the headers keystonemiddleware set."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
            resp = errors.render(webob.Request(environ), 401, "Authentication required.",
                                 "acceld.unauthorized")
            return resp(environ, start_response)
        ctx = RequestContext.from_environ(environ)
        _set_context(environ, ctx.user_id, ctx.project_id, list(ctx.roles),
                     list(ctx.service_roles or []))
        return self._app(environ, start_response)


class _PublicBypass:
    """Serves the public routes without authentication, everything else through auth."""

    def __init__(self, app: WSGIApp, authed: WSGIApp) -> None:
        self._app, self._authed = app, authed

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO", "").rstrip("/") in PUBLIC_PATHS:
            return self._app(environ, start_response)
        return self._authed(environ, start_response)


def wrap(app: WSGIApp, conf: cfg.ConfigOpts) -> WSGIApp:
    if conf.api.auth_strategy == "noauth":
        return _PublicBypass(app, NoAuth(app))
    from keystonemiddleware import auth_token
    authed = auth_token.AuthProtocol(KeystoneContext(app), {"oslo_config_config": conf})
    return _PublicBypass(app, authed)
