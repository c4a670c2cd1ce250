"""Integration check of tests/placement_server.py: the real Placement, on loopback."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests import placement_server
from tests.placement_server import PlacementServer, PlacementServerError, request_kind

ROOT_INVENTORY = {"VCPU", "MEMORY_MB", "DISK_GB"}


@pytest.fixture
def placement() -> Iterator[PlacementServer]:
    with PlacementServer() as server:
        yield server


def _ok(resp, status: int = 200):
    assert resp.status_code == status, (resp.status_code, resp.text)
    return resp.json() if resp.content else None


def test_nested_tree_traits_and_allocation_candidates(placement: PlacementServer) -> None:
    api = placement.admin_session()
    root = placement.create_compute_node("compute-1")
    assert set(_ok(api.get(f"/resource_providers/{root}/inventories"))["inventories"]) == \
        ROOT_INVENTORY

    _ok(api.put("/resource_classes/CUSTOM_X", microversion="1.7"), 201)
    _ok(api.put("/traits/CUSTOM_FPGA_BLUE"), 201)
    child = str(uuid.uuid4())
    body = _ok(api.post("/resource_providers", json={
        "name": "compute-1_fpga_0", "uuid": child, "parent_provider_uuid": root}))
    assert body["root_provider_uuid"] == root
    gen = body["generation"]
    gen = _ok(api.put(f"/resource_providers/{child}/inventories", json={
        "resource_provider_generation": gen,
        "inventories": {"CUSTOM_X": {"total": 2}}}))["resource_provider_generation"]
    _ok(api.put(f"/resource_providers/{child}/traits", json={
        "resource_provider_generation": gen, "traits": ["CUSTOM_FPGA_BLUE", "HW_CPU_X86_AVX2"]}))

    # Placement's standard traits were synced into the new database at start.
    assert "HW_CPU_X86_AVX2" in _ok(api.get("/traits?name=startswith:HW_CPU_X86_AVX"))["traits"]

    cands = _ok(api.get("/allocation_candidates?resources=CUSTOM_X:1&required=CUSTOM_FPGA_BLUE"))
    assert [list(a["allocations"]) for a in cands["allocation_requests"]] == [[child]]
    assert cands["allocation_requests"][0]["allocations"][child]["resources"] == {"CUSTOM_X": 1}
    summaries = cands["provider_summaries"]
    assert set(summaries) == {root, child}  # the whole tree, since 1.29
    assert summaries[child]["parent_provider_uuid"] == root
    assert set(summaries[child]["traits"]) == {"CUSTOM_FPGA_BLUE", "HW_CPU_X86_AVX2"}
    absent = _ok(api.get("/allocation_candidates?resources=CUSTOM_X:1&required=!CUSTOM_FPGA_BLUE"))
    assert absent["allocation_requests"] == []

    # The recorder saw every call, in order, with its status.
    assert placement.writes() == [
        ("POST", "/resource_providers", 200),
        ("PUT", f"/resource_providers/{root}/inventories", 200),
        ("PUT", "/resource_classes/CUSTOM_X", 201),
        ("PUT", "/traits/CUSTOM_FPGA_BLUE", 201),
        ("POST", "/resource_providers", 200),
        ("PUT", f"/resource_providers/{child}/inventories", 200),
        ("PUT", f"/resource_providers/{child}/traits", 200),
    ]
    assert placement.requests()[-1] == (
        "GET", "/allocation_candidates?resources=CUSTOM_X:1&required=!CUSTOM_FPGA_BLUE", 200)
    assert len(placement.requests()) == 11


def test_recorder_copy_reset_and_errors(placement: PlacementServer) -> None:
    api = placement.admin_session()
    _ok(api.get("/resource_providers?name=nope"))
    api.get(f"/resource_providers/{uuid.uuid4()}")
    api.put("/resource_classes/NOT_CUSTOM", microversion="1.7")
    seen = placement.requests()
    assert seen[0] == ("GET", "/resource_providers?name=nope", 200)
    assert seen[1][2] == 404
    assert seen[2] == ("PUT", "/resource_classes/NOT_CUSTOM", 400)
    assert placement.writes() == [seen[2]]
    seen.clear()  # a copy
    assert len(placement.requests()) == 3
    by_kind = placement.cpu_by_kind()
    assert by_kind.keys() == {"GET /resource_providers?name", "GET /resource_providers/{id}",
                              "PUT /resource_classes/{name}"}
    assert all(n == 1 and cpu > 0 and waited >= 0 for n, cpu, waited in by_kind.values())
    placement.reset_counts()
    assert placement.requests() == [] and placement.writes() == []
    assert placement.cpu_by_kind() == {}
    # No token: Placement's noauth2 middleware refuses it (the harness adds no auth).
    assert requests.get(f"{placement.url}/resource_providers", timeout=10).status_code == 401
    assert placement.requests() == [("GET", "/resource_providers", 401)]


def test_request_kind() -> None:
    rp = str(uuid.uuid4())
    assert (request_kind("PUT", f"/resource_providers/{rp}/traits", "")
            == "PUT /resource_providers/{id}/traits")
    assert (request_kind("GET", "/resource_providers", f"in_tree={rp}&required=X&in_tree=y")
            == "GET /resource_providers?in_tree&required")
    assert request_kind("PUT", "/traits/CUSTOM_X", "") == "PUT /traits/{name}"


def test_set_down_answers_503_and_recovers(placement: PlacementServer) -> None:
    api = placement.admin_session()
    root = placement.create_compute_node("compute-1")
    placement.reset_counts()
    placement.set_down(True)
    assert api.get("/resource_providers").status_code == 503
    resp = api.delete(f"/resource_providers/{root}")
    assert resp.status_code == 503 and resp.json()["errors"][0]["status"] == 503
    with pytest.raises(PlacementServerError):
        placement.create_compute_node("compute-2")
    placement.set_down(False)
    assert [p["uuid"] for p in _ok(api.get("/resource_providers"))["resource_providers"]] == \
        [root]
    assert placement.requests() == [
        ("GET", "/resource_providers", 503),
        ("DELETE", f"/resource_providers/{root}", 503),
        ("POST", "/resource_providers", 503),
        ("GET", "/resource_providers", 200),
    ]


def test_one_per_process_and_restart_on_an_empty_database() -> None:
    first = PlacementServer().start()
    try:
        first.create_compute_node("compute-1")
        first_url = first.url
        api = first.admin_session()
        _ok(api.put("/resource_classes/CUSTOM_X", microversion="1.7"), 201)
        with pytest.raises(PlacementServerError, match="already running"):
            PlacementServer().start()
        assert len(_ok(api.get("/resource_providers"))["resource_providers"]) == 1
    finally:
        first.stop()
    first.stop()  # idempotent
    with pytest.raises(requests.ConnectionError):
        requests.get(first_url, timeout=5)

    with PlacementServer() as second:
        assert second.requests() == []
        api = second.admin_session()
        assert _ok(api.get("/resource_providers"))["resource_providers"] == []
        classes = {rc["name"] for rc in _ok(api.get("/resource_classes"))["resource_classes"]}
        assert "VCPU" in classes and "CUSTOM_X" not in classes
        assert "HW_CPU_X86_AVX2" in _ok(api.get("/traits"))["traits"]
        second.create_compute_node("compute-1")  # the same name is free again
        assert second.writes()[0] == ("POST", "/resource_providers", 200)


def test_failed_start_releases_the_process_slot() -> None:
    from oslo_db import exception as db_exc

    with pytest.raises(db_exc.DBError):
        PlacementServer("sqlite:////nonexistent-dir/placement.sqlite").start()
    with PlacementServer() as server:
        assert server.create_compute_node("compute-1")


def test_alembic_schema() -> None:
    with PlacementServer(schema="alembic") as server:
        root = server.create_compute_node("compute-1")
        api = server.admin_session()
        assert _ok(api.get(f"/resource_providers/{root}"))["name"] == "compute-1"


def test_acceld_placement_config(placement: PlacementServer, tmp_path) -> None:
    """The [placement] snippet in the module docstring works with acceld's own loader."""
    from oslo_config import cfg

    from acceld.clients import make_adapter
    from acceld.conf import default, service_client
    from acceld.conf import placement as placement_conf

    conf_file = tmp_path / "acceld.conf"
    conf_file.write_text(
        f"[placement]\nauth_type = admin_token\nendpoint = {placement.url}\ntoken = admin\n")
    conf = cfg.ConfigOpts()
    conf.register_opts(default.OPTS)      # [DEFAULT] host names the caller (User-Agent)
    service_client.register(conf, placement_conf)
    conf([], default_config_files=[str(conf_file)])
    resp = make_adapter(conf, "placement").get("/resource_providers", microversion="1.14",
                                               raise_exc=False)
    assert resp.status_code == 200
    assert resp.request.headers["X-Auth-Token"] == "admin"
    assert resp.request.headers["OpenStack-API-Version"] == "placement 1.14"
    assert resp.request.headers["User-Agent"].startswith(f"acceld/0.1.0 ({conf.host})")

    conf2 = cfg.ConfigOpts()
    conf2.register_opts(default.OPTS)
    service_client.register(conf2, placement_conf)
    conf2([], default_config_files=[])
    placement.configure_client(conf2)
    assert make_adapter(conf2, "placement").get("/", raise_exc=False).status_code == 200
    assert placement.requests() == [("GET", "/resource_providers", 200), ("GET", "/", 200)]


def test_admin_session_headers(placement: PlacementServer) -> None:
    resp = placement.admin_session().get("/")
    assert resp.request.headers["OpenStack-API-Version"] == "placement 1.39"
    assert resp.request.headers["X-Auth-Token"] == "admin"
    assert resp.headers["OpenStack-API-Version"] == "placement 1.39"
    assert _ok(resp)["versions"][0]["max_version"] == "1.39"


@pytest.mark.parametrize("backend", [
    pytest.param("postgresql", marks=pytest.mark.postgresql),
    pytest.param("mysql", marks=pytest.mark.mysql),
])
def test_database_url_passed_in(backend: str, make_db_url) -> None:
    with PlacementServer(make_db_url(backend)) as server:
        root = server.create_compute_node("compute-1")
        api = server.admin_session()
        assert [p["uuid"] for p in _ok(api.get("/resource_providers"))["resource_providers"]] == \
            [root]


def test_concurrent_writes_on_sqlite(placement: PlacementServer) -> None:
    """Eight clients writing at once: serialized by BEGIN IMMEDIATE, no 'database is locked'."""
    def work(i: int) -> list[str]:
        return [placement.create_compute_node(f"compute-{i}-{j}") for j in range(4)]

    with ThreadPoolExecutor(8) as pool:
        created = [u for batch in pool.map(work, range(8)) for u in batch]
    assert len(set(created)) == 32
    assert {status for _, _, status in placement.requests()} == {200}
    rps = _ok(placement.admin_session().get("/resource_providers"))["resource_providers"]
    assert len(rps) == 32


def test_throughput_smoke(placement: PlacementServer) -> None:
    """A bounded loop of GET /resource_providers; prints the rate for benchmark planning."""
    placement.create_compute_node("compute-1")
    api = placement.admin_session()
    n = 100
    started = time.perf_counter()
    for _ in range(n):
        assert api.get("/resource_providers").status_code == 200
    elapsed = time.perf_counter() - started
    print(f"\nPlacementServer: start {placement.start_seconds * 1000:.0f} ms; "
          f"{n} GET /resource_providers in {elapsed:.2f} s = {n / elapsed:.0f} req/s")
    assert len(placement.requests()) == n + 2


@pytest.mark.skipif(not os.path.exists(placement_server.SCHEDSTAT),
                    reason="this kernel keeps no per-thread schedstat")
def test_run_delay_is_the_threads_wait_for_a_core_in_seconds() -> None:
    """The recorder's wait for a core is schedstat's second field (run delay, ns), not the
    first (time on a core, far larger on a thread that has run)."""
    before = placement_server._run_delay()
    with open(placement_server.SCHEDSTAT, encoding="ascii") as f:
        waited_ns = int(f.read().split()[1])
    after = placement_server._run_delay()
    assert before <= waited_ns / 1e9 <= after


def test_run_delay_is_zero_without_schedstat(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path) -> None:
    monkeypatch.setattr(placement_server, "SCHEDSTAT", str(tmp_path / "absent"))
    assert placement_server._run_delay() == 0.0
