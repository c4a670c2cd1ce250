"""The allocation ledger (docs/ledger.md): its rows, ``GET /v1/ledger``, and device-hours
per project (or device, host, instance), ``GET /v1/usage``. Administrators only (the
policy rules ``acceld:ledger:get_all`` and ``acceld:usage:get``)."""

from __future__ import annotations

import datetime

import webob

from acceld.api import errors, listing, util
from acceld.objects import ledger


def parse_time(query: dict[str, str], field: str) -> datetime.datetime | None:
    """``query[field]`` (schema-checked ISO 8601 form) as naive UTC; a date alone is its
    midnight UTC, a time without an offset is UTC. 400 naming the field for a date that
    does not exist (2026-02-30)."""
    text = query.get(field)
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise errors.invalid(f"Invalid query field '{field}': {text!r} is not a date and "
                             f"time ({exc}).") from exc
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC).replace(tzinfo=None)
    return when


def _window(query: dict[str, str]) -> tuple[datetime.datetime | None,
                                            datetime.datetime | None]:
    since, until = parse_time(query, "since"), parse_time(query, "until")
    if since is not None and until is not None and until <= since:
        raise errors.invalid(f"Invalid query field 'until': {query['until']} is not after "
                             f"'since' ({query['since']}).")
    return since, until


def list_ledger(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v1/ledger[?project_id=&device_uuid=&arq_uuid=&since=&until=][&limit=&marker=]
    -> 200 {"ledger": [...]} in id order (``since`` <= ``at`` < ``until``), paged as
    every list (``marker``: a row's ``id``); 400 bad query."""
    limit, _ = listing.page_params(req, {k: v for k, v in query.items() if k != "marker"})
    since, until = _window(query)
    found = ledger.list_entries(
        util.state(req).db, project_id=query.get("project_id"),
        device_uuid=util.canonical_uuid(query["device_uuid"]) if "device_uuid" in query
        else None,
        arq_uuid=util.canonical_uuid(query["arq_uuid"]) if "arq_uuid" in query else None,
        since=since, until=until, limit=limit,
        marker=int(query["marker"]) if "marker" in query else None)
    return listing.respond(req, "ledger", found, lambda _req, item: item, marker_key="id")


def usage(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v1/usage?since=[&until=][&project_id=][&group_by=project|device|host|instance]
    -> 200 {"since", "until", "group_by", "usage": [{<group_by>, "device_hours",
    "holdings"}]}: the hours devices were held in [since, until) (until: now), an open
    holding counted up to ``until``; 400 bad query or ``until`` not after ``since``."""
    since, until = _window(query)
    assert since is not None                    # required by the schema
    # now, naive UTC (as the ledger keeps ``at``)
    until = until or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    if until <= since:
        raise errors.invalid(f"Invalid query field 'since': {query['since']} is not "
                             "before now.")
    group_by = query.get("group_by", "project")
    rows = ledger.usage(util.state(req).db, since=since, until=until,
                        project_id=query.get("project_id"), group_by=group_by)
    return util.json_response({"since": since, "until": until, "group_by": group_by,
                               "usage": rows})
