"""``GET /metrics`` on the real app over a seeded fleet, on every database backend.

The fleet: host A reports the fake driver's 4 devices (GPU, FPGA, QAT, NIC: 1, 1, 4 and
2 accelerators), one GPU made ready and the FPGA degraded; host B reports 8 and has not
been heard from for longer than the down time; a conductor beats; 3 ARQs are Initial and
2 Bound. The scrape is parsed with prometheus-client's own text-format parser and every
gauge compared with that fleet; it costs three statements, whatever the fleet's size.
"""

from __future__ import annotations

import collections
import datetime
from pathlib import Path

import pytest
import webob
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

import acceld
from acceld import rpc, states
from acceld.api import deploy
from acceld.api import metrics as api_metrics
from acceld.collector import usage
from acceld.db import models as m
from acceld.objects import inventory, services
from tests.functional.test_inventory_db import Agent, fake_devices
from tests.functional.test_statement_count import StatementCounter
from tests.helpers import make_conf
from tests.seed import seed_arqs

DOWN_TIME = 60
ACCELERATORS = {"GPU": 1, "FPGA": 1, "QAT": 4, "NIC": 2}
DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _app(db):
    conf = make_conf(conductor={"service_down_time": DOWN_TIME})
    return deploy.make_app(conf, db, rpc.ConductorClient(rpc.LocalTransport()))


def _get(app, path: str, token: str = "admin") -> webob.Response:
    return webob.Request.blank(path, headers={"X-Auth-Token": token}).get_response(app)


def _scrape(app) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value} of every sample."""
    resp = _get(app, "/metrics")
    assert resp.status_int == 200, resp.text
    assert resp.headers["Content-Type"] == api_metrics.CONTENT_TYPE
    out: dict[str, dict[tuple, float]] = collections.defaultdict(dict)
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            out[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _seed(db, tmp_path) -> collections.Counter:
    """The fleet of the module docstring; returns the expected (type, state, health) ->
    (devices, deployables, accelerators) as a Counter of tuples."""
    a_devs = fake_devices("hostA", 4, tmp_path / "a")
    b_devs = fake_devices("hostB", 8, tmp_path / "b")
    inventory.apply_report(db, Agent("hostA").report(a_devs))
    inventory.apply_report(db, Agent("hostB").report(b_devs))
    dev = m.Device.__table__
    svc = m.Service.__table__
    now = m.utcnow()
    with db.write_rows() as conn:
        conn.execute(update(dev).where(dev.c.hostname == "hostA", dev.c.type == "GPU")
                     .values(state=states.READY))
        conn.execute(update(dev).where(dev.c.hostname == "hostA", dev.c.type == "FPGA")
                     .values(health=states.HEALTH_DEGRADED))
        conn.execute(update(svc).where(svc.c.host == "hostA").values(last_seen_at=now))
        conn.execute(update(svc).where(svc.c.host == "hostB").values(
            last_seen_at=now - datetime.timedelta(seconds=DOWN_TIME + 30)))
    services.record_heartbeats(db, [("cond1", acceld.CONDUCTOR_BINARY, "1", now)])
    seed_arqs(db, 3, profile="p-initial")
    seed_arqs(db, 2, profile="p-bound", state=states.ARQ_BOUND)
    expected: collections.Counter = collections.Counter()
    for host, devs in (("hostA", a_devs), ("hostB", b_devs)):
        for d in devs:
            state = states.READY if (host, d.type) == ("hostA", "GPU") else states.INACTIVE
            health = (states.HEALTH_DEGRADED if (host, d.type) == ("hostA", "FPGA")
                      else states.HEALTH_OK)
            expected[d.type, state, health, "devices"] += 1
            expected[d.type, state, health, "deployables"] += 1
            expected[d.type, state, health, "accelerators"] += ACCELERATORS[d.type]
    return expected


def test_the_scrape_parses_and_its_gauges_are_the_fleets(db, tmp_path):
    expected = _seed(db, tmp_path)
    scraped = _scrape(_app(db))
    for what in ("devices", "deployables", "accelerators"):
        got = {dict(k)["type"] + "/" + dict(k)["state"] + "/" + dict(k)["health"]: v
               for k, v in scraped[f"acceld_{what}"].items()}
        assert got == {f"{t}/{s}/{h}": n for (t, s, h, w), n in expected.items()
                       if w == what}, what
    assert scraped["acceld_devices"][
        (("health", "ok"), ("state", "inactive"), ("type", "QAT"))] == 2 + 1
    arqs = {dict(k)["state"]: v for k, v in scraped["acceld_accelerator_requests"].items()}
    assert arqs == {s: {"Initial": 3, "Bound": 2}.get(s, 0) for s in states.ARQ_STATES}
    assert scraped["acceld_services"] == {
        (("alive", "true"), ("binary", "acceld-agent")): 1,
        (("alive", "false"), ("binary", "acceld-agent")): 1,
        (("alive", "true"), ("binary", "acceld-conductor")): 1,
        (("alive", "false"), ("binary", "acceld-conductor")): 0}


def test_a_scrape_costs_three_statements_whatever_the_fleet(db, tmp_path):
    _seed(db, tmp_path)
    app = _app(db)
    with StatementCounter(db) as small:
        _scrape(app)
    inventory.apply_report(db, Agent("hostC").report(fake_devices("hostC", 16,
                                                                  tmp_path / "c")))
    seed_arqs(db, 50, profile="p-more")
    with StatementCounter(db) as large:
        scraped = _scrape(app)
    assert small.statements == large.statements      # the same, sent once each
    selects = [s for s in large.statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 3, large.statements
    assert sum(scraped["acceld_devices"].values()) == 4 + 8 + 16


def test_requests_are_counted_by_route_template_method_and_status(sqlite_db):
    app = _app(sqlite_db)
    for path in ("/v2/devices", "/devices", "/v2/devices/" + "0" * 32, "/no/such/path"):
        _get(app, path)
    _get(app, "/v1/services", token="user1:proj1")          # 403
    webob.Request.blank("/v2/devices", method="BREW").get_response(app)
    scraped = _scrape(app)
    counts = {(dict(k)["method"], dict(k)["route"], dict(k)["status"]): v
              for k, v in scraped["acceld_api_requests_total"].items()}
    assert counts == {("GET", "/v2/devices", "200"): 2,
                      ("GET", "/v2/devices/{uuid}", "404"): 1,
                      ("GET", "unrouted", "404"): 1,
                      ("GET", "/v1/services", "403"): 1,
                      ("other", "/v2/devices", "405"): 1}
    latency = {(dict(k)["method"], dict(k)["route"]): v
               for k, v in scraped["acceld_api_request_duration_seconds_count"].items()}
    assert latency[("GET", "/v2/devices")] == 2
    inf = scraped["acceld_api_request_duration_seconds_bucket"][
        (("le", "+Inf"), ("method", "GET"), ("route", "/v2/devices"))]
    assert inf == 2
    # this scrape is counted in the next one
    again = _scrape(app)["acceld_api_requests_total"]
    assert again[(("method", "GET"), ("route", "/metrics"), ("status", "200"))] == 1


@pytest.mark.parametrize("token", ["user1:proj1", "nova:service"])
def test_only_an_admin_may_scrape(sqlite_db, token):
    resp = _get(_app(sqlite_db), "/metrics", token=token)
    assert resp.status_int == 403
    assert resp.json["errors"][0]["detail"] == \
        "Policy does not allow acceld:metrics:get to be performed."


def _documented() -> set[str]:
    """The metric names of docs/metrics.md's tables (first column, in backquotes)."""
    names = set()
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1].startswith("`acceld_"):
            names.add(cells[1].strip("`"))
    return names


def _exposed(text: str) -> set[str]:
    """The exposed names as Prometheus queries them (a counter's with ``_total``)."""
    return {f.name + "_total" if f.type == "counter" else f.name
            for f in text_string_to_metric_families(text)}


def test_docs_list_exactly_the_metrics_exposed(sqlite_db):
    api_side = _exposed(_get(_app(sqlite_db), "/metrics").text)
    from prometheus_client import generate_latest
    store = usage.UsageStore(10, 3.0)
    collector_side = _exposed(generate_latest(usage.registry(store)).decode())
    assert api_side and collector_side
    assert _documented() == api_side | collector_side
