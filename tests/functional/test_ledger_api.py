"""GET /v1/usage and GET /v1/ledger through the API (handlers/ledger.py): admin only
(policy first), the query validated with 400s naming the field, the ledger paged by id."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pytest
import webob

from acceld.objects import ledger
from tests.functional.gabbi_fixtures import RunningStack
from tests.functional.test_policy_sweep import PERSONAS

DEVICE = "0b7f3e2c-6a3a-4f59-9f0c-1d2e3f405060"
T0 = datetime.datetime(2026, 1, 1)


@pytest.fixture(scope="module")
def stack() -> Iterator[RunningStack]:
    running = RunningStack()
    with running.db.write_rows() as conn:
        for hour, event in ((0, ledger.BIND), (3, ledger.UNBIND), (5, ledger.BIND)):
            ledger.record(conn, ledger.Entry(event, ledger.KIND_ARQ, DEVICE, arq_uuid="a1",
                                             project_id="p1", host="h1",
                                             at=T0 + datetime.timedelta(hours=hour)))
    try:
        yield running
    finally:
        running.stop()


def _get(stack: RunningStack, url: str, persona: str = "admin") -> webob.Response:
    return webob.Request.blank(url, headers=PERSONAS[persona]).get_response(
        stack.stack.app)


@pytest.mark.parametrize("persona", ["member", "manager", "service"])
@pytest.mark.parametrize("url", ["/v1/usage?since=bad", "/v1/ledger"])
def test_only_an_admin_reads_them_and_policy_comes_first(stack, persona, url) -> None:
    assert _get(stack, url, persona).status_int == 403


def test_usage_counts_known_and_open_holdings(stack) -> None:
    resp = _get(stack, "/v1/usage?since=2026-01-01&until=2026-01-01T08:00:00Z")
    assert resp.status_int == 200, resp.text
    body = json.loads(resp.body)
    assert body["usage"] == [{"project": "p1", "device_hours": 6.0, "holdings": 2}]
    assert (body["since"], body["until"], body["group_by"]) == (
        "2026-01-01T00:00:00+00:00", "2026-01-01T08:00:00+00:00", "project")
    # an offset is turned into UTC: 03:00+02:00 is 01:00 UTC
    resp = _get(stack, "/v1/usage?since=2026-01-01T03:00:00%2B02:00&until=2026-01-01T02:00"
                       "&group_by=device&project_id=p1")
    assert json.loads(resp.body)["usage"] == [
        {"device": DEVICE, "device_hours": 1.0, "holdings": 1}]


@pytest.mark.parametrize(("query", "field"), [
    ("", "since"),
    ("since=yesterday", "since"),
    ("since=2026-02-30", "since"),
    ("since=2026-01-02&until=2026-01-01", "until"),
    ("since=2026-01-01&group_by=colour", "group_by"),
    ("since=2026-01-01&colour=red", "colour"),
])
def test_a_bad_usage_query_is_a_400_naming_the_field(stack, query, field) -> None:
    resp = _get(stack, f"/v1/usage?{query}")
    assert resp.status_int == 400, resp.text
    assert field in json.loads(resp.body)["errors"][0]["detail"]


def test_the_ledger_is_listed_by_the_page(stack) -> None:
    resp = _get(stack, "/v1/ledger?limit=2")
    body = json.loads(resp.body)
    assert [r["event"] for r in body["ledger"]] == ["bind", "unbind"]
    (link,) = body["ledger_links"]
    rest = json.loads(_get(stack, link["href"].split("localhost", 1)[-1]).body)
    assert [r["event"] for r in rest["ledger"]] == ["bind"] and "ledger_links" not in rest
    since = json.loads(_get(stack, "/v1/ledger?since=2026-01-01T04:00:00").body)["ledger"]
    assert [r["at"] for r in since] == ["2026-01-01T05:00:00+00:00"]
    assert _get(stack, "/v1/ledger?marker=abc").status_int == 400
    assert _get(stack, "/v1/ledger?device_uuid=nope").status_int == 400
