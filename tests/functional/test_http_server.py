"""`acceld serve`'s HTTP front door against the real process on loopback: JSON errors for
the limits and the router's statuses, chunked bodies, keep-alive, the access log, the
graceful stop on SIGTERM, `--host`/`--port`, and each server command's `--help`."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from acceld import conf as config
from acceld import wiring
from tests import helpers
from tests.integration.procs import free_port
from tests.stack import wait_for

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"
ADMIN = {"X-Auth-Token": "admin"}
PROFILE = json.dumps([{"name": "chunked", "groups": [{"resources:FPGA": "1"}]}]).encode()


def _start(tmp_path, name: str) -> tuple[subprocess.Popen, int, str]:
    """`acceld serve` with its port on the command line (the file names another one)."""
    port = free_port()
    conf = tmp_path / f"{name}.conf"
    conf.write_text(f"[DEFAULT]\nhost = http-host\nstate_path = {tmp_path / name}\n"
                    f"[api]\nport = 1\nworkers = 4\n[fake_driver]\ndevice_count = 2\n")
    log = tmp_path / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf), "--host",
                                 "127.0.0.1", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    for _ in range(300):                       # bounded: 30 s
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1):
                return proc, port, str(log)
        except OSError:
            time.sleep(0.1)
    helpers.stop_process(proc)
    raise AssertionError("acceld serve did not answer in 30 s:\n" + log.read_text())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("http")
    proc, port, log = _start(tmp, "serve")
    try:
        yield port, log
    finally:
        helpers.stop_process(proc)


def _conn(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=10)


def _ask(port: int, method: str, target: str, headers: dict | None = None,
         body: bytes | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    conn = _conn(port)
    try:
        conn.request(method, target, body=body, headers={**ADMIN, **(headers or {})})
        resp = conn.getresponse()
        return resp, resp.read()
    finally:
        conn.close()


def _error(resp: http.client.HTTPResponse, body: bytes, status: int) -> dict:
    assert resp.status == status, body
    assert resp.getheader("Content-Type") == "application/json"
    assert resp.getheader("x-openstack-request-id", "").startswith("req-")
    (error,) = json.loads(body)["errors"]
    assert error["status"] == status
    assert error["request_id"] == resp.getheader("x-openstack-request-id")
    return error


@pytest.mark.parametrize("method,target,headers,body,status", [
    ("GET", "/v2/nothing-here", {}, None, 404),
    ("PUT", "/v2/devices", {}, b"", 405),
    ("GET", "/v2/devices?q=" + "a" * 9000, {}, None, 414),
    ("GET", "/v2/devices", {"X-Filler": "a" * 70000}, None, 431),
    ("POST", "/v2/device_profiles", {"Content-Type": "application/json"},
     b"[" + b"1," * 60000 + b"1]", 413),
], ids=["404", "405", "414", "431", "413"])
def test_every_refusal_is_the_json_error_body(served, method, target, headers, body,
                                              status):
    port, _ = served
    resp, data = _ask(port, method, target, headers, body)
    error = _error(resp, data, status)
    if status == 405:
        assert resp.getheader("Allow") == "GET"
    if status in (413, 414, 431):
        assert re.search(r"at most \d+", error["detail"]), error


def _chunked(port: int, body: bytes, piece: int) -> tuple[http.client.HTTPResponse, bytes]:
    chunks = [body[i:i + piece] for i in range(0, len(body), piece)]
    conn = _conn(port)
    try:
        conn.request("POST", "/v2/device_profiles", body=iter(chunks), encode_chunked=True,
                     headers={**ADMIN, "Content-Type": "application/json",
                              "Transfer-Encoding": "chunked"})
        resp = conn.getresponse()
        return resp, resp.read()
    finally:
        conn.close()


def test_a_chunked_request_body_reaches_the_app(served):
    port, _ = served
    resp, data = _chunked(port, PROFILE, 7)
    assert resp.status == 201, data
    created = json.loads(data)
    assert created["name"] == "chunked"
    resp, data = _ask(port, "GET", f"/v2/device_profiles/{created['uuid']}")
    assert resp.status == 200
    assert json.loads(data)["device_profile"]["groups"] == [{"resources:FPGA": "1"}]


def test_a_chunked_body_over_the_limit_is_the_json_413(served):
    port, _ = served
    resp, data = _chunked(port, b"[" + b"1," * 60000 + b"1]", 4096)
    _error(resp, data, 413)


def test_keep_alive_serves_several_requests_on_one_connection(served):
    port, _ = served
    conn = _conn(port)
    try:
        peers = set()
        for path in ("/v2/devices", "/v1/accelerators", "/v2/accelerator_requests"):
            conn.request("GET", path, headers=ADMIN)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            assert not resp.will_close
            peers.add(conn.sock.getsockname())
        assert len(peers) == 1
    finally:
        conn.close()


def test_one_access_log_line_per_request_in_the_openstack_form(served):
    port, log = served
    resp, _ = _ask(port, "GET", "/v2/devices?hostname=http-host")
    req_id = resp.getheader("x-openstack-request-id")
    length = resp.getheader("Content-Length")
    resp404, _ = _ask(port, "GET", "/v2/none%7F")
    lines = []
    for _ in range(50):                        # the line follows the answer: bounded wait
        with open(log) as f:
            lines = [line for line in f if req_id in line]
        if lines:
            break
        time.sleep(0.1)
    assert len(lines) == 1, lines
    # oslo.log's context part ([global id, request id, user identity]) before the message
    assert re.search(rf' acceld\.api\.access \[None {req_id} admin default [^\]]*\] '
                     rf'127\.0\.0\.1 "GET /v2/devices\?hostname=http-host" '
                     rf'status: 200 len: {length} microversion: 2\.0 time: \d+\.\d{{7}}$',
                     lines[0].rstrip("\n")), lines[0]
    with open(log) as f:
        other = [line for line in f if resp404.getheader("x-openstack-request-id") in line]
    assert len(other) == 1 and " status: 404 " in other[0], other


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


@pytest.mark.timeout(90)
def test_sigterm_lets_the_request_in_flight_finish(tmp_path):
    proc, port, log = _start(tmp_path, "stop")
    try:
        idle = _conn(port)                      # a keep-alive connection left idle
        idle.request("GET", "/v2/devices", headers=ADMIN)
        first = idle.getresponse()
        first.read()
        assert first.status == 200
        busy = socket.create_connection(("127.0.0.1", port), timeout=10)
        busy.sendall(b"POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\nX-Auth-Token: admin"
                     b"\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(PROFILE)).encode() + b"\r\n\r\n" + PROFILE[:10])
        time.sleep(0.3)                         # let the server read the part sent
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: _refused(port))        # the stop closes the listener first
        busy.sendall(PROFILE[10:])
        answer = b""
        while chunk := busy.recv(65536):       # the server closes it after the answer
            answer += chunk
        busy.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 201 "), answer
        length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))
        assert len(body) == length
        assert json.loads(body)["name"] == "chunked"
        assert proc.wait(timeout=60) == 0, open(log).read()
        with pytest.raises((OSError, http.client.HTTPException)):  # the idle one closed
            idle.request("GET", "/v2/devices", headers=ADMIN)
            idle.getresponse()
    finally:
        helpers.stop_process(proc)


def test_the_pool_has_a_connection_per_api_thread_and_headroom_for_the_services(tmp_path):
    conf = config.load([], config_files=[], overrides={
        "DEFAULT": {"state_path": str(tmp_path)}, "api": {"workers": 12}})
    served = wiring.database(conf, api=True, services=True)
    api_only = wiring.database(conf, api=True)
    assert served.engine.pool.size() == 12 + wiring.SERVICE_CONNECTIONS
    assert api_only.engine.pool.size() == 12
    for db in (served, api_only):
        db.engine.dispose()


@pytest.mark.parametrize("command,words", [
    ("serve", ("acceld serve", "conductor and an agent", "--host", "--port")),
    ("api", ("acceld api", "REST API server alone", "--host", "--port")),
    ("conductor", ("acceld conductor", "owns the inventory")),
    ("agent", ("acceld agent", "discovers devices")),
    ("db", ("acceld db {upgrade,version}", "pending migration")),
])
def test_each_server_command_has_its_own_help(command, words):
    out = subprocess.run([ACCELD, command, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for word in words:
        assert word in text, (word, out.stdout)
    if command not in ("serve", "api"):
        assert "--port" not in text
