"""Authentication strategies (noauth, keystonemiddleware's ``auth_token``) and the request
context; ``PUBLIC_PATHS`` (version discovery) stay public in both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from oslo_config import cfg
from oslo_context import context

from acceld.api import errors, request_id
from acceld.api.reply import Reply

DEFAULT_PROJECT = "default"
# Version discovery, the OpenAPI document and the fleet view's files (which hold no data),
# also under the ``/accelerator`` mount prefix the router strips.
_PUBLIC = ("/v2", "/openapi.json", "/ui", "/ui/fleet.js", "/ui/fleet.css")
PUBLIC_PATHS = ("/", "", *_PUBLIC, "/accelerator", *("/accelerator" + p for p in _PUBLIC))

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class RequestContext(context.RequestContext):
    """oslo.context's RequestContext with a lean constructor, :meth:`for_request`: what
    oslo's ``__init__`` assigns (nearly all None) are class-level defaults here, and only
    what a request knows (and the mutable lists) is set on the instance."""

    auth_token = domain_id = user_domain_id = project_domain_id = None
    user_name = project_name = domain_name = user_domain_name = None
    project_domain_name = system_scope = resource_uuid = global_request_id = None
    service_token = service_user_id = service_user_name = None
    service_user_domain_id = service_user_domain_name = None
    service_project_id = service_project_name = None
    service_project_domain_id = service_project_domain_name = None
    read_only = show_deleted = False
    is_admin_project = True

    @classmethod
    def for_request(cls, user_id: str | None, project_id: str | None, roles: list[str],
                    service_roles: list[str], is_admin: bool, request_id: str | None,
                    global_request_id: str | None,
                    scope: Scope | None = None) -> RequestContext:
        """``cls(user_id=..., ...)`` for these, current in this thread as that is."""
        self = cls.__new__(cls)
        attrs = self.__dict__
        attrs.update(user_id=user_id, project_id=project_id, roles=roles,
                     service_roles=service_roles, _is_admin=is_admin,
                     request_id=request_id or context.generate_request_id())
        if global_request_id is not None:
            attrs["global_request_id"] = global_request_id
        if scope is not None:
            attrs.update((k, v) for k, v in scope.items() if v is not None)
        self.update_store()
        return self

    def to_policy_values(self) -> Any:
        """oslo.context's values plus ``is_admin``, which Cyborg's legacy rules test
        (oslo.context offers it as a deprecated value, which warns when read)."""
        values = super().to_policy_values()
        values["is_admin"] = self.is_admin
        return values


# What a token says of its scope besides its project (keystonemiddleware's headers, read
# by oslo.context): a system-scoped token (``system_scope``, ``OpenStack-System-Scope``)
# or a domain-scoped one (``domain_id``, ``X-Domain-Id``), and the domains of the user
# and the project. oslo.policy compares the first two with each rule's scope_types, so a
# system or domain token is refused by every project-scoped rule however admin it is.
Scope = dict[str, "str | None"]
SCOPE_ATTRIBUTES = ("system_scope", "domain_id", "user_domain_id", "project_domain_id")


def _set_context(environ: dict[str, Any], user: str | None, project: str | None,
                 roles: list[str], service_roles: list[str],
                 scope: Scope | None = None) -> None:
    environ["acceld.context"] = RequestContext.for_request(
        user, project, list(dict.fromkeys(roles + service_roles)), service_roles,
        "admin" in roles, environ.get(request_id.ENV_REQUEST_ID),
        environ.get(request_id.ENV_GLOBAL_REQUEST_ID), scope)


def begin_context(environ: dict[str, Any]) -> None:
    """Make a context of the request's ids current in this thread, so every line logged for
    the request carries its id (authentication replaces it with the caller's)."""
    RequestContext.for_request(None, None, [], [], False, environ.get(request_id.ENV_REQUEST_ID),
                               environ.get(request_id.ENV_GLOBAL_REQUEST_ID))


# noauth's "<user>:<project>": each 1-255 characters (what the columns that keep a project
# hold), no control character
_NOAUTH_TOKEN = re.compile(r"[^:\x00-\x1f\x7f]{1,255}:[^\x00-\x1f\x7f]{1,255}")


def noauth(environ: dict[str, Any]) -> Reply | None:
    """noauth, like Placement's noauth2: no token or ``X-Auth-Token: admin`` is the admin of
    project ``default``; ``<user>:<project>`` that user with the member and reader roles
    plus any ``X-Roles``; ``X-Service-Token`` adds ``service``. Sets the caller's context,
    or answers the 401 for a token it does not know."""
    token = environ.get("HTTP_X_AUTH_TOKEN")
    if token in (None, "", "admin"):
        user, project, roles = "admin", DEFAULT_PROJECT, ["admin", "member", "reader"]
    elif _NOAUTH_TOKEN.fullmatch(token):
        user, project = token.split(":", 1)
        roles = ["member", "reader"]
    else:
        return errors.render(environ, 401, "noauth expects X-Auth-Token 'admin' or "
                             "'<user>:<project>' (each 1-255 characters, no control "
                             "character).", "acceld.unauthorized")
    service_roles = ["service"] if environ.get("HTTP_X_SERVICE_TOKEN") else []
    extra = [role.strip() for role in environ.get("HTTP_X_ROLES", "").split(",")]
    _set_context(environ, user, project, roles + [role for role in extra if role],
                 service_roles)
    return None


class KeystoneContext:
    """Builds the context from the headers keystonemiddleware set."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
            resp = errors.render(environ, 401, "Authentication required.", "acceld.unauthorized")
            return resp(environ, start_response)
        ctx = RequestContext.from_environ(environ)
        _set_context(environ, ctx.user_id, ctx.project_id, list(ctx.roles),
                     list(ctx.service_roles or []),
                     {name: getattr(ctx, name) for name in SCOPE_ATTRIBUTES})
        return self._app(environ, start_response)


def is_public(environ: dict[str, Any]) -> bool:
    """Whether the request is for a route served without authentication."""
    return environ.get("PATH_INFO", "").rstrip("/") in PUBLIC_PATHS


def keystone(app: WSGIApp, conf: cfg.ConfigOpts) -> WSGIApp | None:
    """``app`` behind keystonemiddleware's ``auth_token`` (``auth_strategy = keystone``);
    None for noauth (:func:`noauth` is then called for each request)."""
    if conf.api.auth_strategy == "noauth":
        return None
    from keystonemiddleware import auth_token
    return auth_token.AuthProtocol(KeystoneContext(app), {"oslo_config_config": conf})
