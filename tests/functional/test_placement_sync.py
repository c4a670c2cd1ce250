"""Placement sync against the real OpenStack Placement (openstack-placement on loopback).

Each test gets its own host and compute node on one module-wide Placement server; the
request recorder of ``tests.placement_server`` proves what was (and was not) written.
"""

from __future__ import annotations

import json
import uuid

import pytest
import webob
from sqlalchemy import delete

from acceld import clients
from acceld.clients import placement as pc
from acceld.conductor import placement_plan as pp
from acceld.db import models as m
from acceld.objects import accelerators
from acceld.objects import placement as po
from tests.placement_server import PlacementServer
from tests.stack import Stack, wait_for


@pytest.fixture(scope="module")
def placement():
    with PlacementServer() as server:
        yield server


@pytest.fixture
def env(placement, tmp_path):
    """A fresh acceld (SQLite) with one agent host whose compute node exists."""
    host = f"cn-{uuid.uuid4().hex[:8]}"
    # Retries of a failed sync wait a minute unless a test asks for less; keystoneauth's
    # own retries (a 503 during set_down) wait 10 ms.
    stack = Stack.syncing_to(placement, tmp_path / "acceld.sqlite", (host,),
                             retry_initial_delay=60.0, retry_max_delay=60.0,
                             status_code_retry_delay=0.01, connect_retry_delay=0.01)
    (compute,) = placement.admin_session().get(
        f"/resource_providers?name={host}").json()["resource_providers"]
    placement.reset_counts()
    yield _Env(stack, placement, host, compute["uuid"])
    stack.stop()


class _Env:
    def __init__(self, stack: Stack, placement: PlacementServer, host: str, compute: str):
        self.stack, self.placement, self.host, self.compute = stack, placement, host, compute
        self.syncer = stack.conductor.placement
        self.admin = placement.admin_session()

    def report(self) -> None:
        self.stack.report_all()
        assert self.syncer.wait_idle(60)

    def children(self) -> dict[str, dict]:
        body = self.admin.get(f"/resource_providers?in_tree={self.compute}").json()
        out = {}
        for rp in body["resource_providers"]:
            if rp["uuid"] == self.compute:
                continue
            inv = self.admin.get(f"/resource_providers/{rp['uuid']}/inventories").json()
            traits = self.admin.get(f"/resource_providers/{rp['uuid']}/traits").json()
            out[rp["name"]] = {"uuid": rp["uuid"], "parent": rp["parent_provider_uuid"],
                               "inventories": inv["inventories"],
                               "traits": set(traits["traits"])}
        return out

    def device(self, kind: str) -> dict:
        return next(a for a in accelerators.list_accelerators(self.stack.db)
                    if a["device_type"] == kind)

    def api(self, method: str, path: str, body=None) -> webob.Response:
        req = webob.Request.blank(path, method=method)
        if body is not None:
            req.content_type = "application/json"
            req.body = json.dumps(body).encode()
        return req.get_response(self.stack.app)


def test_devices_become_child_providers_with_inventories_and_traits(env):
    env.report()
    children = env.children()
    assert len(children) == 4
    for child in children.values():
        assert child["parent"] == env.compute
        assert pp.OWNER_TRAIT in child["traits"]
        (rc, inv), = child["inventories"].items()
        assert inv["reserved"] == inv["total"]          # new devices are inactive
    qat = children[f"{env.host}_fake_3d"]
    assert qat["inventories"]["CUSTOM_QAT"]["total"] == 4
    assert {"CUSTOM_QAT_FAKE_4XXX", "CUSTOM_VENDOR_8086", "CUSTOM_PRODUCT_8086_4941"} <= \
        qat["traits"]
    gpu = children[f"{env.host}_fake_3b"]
    assert "PGPU" in gpu["inventories"]
    state = po.host_inputs(env.stack.db, env.host).state
    assert state.in_sync and state.compute_rp_uuid == env.compute


def test_allocation_candidates_from_a_device_profile_group(env):
    env.report()
    qat = env.device("QAT")
    assert env.api("PUT", f"/v1/accelerators/{qat['uuid']}/state",
                   {"state": "ready"}).json["state"] == "ready"
    assert env.syncer.wait_idle(60)
    # A device profile group as Nova folds it into the request: resources + required trait.
    group = {"resources:CUSTOM_QAT": "2", "trait:CUSTOM_QAT_FAKE_4XXX": "required"}
    resources = ",".join(f"{k.split(':', 1)[1]}:{v}" for k, v in group.items()
                         if k.startswith("resources:"))
    required = ",".join(k.split(":", 1)[1] for k, v in group.items()
                        if k.startswith("trait:") and v == "required")
    body = env.admin.get(f"/allocation_candidates?resources={resources}"
                         f"&required={required}").json()
    providers = {rp for req in body["allocation_requests"] for rp in req["allocations"]}
    qat_rp = env.children()[f"{env.host}_fake_3d"]["uuid"]
    assert providers == {qat_rp}
    # The inactive GPU stays out: all of it is reserved.
    body = env.admin.get("/allocation_candidates?resources=PGPU:1"
                         "&required=CUSTOM_FAKE_GPU_A100").json()
    assert body["allocation_requests"] == []


def test_device_added_removed_and_count_changed(env):
    env.report()
    env.stack.set_control(device_count=5)
    env.report()
    assert len(env.children()) == 5
    env.stack.set_control(device_count=3)
    env.report()
    children = env.children()
    assert len(children) == 3 and f"{env.host}_fake_3e" not in children
    env.stack.set_control(device_count=3, vf_count=6)
    env.report()
    assert env.children()[f"{env.host}_fake_3d"]["inventories"]["CUSTOM_QAT"]["total"] == 6


def test_reprogrammed_fpga_changes_traits(env):
    env.report()
    env.stack.set_control(device_count=4, fpga_function="AES256")
    env.report()
    fpga = env.children()[f"{env.host}_fake_3c"]
    assert "CUSTOM_FPGA_FUNCTION_ID_AES256" in fpga["traits"]
    env.stack.set_control(device_count=4, fpga_function="SHA3")
    env.report()
    traits = env.children()[f"{env.host}_fake_3c"]["traits"]
    assert "CUSTOM_FPGA_FUNCTION_ID_SHA3" in traits
    assert "CUSTOM_FPGA_FUNCTION_ID_AES256" not in traits


def test_inactive_and_ready_again_toggle_reserved(env):
    env.report()
    gpu = env.device("GPU")
    name = f"{env.host}_fake_3b"

    def reserved() -> int:
        return env.children()[name]["inventories"]["PGPU"]["reserved"]

    assert reserved() == 1
    env.api("PUT", f"/v1/accelerators/{gpu['uuid']}/state", {"state": "ready"})
    assert env.syncer.wait_idle(60)
    assert reserved() == 0
    env.api("PUT", f"/v1/accelerators/{gpu['uuid']}/state", {"state": "inactive"})
    assert env.syncer.wait_idle(60)
    assert reserved() == 1


def _allocate(env, rp_uuid: str, rc: str, amount: int) -> str:
    consumer = str(uuid.uuid4())
    resp = env.admin.put(f"/allocations/{consumer}", json={
        "allocations": {rp_uuid: {"resources": {rc: amount}}}, "consumer_generation": None,
        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
        "consumer_type": "INSTANCE"})
    assert resp.status_code == 204, resp.text
    return consumer


def test_provider_with_allocations_is_kept_and_the_conflict_shown(env):
    env.report()
    qat = env.device("QAT")
    env.api("PUT", f"/v1/accelerators/{qat['uuid']}/state", {"state": "ready"})
    assert env.syncer.wait_idle(60)
    qat_rp = env.children()[f"{env.host}_fake_3d"]["uuid"]
    consumer = _allocate(env, qat_rp, "CUSTOM_QAT", 3)

    env.stack.set_control(device_count=4, vf_count=2)        # lowering below the allocation
    env.report()
    held = env.children()[f"{env.host}_fake_3d"]["inventories"]["CUSTOM_QAT"]
    assert (held["total"], held["reserved"]) == (3, 3)  # held at what is used; no new ones
    env.stack.set_control(device_count=2)                    # the QAT vanishes entirely
    env.report()
    assert f"{env.host}_fake_3d" in env.children()
    status = env.api("GET", "/v1/placement").json["hosts"]
    mine = next(h for h in status if h["host"] == env.host)
    assert mine["in_sync"] is False
    assert [c["provider"] for c in mine["conflicts"]] == [qat_rp]
    assert "allocations" in mine["conflicts"][0]["reason"]

    assert env.admin.delete(f"/allocations/{consumer}").status_code == 204
    env.syncer.sync_host(env.host)                 # the next pass
    assert f"{env.host}_fake_3d" not in env.children()
    assert po.host_inputs(env.stack.db, env.host).state.in_sync


class _RacingClient(pc.PlacementClient):
    """The real client; before its first trait write, another writer bumps the
    provider's generation (a real concurrent write, so Placement answers 409)."""

    def __init__(self, adapter, admin):
        super().__init__(adapter)
        self._admin, self.raced = admin, 0

    def set_traits(self, uuid_, generation, traits):
        if not self.raced:
            self.raced += 1
            current = self._admin.get(f"/resource_providers/{uuid_}/traits").json()
            resp = self._admin.put(f"/resource_providers/{uuid_}/traits", json={
                "resource_provider_generation": current["resource_provider_generation"],
                "traits": current["traits"] + ["CUSTOM_SOMEONE_ELSE"]})
            assert resp.status_code == 200, resp.text
        return super().set_traits(uuid_, generation, traits)


def test_concurrent_generation_bump_is_retried(env):
    env.admin.put("/traits/CUSTOM_SOMEONE_ELSE")
    racing = _RacingClient(clients.make_adapter(env.stack.conf, "placement"), env.admin)
    env.syncer.client = racing
    env.report()
    assert racing.raced == 1
    conflicts = [r for r in env.placement.requests() if r[2] == 409]
    assert conflicts, "the race did not happen"
    children = env.children()
    assert len(children) == 4
    assert all("CUSTOM_SOMEONE_ELSE" not in c["traits"] for c in children.values())
    assert po.host_inputs(env.stack.db, env.host).state.in_sync


def test_placement_down_during_a_report_heals_on_the_retry(env):
    env.stack.conf.set_override("retry_initial_delay", 0.05, group="placement")
    env.stack.conf.set_override("retry_max_delay", 0.2, group="placement")
    env.placement.set_down(True)
    env.report()
    state = po.host_inputs(env.stack.db, env.host).state
    assert state.in_sync is False and "503" in (state.last_error or "")
    assert state.next_retry_at is not None
    # keystoneauth retried each 503 three times before the sync gave up
    assert len(env.placement.requests()) >= 4
    status = env.api("GET", "/v1/placement").json
    assert status["placement"] == {"configured": True, "reachable": False,
                                   "detail": status["placement"]["detail"]}
    assert "503" in status["placement"]["detail"]
    mine = next(h for h in status["hosts"] if h["host"] == env.host)
    assert mine["last_error_at"] is not None and mine["next_retry_at"] is not None
    env.placement.set_down(False)
    wait_for(lambda: po.host_inputs(env.stack.db, env.host).state.in_sync)
    assert len(env.children()) == 4
    assert po.host_inputs(env.stack.db, env.host).state.next_retry_at is None
    assert env.syncer.retries() == {}
    status = env.api("GET", "/v1/placement").json
    assert status["placement"]["reachable"] is True
    mine = next(h for h in status["hosts"] if h["host"] == env.host)
    assert (mine["last_error"], mine["last_error_at"], mine["next_retry_at"]) == (
        None, None, None)


def test_unchanged_host_issues_no_placement_requests(env):
    env.report()
    env.placement.reset_counts()
    env.report()                                      # the same report again
    env.syncer.sync_host(env.host)                    # and a change-triggered sync
    assert env.placement.requests() == []


def test_manual_edit_in_placement_heals_on_the_periodic_pass(env):
    env.report()
    name = f"{env.host}_fake_3b"
    rp = env.children()[name]
    resp = env.admin.put(f"/resource_providers/{rp['uuid']}/traits", json={
        "resource_provider_generation": env.admin.get(
            f"/resource_providers/{rp['uuid']}").json()["generation"],
        "traits": ["OWNER_CYBORG"]})
    assert resp.status_code == 200
    env.placement.reset_counts()
    env.syncer.schedule_all()                         # the periodic pass
    assert env.syncer.wait_idle(60)
    assert "CUSTOM_FAKE_GPU_A100" in env.children()[name]["traits"]
    writes = env.placement.writes()
    assert [(w[0], w[1].split("?")[0]) for w in writes] == [
        ("PUT", f"/resource_providers/{rp['uuid']}/traits")]


def _set_traits(env, rp_uuid: str, traits: list[str]) -> None:
    resp = env.admin.put(f"/resource_providers/{rp_uuid}/traits", json={
        "resource_provider_generation": env.admin.get(
            f"/resource_providers/{rp_uuid}").json()["generation"], "traits": traits})
    assert resp.status_code == 200, resp.text


def _full_pass(env) -> list[tuple[str, str]]:
    """A periodic pass over the host; its requests to Placement (method, path)."""
    env.placement.reset_counts()
    assert env.syncer.sync_host(env.host, full=True).in_sync
    return [(method, path.split("?")[0]) for method, path, _ in env.placement.requests()]


def test_a_full_pass_reads_only_the_providers_placement_changed(env):
    env.report()
    env.api("PUT", f"/v1/accelerators/{env.device('QAT')['uuid']}/state", {"state": "ready"})
    assert env.syncer.wait_idle(60)
    # nothing changed since the host's sync: its tree is the only read
    assert _full_pass(env) == [("GET", "/resource_providers")]
    # an allocation bumps a provider's generation: that one is read, nothing written
    qat = env.children()[f"{env.host}_fake_3d"]
    _allocate(env, qat["uuid"], "CUSTOM_QAT", 1)
    assert _full_pass(env) == [
        ("GET", "/resource_providers"),
        ("GET", f"/resource_providers/{qat['uuid']}/inventories"),
        ("GET", f"/resource_providers/{qat['uuid']}/traits")]
    # a manual edit is read and undone; afterwards the tree is the only read again
    gpu = env.children()[f"{env.host}_fake_3b"]
    _set_traits(env, gpu["uuid"], ["OWNER_CYBORG"])
    assert _full_pass(env) == [
        ("GET", "/resource_providers"),
        ("GET", f"/resource_providers/{gpu['uuid']}/inventories"),
        ("GET", f"/resource_providers/{gpu['uuid']}/traits"),
        ("PUT", f"/resource_providers/{gpu['uuid']}/traits")]
    assert env.children()[f"{env.host}_fake_3b"]["traits"] == gpu["traits"]
    assert _full_pass(env) == [("GET", "/resource_providers")]


def test_a_change_triggered_sync_does_not_vouch_for_a_provider_it_did_not_read(env):
    """A manual edit of one provider, then a change of another device: the change-triggered
    sync writes only the changed provider, and the next full pass still reads and undoes
    the edit (the edited provider's new generation was not taken as acceld's)."""
    env.report()
    fpga = env.children()[f"{env.host}_fake_3c"]
    _set_traits(env, fpga["uuid"], ["OWNER_CYBORG"])
    gpu = env.device("GPU")
    env.api("PUT", f"/v1/accelerators/{gpu['uuid']}/state", {"state": "ready"})
    assert env.syncer.wait_idle(60)
    assert env.children()[f"{env.host}_fake_3c"]["traits"] == {"OWNER_CYBORG"}
    assert ("PUT", f"/resource_providers/{fpga['uuid']}/traits") in _full_pass(env)
    assert env.children()[f"{env.host}_fake_3c"]["traits"] == fpga["traits"]


def _compute_id(env, tmp_path, node: str) -> None:
    """The agent finds ``node`` in Nova's compute_id file; its provider name names nothing
    in Placement (a lookup by name would fail)."""
    path = tmp_path / "compute_id"
    path.write_text(node + "\n")
    env.stack.conf.set_override("nova_compute_id_file", str(path), group="agent")
    env.stack.conf.set_override("resource_provider_name", "no-such-node", group="agent")


def _under(env, node: str) -> set[str]:
    """The names of the providers under ``node`` (not ``node`` itself)."""
    return {rp["name"] for rp in env.admin.get(
        f"/resource_providers?in_tree={node}").json()["resource_providers"]
        if rp["uuid"] != node}


def test_a_reported_compute_node_uuid_saves_the_lookup_by_name(env, tmp_path):
    _compute_id(env, tmp_path, env.compute)
    env.report()
    sent = [(method, path) for method, path, _ in env.placement.requests()]
    # a host's first sync reads nothing: neither its node by name nor the node's tree
    assert not [s for s in sent if s[0] == "GET"], sent
    assert ("POST", "/resource_providers") in sent
    assert len(_under(env, env.compute)) == 4
    state = po.host_inputs(env.stack.db, env.host).state
    assert state.in_sync and state.compute_rp_uuid == env.compute


def test_an_agent_that_starts_reporting_the_uuid_it_was_found_under_costs_nothing(
        env, tmp_path):
    env.report()                                     # found by name
    env.placement.reset_counts()
    path = tmp_path / "compute_id"
    path.write_text(env.compute)
    env.stack.conf.set_override("nova_compute_id_file", str(path), group="agent")
    env.report()                                     # the same node, now by its uuid
    assert env.placement.requests() == []
    inputs = po.host_inputs(env.stack.db, env.host)
    assert inputs.compute_node_uuid == env.compute
    assert inputs.state.in_sync and inputs.state.compute_rp_uuid == env.compute


def test_a_reported_compute_node_placement_lacks_is_waited_for(env, placement, tmp_path):
    node = str(uuid.uuid4())
    _compute_id(env, tmp_path, node)
    env.report()
    state = po.host_inputs(env.stack.db, env.host).state
    assert not state.in_sync and node in state.last_error
    assert state.next_retry_at is not None
    assert not any("name=" in path for _, path, _ in env.placement.requests())
    assert _under(env, env.compute) == set()        # nothing went under the named node
    # Nova makes the node (under a name of its own): the next try publishes under it
    placement.create_compute_node(f"nova-{env.host}", uuid=node)
    assert env.syncer.sync_host(env.host).in_sync
    assert len(_under(env, node)) == 4


def test_dry_run_shows_the_plan_and_writes_nothing(env):
    env.placement.set_down(True)
    env.report()                                      # inventory in the DB, not in Placement
    env.placement.set_down(False)
    env.placement.reset_counts()
    resp = env.api("POST", "/v1/placement/sync", {"host": env.host, "dry_run": True})
    assert resp.status_int == 200
    (result,) = resp.json["results"]
    assert sorted({s["action"] for s in result["steps"]}) == ["create", "set_inventories",
                                                              "set_traits"]
    assert env.placement.writes() == []
    resp = env.api("POST", "/v1/placement/sync", {"host": env.host})
    assert resp.json["results"][0]["in_sync"] is True
    assert len(env.children()) == 4


def test_missing_compute_node_is_reported_then_found(env, placement):
    host = f"late-{uuid.uuid4().hex[:6]}"
    env.stack.add_agent(host)
    env.stack.agents[host].report_once()
    assert env.syncer.wait_idle(60)
    state = po.host_inputs(env.stack.db, host).state
    assert state.in_sync is False and "not found" in state.last_error
    placement.create_compute_node(host)
    env.syncer.sync_host(host)
    assert po.host_inputs(env.stack.db, host).state.in_sync


def test_v2_disable_and_enable_toggle_reserved(env):
    env.report()
    gpu = env.device("GPU")
    env.api("PUT", f"/v1/accelerators/{gpu['uuid']}/state", {"state": "ready"})
    assert env.syncer.wait_idle(60)
    name = f"{env.host}_fake_3b"
    assert env.children()[name]["inventories"]["PGPU"]["reserved"] == 0
    assert env.api("POST", f"/v2/devices/{gpu['uuid']}/disable").status_int == 200
    wait_for(lambda: env.children()[name]["inventories"]["PGPU"]["reserved"] == 1)
    assert env.api("POST", f"/v2/devices/{gpu['uuid']}/enable").status_int == 200
    wait_for(lambda: env.children()[name]["inventories"]["PGPU"]["reserved"] == 0)


def test_provider_created_by_a_lost_request_is_adopted(env):
    """A create that reached Placement but whose answer was lost (a reset connection)
    left the provider without its owner trait; the next sync adopts it instead of
    failing on "already exists" for ever."""
    env.placement.set_down(True)
    env.report()                                      # the devices are in acceld only
    env.placement.set_down(False)
    row = po.host_inputs(env.stack.db, env.host).rows[0]
    resp = env.admin.post("/resource_providers", json={
        "uuid": row["rp_uuid"], "name": row["name"], "parent_provider_uuid": env.compute})
    assert resp.status_code == 200, resp.text
    result = env.syncer.sync_host(env.host)
    assert (result.error, result.in_sync) == (None, True)
    children = env.children()
    assert len(children) == 4
    assert children[row["name"]]["uuid"] == row["rp_uuid"]
    assert pp.OWNER_TRAIT in children[row["name"]]["traits"]


def test_a_tree_of_acceld_providers_only_is_read_without_the_owner_query(env):
    env.report()                                      # the first sync of the host: no read
    env.syncer.sync_host(env.host, full=True)         # a full pass over its providers
    reads = [path for method, path, _ in env.placement.requests()
             if method == "GET" and "in_tree=" in path]
    assert reads == [f"/resource_providers?in_tree={env.compute}"]


def test_a_first_sync_adopts_what_placement_has_and_the_full_pass_removes_the_stale(env):
    """acceld's record of a host is lost (a database restored from an older backup) while
    Placement keeps its providers and one that no device matches any more: the host's
    next sync, a first one, creates without reading, adopts each provider it finds, and
    the periodic full pass deletes the stale one."""
    env.report()
    stale = env.admin.post("/resource_providers", json={
        "name": f"{env.host}_fake_gone", "parent_provider_uuid": env.compute},
        headers={"OpenStack-API-Version": "placement 1.20"}).json()
    _set_traits(env, stale["uuid"], [pp.OWNER_TRAIT])
    before = env.children()
    with env.stack.db.writer() as session:
        session.execute(delete(m.PlacementSync).where(m.PlacementSync.host == env.host))
    assert po.host_inputs(env.stack.db, env.host).state is None
    env.placement.reset_counts()
    result = env.syncer.sync_host(env.host)
    assert (result.error, result.in_sync) == (None, True)
    sent = env.placement.requests()
    assert [r for r in sent if r[0] == "POST" and r[2] == 409]    # found, adopted
    assert not [r for r in sent if r[0] == "GET" and "in_tree=" in r[1]]
    assert env.children() == before                               # no duplicate, none lost
    _full_pass(env)
    after = env.children()
    assert f"{env.host}_fake_gone" not in after and len(after) == 4


def test_another_services_provider_is_left_alone_and_a_stale_one_of_acceld_deleted(env):
    env.report()
    foreign = env.admin.post("/resource_providers", json={
        "name": f"{env.host}_pci_0000_81_00_0", "parent_provider_uuid": env.compute},
        headers={"OpenStack-API-Version": "placement 1.20"}).json()
    stale = env.admin.post("/resource_providers", json={
        "name": f"{env.host}_gone_device", "parent_provider_uuid": env.compute},
        headers={"OpenStack-API-Version": "placement 1.20"}).json()
    env.admin.put(f"/resource_providers/{stale['uuid']}/traits", json={
        "resource_provider_generation": stale["generation"], "traits": [pp.OWNER_TRAIT]},
        headers={"OpenStack-API-Version": "placement 1.20"})
    env.placement.reset_counts()
    assert env.syncer.sync_host(env.host, full=True).in_sync
    names = set(env.children())
    assert foreign["name"] in names                   # not acceld's: never touched
    assert stale["name"] not in names                 # acceld's, no longer reported
    touched = {path for method, path, _ in env.placement.requests() if method != "GET"}
    assert touched == {f"/resource_providers/{stale['uuid']}"}
    assert any("required=" in path for _, path, _ in env.placement.requests())
