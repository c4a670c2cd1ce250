"""The route table (data) and the dispatcher.

Each path maps HTTP methods to handlers. An unknown path is 404, a known path with another
method is 405 with an ``Allow`` header; both through the one error renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import routes
import webob

from acceld.api import errors, util
from acceld.api.handlers import accelerators, operator, root

Handler = Callable[..., webob.Response]

ROUTES: dict[str, dict[str, Handler]] = {
    "/": {"GET": root.versions},
    "/v1": {"GET": root.v1},
    "/v1/accelerators": {"GET": accelerators.list_accelerators,
                         "POST": accelerators.create_accelerator},
    "/v1/accelerators/{uuid}": {"GET": accelerators.show_accelerator,
                                "PUT": accelerators.attach,
                                "DELETE": accelerators.detach},
    "/v1/accelerators/{uuid}/state": {"PUT": accelerators.set_state},
    "/v1/accelerators/{uuid}/{acc_spec}": {"PUT": accelerators.update_specs},
    "/v1/services": {"GET": operator.list_services},
    "/v1/drivers": {"GET": operator.list_drivers},
    "/v1/drivers/{name}/action": {"POST": operator.driver_action},
    "/v1/discover": {"POST": operator.discover},
    "/v1/placement": {"GET": operator.placement_status},
    "/v1/placement/sync": {"POST": operator.placement_sync},
}


class Router:
    def __init__(self, table: dict[str, dict[str, Handler]] = ROUTES) -> None:
        self._table = table
        self._mapper = routes.Mapper()
        for path in table:
            self._mapper.connect(path, path_template=path)
            if path != "/":
                self._mapper.connect(path + "/", path_template=path)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        req = webob.Request(environ)
        try:
            resp = self._dispatch(req)
        except Exception as exc:  # noqa: BLE001 - the one place errors become responses
            resp = errors.from_exception(req, exc)
        return resp(environ, start_response)

    def _dispatch(self, req: webob.Request) -> webob.Response:
        match = self._mapper.match(req.path_info or "/")
        if match is None:
            raise errors.HTTPError(404, f"The resource {req.path_info} could not be found.",
                                   "acceld.not_found")
        methods = self._table[match.pop("path_template")]
        if "uuid" in match:  # one spelling of a UUID everywhere below the router
            match["uuid"] = util.canonical_uuid(match["uuid"])
        method = "GET" if req.method == "HEAD" else req.method
        if method not in methods:
            allow = ", ".join(sorted(methods))
            raise errors.HTTPError(405, f"Method {req.method} is not allowed on "
                                   f"{req.path_info}; allowed: {allow}.",
                                   "acceld.method_not_allowed", {"Allow": allow})
        return methods[method](req, **match)
