"""Tests of the acceld operator CLI against a real in-process fake of the v1 REST API."""

from __future__ import annotations

import copy
import json
import socket
import threading
import uuid as uuidlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from acceld.cli.output import safe
from acceld.cli.shell import main

INSTANCE = "11111111-1111-4111-8111-111111111111"
OTHER_INSTANCE = "22222222-2222-4222-8222-222222222222"
ACC_A = "aaaaaaaa-0000-4000-8000-000000000001"
ACC_B = "aaaaaaaa-0000-4000-8000-000000000002"
ACC_C = "aaaaaaaa-0000-4000-8000-000000000003"
ACC_D = "aaaaaaaa-0000-4000-8000-000000000004"
MISSING = "ffffffff-ffff-4fff-8fff-ffffffffffff"
BOOM = "b0000000-0000-4000-8000-00000000b00b"
LIST_FILTERS = {"host", "state", "device_type", "instance_uuid", "limit", "marker"}


def _acc(uuid: str, name: str, host: str | None, attached: Any = None,
         state: str = "ready") -> dict[str, Any]:
    return {
        "uuid": uuid, "name": name, "host": host, "driver": "fake",
        "device_type": "GPU" if host else None, "vendor_id": "10de",
        "product_id": "20b5", "state": state, "health": "ok",
        "acc_specs": {"num": 1, "remote": 0}, "attached_to": attached,
        "revision": 3, "last_error": None,
        "created_at": "2026-11-22T10:00:00+00:00", "updated_at": None,
    }


class FakeApi:
    """In-memory state of the fake acceld and a log of the requests it got."""

    def __init__(self) -> None:
        self.accs: dict[str, dict[str, Any]] = {
            ACC_A: _acc(ACC_A, "host1-fake-gpu-0", "host1",
                        {"type": "instance", "id": INSTANCE}),
            ACC_B: _acc(ACC_B, "host1-fake-gpu-1", "host1",
                        {"type": "instance", "id": INSTANCE}),
            ACC_C: _acc(ACC_C, "host2-fake-gpu-0", "host2",
                        {"type": "host", "id": "host2"}),
            ACC_D: _acc(ACC_D, "host2-fake-gpu-1", "host2", state="inactive"),
        }
        self.drivers = [
            {"host": "host1", "name": "fake", "version": "1.0", "state": "installed",
             "device_count": 2, "error": None},
            {"host": "host2", "name": "nvidia", "version": "2.1", "state": "failed",
             "device_count": 0, "error": "nvidia-smi not found"},
        ]
        self.services = [
            {"host": "cond1", "binary": "acceld-conductor", "version": "0.1.0",
             "last_seen_at": "2026-11-22T10:00:01+00:00", "alive": True,
             "conductor": None, "hosts": 1},
            {"host": "host1", "binary": "acceld-agent", "version": "0.1.0",
             "last_seen_at": "2026-11-22T10:00:00+00:00", "alive": True,
             "conductor": "cond1", "hosts": None},
        ]
        self.explanations = {
            "host1": {"checks": [{"name": "vfio-pci loaded", "ok": True, "detail": ""},
                                 {"name": "IOMMU on", "ok": False,
                                  "detail": "no /sys/kernel/iommu_groups"}],
                      "expected": 3, "found": 2,
                      "skipped": [{"address": "0000:5e:00.0",
                                   "reason": "bound to a host driver in use"}]},
            "host2": None,
        }
        self.backends = [
            {"host": "host1", "driver": "generic", "backend": "crypto",
             "services": ["asym", "sym"], "devices": 1, "deployables": 4},
            {"host": "host2", "driver": "generic", "backend": "net",
             "services": ["physnet1"], "devices": 1, "deployables": 1},
        ]
        self.programs: dict[str, list[dict[str, Any]]] = {}
        self.install_errors: dict[str, str] = {}   # uuid -> the driver's install error
        self.detach_refused: set[str] = set()      # uuids whose DELETE answers 409
        self.log: list[dict[str, Any]] = []
        self.bump_after_get = False
        self.lock = threading.Lock()


def _error(status: int, title: str, detail: str) -> tuple[int, dict[str, Any]]:
    return status, {"errors": [{"status": status, "code": "acceld.test",
                                "title": title, "detail": detail,
                                "request_id": "req-test"}]}


def _handle(api: FakeApi, method: str, path: str, query: dict[str, list[str]],
            body: Any, base: str) -> tuple[int, Any, dict[str, str]]:
    """The fake contract of docs/api-v1.md; returns (status, body, headers)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["v1", "accelerators"]:
        if len(parts) == 2 and method == "GET":
            unknown = set(query) - LIST_FILTERS
            if unknown:
                return (*_error(400, "Bad Request", f"unknown {sorted(unknown)}"), {})
            rows = list(api.accs.values())
            if "host" in query:
                rows = [r for r in rows if r["host"] == query["host"][0]]
            if "state" in query:
                rows = [r for r in rows if r["state"] == query["state"][0]]
            if "instance_uuid" in query:
                rows = [r for r in rows if r["attached_to"]
                        and r["attached_to"]["type"] == "instance"
                        and r["attached_to"]["id"] == query["instance_uuid"][0]]
            if "limit" in query and len(rows) > int(query["limit"][0]):
                rows = rows[: int(query["limit"][0])]
                return 200, {"accelerator": rows, "accelerator_links": [
                    {"rel": "next", "href": f"{base}{path}?marker={rows[-1]['uuid']}"}]}, {}
            return 200, {"accelerator": rows}, {}
        if len(parts) == 2 and method == "POST":
            if not isinstance(body, dict) or set(body) - {"name", "uuid"} or "name" not in body:
                return (*_error(400, "Bad Request", "bad body"), {})
            new = body.get("uuid") or str(uuidlib.uuid4())
            api.accs[new] = _acc(new, body["name"], None, state="inactive")
            return 201, None, {"Location": f"{base}/v1/accelerators/{new}"}
        uuid = parts[2]
        if uuid == BOOM:
            return 502, "Bad Gateway from proxy", {"Content-Type": "text/plain"}
        acc = api.accs.get(uuid)
        if acc is None:
            return (*_error(404, "Not Found", f"Accelerator {uuid} not found."), {})
        if len(parts) == 3 and method == "GET":
            out = copy.deepcopy(acc)
            if api.bump_after_get:
                acc["revision"] += 1  # another writer gets in between
            return 200, out, {"ETag": f'"{out["revision"]}"'}
        if len(parts) == 4 and parts[3] == "acc_specs" and method == "PUT":
            if "revision" not in body:
                return (*_error(428, "Precondition Required", "revision needed"), {})
            if body["revision"] != acc["revision"]:
                return (*_error(409, "Conflict",
                                f"Accelerator {uuid} revision is {acc['revision']}, "
                                f"not {body['revision']}."), {})
            acc["acc_specs"] = body["acc_specs"]
            acc["revision"] += 1
            return 200, acc, {}
        if len(parts) == 4 and parts[3] == "stats" and method == "GET":
            return 200, {"uuid": uuid, "host": acc["host"],
                         "stats": {"utilization_percent": 40.0, "memory_used_bytes": 1.0}}, {}
        if len(parts) == 4 and parts[3] == "state" and method == "PUT":
            acc["state"] = body["state"]
            if body["state"] == "ready" and uuid in api.install_errors:
                acc["state"], acc["last_error"] = "error", api.install_errors[uuid]
            acc["revision"] += 1
            return 200, acc, {}
        if len(parts) == 3 and method == "PUT":
            if len(body) != 1 or not ({"instance_uuid", "host"} & set(body)):
                return (*_error(400, "Bad Request", "exactly one target"), {})
            if acc["attached_to"]:
                return (*_error(409, "Conflict", f"Accelerator {uuid} is attached."), {})
            kind = "instance" if "instance_uuid" in body else "host"
            acc["attached_to"] = {"type": kind, "id": next(iter(body.values()))}
            acc["revision"] += 1
            return 200, acc, {}
        if len(parts) == 3 and method == "DELETE":
            if uuid in api.detach_refused:
                return (*_error(409, "Conflict",
                                f"Accelerator {uuid} has allocation records."), {})
            acc["attached_to"] = None
            acc["revision"] += 1
            return 204, None, {}
    if parts == ["v1", "drivers"] and method == "GET":
        rows = copy.deepcopy(api.drivers)
        if "host" in query:
            rows = [d for d in rows if d["host"] == query["host"][0]]
        if query.get("long") == ["true"]:
            for row in rows:
                row["explanation"] = api.explanations[row["host"]]
                row["capabilities"] = ["host_work"] if row["host"] == "host1" else []
        return 200, {"drivers": rows}, {}
    if parts == ["v1", "backends"] and method == "GET":
        rows = [b for b in api.backends if b["host"] == query.get("host", [b["host"]])[0]]
        return 200, {"backends": rows}, {}
    if parts[:2] == ["v2", "deployables"] and len(parts) == 4 and parts[3] == "program":
        return _program(api, method, parts[2], body)
    if len(parts) == 4 and parts[:2] == ["v1", "drivers"] and parts[3] == "action":
        hosts = [body["host"]] if body.get("host") else ["host1", "host2"]
        results = [{"host": h, "driver": parts[2],
                    "ok": not (parts[2] == "nvidia" and h == "host2"),
                    "error": "nvidia-smi not found"
                    if parts[2] == "nvidia" and h == "host2" else None}
                   for h in hosts]
        return 200, {"results": results}, {}
    if parts == ["v1", "services"] and method == "GET":
        return 200, {"services": api.services}, {}
    if parts == ["v1", "discover"] and method == "POST":
        return 202, {"hosts": [body["host"]] if body.get("host") else ["host1", "host2"]}, {}
    return (*_error(404, "Not Found", f"No route {method} {path}."), {})


def _program(api: FakeApi, method: str, uuid: str,
             body: Any) -> tuple[int, Any, dict[str, str]]:
    """A fake deployable whose program operation advances one step per status read and
    fails when the image's digest starts with "bad"."""
    ops = api.programs.setdefault(uuid, [])
    if method == "PATCH":
        image = body[0]["value"][0]
        op = {"uuid": f"op-{len(ops)}", "state": "queued", "progress": 0,
              "message": None, "image_ref": image.get("image_uuid") or image["image_path"],
              "fail": image["image_sha256"].startswith("bad")}
        ops.append(op)
        return 202, {"uuid": uuid, "program": op}, {}
    if not ops:
        return 200, {"uuid": uuid, "program": None}, {}
    op = ops[-1]
    if op["state"] in ("queued", "running"):
        op["progress"] = min(100, op["progress"] + 50)
        op["state"] = "running" if op["progress"] < 100 else (
            "failed" if op["fail"] else "done")
        op["message"] = "boom" if op["state"] == "failed" else f"{op['progress']}%"
    return 200, {"uuid": uuid, "program": op}, {}


def _make_handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5  # an idle keep-alive connection cannot hold a thread forever

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            base = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
            with api.lock:
                api.log.append({"method": self.command, "path": split.path,
                                "query": query, "body": body,
                                "token": self.headers.get("X-Auth-Token")})
                status, out, headers = _handle(api, self.command, unquote(split.path),
                                               query, body, base)
            if out is None:
                payload = b""
            elif isinstance(out, str):
                payload = out.encode()
            else:
                payload = json.dumps(out).encode()
                headers.setdefault("Content-Type", "application/json")
            self.send_response(status)
            self.send_header("x-openstack-request-id", "req-test")
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, FakeApi]]:
    for var in ("ACCELD_URL", "ACCELD_TOKEN", "OS_AUTH_URL"):
        monkeypatch.delenv(var, raising=False)
    api = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(api))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run(url: str, *argv: str) -> int:
    return main(["--url", url, "--timeout", "5", *argv])


# --- accelerator list / show / create ------------------------------------------


def test_list_table(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "list") == 0
    out = capsys.readouterr().out
    header = out.splitlines()[1]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "uuid", "name", "host", "device_type", "state", "health", "lifecycle", "maintenance",
        "attached_to"]
    assert f"instance:{INSTANCE}" in out
    assert "host:host2" in out
    row_d = next(line for line in out.splitlines() if ACC_D in line)
    cells = [c.strip() for c in row_d.strip().strip("|").split("|")]
    assert cells == [ACC_D, "host2-fake-gpu-1", "host2", "GPU", "inactive", "ok", "", "", ""]


def test_list_json_with_filters(fake, capsys):
    url, api = fake
    rc = run(url, "accelerator", "list", "--host", "host1", "--limit", "5", "-f", "json")
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert [a["uuid"] for a in data] == [ACC_A, ACC_B]
    assert data[0]["acc_specs"] == {"num": 1, "remote": 0}
    assert api.log[-1]["query"] == {"host": ["host1"], "limit": ["5"]}


def test_list_page_says_where_the_next_one_starts(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "list", "--limit", "3") == 0
    captured = capsys.readouterr()
    assert ACC_C in captured.out and ACC_D not in captured.out
    assert captured.err == f"more accelerators follow: --marker {ACC_C}\n"
    assert run(url, "accelerator", "list", "--limit", "4") == 0
    assert capsys.readouterr().err == ""


def test_global_format_before_verb(fake, capsys):
    url, _ = fake
    assert main(["--url", url, "-f", "json", "accelerator", "list", "--state",
                 "inactive"]) == 0
    assert [a["uuid"] for a in json.loads(capsys.readouterr().out)] == [ACC_D]


def test_url_from_env(fake, capsys, monkeypatch):
    url, _ = fake
    monkeypatch.setenv("ACCELD_URL", url)
    assert main(["accelerator", "show", ACC_A, "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "host1-fake-gpu-0"


def test_show_table(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "show", ACC_C) == 0
    out = capsys.readouterr().out
    assert "| Field" in out and "Value" in out
    assert '{"num":1,"remote":0}' in out
    assert '{"id":"host2","type":"host"}' in out
    assert "host2-fake-gpu-0" in out


def test_create_prints_uuid_from_location(fake, capsys):
    url, api = fake
    new = "cccccccc-0000-4000-8000-00000000000c"
    assert run(url, "accelerator", "create", "declared-0", "--uuid", new) == 0
    assert capsys.readouterr().out.strip() == new
    assert api.log[-1]["body"] == {"name": "declared-0", "uuid": new}
    assert run(url, "-f", "json", "accelerator", "create", "declared-1") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["location"] == f"{url}/v1/accelerators/{data['uuid']}"
    assert data["uuid"] in api.accs


# --- errors --------------------------------------------------------------------


def test_not_found_error(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "show", MISSING) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"ERROR: 404 Accelerator {MISSING} not found."
    assert "Traceback" not in captured.err


def test_error_falls_back_to_raw_text(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "show", BOOM) == 1
    assert capsys.readouterr().err.strip() == "ERROR: 502 Bad Gateway from proxy"


def test_attach_conflict_error(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "attach", ACC_A, "--host", "host1") == 1
    assert capsys.readouterr().err.strip() == f"ERROR: 409 Accelerator {ACC_A} is attached."


def test_connection_refused(capsys, monkeypatch):
    monkeypatch.delenv("ACCELD_TOKEN", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rc = main(["--url", f"http://127.0.0.1:{port}", "service-list"])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: cannot reach acceld at http://127.0.0.1:{port}: ")
    assert "Traceback" not in err


def test_token_sent_but_never_logged(fake, capsys):
    url, api = fake
    assert run(url, "service-list") == 0
    assert api.log[-1]["token"] is None
    assert run(url, "--token", "s3cret-tok", "--debug", "service-list") == 0
    assert api.log[-1]["token"] == "s3cret-tok"
    captured = capsys.readouterr()
    assert "DEBUG: REQ GET" in captured.err
    assert "s3cret-tok" not in captured.err + captured.out


# --- set-specs -----------------------------------------------------------------


def test_set_specs_reads_revision_then_puts(fake, capsys):
    url, api = fake
    rc = run(url, "accelerator", "set-specs", ACC_D, "--specs", '{"num": 2}', "-f", "json")
    assert rc == 0
    assert [(e["method"], e["path"]) for e in api.log] == [
        ("GET", f"/v1/accelerators/{ACC_D}"),
        ("PUT", f"/v1/accelerators/{ACC_D}/acc_specs")]
    assert api.log[1]["body"] == {"acc_specs": {"num": 2}, "revision": 3}
    data = json.loads(capsys.readouterr().out)
    assert data["acc_specs"] == {"num": 2} and data["revision"] == 4


def test_set_specs_explicit_revision_skips_get(fake, capsys):
    url, api = fake
    assert run(url, "accelerator", "set-specs", ACC_D, "--specs", "{}",
               "--revision", "3") == 0
    assert [e["method"] for e in api.log] == ["PUT"]
    assert "| revision" in capsys.readouterr().out


def test_set_specs_conflict(fake, capsys):
    url, api = fake
    api.bump_after_get = True
    assert run(url, "accelerator", "set-specs", ACC_D, "--specs", '{"num": 2}') == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("ERROR: 409 conflict: ")
    assert "revision 3 is stale" in captured.err
    assert f"Accelerator {ACC_D} revision is 4, not 3." in captured.err
    assert api.accs[ACC_D]["acc_specs"] == {"num": 1, "remote": 0}


# --- state, attach, detach -------------------------------------------------------


def test_set_ready_and_inactive(fake, capsys):
    url, api = fake
    assert run(url, "accelerator", "set-ready", ACC_D, "-f", "json") == 0
    assert api.log[-1]["body"] == {"state": "ready"}
    assert json.loads(capsys.readouterr().out)["state"] == "ready"
    assert run(url, "accelerator", "set-inactive", ACC_D) == 0
    assert api.log[-1]["body"] == {"state": "inactive"}
    assert api.accs[ACC_D]["state"] == "inactive"


def test_attach_and_detach(fake, capsys):
    url, api = fake
    assert run(url, "accelerator", "attach", ACC_D, "--instance", OTHER_INSTANCE) == 0
    assert api.log[-1]["body"] == {"instance_uuid": OTHER_INSTANCE}
    assert "instance" in capsys.readouterr().out
    assert run(url, "accelerator", "detach", ACC_D) == 0
    assert capsys.readouterr().out.strip() == f"Detached accelerator {ACC_D}"
    assert api.accs[ACC_D]["attached_to"] is None


def test_attach_instance_seed_verb(fake, capsys):
    url, api = fake
    assert run(url, "attach-instance", OTHER_INSTANCE, "--accelerator", ACC_D,
               "-f", "json") == 0
    assert json.loads(capsys.readouterr().out)["attached_to"] == {
        "type": "instance", "id": OTHER_INSTANCE}
    assert api.log[-1]["method"] == "PUT"


def test_detach_instance_without_accelerator(fake, capsys):
    url, api = fake
    assert run(url, "detach-instance", INSTANCE) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"Detached accelerator {ACC_A} from instance {INSTANCE}",
                   f"Detached accelerator {ACC_B} from instance {INSTANCE}"]
    assert api.log[0]["query"] == {"instance_uuid": [INSTANCE]}
    assert api.accs[ACC_A]["attached_to"] is None
    assert api.accs[ACC_B]["attached_to"] is None
    assert api.accs[ACC_C]["attached_to"] == {"type": "host", "id": "host2"}


def test_detach_instance_none_attached(fake, capsys):
    url, api = fake
    assert run(url, "detach-instance", OTHER_INSTANCE) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"ERROR: no accelerator is attached to instance {OTHER_INSTANCE}"
    assert [e["method"] for e in api.log] == ["GET"]


def test_detach_instance_with_accelerator_json(fake, capsys):
    url, api = fake
    assert run(url, "-f", "json", "detach-instance", INSTANCE, "--accelerator", ACC_B) == 0
    assert json.loads(capsys.readouterr().out) == {
        "instance_uuid": INSTANCE, "detached": [ACC_B], "failed": []}
    assert [e["method"] for e in api.log] == ["GET", "DELETE"]
    assert api.accs[ACC_A]["attached_to"] is not None


def test_detach_instance_refuses_an_accelerator_of_another_instance(fake, capsys):
    url, api = fake
    assert run(url, "detach-instance", OTHER_INSTANCE, "--accelerator", ACC_A) == 1
    assert capsys.readouterr().err == (
        f"ERROR: accelerator {ACC_A} is not attached to instance {OTHER_INSTANCE}\n")
    assert [e["method"] for e in api.log] == ["GET"]
    assert api.accs[ACC_A]["attached_to"] == {"type": "instance", "id": INSTANCE}


def test_detach_instance_partial_failure_detaches_the_rest_and_exits_1(fake, capsys):
    url, api = fake
    api.detach_refused.add(ACC_A)
    assert run(url, "-f", "json", "detach-instance", INSTANCE) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "instance_uuid": INSTANCE, "detached": [ACC_B],
        "failed": [{"uuid": ACC_A,
                    "error": f"409 Accelerator {ACC_A} has allocation records."}]}
    assert captured.err == (
        f"ERROR: 1 of 2 accelerator(s) of instance {INSTANCE} not detached: "
        f"{ACC_A}: 409 Accelerator {ACC_A} has allocation records.\n")
    assert api.accs[ACC_B]["attached_to"] is None
    assert api.accs[ACC_A]["attached_to"] is not None


def test_a_detach_the_server_refuses_exits_1_saying_it_is_still_attached(fake, capsys):
    url, api = fake
    api.detach_refused.add(ACC_A)
    assert run(url, "accelerator", "detach", ACC_A) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"ERROR: accelerator {ACC_A} is still attached: Accelerator "
                            f"{ACC_A} has allocation records.\n")
    assert api.accs[ACC_A]["attached_to"] is not None


def test_detach_of_what_is_not_attached_exits_1(fake, capsys):
    url, api = fake
    assert run(url, "accelerator", "detach", ACC_D) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"ERROR: accelerator {ACC_D} is not attached\n"
    assert [e["method"] for e in api.log] == ["GET"]


def test_set_ready_whose_install_failed_exits_1(fake, capsys):
    url, api = fake
    api.install_errors[ACC_D] = "nvidia-smi: no devices"
    assert run(url, "accelerator", "set-ready", ACC_D, "-f", "json") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["state"] == "error"
    assert captured.err == (
        f"ERROR: set-ready of accelerator {ACC_D} failed: nvidia-smi: no devices\n")


# --- operator verbs ----------------------------------------------------------------


def test_driver_list_table_and_long(fake, capsys):
    url, _ = fake
    assert run(url, "driver-list") == 0
    out = capsys.readouterr().out
    assert "device_count" in out and "nvidia" in out
    assert "error" not in out.splitlines()[1] and "nvidia-smi" not in out
    assert run(url, "driver-list", "--long", "--host", "host2") == 0
    out = capsys.readouterr().out
    assert "nvidia-smi not found" in out and "host1" not in out
    assert "no explanation reported" in out


def test_driver_list_long_explains_discovery(fake, capsys):
    url, api = fake
    assert run(url, "driver-list", "--long", "--host", "host1") == 0
    assert api.log[-1]["query"] == {"host": ["host1"], "long": ["true"]}
    out = capsys.readouterr().out
    assert "host1 / fake (capabilities: host_work)" in out
    assert "found 2 device(s), expected 3" in out
    assert "[ok  ] vfio-pci loaded" in out
    assert "[FAIL] IOMMU on: no /sys/kernel/iommu_groups" in out
    assert "skipped 0000:5e:00.0: bound to a host driver in use" in out
    assert run(url, "driver-list", "--long", "-f", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["explanation"]["skipped"][0]["address"] == "0000:5e:00.0"
    assert run(url, "driver-list") == 0
    assert "long" not in api.log[-1]["query"]


def test_service_list_json(fake, capsys):
    url, api = fake
    assert run(url, "service-list", "-f", "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data == api.services


def test_service_list_table_shows_each_hosts_conductor(fake, capsys):
    """The owner of an agent's host and a conductor's count of hosts are columns; a
    field that does not apply to the row (null) is an empty cell."""
    url, _ = fake
    assert run(url, "service-list") == 0
    lines = capsys.readouterr().out.splitlines()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines
             if line.startswith("|")]
    assert cells == [
        ["host", "binary", "version", "last_seen_at", "alive", "conductor", "hosts"],
        ["cond1", "acceld-conductor", "0.1.0", "2026-11-22T10:00:01+00:00", "True", "", "1"],
        ["host1", "acceld-agent", "0.1.0", "2026-11-22T10:00:00+00:00", "True", "cond1", ""],
    ]


def test_discover_services(fake, capsys):
    url, api = fake
    assert run(url, "discover-services", "--host", "host2", "-f", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"hosts": ["host2"], "backends": [api.backends[1]]}
    assert [(e["method"], e["path"], e["body"]) for e in api.log[-2:]] == [
        ("POST", "/v1/discover", {"host": "host2"}), ("GET", "/v1/backends", None)]
    assert api.log[-1]["query"] == {"host": ["host2"]}
    assert run(url, "discover-services") == 0
    assert api.log[-2]["body"] == {}
    out = capsys.readouterr().out
    assert "host1" in out and "host2" in out
    assert "| crypto " in out and "asym, sym" in out and "physnet1" in out


# --- FPGA programming and stats ----------------------------------------------------

DEPLOYABLE = "dddddddd-0000-4000-8000-000000000001"
SHA = "ab" * 32


def test_deployable_program_waits_until_done(fake, capsys):
    url, api = fake
    assert run(url, "deployable-program", DEPLOYABLE, "--image-uuid", INSTANCE,
               "--sha256", SHA, "--wait", "10", "-f", "json") == 0
    patch = next(e for e in api.log if e["method"] == "PATCH")
    assert patch["path"] == f"/v2/deployables/{DEPLOYABLE}/program"
    assert patch["body"] == [{"op": "replace", "path": "/program",
                              "value": [{"image_uuid": INSTANCE, "image_sha256": SHA}]}]
    assert json.loads(capsys.readouterr().out)["state"] == "done"
    assert run(url, "deployable-program-status", DEPLOYABLE, "-f", "json") == 0
    assert json.loads(capsys.readouterr().out)["progress"] == 100


def test_deployable_program_failure_is_exit_1(fake, capsys):
    url, _ = fake
    assert run(url, "deployable-program", DEPLOYABLE, "--image-path", "/img/a.gbs",
               "--sha256", "bad" + SHA[3:], "--wait", "10") == 1
    err = capsys.readouterr().err
    assert f"ERROR: programming {DEPLOYABLE} failed: boom" in err


def test_deployable_program_without_wait_shows_the_queued_operation(fake, capsys):
    url, _ = fake
    assert run(url, "deployable-program", DEPLOYABLE, "--image-path", "/img/a.gbs",
               "--sha256", SHA, "-f", "json") == 0
    assert json.loads(capsys.readouterr().out)["state"] == "queued"


def test_deployable_program_needs_one_image_and_a_digest(fake, capsys):
    url, api = fake
    assert run(url, "deployable-program", DEPLOYABLE, "--sha256", SHA) == 2
    assert run(url, "deployable-program", DEPLOYABLE, "--image-path", "/a") == 2
    assert api.log == []


def test_program_status_of_a_never_programmed_deployable(fake, capsys):
    url, _ = fake
    assert run(url, "deployable-program-status", DEPLOYABLE) == 1
    assert "never programmed" in capsys.readouterr().err


def test_install_driver_ok(fake, capsys):
    url, api = fake
    assert run(url, "install-driver", "fake", "--host", "host1") == 0
    assert api.log[-1]["path"] == "/v1/drivers/fake/action"
    assert api.log[-1]["body"] == {"action": "install", "host": "host1"}
    assert "True" in capsys.readouterr().out


def test_update_driver_partial_failure_exits_1(fake, capsys):
    url, api = fake
    assert run(url, "update-driver", "nvidia", "-f", "json") == 1
    captured = capsys.readouterr()
    results = json.loads(captured.out)
    assert [r["ok"] for r in results] == [True, False]
    assert captured.err == "ERROR: update of driver nvidia failed on 1 of 2 host(s): host2\n"
    assert api.log[-1]["body"] == {"action": "update"}
    assert run(url, "uninstall-driver", "nvidia", "--host", "host1") == 0
    assert api.log[-1]["body"] == {"action": "uninstall", "host": "host1"}


# --- usage errors ----------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    [],
    ["accelerator"],
    ["no-such-verb"],
    ["accelerator", "attach", ACC_A],
    ["accelerator", "attach", ACC_A, "--instance", INSTANCE, "--host", "h"],
    ["accelerator", "set-specs", ACC_A, "--specs", "{not json"],
    ["accelerator", "set-specs", ACC_A, "--specs", "[1, 2]"],
    ["accelerator", "list", "--limit", "0"],
    ["-f", "yaml", "service-list"],
    ["attach-instance", INSTANCE],
])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage: acceld" in capsys.readouterr().err


def test_keystone_failure_is_reported(capsys, monkeypatch):
    pytest.importorskip("keystoneauth1")
    monkeypatch.delenv("ACCELD_TOKEN", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rc = main(["--timeout", "5", "--os-auth-url", f"http://127.0.0.1:{port}/v3",
               "--os-username", "admin", "--os-password", "pw-not-shown",
               "--os-project-name", "admin", "service-list"])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: keystone authentication at http://127.0.0.1:{port}/v3 failed")
    assert "Traceback" not in err and "pw-not-shown" not in err


def test_accelerator_stats(fake, capsys):
    url, api = fake
    assert run(url, "accelerator", "stats", ACC_A) == 0
    assert api.log[-1]["path"] == f"/v1/accelerators/{ACC_A}/stats"
    out = capsys.readouterr().out
    assert "utilization_percent" in out and "40.0" in out
    assert run(url, "accelerator", "stats", MISSING) == 1


# --- escaping of what the server says --------------------------------------------------

HOSTILE = "gpu\x1b[2J\x07\x9b\u202eevil\u2066x\u2069\n"
HOSTILE_SHOWN = "gpu\\x1b[2J\\x07\\x9b\\u202eevil\\u2066x\\u2069\\x0a"


def test_safe_escapes_every_control_and_bidi_character_and_nothing_else():
    unsafe = [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    for code in unsafe:
        shown = safe(f"a{chr(code)}b")
        assert shown.isprintable() and shown.startswith("a\\") and shown.endswith("b"), code
    ordinary = "Grüße, 東京, émoji \U0001F600, tab-free (a|b) \\ back"
    assert safe(ordinary) == ordinary


def test_table_and_plain_output_escape_names_json_stays_exact(fake, capsys):
    url, api = fake
    api.accs[ACC_D]["name"] = HOSTILE
    api.explanations["host1"]["checks"][1]["detail"] = HOSTILE
    assert run(url, "accelerator", "list") == 0
    out = capsys.readouterr().out
    assert HOSTILE_SHOWN in out and "\x1b" not in out and "\u202e" not in out
    assert run(url, "accelerator", "show", ACC_D) == 0
    assert HOSTILE_SHOWN in capsys.readouterr().out
    assert run(url, "driver-list", "--long", "--host", "host1") == 0
    out = capsys.readouterr().out
    assert f"[FAIL] IOMMU on: {HOSTILE_SHOWN}" in out and "\x1b" not in out
    assert run(url, "accelerator", "show", ACC_D, "-f", "json") == 0
    assert json.loads(capsys.readouterr().out)["name"] == HOSTILE


def test_error_message_from_the_server_is_one_escaped_line(fake, capsys):
    url, _ = fake
    assert run(url, "accelerator", "show", "x\x1b]0;owned\x07\u202e") == 1
    err = capsys.readouterr().err
    assert err == "ERROR: 404 Accelerator x\\x1b]0;owned\\x07\\u202e not found.\n"


# --- help and exit statuses ------------------------------------------------------------


def test_help_lists_every_command_on_one_line_with_the_exit_statuses(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = {line.split()[0]: line for line in out.splitlines()
              if line.startswith("    ") and not line.startswith("     ")}
    for verb in ("serve", "api", "conductor", "agent", "db", "accelerator", "placement",
                 "driver-list", "service-list", "discover-services", "deployable-program",
                 "deployable-program-status", "install-driver", "uninstall-driver",
                 "update-driver", "attach-instance", "detach-instance", "help"):
        assert len(listed[verb].split()) > 1, f"{verb} has no help on its line"
    assert "exit status:" in out and "3    timed out" in out


def test_help_verb_shows_a_command_help(capsys):
    assert main(["help", "accelerator", "set-ready"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: acceld accelerator set-ready")
    assert "--wait SECONDS" in out and "exit status:" in out
    assert main(["help"]) == 0
    assert "commands:" in capsys.readouterr().out
    assert main(["help", "no-such-verb"]) == 2


def test_no_command_prints_the_help_on_stderr_and_exits_2(capsys):
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "commands:" in captured.err


def test_http_timeout_exits_3(capsys, monkeypatch):
    monkeypatch.delenv("ACCELD_TOKEN", raising=False)
    with socket.socket() as sock:  # accepts connections (backlog), never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        rc = main(["--url", f"http://127.0.0.1:{port}", "--timeout", "0.2", "service-list"])
    assert rc == 3
    assert capsys.readouterr().err == (
        f"ERROR: no answer from acceld at http://127.0.0.1:{port} within 0.2s (--timeout)\n")


def test_program_wait_that_runs_out_exits_3_with_progress(fake, capsys):
    url, _ = fake
    assert run(url, "deployable-program", DEPLOYABLE, "--image-path", "/img/a.gbs",
               "--sha256", SHA, "--wait", "0.1", "-f", "json") == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out)["state"] in ("queued", "running")
    lines = captured.err.splitlines()
    assert lines[0].startswith(f"waiting for programming of {DEPLOYABLE}: queued 0%")
    assert lines[-1].startswith(f"ERROR: programming {DEPLOYABLE} is still ")
    assert lines[-1].endswith("after 0.1s (--wait)")


def test_an_answer_broken_off_mid_stream_exits_1(capsys, monkeypatch):
    """A streamed list whose server fails after the answer started: the chunked body ends
    without its last chunk when the connection closes."""
    monkeypatch.delenv("ACCELD_TOKEN", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]

        def answer_half() -> None:
            conn, _ = sock.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"accelerator\": [\r\n")

        server = threading.Thread(target=answer_half, daemon=True)
        server.start()
        rc = main(["--url", f"http://127.0.0.1:{port}", "--timeout", "5", "accelerator",
                   "list"])
        server.join(timeout=5)
    assert rc == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"ERROR: GET /v1/accelerators: the answer of acceld at http://127.0.0.1:{port} "
        "broke off: ")
    assert len(captured.err.splitlines()) == 1
