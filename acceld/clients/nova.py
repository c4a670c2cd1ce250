"""A typed client for the Nova compute API calls acceld makes: ``POST
/os-server-external-events`` (``accelerator-request-bound``, 2.82) and, for hot plug,
``GET /servers/{id}`` (where an instance runs, and whose it is). ClientError: 4xx, or
a 207 with an entry other than 200/422 (422, no host yet, is logged: the compute reads
the ARQs when it runs); ServerError: 5xx or unreachable. Never logs tokens or bodies."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc

LOG = logging.getLogger(__name__)

MICROVERSION = "2.82"
EVENT_NAME = "accelerator-request-bound"
COMPLETED = "completed"
FAILED = "failed"


class NovaError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ClientError(NovaError):
    pass


class ServerError(NovaError):
    pass


@dataclasses.dataclass(frozen=True)
class BoundEvent:
    """ARQ ``arq_uuid`` of ``server_uuid`` is resolved: ``status`` completed or failed."""
    server_uuid: str
    arq_uuid: str
    status: str

    def to_body(self) -> dict[str, str]:
        return {"name": EVENT_NAME, "server_uuid": self.server_uuid, "tag": self.arq_uuid,
                "status": self.status}


class NovaClient:
    def __init__(self, adapter: ks_adapter.Adapter) -> None:
        self._a = adapter

    def _request(self, method: str, url: str, **kwargs: Any) -> Any:
        """The response, whatever its status; ServerError when Nova cannot be reached."""
        try:
            return self._a.request(url, method, microversion=MICROVERSION, raise_exc=False,
                                   headers={"Accept": "application/json"}, **kwargs)
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout, ks_exc.DiscoveryFailure,
                ks_exc.EndpointNotFound, ks_exc.RetriableConnectionFailure) as exc:
            raise ServerError(f"Nova unreachable: {type(exc).__name__}") from exc

    def send_external_events(self, events: list[BoundEvent]) -> None:
        """One request carrying every event. 200: done; 207 whose failed entries are all
        422 (no host yet): tolerated and logged; anything else: a NovaError."""
        if not events:
            return
        ids = ", ".join(f"{e.arq_uuid}={e.status}" for e in events)
        resp = self._request("POST", "/os-server-external-events",
                             json={"events": [e.to_body() for e in events]})
        status = resp.status_code
        if status == 200:
            LOG.info("told Nova about server %s: %s", events[0].server_uuid, ids)
            return
        if status == 207:
            return self._check_multi_status(resp, events)
        message = f"POST /os-server-external-events ({ids}): {status}"
        if status >= 500:
            raise ServerError(message, status)
        raise ClientError(message, status)

    def server(self, uuid: str) -> dict[str, Any] | None:
        """Server ``uuid`` as an admin sees it (``tenant_id``, ``status``,
        ``OS-EXT-SRV-ATTR:host``); None when Nova has no such server."""
        resp = self._request("GET", f"/servers/{uuid}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            kind = ServerError if resp.status_code >= 500 else ClientError
            raise kind(f"GET /servers/{uuid}: {resp.status_code}", resp.status_code)
        server: dict[str, Any] = resp.json()["server"]
        return server

    @staticmethod
    def _check_multi_status(resp: Any, events: list[BoundEvent]) -> None:
        try:
            answered = resp.json()["events"]
            codes = {(e.get("server_uuid"), e.get("tag")): int(e.get("code", 0)) for e in answered}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ClientError("POST /os-server-external-events: 207 with an unreadable "
                              "body", 207) from exc
        bad = []
        for ev in events:
            code = codes.get((ev.server_uuid, ev.arq_uuid), 200)
            if code == 422:
                LOG.info("Nova did not take event for ARQ %s of server %s (422: no host "
                         "yet); its compute will read the ARQ", ev.arq_uuid, ev.server_uuid)
            elif code != 200:
                bad.append(f"{ev.arq_uuid}={code}")
        if bad:
            raise ClientError(f"POST /os-server-external-events: 207 with {', '.join(bad)}", 207)
