"""The one error renderer, and the map from domain exceptions to HTTP statuses: every
error body is ``{"errors": [{"status", "code", "title", "detail", "request_id"}]}``
(Placement's shape); only a bug is a 500, and its body says nothing about internals.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import webob.exc
from oslo_db import exception as db_exc

from acceld import exception
from acceld.api.reply import Reply, body_response

LOG = logging.getLogger(__name__)

_STATUS = (
    (exception.NotFound, 404),
    (exception.Conflict, 409),
    (exception.InvalidInput, 400),
    (exception.Unavailable, 503),
    (exception.OperationFailed, 502),
    (exception.Forbidden, 403),
    (exception.NotResolved, 423),
)


class HTTPError(Exception):
    """An HTTP-level error raised by the API layer itself (not a domain error)."""

    def __init__(self, status: int, detail: str, code: str = "acceld.http",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code
        self.headers = headers or {}


def invalid(detail: str) -> HTTPError:
    """The 400 for a client mistake ``detail`` names."""
    return HTTPError(400, detail, "acceld.invalid_input")


def render(environ: dict[str, Any], status: int, detail: str, code: str,
           headers: dict[str, str] | None = None) -> Reply:
    title = webob.exc.status_map[status].title if status in webob.exc.status_map else "Error"
    body = {"errors": [{"status": status, "code": code, "title": title, "detail": detail,
                        "request_id": environ.get("openstack.request_id")}]}
    return body_response(json.dumps(body).encode("utf-8"), status, headers)


def _where(environ: dict[str, Any]) -> str:
    """The request's method and path for a log line, escaped (a path may not be UTF-8)."""
    path = ascii(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))[1:-1]
    return f"{environ.get('REQUEST_METHOD')} {path}"[:300]


def from_exception(environ: dict[str, Any], exc: BaseException) -> Reply:
    if isinstance(exc, HTTPError):
        return render(environ, exc.status, exc.detail, exc.code, exc.headers)
    if isinstance(exc, exception.AccelDError):
        status = next((status for cls, status in _STATUS if isinstance(exc, cls)), 500)
        if status >= 500:
            LOG.warning("%s: %s", _where(environ), exc)
        return render(environ, status, str(exc), exc.code)
    if isinstance(exc, db_exc.DBConnectionError):
        # the database is down or unreachable: the client may try again (the cause, in
        # the log, is the driver's message: no statement, no parameters)
        cause = getattr(exc, "inner_exception", None) or exc
        LOG.warning("%s: the database is unreachable: %s", _where(environ),
                    getattr(cause, "orig", None) or cause)
        return render(environ, 503, "The database is unreachable; try again later.",
                      "acceld.database_unavailable", {"Retry-After": "1"})
    LOG.exception("unexpected error in %s", _where(environ))
    return render(environ, 500, "An unexpected error occurred; see the acceld-api log for the "
                  "request id.", "acceld.internal")
