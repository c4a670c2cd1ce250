"""The agent journal: while the conductor is away, reports and operation outcomes wait in
the agent's journal; when it is back they are delivered exactly once and the inventory
ends exactly right (nothing lost, nothing duplicated).

Two variants: the real processes (PostgreSQL, RabbitMQ, SIGKILL of the conductor) and an
in-process one over the local bus (fast and deterministic).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from acceld import rpc
from acceld.objects import accelerators
from tests.conftest import IN_CI
from tests.integration import procs as p
from tests.stack import Stack, wait_for

OUTAGE = float(os.environ.get("ACCELD_TEST_OUTAGE", "60" if IN_CI else "10"))


def _counts(engine: sqlalchemy.engine.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {table: conn.execute(sqlalchemy.text(f"SELECT count(*) FROM {table}")).scalar()
                for table in ("devices", "deployables", "controlpath_ids")}


def _assert_unique(records: list[dict[str, Any]], count: int) -> None:
    assert len(records) == count
    assert len({r["uuid"] for r in records}) == count, records
    assert len({r["name"] for r in records}) == count, records


# -- real processes ----------------------------------------------------------------------

@pytest.mark.rabbitmq
@pytest.mark.postgresql
def test_conductor_killed_agent_catches_up(acceld_procs, make_db_url, isolated_rabbit_url):
    db_url = make_db_url("postgresql")
    dep = p.start_three_process(
        acceld_procs, db_url=db_url, transport_url=isolated_rabbit_url, host=p.unique_host(),
        device_count=4, conductor={"operation_wait": 2.0, "operation_timeout": 5.0})
    api = dep.api
    inv = sorted(p.wait_inventory(dep, 4), key=lambda r: r["name"])
    first, second = inv[0]["uuid"], inv[1]["uuid"]

    # One device made ready while everything runs.
    resp = api.set_state(first, "ready")
    assert resp.status_code == 200, resp.text
    assert resp.json()["state"] == "ready"

    # The second state change: freeze the agent so that the install request waits on the
    # bus; the conductor answers "installing" after operation_wait, having sent it.
    agent, conductor = dep.running["agent"], dep.running["conductor"]
    agent.signal(signal.SIGSTOP)
    answer: dict[str, Any] = {}

    def put() -> None:
        try:
            answer["resp"] = api.set_state(second, "ready")
        except Exception as exc:  # noqa: BLE001 - checked below
            answer["error"] = exc
    thread = threading.Thread(target=put, name="put-state", daemon=True)
    thread.start()
    thread.join(p.HTTP_TIMEOUT + 5)
    assert not thread.is_alive(), "PUT state did not answer"
    assert "error" not in answer, answer
    assert answer["resp"].status_code == 200, answer["resp"].text
    assert answer["resp"].json()["state"] == "installing"

    # Crash the conductor, then let the agent run the operation it cannot report.
    conductor.kill()
    agent.signal(signal.SIGCONT)

    def pending_result() -> dict[str, Any] | None:
        journal = dep.journal()
        mine = [r for r in journal["results"].values() if r["op"]["device_uuid"] == second]
        return mine[0] if mine and not journal["inflight"] else None
    result = p.wait_until(pending_result, 30, "the install outcome journaled by the agent")
    assert result["ok"] is True and result["op"]["operation"] == "install"
    op_id = result["op"]["op_id"]

    # The host changes while the conductor is down.
    p.write_control(dep.control_file, device_count=6)
    deadline = time.monotonic() + OUTAGE
    while time.monotonic() < deadline:
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        assert op_id in dep.journal()["results"], "outcome lost while the conductor is down"
    journal = dep.journal()
    assert journal["acked_seq"] < journal["seq"], "reports acknowledged by no conductor"
    # The API still reads the database: nothing changed behind the conductor's back.
    during = api.accelerators(host=dep.host)
    _assert_unique(during, 4)
    assert api.accelerator(second)["state"] == "installing"
    assert api.accelerator(first)["state"] == "ready"
    assert agent.alive

    dep.start("conductor")

    def caught_up() -> list[dict[str, Any]] | None:
        records = api.accelerators(host=dep.host)
        states = {r["uuid"]: r["state"] for r in records}
        if len(records) == 6 and states.get(second) == "ready":
            return records
        return None
    final = p.wait_until(caught_up, 60, "6 devices and the second one ready")
    _assert_unique(final, 6)
    states = {r["uuid"]: r["state"] for r in final}
    assert states[first] == states[second] == "ready"
    assert sorted(s for u, s in states.items() if u not in (first, second)) == \
        ["inactive"] * 4
    assert api.accelerator(second)["last_error"] is None
    # The whole listing holds this host only, once.
    _assert_unique(api.accelerators(), 6)

    def journal_drained() -> dict[str, Any] | None:
        journal = dep.journal()
        if not journal["results"] and not journal["inflight"] and \
                journal["acked_seq"] == journal["seq"]:
            return journal
        return None
    journal = p.wait_until(journal_drained, 60, "journal delivered and acked_seq == seq")
    assert op_id in journal["done"]

    engine = sqlalchemy.create_engine(db_url)
    try:
        assert _counts(engine) == {"devices": 6, "deployables": 6, "controlpath_ids": 6}
        with engine.connect() as conn:
            pending = conn.execute(sqlalchemy.text(
                "SELECT count(*) FROM devices WHERE op_id IS NOT NULL")).scalar()
        assert pending == 0
    finally:
        engine.dispose()

    def conductor_alive() -> bool:
        return any(s["binary"] == "acceld-conductor" and s["alive"] and s["host"] == dep.host
                   for s in api.services())
    p.wait_until(conductor_alive, 30, "the restarted conductor alive in /v1/services")
    drivers = api.drivers(host=dep.host)
    assert [(d["name"], d["state"], d["device_count"]) for d in drivers] == [
        ("fake", "installed", 6)]


# -- in process, over the local bus ------------------------------------------------------

def test_in_process_catchup_exactly_once(sqlite_db, monkeypatch):
    host = f"itest-{uuid.uuid4().hex[:10]}"
    stack = Stack(sqlite_db, hosts=(host,), device_count=4,
                  conductor={"operation_wait": 0.2})
    try:
        _in_process_catchup(stack, sqlite_db, host, monkeypatch)
    finally:
        stack.stop()


def _in_process_catchup(stack: Stack, db, host: str, monkeypatch) -> None:
    agent = stack.agents[host]
    client = rpc.ConductorClient(stack.transport)
    p.write_control(Path(stack.control_file), device_count=4)
    stack.report_all()
    inv = sorted(accelerators.list_accelerators(db, host=host), key=lambda r: r["name"])
    _assert_unique(inv, 4)
    first, second = inv[0]["uuid"], inv[1]["uuid"]
    assert client.set_state(first, "ready")["state"] == "ready"

    recorded: list[tuple[str, bool]] = []
    real_finish = accelerators.finish_transition

    def spy(db_, uuid_, op_id, ok, error=None):
        result = real_finish(db_, uuid_, op_id, ok, error)
        recorded.append((op_id, result))
        return result
    monkeypatch.setattr(accelerators, "finish_transition", spy)

    installs: list[str] = []
    driver = agent._driver("fake")
    real_install = driver.install

    def counting_install(identity: str) -> None:
        installs.append(identity)
        real_install(identity)
    monkeypatch.setattr(driver, "install", counting_install)

    before_outage = agent.build_report().to_dict()   # built, never delivered

    # The conductor's server goes away; its manager still takes the API's request and
    # sends the operation, which the agent runs but cannot report.
    stack.stop_conductor()
    answer = stack.conductor.set_state(second, "ready")
    assert answer["state"] == "installing"
    results = wait_for(agent.journal.results, timeout=10)
    assert len(results) == 1
    op = results[0]["op"]
    assert (op["device_uuid"], op["operation"], results[0]["ok"]) == (second, "install", True)
    assert agent.journal.inflight() == []
    assert len(installs) == 1
    assert recorded == []

    p.write_control(Path(stack.control_file), device_count=6)
    acked = agent.journal.acked_seq
    assert agent.report_once() is False
    assert agent.deliver_results() is False
    assert agent.journal.results() == results
    assert agent.journal.acked_seq == acked < agent.journal.seq
    # The operation sent again while its outcome waits is not run again.
    agent.run_operation(op)
    assert len(installs) == 1
    assert agent.journal.results() == results
    # Nothing reached the database.
    _assert_unique(list(accelerators.list_accelerators(db, host=host)), 4)
    assert accelerators.get_accelerator(db, second)["state"] == "installing"

    stack.start_conductor()
    assert agent.deliver_results() is True
    assert agent.journal.results() == []
    assert recorded == [(op["op_id"], True)]
    assert agent.deliver_results() is True          # nothing left: nothing sent
    assert recorded == [(op["op_id"], True)]
    # A duplicate of the outcome (a re-delivery) is acknowledged but not recorded again.
    assert client.operation_done(op["op_id"], second, True, None) == {"recorded": False}
    assert [r for _op, r in recorded] == [True, False]
    # Sent again after delivery: still not run again.
    agent.run_operation(op)
    assert len(installs) == 1
    assert agent.journal.results() == []

    assert agent.report_once() is True
    assert agent.journal.acked_seq == agent.journal.seq
    final = list(accelerators.list_accelerators(db, host=host))
    _assert_unique(final, 6)
    states = {r["uuid"]: r["state"] for r in final}
    assert states[first] == states[second] == "ready"
    assert sorted(states.values()).count("inactive") == 4
    assert accelerators.get_accelerator(db, second)["last_error"] is None

    # The report built before the outage arrives late: recognised as stale, ignored.
    late = client.report_inventory(json.loads(json.dumps(before_outage)))
    assert late["stale"] is True and late["changed"] is False
    _assert_unique(list(accelerators.list_accelerators(db, host=host)), 6)

    from acceld.db import models as m
    with db.reader() as s:
        counts = {model.__tablename__: s.execute(
            sqlalchemy.select(sqlalchemy.func.count()).select_from(model)).scalar()
            for model in (m.Device, m.Deployable, m.ControlpathID)}
    assert counts == {"devices": 6, "deployables": 6, "controlpath_ids": 6}
