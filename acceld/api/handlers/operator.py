"""Operator endpoints behind the seed's CLI verbs: services, drivers, backends, discovery,
device stats; the Prometheus metrics; a device's health life cycle and maintenance
(docs/health.md)."""

from __future__ import annotations

from typing import Any

import webob
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg

from acceld import clients, states
from acceld.api import metrics, util
from acceld.clients import placement as placement_client
from acceld.conf import placement as placement_conf
from acceld.objects import health, services
from acceld.objects import placement as placement_objects


def list_services(req: webob.Request) -> util.Reply:
    """GET /v1/services -> 200 {"services": [...]} with liveness, each agent's owning
    ``conductor`` and each conductor's count of alive agents it owns (``hosts``)."""
    st = util.state(req)
    return util.json_response({
        "services": services.list_services(st.db, st.conf.conductor.service_down_time),
        "placement": placement_objects.list_states(st.db)})


# How long GET /v1/placement waits for Placement's answer to its probe.
PLACEMENT_PROBE_TIMEOUT = 5.0


def placement_status(req: webob.Request) -> util.Reply:
    """GET /v1/placement -> 200 {"placement": {"configured", "reachable", "detail"},
    "hosts": [...]}: whether Placement is configured and answers now (one GET of its root
    from this process, with this process's ``[placement]`` options), and per host the last
    sync, in sync, conflicts, the last error and when it happened (``last_error_at``), and
    when the conductor tries that host again (``next_retry_at``, null when none is due)."""
    st = util.state(req)
    hosts = placement_objects.list_states(st.db)
    for row in hosts:
        row["last_error_at"] = row["last_attempt_at"] if row["last_error"] else None
    return util.json_response({"placement": _placement_reach(st.conf), "hosts": hosts})


def _placement_reach(conf: cfg.ConfigOpts) -> dict[str, Any]:
    if not placement_conf.enabled(conf):
        return {"configured": False, "reachable": None,
                "detail": "Placement is not configured ([placement] auth_type is unset): "
                          "acceld publishes no devices to Placement."}
    try:
        client = placement_client.PlacementClient(clients.make_adapter(conf, "placement"))
        client.probe(PLACEMENT_PROBE_TIMEOUT)
    except placement_client.Unreachable as exc:
        detail = str(exc)
    except placement_client.PlacementError as exc:  # its body is not passed on
        detail = f"Placement answered HTTP {exc.status} to GET /"
    except ks_exc.ClientException as exc:  # e.g. an auth plugin option missing
        detail = f"Placement client: {exc}"
    else:
        return {"configured": True, "reachable": True, "detail": "Placement answers."}
    return {"configured": True, "reachable": False, "detail": detail}


def placement_sync(req: webob.Request, body: dict[str, Any]) -> util.Reply:
    """POST /v1/placement/sync {"host"?, "dry_run"?} -> 200 {"results": [...]}."""
    results = util.state(req).conductor.placement_sync(body.get("host"),
                                                       bool(body.get("dry_run")))
    return util.json_response({"results": results})


def list_drivers(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v1/drivers[?host=&long=true] -> 200 {"drivers": [...]} per host; ``long``
    adds each driver's ``explanation`` (checks, expected vs found, skipped devices with
    the reason) and ``capabilities``."""
    long = query.get("long", "false").lower() in ("true", "1")
    return util.json_response({"drivers": services.list_driver_states(
        util.state(req).db, query.get("host"), long=long)})


def list_backends(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v1/backends[?host=] -> 200 {"backends": [{"host", "driver", "backend",
    "services", "devices", "deployables"}]}: the services each backend offers, as the
    drivers last reported them (``discover-services``)."""
    return util.json_response({"backends": services.list_backends(util.state(req).db,
                                                                  query.get("host"))})


def device_stats(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v1/accelerators/{uuid}/stats -> 200 {"uuid", "host", "stats": {name: number}}
    read from the device's agent now; 404, 409 not on a host, 503 agent unreachable."""
    return util.json_response(util.state(req).conductor.device_stats(uuid))


def driver_action(req: webob.Request, name: str, body: dict[str, Any]) -> util.Reply:
    """POST /v1/drivers/{name}/action {"action", "host"?} -> 200 per-host results."""
    results = util.state(req).conductor.driver_action(name, body["action"], body.get("host"))
    return util.json_response({"results": results})


def list_guests(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v1/guests[?host=] -> 200 {"guests": [...], "unreachable": [hosts]}: the
    instances each agent's hypervisor runs (what hot plug attaches to)."""
    return util.json_response(util.state(req).conductor.guests(query.get("host")))


def discover(req: webob.Request, body: dict[str, Any]) -> util.Reply:
    """POST /v1/discover {"host"?} -> 202 {"hosts": [...]} (agents asked to rediscover)."""
    hosts = util.state(req).conductor.discover(body.get("host"))
    return util.json_response({"hosts": hosts}, status=202)


def scrape(req: webob.Request) -> util.Reply:
    """GET /metrics -> 200 the Prometheus text exposition (docs/metrics.md): the fleet
    gauges, read from the database now in a fixed few aggregate statements, and the API's
    request counters and latency histograms."""
    body = util.state(req).metrics.exposition()
    return util.Reply(200, body, [("Content-Type", metrics.CONTENT_TYPE),
                                  ("Content-Length", str(len(body)))])


def show_health(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v1/accelerators/{uuid}/health -> 200 {"uuid", "host", "health", "lifecycle",
    "lifecycle_reason", "lifecycle_since", "maintenance" (null|draining|drained),
    "maintenance_reason", "maintenance_since", "schedulable", "bound": [holders]}; 404."""
    return util.json_response(health.status(util.state(req).db, uuid))


def health_action(req: webob.Request, uuid: str, body: dict[str, Any]) -> util.Reply:
    """POST /v1/accelerators/{uuid}/health {"action": quarantine|release|reset,
    "reason"?} -> 200 the health view with the ``transition`` (a reset answers once its
    driver is done or ``[health] reset_wait`` passed: ``lifecycle`` resetting, healthy or
    failed); 404; 409 when the device's life-cycle state does not allow the action (the
    message names both states) or, for a reset, while anything holds the device; 503."""
    return util.json_response(util.state(req).conductor.device_health(
        uuid, body["action"], body.get("reason", "")))


def drain(req: webob.Request, uuid: str, body: dict[str, Any]) -> util.Reply:
    """PUT /v1/accelerators/{uuid}/maintenance {"reason"?} -> 200 the health view:
    reserved in Placement at once and refused to new binds; ``bound`` lists the binds it
    keeps; ``maintenance`` is draining until they are gone, then drained; 404; 503."""
    return util.json_response(util.state(req).conductor.device_maintenance(
        uuid, states.MAINTENANCE_DRAIN, body.get("reason", "")))


def undrain(req: webob.Request, uuid: str) -> util.Reply:
    """DELETE /v1/accelerators/{uuid}/maintenance -> 200 the health view, back in
    service (schedulable again where nothing else stops it); 404; 503."""
    return util.json_response(util.state(req).conductor.device_maintenance(
        uuid, states.MAINTENANCE_UNDRAIN, ""))
