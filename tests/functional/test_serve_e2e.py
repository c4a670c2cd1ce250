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
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
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


def test_serve_lists_devices_within_ten_seconds_and_cli_agrees(served):
    url, proc, started = served
    devices = None
    while time.monotonic() - started < 10:
        body = _get(f"{url}/v1/accelerators")
        if body and len(body["accelerator"]) == 4:
            devices = body["accelerator"]
            break
        assert proc.poll() is None, "acceld serve exited"
        time.sleep(0.1)
    assert devices is not None, "fake devices not listed within 10 s"
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
