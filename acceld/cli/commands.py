"""Handlers of the CLI verbs; each takes the API client and parsed args and returns 0,
or raises :class:`CliError` (failed) or :class:`TimedOut` (not finished in time) after
printing what it got."""

from __future__ import annotations

import argparse
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from acceld import AGENT_BINARY
from acceld.cli.client import ApiError, Client, CliError, TimedOut
from acceld.cli.output import (
    print_json,
    print_line,
    print_list,
    print_object,
    print_progress,
    render_attached_to,
    render_value,
)

ACC_COLUMNS = ("uuid", "name", "host", "device_type", "state", "health", "lifecycle",
               "maintenance", "attached_to")
DRIVER_COLUMNS = ("host", "name", "version", "state", "device_count")
SERVICE_COLUMNS = ("host", "binary", "version", "last_seen_at", "alive", "conductor", "hosts")
RESULT_COLUMNS = ("host", "driver", "ok", "error")
PLACEMENT_COLUMNS = ("host", "in_sync", "last_synced_at", "compute_rp_uuid")
BACKEND_COLUMNS = ("host", "driver", "backend", "services", "devices")
GUEST_COLUMNS = ("host", "uuid", "name", "running", "arqs")
FIT_COLUMNS = ("hostname", "count", "device_rp_uuids")
NOT_FIT_COLUMNS = ("hostname", "reason", "detail")
DRY_RUN_COLUMNS = ("device_profile_group_id", "hostname", "device_rp_uuid", "device_uuid")
PROGRAM_FINISHED = ("done", "failed")
# The transient state of each state change an operator asks for.
TRANSITIONS = {"ready": "installing", "inactive": "uninstalling"}
POLL_INTERVAL = 0.5   # seconds between two reads while waiting
PROGRESS_EVERY = 10.0  # a progress line at least this often while nothing changes


def _acc_path(uuid: str, suffix: str = "") -> str:
    return f"/v1/accelerators/{quote(uuid, safe='')}{suffix}"


def _expect(value: Any, kind: type, what: str) -> Any:
    """``value`` when it is a ``kind``; else the server's answer lacks ``what``."""
    if not isinstance(value, kind):
        raise CliError(f"unexpected answer from server: no {what}")
    return value


def _list_key(body: Any, key: str) -> list[dict[str, Any]]:
    return _expect(body.get(key) if isinstance(body, dict) else None, list, f"'{key}' list")


def _acc_obj(obj: Any) -> dict[str, Any]:
    return _expect(obj, dict, "accelerator object")


def _print_acc(obj: Any, fmt: str) -> None:
    print_object(_acc_obj(obj), fmt)


def _wait(what: str, current: dict[str, Any], read: Callable[[], dict[str, Any]],
          finished: Callable[[dict[str, Any]], bool], describe: Callable[[dict[str, Any]], str],
          seconds: float) -> tuple[dict[str, Any], bool]:
    """Read ``what`` again until it is ``finished`` or ``seconds`` have passed, with progress
    on stderr; returns the last object read and whether it finished."""
    if seconds <= 0:
        return current, finished(current)
    started = time.monotonic()
    deadline = started + seconds
    shown, shown_at = None, started
    while not finished(current):
        now = time.monotonic()
        text = describe(current)
        if text != shown or now - shown_at >= PROGRESS_EVERY:
            print_progress(f"waiting for {what}: {text} ({now - started:.0f}s elapsed, "
                           f"up to {seconds:g}s)")
            shown, shown_at = text, now
        if now >= deadline:
            return current, False
        time.sleep(min(POLL_INTERVAL, deadline - now))
        current = read()
    if shown is not None:
        print_progress(f"{what}: {describe(current)} after {time.monotonic() - started:.0f}s")
    return current, True


def _same_uuid(a: Any, b: str) -> bool:
    try:
        return uuidlib.UUID(str(a)) == uuidlib.UUID(b)
    except ValueError:
        return str(a) == b


def _given(**fields: Any) -> dict[str, Any]:
    """The fields of a request body whose option was given (not absent, not empty)."""
    return {key: value for key, value in fields.items() if value}


def _say_next_page(body: dict[str, Any], key: str, rows: list[dict[str, Any]], what: str,
                   marker: str) -> None:
    """With --limit: on stderr, the --marker where the next page starts, if there is one."""
    links = body.get(f"{key}_links") or []
    if rows and any(isinstance(link, dict) and link.get("rel") == "next" for link in links):
        print_progress(f"more {what} follow: --marker {rows[-1].get(marker)}")


def _print_result(fmt: str, data: Any, text: str) -> None:
    """``data`` as JSON with ``-f json``, else the line ``text``."""
    if fmt == "json":
        print_json(data)
    else:
        print_line(text)


# --- accelerator ---------------------------------------------------------------


def acc_list(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/accelerators; with --limit, stderr says where a next page starts."""
    params = {key: getattr(args, key) for key in
              ("host", "state", "device_type", "instance_uuid", "limit", "marker")}
    body = client.get("/v1/accelerators", params)
    rows = _list_key(body, "accelerator")
    print_list(rows, ACC_COLUMNS, args.format, {"attached_to": render_attached_to})
    _say_next_page(body, "accelerator", rows, "accelerators", "uuid")
    return 0


def acc_show(client: Client, args: argparse.Namespace) -> int:
    _print_acc(client.get(_acc_path(args.uuid)), args.format)
    return 0


def acc_create(client: Client, args: argparse.Namespace) -> int:
    """POST /v1/accelerators; print the new uuid from the Location header."""
    body = {"name": args.name, **_given(uuid=args.uuid)}
    location = client.request("POST", "/v1/accelerators", body=body)[1].get("Location") or ""
    uuid = location.rstrip("/").rsplit("/", 1)[-1] if location else args.uuid
    if not uuid:
        raise CliError("unexpected answer from server: no Location of the new accelerator")
    _print_result(args.format, {"uuid": uuid, "location": location}, uuid)
    return 0


def acc_set_state(client: Client, args: argparse.Namespace) -> int:
    """PUT state ``args.target`` and wait (--wait) for the driver's step; failed on error."""
    state, transient = args.target, TRANSITIONS[args.target]
    record = _acc_obj(client.put(_acc_path(args.uuid, "/state"), {"state": state}))
    record, finished = _wait(
        f"accelerator {args.uuid}", record,
        lambda: _acc_obj(client.get(_acc_path(args.uuid))),
        lambda r: r.get("state") != transient,
        lambda r: f"state {r.get('state')}", args.wait)
    _print_acc(record, args.format)
    if record.get("state") == "error":
        raise CliError(f"set-{state} of accelerator {args.uuid} failed: "
                       f"{record.get('last_error') or 'the device is in state error'}")
    if not finished:
        if args.wait:
            raise TimedOut(f"accelerator {args.uuid} is still {transient} after "
                           f"{args.wait:g}s (--wait)")
        print_progress(f"accelerator {args.uuid} is {transient}; `acceld accelerator show "
                       f"{args.uuid}` tells when it is done")
    return 0


def acc_set_specs(client: Client, args: argparse.Namespace) -> int:
    """PUT acc_specs guarded by a revision (read from the server when not given)."""
    revision = args.revision
    if revision is None:
        current = client.get(_acc_path(args.uuid))
        if not isinstance(current, dict) or not isinstance(current.get("revision"), int):
            raise CliError(f"accelerator {args.uuid} has no revision to guard the update")
        revision = current["revision"]
    body = {"acc_specs": args.specs, "revision": revision}
    try:
        obj = client.put(_acc_path(args.uuid, "/acc_specs"), body)
    except ApiError as exc:
        if exc.status == 409:
            raise CliError(
                f"409 conflict: accelerator {args.uuid} was changed by another writer "
                f"(revision {revision} is stale); show it again and retry. "
                f"Server said: {exc.detail}"
            ) from exc
        raise
    _print_acc(obj, args.format)
    return 0


def acc_attach(client: Client, args: argparse.Namespace) -> int:
    """PUT /v1/accelerators/UUID with an instance or a host (``attach-instance`` too)."""
    body = {"instance_uuid": args.instance} if args.instance else {"host": args.host}
    _print_acc(client.put(_acc_path(args.uuid), body), args.format)
    return 0


def acc_detach(client: Client, args: argparse.Namespace) -> int:
    """DELETE /v1/accelerators/UUID; failed when it is not attached (the API's DELETE
    answers 204 for that too) or stays attached (a 409: bound requests hold it, or the
    instance has not released its devices yet)."""
    if not _acc_obj(client.get(_acc_path(args.uuid))).get("attached_to"):
        raise CliError(f"accelerator {args.uuid} is not attached")
    try:
        client.delete(_acc_path(args.uuid))
    except ApiError as exc:
        if exc.status == 409:
            raise CliError(f"accelerator {args.uuid} is still attached: {exc.detail}") from exc
        raise
    _print_result(args.format, {"uuid": args.uuid, "detached": True},
                  f"Detached accelerator {args.uuid}")
    return 0


# --- seed verbs -------------------------------------------------------------------


def driver_list(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/drivers; --long adds errors and each driver's explanation of its discovery."""
    params = {"host": args.host, "long": "true" if args.long else None}
    rows = _list_key(client.get("/v1/drivers", params), "drivers")
    columns = DRIVER_COLUMNS + ("error",) if args.long else DRIVER_COLUMNS
    print_list(rows, columns, args.format)
    if args.long and args.format != "json":
        for row in rows:
            _print_explanation(row)
    return 0


def _print_explanation(row: dict[str, Any]) -> None:
    """A driver's explanation as text: what it checked and what it left out, and why."""
    explanation = row.get("explanation")
    caps = ", ".join(row.get("capabilities") or []) or "none"
    print_line("")
    print_line(f"{row.get('host')} / {row.get('name')} (capabilities: {caps})")
    if not explanation:
        print_line("  no explanation reported")
        return
    expected = explanation.get("expected")
    print_line(f"  found {explanation.get('found')} device(s), expected "
               f"{'unknown' if expected is None else expected}")
    for check in explanation.get("checks") or []:
        mark = "ok  " if check.get("ok") else "FAIL"
        detail = f": {check['detail']}" if check.get("detail") else ""
        print_line(f"  [{mark}] {check.get('name')}{detail}")
    for skipped in explanation.get("skipped") or []:
        print_line(f"  skipped {skipped.get('address')}: {skipped.get('reason')}")


def service_list(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/services; the table view adds each host's Placement sync state."""
    body = client.get("/v1/services")
    print_list(_list_key(body, "services"), SERVICE_COLUMNS, args.format)
    placement = body.get("placement") or []
    if args.format != "json" and placement:
        print_line("Placement:")
        print_list(placement, PLACEMENT_COLUMNS, "table")
    return 0


def placement_status(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/placement: whether Placement is configured and answers, then per host the
    sync state, last error and next retry; 1 when Placement is unreachable."""
    body = client.get("/v1/placement")
    rows = _list_key(body, "hosts")
    reach = _expect(body.get("placement"), dict, "'placement' object")
    if args.format == "json":
        print_json(body)
    else:
        if rows:
            print_list(rows, PLACEMENT_COLUMNS + ("last_error", "last_error_at",
                                                  "next_retry_at", "conflicts"), args.format)
        if not reach.get("configured"):
            print_line(str(reach.get("detail")))
        elif not rows and reach.get("reachable"):
            print_line("Placement answers; no host has been synced yet.")
    if reach.get("configured") and not reach.get("reachable"):
        raise CliError(str(reach.get("detail")))
    return 0


def placement_sync(client: Client, args: argparse.Namespace) -> int:
    """POST /v1/placement/sync: show the plan per host, applied unless --dry-run."""
    body = {"dry_run": bool(args.dry_run), **_given(host=args.host)}
    results = _list_key(client.post("/v1/placement/sync", body), "results")
    if args.format == "json":
        print_json(results)
    else:
        steps = [dict(step, host=r["host"]) for r in results for step in r["steps"]]
        print_list(steps, ("host", "action", "name", "provider"), "table")
        print_list(results, ("host", "in_sync", "error"), "table")
    failed = [r["host"] for r in results if r.get("error")]
    if failed:
        raise CliError(f"Placement sync failed for: {', '.join(failed)}")
    return 0


def discover_services(client: Client, args: argparse.Namespace) -> int:
    """POST /v1/discover, then GET /v1/backends as the drivers last reported them (the
    rediscovery shows up with each host's next report)."""
    if args.host:
        asked = [args.host]
    else:
        services = _list_key(client.get("/v1/services"), "services")
        asked = sorted({str(s["host"]) for s in services if s.get("binary") == AGENT_BINARY})
    hosts = _list_key(client.post("/v1/discover", _given(host=args.host)), "hosts")
    backends = _list_key(client.get("/v1/backends", {"host": args.host}), "backends")
    if args.format == "json":
        print_json({"hosts": hosts, "backends": backends})
    else:
        print_list([{"host": h} for h in hosts], ("host",), "table")
        print_list(backends, BACKEND_COLUMNS, "table", {"services": lambda v: ", ".join(v or [])})
    silent = [h for h in asked if h not in hosts]
    if silent:
        raise CliError(f"no agent answered on: {', '.join(silent)}")
    return 0


def driver_action(client: Client, args: argparse.Namespace) -> int:
    """POST /v1/drivers/NAME/action ``args.action``; failed unless it worked on every host."""
    action = args.action
    path = f"/v1/drivers/{quote(args.name, safe='')}/action"
    body = {"action": action, **_given(host=args.host)}
    results = _list_key(client.post(path, body), "results")
    print_list(results, RESULT_COLUMNS, args.format)
    if not results:
        raise CliError(f"no agent host to {action} driver {args.name} on")
    failed = [r for r in results if not r.get("ok")]
    if failed:
        hosts = ", ".join(str(r.get("host")) for r in failed)
        raise CliError(f"{action} of driver {args.name} failed on {len(failed)} of "
                       f"{len(results)} host(s): {hosts}")
    return 0


# --- FPGA programming and device stats ---------------------------------------------


def _program_path(uuid: str) -> str:
    return f"/v2/deployables/{quote(uuid, safe='')}/program"


def deployable_program(client: Client, args: argparse.Namespace) -> int:
    """PATCH /v2/deployables/UUID/program; with --wait, poll until it is done or failed."""
    image: dict[str, str] = {"image_sha256": args.sha256}
    if args.image_uuid:
        image["image_uuid"] = args.image_uuid
    else:
        image["image_path"] = args.image_path
    patch = [{"op": "replace", "path": "/program", "value": [image]}]
    operation = _operation(client.patch(_program_path(args.uuid), patch))
    operation, finished = _wait(
        f"programming of {args.uuid}", operation,
        lambda: _operation(client.get(_program_path(args.uuid))),
        lambda op: op.get("state") in PROGRAM_FINISHED,
        _describe_program, args.wait)
    print_object(operation, args.format)
    if operation.get("state") == "failed":
        raise CliError(f"programming {args.uuid} failed: {operation.get('message')}")
    if not finished and args.wait:
        raise TimedOut(f"programming {args.uuid} is still {operation.get('state')} after "
                       f"{args.wait:g}s (--wait)")
    return 0


def _describe_program(operation: dict[str, Any]) -> str:
    progress = operation.get("progress")
    parts = [str(operation.get("state")), "" if progress is None else f"{progress}%",
             str(operation.get("message") or "")]
    return " ".join(p for p in parts if p)


def _operation(body: Any) -> dict[str, Any]:
    return _expect(body.get("program") if isinstance(body, dict) else None, dict,
                   "program operation")


def deployable_program_status(client: Client, args: argparse.Namespace) -> int:
    """GET /v2/deployables/UUID/program: the newest program operation."""
    operation = client.get(_program_path(args.uuid)).get("program")
    if operation is None:
        raise CliError(f"deployable {args.uuid} was never programmed through acceld")
    print_object(operation, args.format)
    return 0


def acc_stats(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/accelerators/UUID/stats (read from the device's agent now)."""
    body = client.get(_acc_path(args.uuid, "/stats"))
    if args.format == "json":
        print_json(body)
    else:
        print_list([{"name": k, "value": v} for k, v in sorted(body["stats"].items())],
                   ("name", "value"), "table")
    return 0


def detach_instance(client: Client, args: argparse.Namespace) -> int:
    """Detach one or every accelerator of INSTANCE_UUID; failed when any detach failed."""
    instance, detached, failed = args.instance_uuid, [], []
    if args.accelerator:
        attached = _acc_obj(client.get(_acc_path(args.accelerator))).get("attached_to")
        if not (isinstance(attached, dict) and attached.get("type") == "instance"
                and _same_uuid(attached.get("id"), instance)):
            raise CliError(f"accelerator {args.accelerator} is not attached to instance {instance}")
        uuids = [args.accelerator]
    else:
        rows = _list_key(client.get("/v1/accelerators", {"instance_uuid": instance}), "accelerator")
        uuids = [str(r["uuid"]) for r in rows if r.get("uuid")]
        if not uuids:
            raise CliError(f"no accelerator is attached to instance {instance}")
    for uuid in uuids:
        try:
            client.delete(_acc_path(uuid))
        except ApiError as exc:
            failed.append({"uuid": uuid, "error": str(exc)})
            continue
        detached.append(uuid)
        if args.format != "json":
            print_line(f"Detached accelerator {uuid} from instance {instance}")
    if args.format == "json":
        print_json({"instance_uuid": instance, "detached": detached, "failed": failed})
    if failed:
        reasons = "; ".join(f"{f['uuid']}: {f['error']}" for f in failed)
        raise CliError(f"{len(failed)} of {len(uuids)} accelerator(s) of instance "
                       f"{instance} not detached: {reasons}")
    return 0


# --- hot plug (acceld's v2 extension) -------------------------------------------------

def _hot_path(uuid: str) -> str:
    return f"/v2/accelerator_requests/{quote(uuid, safe='')}/hot_plug"


def guest_list(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/guests: the instances hot plug can attach to; failed when a host did not
    answer (after printing what the others said)."""
    body = client.get("/v1/guests", {"host": args.host} if args.host else None)
    print_list(_list_key(body, "guests"), GUEST_COLUMNS, args.format)
    unreachable = body.get("unreachable") or []
    if unreachable:
        raise CliError(f"the agents of {', '.join(map(str, unreachable))} did not answer")
    return 0


def arq_attach(client: Client, args: argparse.Namespace) -> int:
    """PUT hot_plug {instance_uuid}: the ARQ's device attached live to the instance."""
    print_progress(f"attaching ARQ {args.uuid} to instance {args.instance}")
    print_object(_expect(client.put(_hot_path(args.uuid), {"instance_uuid": args.instance}),
                         dict, "accelerator request"), args.format)
    return 0


def arq_detach(client: Client, args: argparse.Namespace) -> int:
    """DELETE hot_plug, asked again until the guest released the device or --wait
    passed (then TimedOut: the device is still in the guest, the ARQ Detaching)."""
    def ask() -> dict[str, Any]:
        return _expect(client.delete(_hot_path(args.uuid)), dict, "accelerator request")

    record, finished = _wait(f"ARQ {args.uuid} to leave its instance", ask(), ask,
                             lambda r: r.get("hot_plug") != "Detaching",
                             lambda r: f"hot_plug {r.get('hot_plug')}", args.wait)
    print_object(record, args.format)
    if not finished:
        raise TimedOut(f"the instance has not released ARQ {args.uuid}'s device after "
                       f"{args.wait:g}s (--wait): it stays attached, the ARQ Detaching; run "
                       "the detach again to keep waiting")
    return 0



# --- allocation ledger ---------------------------------------------------------------

LEDGER_COLUMNS = ("id", "at", "event", "kind", "device_uuid", "deployable_uuid",
                  "attach_handle_uuid", "arq_uuid", "instance_uuid", "host", "project_id",
                  "user_id", "from_state", "to_state")


def usage(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/usage: device-hours per ``--group-by`` value (table, JSON or CSV)."""
    body = client.get("/v1/usage", {"project_id": args.project, "since": args.since,
                                    "until": args.until, "group_by": args.group_by})
    rows = _list_key(body, "usage")
    print_list(rows, (args.group_by, "device_hours", "holdings"), args.format)
    if args.format == "table":
        print_line(f"from {body.get('since')} to {body.get('until')} (UTC)")
    return 0


def ledger_list(client: Client, args: argparse.Namespace) -> int:
    """GET /v1/ledger; with --limit, stderr says where a next page starts."""
    body = client.get("/v1/ledger", {
        "project_id": args.project, "device_uuid": args.device, "arq_uuid": args.arq,
        "since": args.since, "until": args.until, "limit": args.limit,
        "marker": args.marker})
    rows = _list_key(body, "ledger")
    print_list(rows, LEDGER_COLUMNS, args.format)
    _say_next_page(body, "ledger", rows, "rows", "id")
    return 0


# --- device health life cycle and drain (docs/health.md) ----------------------------

def _health_view(body: Any) -> dict[str, Any]:
    return _expect(body, dict, "health view")


def _print_health(view: dict[str, Any], fmt: str) -> None:
    """The device's health view; in a table, the change it made on one line first."""
    if fmt == "json":
        print_json(view)
        return
    change = view.get("transition")
    shown = {k: v for k, v in view.items() if k != "transition"}
    if isinstance(change, dict):
        after = change.get("after")
        print_line(f"{change.get('what')}: {change.get('before')} -> {after}"
                   if change.get("changed") else f"{change.get('what')}: already {after}")
    print_object(shown, fmt)


def device_health(client: Client, args: argparse.Namespace) -> int:
    _print_health(_health_view(client.get(_acc_path(args.uuid, "/health"))), args.format)
    return 0


def device_health_action(client: Client, args: argparse.Namespace) -> int:
    """POST /v1/accelerators/UUID/health {action, reason?}; a reset with --wait follows
    the device until it is no longer resetting, and fails when it ends failed."""
    body = {"action": args.action, **_given(reason=args.reason)}
    view = _health_view(client.post(_acc_path(args.uuid, "/health"), body))
    finished = True
    if args.action == "reset":
        change = view.get("transition")
        view, finished = _wait(
            f"reset of {args.uuid}", view,
            lambda: _health_view(client.get(_acc_path(args.uuid, "/health"))),
            lambda v: v.get("lifecycle") != "resetting",
            lambda v: f"lifecycle {v.get('lifecycle')}", args.wait)
        view["transition"] = change
    _print_health(view, args.format)
    if view.get("lifecycle") == "failed" and args.action == "reset":
        raise CliError(f"reset of accelerator {args.uuid} failed: "
                       f"{view.get('lifecycle_reason') or 'the device is failed'}")
    if not finished and args.wait:
        raise TimedOut(f"accelerator {args.uuid} is still resetting after {args.wait:g}s "
                       "(--wait)")
    return 0


def device_maintenance(client: Client, args: argparse.Namespace) -> int:
    """PUT (drain) or DELETE (undrain) /v1/accelerators/UUID/maintenance; a drain lists
    the binds it keeps on stderr."""
    path = _acc_path(args.uuid, "/maintenance")
    if args.drain:
        view = _health_view(client.put(path, _given(reason=args.reason)))
        for held in view.get("bound") or []:
            print_progress(f"still bound: {render_value(held)}")
    else:
        view = _health_view(client.delete(path))
    _print_health(view, args.format)
    return 0


# --- explain (acceld's v2 extension, docs/explain.md) -----------------------------------


def profile_availability(client: Client, args: argparse.Namespace) -> int:
    """GET /v2/device_profiles/NAME/availability: the hosts where instances of the profile
    fit now (how many), then every other host with its first reason. An answer that
    nothing fits is an answer: 0."""
    path = f"/v2/device_profiles/{quote(args.profile, safe='')}/availability"
    body = _expect(client.get(path, {"group_policy": args.group_policy}), dict,
                   "availability object")
    hosts, others = _list_key(body, "hosts"), _list_key(body, "not_fitting")
    if args.format == "json":
        print_json(body)
        return 0
    print_line(f"{body.get('count')} instance(s) of device profile "
               f"{body.get('device_profile_name')} fit now on {len(hosts)} host(s) "
               f"(group_policy {body.get('group_policy')})")
    if hosts:
        print_list(hosts, FIT_COLUMNS, "table", {"device_rp_uuids": lambda v: " ".join(v)})
    if others:
        print_line("Not fitting:")
        print_list(others, NOT_FIT_COLUMNS, "table")
    return 0


def arq_dry_run(client: Client, args: argparse.Namespace) -> int:
    """POST /v2/accelerator_requests/dry_run: the ARQs the profile would make and the
    device each would bind to (nothing is created); failed when they would not bind."""
    body: dict[str, Any] = {"device_profile_name": args.profile}
    for key, value in (("hostname", args.host), ("group_policy", args.group_policy)):
        if value is not None:
            body[key] = value
    answer = _expect(client.post("/v2/accelerator_requests/dry_run", body), dict,
                     "dry run object")
    if args.format == "json":
        print_json(answer)
    elif answer.get("would_bind"):
        print_list(_list_key(answer, "arqs"), DRY_RUN_COLUMNS, "table")
    if not answer.get("would_bind"):
        where = f" on {args.host}" if args.host else ""
        raise CliError(f"the ARQs of device profile {args.profile} would not bind{where}: "
                       f"{answer.get('reason')}: {answer.get('detail')}")
    return 0
