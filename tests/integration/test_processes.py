"""Real processes: ``acceld conductor`` + ``agent`` + ``api`` (PostgreSQL, RabbitMQ)
against ``acceld serve`` (SQLite, in-process bus) for the same host.

Both must discover the same inventory with the same deterministic uuids, and the
3-process deployment must show its services alive, its driver installed, and carry a
state change through API -> conductor -> agent -> conductor.
"""

from __future__ import annotations

import signal
import subprocess
import uuid

import pytest

from tests.integration import procs as p


def needs_services(test):
    """PostgreSQL and RabbitMQ (skipped without them, failed under CI=true)."""
    return pytest.mark.rabbitmq(pytest.mark.postgresql(test))


DEVICES = 4


@pytest.fixture
def deployments(acceld_procs, make_db_url, isolated_rabbit_url):
    host = p.unique_host()
    serve = p.start_serve(acceld_procs, host=host, device_count=DEVICES, wait=False)
    three = p.start_three_process(acceld_procs, db_url=make_db_url("postgresql"),
                                  transport_url=isolated_rabbit_url, host=host,
                                  device_count=DEVICES)
    serve.wait_api()
    return three, serve


@needs_services
def test_three_processes_match_serve(deployments):
    three, serve = deployments
    three_inv = p.wait_inventory(three, DEVICES)
    serve_inv = p.wait_inventory(serve, DEVICES)

    assert p.inventory_key(three_inv) == p.inventory_key(serve_inv)
    assert {r["host"] for r in three_inv} == {three.host}
    assert len({r["uuid"] for r in three_inv}) == DEVICES
    assert len({r["name"] for r in three_inv}) == DEVICES
    assert sorted(r["device_type"] for r in three_inv) == ["FPGA", "GPU", "NIC", "QAT"]
    assert {r["state"] for r in three_inv} == {"inactive"}
    assert {r["health"] for r in three_inv} == {"ok"}
    # The full listing (no host filter) holds nothing else on either side.
    assert p.inventory_key(three.api.accelerators()) == p.inventory_key(serve_inv)
    assert p.inventory_key(serve.api.accelerators()) == p.inventory_key(serve_inv)


@needs_services
def test_three_process_services_and_drivers(deployments):
    three, _serve = deployments
    p.wait_inventory(three, DEVICES)

    def alive_services() -> dict[str, dict]:
        found = {s["binary"]: s for s in three.api.services() if s["host"] == three.host}
        want = ("acceld-agent", "acceld-conductor")
        return found if all(found.get(b, {}).get("alive") for b in want) else None
    services = p.wait_until(alive_services, 30, "agent and conductor alive in /v1/services")
    assert services["acceld-agent"]["version"]
    assert services["acceld-conductor"]["version"]

    drivers = three.api.drivers(host=three.host)
    assert [(d["host"], d["name"], d["state"], d["device_count"], d["error"])
            for d in drivers] == [(three.host, "fake", "installed", DEVICES, None)]


@needs_services
def test_three_process_state_change(deployments):
    three, serve = deployments
    inv = p.wait_inventory(three, DEVICES)
    gpu = next(r for r in inv if r["device_type"] == "GPU")

    resp = three.api.set_state(gpu["uuid"], "ready")
    assert resp.status_code == 200, resp.text
    # operation_wait (3 s) is far longer than a fake install: the answer is final.
    assert resp.json()["state"] == "ready"
    assert resp.json()["uuid"] == gpu["uuid"]

    def ready() -> dict:
        rec = three.api.accelerator(gpu["uuid"])
        return rec if rec["state"] == "ready" else None
    rec = p.wait_until(ready, 30, f"{gpu['uuid']} ready")
    assert rec["last_error"] is None
    assert rec["revision"] > gpu["revision"]
    others = [r for r in three.api.accelerators(host=three.host) if r["uuid"] != gpu["uuid"]]
    assert {r["state"] for r in others} == {"inactive"}
    # The serve deployment is a different database: untouched.
    assert serve.api.accelerator(gpu["uuid"])["state"] == "inactive"

    # Asking again for the state it is in is a no-op answered at once.
    again = three.api.set_state(gpu["uuid"], "ready")
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "ready"
    assert again.json()["revision"] == rec["revision"]


@needs_services
def test_domain_errors_identical_across_deployments(deployments):
    """A domain error raised in the conductor reaches the API client as it does in serve."""
    three, serve = deployments
    p.wait_inventory(three, DEVICES)
    p.wait_inventory(serve, DEVICES)
    missing = str(uuid.uuid4())
    answers = []
    for dep in (three, serve):
        resp = dep.api.set_state(missing, "ready")
        assert resp.status_code == 404, resp.text
        err = resp.json()["errors"][0]
        answers.append((err["status"], err["code"], err["detail"]))
    assert answers[0] == answers[1]
    assert answers[0] == (404, "acceld.accelerator.not_found",
                          f"Accelerator {missing} not found.")


@needs_services
def test_sigterm_stops_every_process_cleanly(deployments):
    three, serve = deployments
    p.wait_inventory(three, DEVICES)
    procs = [*three.running.values(), *serve.running.values()]
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = {}
    for proc in procs:
        try:
            codes[proc.name] = proc.popen.wait(timeout=p.TERM_GRACE)
        except subprocess.TimeoutExpired:
            codes[proc.name] = "still running"
    assert codes == {proc.name: 0 for proc in procs}


@pytest.mark.parametrize("command", ["api", "conductor", "agent"])
def test_split_services_require_transport_url(command, tmp_path):
    """Without ``[DEFAULT] transport_url`` the split services refuse to start (they would
    otherwise talk to whatever broker a default URL points at)."""
    config = p.write_config(tmp_path / "no-bus.conf", {
        "DEFAULT": {"host": p.unique_host(), "state_path": tmp_path},
        "api": {"port": p.free_port()},
        "database": {"connection": f"sqlite:///{tmp_path / 'x.sqlite'}"},
    })
    try:
        res = subprocess.run([*p.ACCELD, command, "--config-file", str(config)],
                             capture_output=True, text=True, timeout=30, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"acceld {command} kept running without a transport_url")
    assert res.returncode != 0
    assert "needs [DEFAULT] transport_url" in res.stderr
