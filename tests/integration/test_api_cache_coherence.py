"""Two ``acceld api`` processes, A and B, on one database (issue 23, item 3): a write
through one process is visible through every other on the next request.

Each API process keeps the bodies and whole answers of ``GET /v2/devices`` and
``GET /v2/deployables`` (``acceld.api.listcache``) under the inventory generation
(``acceld.db.generations``); every other read goes to the database each time. For each
read, with both processes' caches warm, a write goes through A (or through the conductor
process) and B's very next answer must show it. A control first shows that B really
answers those lists from its cache: a change made behind the generation's back (plain
SQL, no bump) is not in B's list until a write through A moves the generation.

Real processes: ``acceld conductor``, ``acceld agent`` and the two APIs (one process
each) on PostgreSQL, and on MariaDB, with RabbitMQ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import sqlalchemy

from tests.integration import procs as p

DEVICES = 4
V2 = {"OpenStack-API-Version": "accelerator 2.3"}   # devices show their status
# every read the test warms: the two cached lists (with a filter: a key of its own) and
# the reads served from the database each time
CACHED = ("/v2/devices", "/v2/devices?type=GPU", "/v2/deployables")
UNCACHED = ("/v2/attributes", "/v2/device_profiles", "/v2/accelerator_requests",
            "/v1/accelerators")

BACKENDS = [
    pytest.param("postgresql", id="postgresql",
                 marks=[pytest.mark.postgresql, pytest.mark.rabbitmq]),
    pytest.param("mysql", id="mysql", marks=[pytest.mark.mysql, pytest.mark.rabbitmq]),
]


class Apis(NamedTuple):
    a: p.Api
    b: p.Api
    db_url: str
    control_file: Path      # the agent's fake driver reads it


@pytest.fixture(params=BACKENDS)
def apis(request, acceld_procs, make_db_url, isolated_rabbit_url) -> Apis:
    """A's and B's clients once the agent's devices are in."""
    db_url = make_db_url(request.param)
    a, b = p.start_two_apis(acceld_procs, db_url=db_url, transport_url=isolated_rabbit_url,
                            host=p.unique_host(), device_count=DEVICES)
    p.wait_inventory(a, DEVICES)
    return Apis(a.api, b.api, db_url, a.control_file)


def _read(api: p.Api, path: str) -> Any:
    resp = api.send("GET", path, headers=V2)
    assert resp.status_code == 200, f"GET {path}: {resp.status_code} {resp.text}"
    return resp.json()


def _write(api: p.Api, method: str, path: str, body: Any = None, status: int = 200) -> Any:
    resp = api.send(method, path, body, headers=V2)
    assert resp.status_code == status, f"{method} {path}: {resp.status_code} {resp.text}"
    return resp.json() if resp.content else None


def _warm(*clients: p.Api) -> None:
    """Every read twice through each process: the lists' caches hold the answers of now."""
    for api in clients:
        for path in CACHED + UNCACHED:
            _read(api, path)
            _read(api, path)


def _statuses(api: p.Api, path: str = "/v2/devices") -> dict[str, str]:
    return {d["uuid"]: d["status"] for d in _read(api, path)["devices"]}


def _attributes_lists(api: p.Api) -> list[list[dict[str, str]]]:
    return [json.loads(d["attributes_list"]) for d in _read(api, "/v2/deployables")
            ["deployables"]]


def _gpu(api: p.Api) -> str:
    (gpu,) = _read(api, "/v2/devices?type=GPU")["devices"]
    return gpu["uuid"]


def test_b_answers_the_lists_from_its_cache_until_the_generation_moves(apis):
    """The control: without it the other tests could pass with no cache at all."""
    a, b, db_url, _control = apis
    gpu = _gpu(a)
    _warm(a, b)
    engine = sqlalchemy.create_engine(db_url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.begin() as conn:    # not through acceld: no generation bump
            conn.execute(sqlalchemy.text("UPDATE devices SET model = 'behind' WHERE uuid = :u"),
                         {"u": gpu})
    finally:
        engine.dispose()
    assert _read(b, f"/v2/devices/{gpu}")["model"] == "behind"     # a show is not cached
    listed = {d["uuid"]: d["model"] for d in _read(b, "/v2/devices")["devices"]}
    assert listed[gpu] != "behind"                                  # the list was

    _write(a, "POST", f"/v2/devices/{gpu}/disable")   # through A: the generation moves
    listed = {d["uuid"]: (d["model"], d["status"]) for d in _read(b, "/v2/devices")["devices"]}
    assert listed[gpu] == ("behind", "maintaining")


def test_a_device_status_written_through_a_is_in_bs_next_lists(apis):
    a, b = apis.a, apis.b
    gpu = _gpu(a)
    for action, status in (("disable", "maintaining"), ("enable", "enabled")):
        _warm(a, b)
        _write(a, "POST", f"/v2/devices/{gpu}/{action}")
        assert _statuses(b)[gpu] == status
        assert _statuses(b, "/v2/devices?type=GPU") == {gpu: status}


def test_an_attribute_written_through_a_is_in_bs_next_deployables(apis):
    a, b = apis.a, apis.b
    deployable_id = _read(a, "/v2/attributes")["attributes"][0]["deployable_id"]
    _warm(a, b)
    created = _write(a, "POST", "/v2/attributes",
                     {"deployable_id": deployable_id, "key": "written-by", "value": "A"},
                     status=201)
    assert sum({"written-by": "A"} in attrs for attrs in _attributes_lists(b)) == 1
    assert created["uuid"] in {x["uuid"] for x in _read(b, "/v2/attributes")["attributes"]}

    _warm(a, b)
    _write(a, "DELETE", f"/v2/attributes/{created['uuid']}", status=204)
    assert not any({"written-by": "A"} in attrs for attrs in _attributes_lists(b))
    assert created["uuid"] not in {x["uuid"] for x in _read(b, "/v2/attributes")["attributes"]}


def test_a_state_change_through_a_and_the_conductor_is_in_bs_next_reads(apis):
    """The write goes API A -> conductor -> agent -> conductor (which commits it)."""
    a, b = apis.a, apis.b
    gpu = _gpu(a)
    _warm(a, b)
    assert _write(a, "PUT", f"/v1/accelerators/{gpu}/state", {"state": "ready"})["state"] \
        == "ready"
    states = {r["uuid"]: r["state"] for r in _read(b, "/v1/accelerators")["accelerator"]}
    assert states[gpu] == "ready"
    assert _read(b, f"/v1/accelerators/{gpu}")["state"] == "ready"


def test_profiles_and_arqs_written_through_a_are_in_bs_next_reads(apis):
    a, b = apis.a, apis.b
    _warm(a, b)
    _write(a, "POST", "/v2/device_profiles",
           [{"name": "coherent", "groups": [{"resources:PGPU": "1"}]}], status=201)
    assert "coherent" in {x["name"] for x in _read(b, "/v2/device_profiles")["device_profiles"]}
    assert _read(b, "/v2/device_profiles/coherent")["device_profile"]["name"] == "coherent"

    _warm(a, b)
    (arq,) = _write(a, "POST", "/v2/accelerator_requests",
                    {"device_profile_name": "coherent"}, status=201)["arqs"]
    assert arq["uuid"] in {x["uuid"] for x in _read(b, "/v2/accelerator_requests")["arqs"]}

    _warm(a, b)
    _write(a, "DELETE", f"/v2/accelerator_requests/{arq['uuid']}", status=204)
    assert _read(b, "/v2/accelerator_requests")["arqs"] == []

    _warm(a, b)
    _write(a, "DELETE", "/v2/device_profiles/coherent", status=204)
    assert "coherent" not in {x["name"] for x in
                              _read(b, "/v2/device_profiles")["device_profiles"]}
    assert b.send("GET", "/v2/device_profiles/coherent", headers=V2).status_code == 404


def test_an_inventory_change_the_conductor_wrote_is_in_bs_next_lists(apis):
    """An agent's report, applied by the conductor process: once A shows it, B's next
    lists show it too (B was not read meanwhile: its cache is of before the report)."""
    a, b = apis.a, apis.b
    _warm(a, b)
    before = len(_read(b, "/v2/deployables")["deployables"])
    p.write_control(apis.control_file, device_count=DEVICES + 1)
    p.wait_until(lambda: len(_read(a, "/v2/devices")["devices"]) == DEVICES + 1, 30,
                 "the fifth device through A")
    assert len(_read(b, "/v2/devices")["devices"]) == DEVICES + 1
    assert len(_read(b, "/v2/deployables")["deployables"]) > before
