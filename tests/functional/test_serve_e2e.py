"""`acceld serve` as a new user runs it: a real process, HTTP, and the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests import helpers

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    port = _free_port()
    conf = tmp_path / "acceld.conf"
    conf.write_text(f"[DEFAULT]\nhost = e2e-host\nstate_path = {tmp_path / 'state'}\n"
                    f"[api]\nport = {port}\n[fake_driver]\ndevice_count = 4\n")
    log = open(tmp_path / "serve.log", "w")
    started = time.monotonic()
    proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf)], stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, proc, started
    finally:
        helpers.stop_process(proc)
        log.close()
        if os.environ.get("ACCELD_TEST_SHOW_LOGS"):
            print((tmp_path / "serve.log").read_text())


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def _cli(url: str, *args: str) -> object:
    out = subprocess.run([ACCELD, "--url", url, *args, "-f", "json"], capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_serve_lists_devices_and_cli_agrees(served):
    # bounded wait, not a timing claim (startup time is bench/README's business)
    url, proc, started = served
    devices = None
    while time.monotonic() - started < 60:
        body = _get(f"{url}/v1/accelerators")
        if body and len(body["accelerator"]) == 4:
            devices = body["accelerator"]
            break
        assert proc.poll() is None, "acceld serve exited"
        time.sleep(0.1)
    assert devices is not None, "fake devices not listed within 60 s"
    assert sorted(d["device_type"] for d in devices) == ["FPGA", "GPU", "NIC", "QAT"]
    assert {d["host"] for d in devices} == {"e2e-host"}

    cli_devices = _cli(url, "accelerator", "list")
    assert sorted(d["uuid"] for d in cli_devices) == sorted(d["uuid"] for d in devices)

    services = _cli(url, "service-list")
    assert {(s["binary"], s["alive"]) for s in services} == {
        ("acceld-agent", True), ("acceld-conductor", True)}

    drivers = _cli(url, "driver-list")
    assert [(d["host"], d["name"], d["state"], d["device_count"]) for d in drivers] == [
        ("e2e-host", "fake", "installed", 4)]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


@pytest.fixture
def placement_process(tmp_path):
    """The real Placement in its own process on loopback (tests.placement_server)."""
    log = open(tmp_path / "placement.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "tests.placement_server"], stdout=log,
                            stderr=subprocess.STDOUT, cwd=os.path.dirname(
                                os.path.dirname(os.path.dirname(__file__))))
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        assert proc.poll() is None, "Placement exited"
        log.seek(0)
        for line in log.read().splitlines():
            if line.startswith("PLACEMENT_URL="):
                url = line.split("=", 1)[1]
        time.sleep(0.1)
    assert url, "Placement did not start within 60 s"
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _placement(url: str, method: str, path: str, body: dict | None = None) -> dict | None:
    req = urllib.request.Request(url + path, method=method, headers={
        "X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
        "Content-Type": "application/json", "Accept": "application/json"},
        data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req, timeout=10) as resp:
        data = resp.read()
        return json.loads(data) if data else None


def test_serve_with_real_placement_publishes_schedulable_providers(tmp_path,
                                                                    placement_process):
    url = placement_process
    host = "e2e-placement-host"
    compute = _placement(url, "POST", "/resource_providers",
                         {"name": host, "uuid": "1b1b1b1b-0000-4000-8000-000000000001"})
    port = _free_port()
    conf = tmp_path / "acceld.conf"
    conf.write_text(f"[DEFAULT]\nhost = {host}\nstate_path = {tmp_path / 'state'}\n"
                    f"[api]\nport = {port}\n"
                    f"[placement]\nauth_type = admin_token\nendpoint = {url}\n"
                    "token = admin\n")
    proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf)],
                            stdout=open(tmp_path / "serve.log", "w"), stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}"
    try:
        def children() -> list[dict]:
            body = _placement(url, "GET", f"/resource_providers?in_tree={compute['uuid']}")
            return [rp for rp in body["resource_providers"] if rp["uuid"] != compute["uuid"]]

        deadline = time.monotonic() + 30
        while len(children()) < 4 and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        kids = children()
        assert len(kids) == 4
        assert {rp["parent_provider_uuid"] for rp in kids} == {compute["uuid"]}

        qat = next(a for a in _cli(api, "accelerator", "list") if a["device_type"] == "QAT")
        subprocess.run([ACCELD, "--url", api, "accelerator", "set-ready", qat["uuid"]],
                       check=True, capture_output=True, timeout=60)
        # The device profile group {"resources:CUSTOM_QAT": "1",
        # "trait:CUSTOM_QAT_FAKE_4XXX": "required"} as Placement is asked for it.
        query = "/allocation_candidates?resources=CUSTOM_QAT:1&required=CUSTOM_QAT_FAKE_4XXX"
        deadline = time.monotonic() + 30
        found = []
        while not found and time.monotonic() < deadline:
            found = _placement(url, "GET", query)["allocation_requests"]
            time.sleep(0.2)
        (candidate,) = found
        (rp_uuid,) = candidate["allocations"]
        inv = _placement(url, "GET", f"/resource_providers/{rp_uuid}/inventories")
        assert inv["inventories"]["CUSTOM_QAT"]["total"] == 4
        traits = _placement(url, "GET", f"/resource_providers/{rp_uuid}/traits")["traits"]
        assert {"OWNER_CYBORG", "CUSTOM_QAT_FAKE_4XXX"} <= set(traits)

        status = _cli(api, "placement", "status")
        assert status["placement"]["reachable"] is True
        assert [(h["host"], h["in_sync"]) for h in status["hosts"]] == [(host, True)]
        table = subprocess.run([ACCELD, "--url", api, "service-list"], check=True,
                               capture_output=True, text=True, timeout=60).stdout
        placement_part = table.split("Placement:", 1)[1]
        assert host in placement_part and "True" in placement_part
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
