"""A typed OpenStack Placement client over a keystoneauth1 adapter; every call names its
microversion. :func:`_error` types what is left after keystoneauth's retries: 404 (or a
create under a missing parent) NotFound, 409 by Placement's code, other 4xx ClientError,
5xx ServerError, none Unreachable."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc

# Writes use 1.26: error bodies carry codes from 1.23 (how a generation conflict is told
# from an inventory in use), and 1.26 allows reserved == total (a device not ready).
WRITE_VERSION = "1.26"


class PlacementError(Exception):
    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code


class NotFound(PlacementError):
    pass


class GenerationConflict(PlacementError):
    pass


class InventoryInUse(PlacementError):
    pass


class ProviderInUse(PlacementError):
    pass


class ClientError(PlacementError):
    pass


class AlreadyExists(ClientError):
    pass


class ServerError(PlacementError):
    pass


class Unreachable(ServerError):
    pass


@dataclasses.dataclass(frozen=True)
class Provider:
    uuid: str
    name: str
    generation: int
    parent_provider_uuid: str | None
    root_provider_uuid: str | None


def _provider(body: dict[str, Any]) -> Provider:
    return Provider(uuid=body["uuid"], name=body["name"], generation=body["generation"],
                    parent_provider_uuid=body.get("parent_provider_uuid"),
                    root_provider_uuid=body.get("root_provider_uuid"))


class PlacementClient:
    """One method per Placement call acceld makes."""

    def __init__(self, adapter: ks_adapter.Adapter) -> None:
        self._a = adapter

    def _request(self, method: str, url: str, version: str | None, body: Any = None,
                 ok: tuple[int, ...] = (200,), **options: Any) -> Any:
        kwargs: dict[str, Any] = {"raise_exc": False,
                                  "headers": {"Accept": "application/json"}, **options}
        if version is not None:
            kwargs["microversion"] = version
        if body is not None:
            kwargs["json"] = body
        try:
            resp = self._a.request(url, method, **kwargs)
        except (ks_exc.ConnectionError, ks_exc.DiscoveryFailure,
                ks_exc.EndpointNotFound) as exc:
            raise Unreachable(f"Placement unreachable: {exc}") from exc
        if resp.status_code in ok:
            return resp.json() if resp.content else None
        raise _error(method, url, resp)

    def probe(self, timeout: float) -> None:
        """GET Placement's root once, for at most ``timeout`` seconds; raises unless 200."""
        self._request("GET", "/", None, connect_retries=0, status_code_retries=0, timeout=timeout)

    # -- providers ---------------------------------------------------------------------
    def find_provider(self, name: str) -> Provider | None:
        body = self._request("GET", f"/resource_providers?name={quote(name, safe='')}", "1.14")
        rps = body["resource_providers"]
        return _provider(rps[0]) if rps else None

    def get_provider(self, uuid: str) -> Provider:
        return _provider(self._request("GET", f"/resource_providers/{uuid}", "1.14"))

    def tree(self, root_uuid: str, required: str | None = None) -> list[Provider]:
        """The providers of ``root_uuid``'s tree (only those carrying trait ``required``
        when given: a query Placement answers several times slower)."""
        query = f"in_tree={root_uuid}" + (f"&required={required}" if required else "")
        body = self._request("GET", f"/resource_providers?{query}", "1.18")
        return [_provider(rp) for rp in body["resource_providers"]]

    def create_provider(self, uuid: str, name: str, parent: str) -> Provider:
        body = self._request("POST", "/resource_providers", WRITE_VERSION,
                             {"uuid": uuid, "name": name, "parent_provider_uuid": parent})
        return _provider(body)

    def delete_provider(self, uuid: str) -> None:
        self._request("DELETE", f"/resource_providers/{uuid}", WRITE_VERSION, ok=(204,))

    # -- inventories and traits ---------------------------------------------------------
    def get_inventories(self, uuid: str) -> tuple[int, dict[str, dict[str, Any]]]:
        body = self._request("GET", f"/resource_providers/{uuid}/inventories", "1.14")
        return body["resource_provider_generation"], body["inventories"]

    def set_inventories(self, uuid: str, generation: int,
                        inventories: dict[str, dict[str, Any]]) -> int:
        body = self._request("PUT", f"/resource_providers/{uuid}/inventories", WRITE_VERSION,
                             {"resource_provider_generation": generation,
                              "inventories": inventories})
        return body["resource_provider_generation"]

    def get_traits(self, uuid: str) -> tuple[int, set[str]]:
        body = self._request("GET", f"/resource_providers/{uuid}/traits", "1.14")
        return body["resource_provider_generation"], set(body["traits"])

    def set_traits(self, uuid: str, generation: int, traits: set[str]) -> int:
        body = self._request("PUT", f"/resource_providers/{uuid}/traits", WRITE_VERSION,
                             {"resource_provider_generation": generation,
                              "traits": sorted(traits)})
        return body["resource_provider_generation"]

    def usages(self, uuid: str) -> dict[str, int]:
        return self._request("GET", f"/resource_providers/{uuid}/usages", "1.14")["usages"]

    # -- names -----------------------------------------------------------------------------
    def ensure_resource_class(self, name: str) -> None:
        self._request("PUT", f"/resource_classes/{name}", WRITE_VERSION, ok=(201, 204))

    def ensure_trait(self, name: str) -> None:
        self._request("PUT", f"/traits/{name}", WRITE_VERSION, ok=(201, 204))

    # -- a consumer's allocations (hot plug adds to an instance's) ------------------------
    def get_allocations(self, consumer: str) -> dict[str, Any]:
        """``{"allocations": {rp: {"resources"}}, "consumer_generation", "project_id",
        "user_id"}``; a consumer Placement does not know has no allocations and generation
        None."""
        return self._request("GET", f"/allocations/{consumer}", ALLOCATION_VERSION)

    def put_allocations(self, consumer: str, body: dict[str, Any]) -> None:
        """Replaces the consumer's allocations (an empty ``allocations`` removes them);
        a stale ``consumer_generation`` is a GenerationConflict."""
        self._request("PUT", f"/allocations/{consumer}", ALLOCATION_VERSION, body=body,
                      ok=(204,))


# Allocations carry consumer generations from 1.28.
ALLOCATION_VERSION = "1.28"

# The 409s told apart by their error code (Placement 1.23+).
CONFLICTS: dict[str | None, type[PlacementError]] = {
    "placement.concurrent_update": GenerationConflict,
    "placement.inventory.inuse": InventoryInUse,
    "placement.resource_provider.inuse": ProviderInUse,
    "placement.duplicate_name": AlreadyExists,
}


def _error(method: str, url: str, resp: Any) -> PlacementError:
    code, detail = None, resp.text[:500]
    try:
        err = resp.json()["errors"][0]
        code, detail = err.get("code"), err.get("detail", detail)
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    status = resp.status_code
    kind = ServerError if status >= 500 else NotFound if status == 404 else ClientError
    if status == 409:
        kind = CONFLICTS.get(code, ClientError)
        if kind in (ClientError, AlreadyExists) and "child resource providers" in detail:
            kind = ProviderInUse     # one with children: told by its text
    elif status == 400 and "parent provider UUID does not exist" in detail:
        kind = NotFound              # a create under a parent Placement has not: by its text
    return kind(f"{method} {url}: {status} {detail}", status, code)
