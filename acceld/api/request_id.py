"""Request ids as oslo.middleware's ``RequestId`` makes them, without its per-request webob
work: ``x-openstack-request-id: req-<uuid>`` on every response (the router's, or through
:func:`adding_header`); a caller's own id of that form is the global request id.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from acceld import uuids

HEADER = "x-openstack-request-id"
_HEADER_LEN = len(HEADER)
ENV_REQUEST_ID = "openstack.request_id"
ENV_GLOBAL_REQUEST_ID = "openstack.global_request_id"
_GLOBAL_ID = re.compile(r"^req-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$")


def new_id() -> str:
    """``req-`` and a random (version 4) UUID (:func:`acceld.uuids.random_uuid`)."""
    return "req-" + uuids.random_uuid()


def begin(environ: dict[str, Any]) -> str:
    """A new request id for the request of ``environ``, noted there (with the caller's
    global one, when it sent a well-formed one)."""
    req_id = environ[ENV_REQUEST_ID] = new_id()
    inbound = environ.get("HTTP_X_OPENSTACK_REQUEST_ID")
    if inbound and _GLOBAL_ID.match(inbound):
        environ[ENV_GLOBAL_REQUEST_ID] = inbound
    return req_id


def adding_header(start_response: Callable[..., Any], req_id: str) -> Callable[..., Any]:
    """``start_response`` that adds the request id header unless the app set one."""

    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        # (a name of another length cannot match: no lower() of every header)
        if not any(len(name) == _HEADER_LEN and name.lower() == HEADER
                   for name, _ in headers):
            headers = [*headers, (HEADER, req_id)]
        return start_response(status, headers, exc_info)

    return start
