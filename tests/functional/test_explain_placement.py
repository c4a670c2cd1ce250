"""Explain (``GET /v2/device_profiles/{name}/availability``) agrees with the real
Placement's ``GET /allocation_candidates`` host by host, on a simulated fleet of 50 hosts
with mixed devices and faults, synced to Placement by a real conductor (SQLite, the
in-process bus).

Faults: hosts whose devices were never readied, vGPUs whose reset failed, FPGAs unplugged,
A100s failed by an ECC storm, one FPGA disabled, and devices held by bound ARQs (whose
allocations Placement holds, written as Nova writes them). Placement is asked as Nova
asks it for a device profile: one numbered request group per profile group
(``resourcesN``, ``requiredN`` with ``!`` for forbidden traits) and ``group_policy``.
For one-group profiles the number of instances per host is compared too, from the
capacity and usage Placement reports for the candidates' providers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter, defaultdict
from concurrent import futures
from typing import Any

import pytest
import webob
from sqlalchemy import select

from acceld import rpc, states, wiring
from acceld.api import deploy
from acceld.conductor import placement_plan as pp
from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs, identity
from acceld.objects import placement as po
from acceld.sim import devices as devmod
from acceld.sim import scenario as scen
from acceld.sim.fleet import Fleet, FleetConfig, host_names
from tests import helpers
from tests.placement_server import PlacementServer
from tests.simulated import mismatches
from tests.stack import wait_for

HOSTS = 50
NEVER_READIED = host_names("sim", HOSTS)[45:]
MIG_READIED = host_names("sim", HOSTS)[:5]
MIX = devmod.parse_mix("gpu=1,vgpu=1,fpga=1,gpu_mig=1")
TIMEOUT = 60.0
# Readying the fleet makes every host's providers change twice (reserved while installing,
# then free): some 700 writes to an in-process Placement that shares this process's one
# interpreter with the conductor and 50 agents; on a loaded machine that took over 60 s.
SYNC_TIMEOUT = 150.0
_H = host_names("sim", HOSTS)
FAULTS = {"seed": 3, "faults": [
    {"at": 0.3, "kind": scen.FAILED_RESET, "hosts": _H[1:5], "device_kind": "vgpu"},
    {"at": 0.3, "kind": scen.UNPLUG, "hosts": _H[5:9], "device_kind": "fpga"},
    {"at": 0.3, "kind": scen.ECC_STORM, "hosts": _H[9:12], "device_kind": "gpu",
     "status": states.HEALTH_FAILED, "duration": None},
]}
DISABLED_FPGA_HOST = _H[12]
FULL_GPU_HOSTS = _H[13:17]                   # the A100 bound
VGPU_BINDS = {_H[17]: 2, _H[18]: 4, _H[19]: 3}   # of the T4's four vGPUs
QUARANTINED_GPU_HOST, DRAINED_GPU_HOST = _H[20], _H[21]   # their A100 (model 20b5)

PROFILES: dict[str, list[dict[str, str]]] = {
    "gpu": [{"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_20B5": "required"}],
    "fpga-d5005": [{"resources:FPGA": "1",
                    "trait:CUSTOM_FPGA_INTEL_PAC_D5005": "required"}],
    "vgpu-pair": [{"resources:VGPU": "2", "trait:CUSTOM_NVIDIA_VGPU_230": "required"}],
    "vgpu-one": [{"resources:VGPU": "1"}],
    "gpu-and-fpga": [{"resources:PGPU": "1"}, {"resources:FPGA": "1"}],
    "nowhere": [{"resources:FPGA": "1", "trait:CUSTOM_NO_SUCH_AFU": "required"}],
    "not-a-t4": [{"resources:VGPU": "1", "trait:CUSTOM_NVIDIA_1EB8": "forbidden"}],
    "mig": [{"resources:CUSTOM_NVIDIA_MIG_1G_10GB": "1"}],
}


@pytest.fixture(scope="module")
def placement():
    with PlacementServer() as server:
        yield server


class Deployment:
    """A conductor syncing to Placement, the API over the same database, and the fleet."""

    def __init__(self, tmp_path: Any, placement: PlacementServer) -> None:
        self.computes = {h: placement.create_compute_node(h) for h in _H}
        self.db = Database(f"sqlite:///{tmp_path / 'acceld.sqlite'}")
        migration.upgrade(self.db)
        conf = helpers.make_conf(
            DEFAULT={"rpc_timeout": 10},
            conductor={"save_interval": 0.2, "periodic_interval": 3600.0,
                       "operation_wait": 10.0},
            placement=dict(placement.acceld_config(), sync_interval=3600.0))
        self.transport = rpc.LocalTransport(workers=8)
        self.manager, self._server = wiring.start_conductor(conf, self.db, self.transport)
        self.app = deploy.make_app(conf, self.db, rpc.ConductorClient(self.transport))
        self.fleet = Fleet(self.transport, FleetConfig(
            hosts=HOSTS, report_interval=2.0, retry_interval=0.1, serve_rpc=HOSTS, mix=MIX,
            workers=8), scen.parse(FAULTS))
        self.placement = placement.admin_session()

    def stop(self) -> None:
        self.fleet.stop()
        self._server.stop()
        self.manager.stop()
        self.transport.close()
        self.db.dispose()

    def call(self, method: str, path: str, body: Any = None) -> webob.Response:
        req = webob.Request.blank(path, method=method)
        if body is not None:
            req.content_type = "application/json"
            req.body = json.dumps(body).encode()
        return req.get_response(self.app)


@pytest.fixture
def deployment(tmp_path, placement):
    dep = Deployment(tmp_path, placement)
    yield dep
    dep.stop()


def _devices(db: Database) -> list[Any]:
    with db.reader() as s:
        return list(s.execute(select(m.Device.uuid, m.Device.hostname, m.Device.type,
                                     m.Device.model, m.Device.state)).all())


def _ready(dep: Deployment) -> None:
    """An operator readies the devices of every host but :data:`NEVER_READIED` (MIG GPUs
    on :data:`MIG_READIED` only); a slow install finishes after ``set_state`` answers."""
    todo = {d.uuid for d in _devices(dep.db) if d.hostname not in NEVER_READIED
            and (d.model != "2330" or d.hostname in MIG_READIED)}
    with futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda u: dep.manager.set_state(u, states.READY), sorted(todo)))
    wait_for(lambda: {d.uuid for d in _devices(dep.db) if d.state == states.READY} == todo,
             TIMEOUT, interval=0.2)


def _bind(dep: Deployment, profile: str, host: str, rc: str, units: int,
          kind: str) -> None:
    """ARQs of ``profile`` bound on ``host``'s device of ``kind`` for a new instance, and
    that instance's allocation in Placement, as Nova makes them."""
    device = next(d for d in dep.fleet.hosts[host].devices if d.kind == kind)
    dev_uuid = identity.device_uuid(host, device.driver, device.identity)
    rp = identity.rp_uuid(identity.deployable_uuid(
        dev_uuid, device.body["deployables"][0]["name"]))
    instance = str(uuid.uuid4())
    made = dep.call("POST", "/v2/accelerator_requests", {"device_profile_name": profile})
    assert made.status_int == 201, made.text
    created = [a["uuid"] for a in made.json["arqs"]][:units]
    dep.manager.arq_bind({u: {"hostname": host, "device_rp_uuid": rp,
                              "instance_uuid": instance, "project_id": None}
                          for u in created})
    assert {a["state"] for a in (arqs.get(dep.db, u, project_id=None) for u in created)} \
        == {states.ARQ_BOUND}
    put = dep.placement.put(f"/allocations/{instance}", json={
        "allocations": {rp: {"resources": {rc: units}}}, "project_id": str(uuid.uuid4()),
        "user_id": str(uuid.uuid4()), "consumer_generation": None}, microversion="1.28")
    assert put.status_code == 204, put.text


def _behind(dep: Deployment) -> list[str]:
    """The hosts whose last sync did not write what acceld's rows want now (the syncer's
    own test: the digests of the desired providers against those it last wrote)."""
    late = []
    for host in _H:
        inputs = po.host_inputs(dep.db, host)
        want = {u: p.digest() for u, p in pp.desired_tree(
            pp.DeployableRow(**row) for row in inputs.rows).items()}
        if inputs.state is None or not inputs.state.in_sync \
                or inputs.state.provider_digests != want:
            late.append(host)
    return late


def _wait_synced(dep: Deployment) -> None:
    """Placement holds what acceld's rows want now on every host. A host's row being in
    sync is not enough: it may be from a sync before a device was readied (the next one
    is queued), and a host whose first sync has not run yet has no row."""
    deadline = time.monotonic() + SYNC_TIMEOUT
    while (late := _behind(dep)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not late, (f"{len(late)} hosts behind Placement: {late[:5]}, states "
                      f"{[r for r in po.list_states(dep.db) if r['host'] in late[:3]]}, "
                      f"retries {dep.manager.placement.retries()}")


def _placement_fit(dep: Deployment, groups: list[dict[str, str]]) -> dict[str, int | bool]:
    """Per host: the instances Placement's candidates allow (one-group profiles), or
    whether it has a candidate (True)."""
    params: dict[str, str] = {"group_policy": "none"}
    for n, group in enumerate(groups, 1):
        params[f"resources{n}"] = ",".join(f"{k.split(':', 1)[1]}:{v}" for k, v in
                                           group.items() if k.startswith("resources:"))
        traits = [("" if v == "required" else "!") + k.split(":", 1)[1]
                  for k, v in group.items() if k.startswith("trait:")]
        if traits:
            params[f"required{n}"] = ",".join(traits)
    answer = dep.placement.get("/allocation_candidates", params=params,
                               microversion="1.36")
    if answer.status_code == 400 and "No such trait" in answer.text:
        return {}                   # a trait nobody publishes: no candidate (NoValidHost)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    host_of = {rp: host for host, rp in dep.computes.items()}
    summaries = body["provider_summaries"]
    out: dict[str, int | bool] = {}
    if len(groups) > 1:
        for request in body["allocation_requests"]:
            rp = next(iter(request["allocations"]))
            out[host_of[summaries[rp]["root_provider_uuid"]]] = True
        return out
    ((rc, amount),) = [(k.split(":", 1)[1], int(v)) for k, v in groups[0].items()
                       if k.startswith("resources:")]
    providers = {rp for request in body["allocation_requests"]
                 for rp in request["allocations"]}
    counts: dict[str, int] = defaultdict(int)
    for rp in providers:
        res = summaries[rp]["resources"][rc]
        counts[host_of[summaries[rp]["root_provider_uuid"]]] += \
            (res["capacity"] - res["used"]) // amount
    return dict(counts)


def _explain_fit(dep: Deployment, name: str, multi: bool) -> tuple[dict[str, Any],
                                                                   dict[str, int | bool]]:
    got = dep.call("GET", f"/v2/device_profiles/{name}/availability")
    assert got.status_int == 200, got.text
    body = got.json
    fit = {h["hostname"]: (True if multi else h["count"]) for h in body["hosts"]}
    return body, fit


def test_explain_agrees_with_placement_on_a_faulty_fleet(deployment):
    dep = deployment
    started = time.monotonic()
    dep.fleet.start()
    assert dep.fleet.wait_converged(TIMEOUT, lambda: not mismatches(
        dep.db, dep.fleet.expected_inventory())), mismatches(dep.db,
                                                             dep.fleet.expected_inventory())
    print(f"converged {time.monotonic() - started:.1f} s")
    _ready(dep)
    print(f"ready {time.monotonic() - started:.1f} s")
    fpga = next(d for d in _devices(dep.db)
                if d.hostname == DISABLED_FPGA_HOST and d.type == "FPGA")
    assert dep.call("POST", f"/v2/devices/{fpga.uuid}/disable").status_int == 200
    a100 = {d.hostname: d.uuid for d in _devices(dep.db) if d.model == "20b5"}
    held = dep.call("POST", f"/v1/accelerators/{a100[QUARANTINED_GPU_HOST]}/health",
                    {"action": "quarantine", "reason": "explain test"})
    assert held.status_int == 200, held.text
    drained = dep.call("PUT", f"/v1/accelerators/{a100[DRAINED_GPU_HOST]}/maintenance",
                       {"reason": "explain test"})
    assert drained.status_int == 200, drained.text
    for name, groups in PROFILES.items():
        made = dep.call("POST", "/v2/device_profiles", [{"name": name, "groups": groups}])
        assert made.status_int == 201, made.text
    _wait_synced(dep)                        # Nova allocates what Placement offers
    print(f"synced {time.monotonic() - started:.1f} s")
    for host in FULL_GPU_HOSTS:
        _bind(dep, "gpu", host, "PGPU", 1, "gpu")
    for host, units in VGPU_BINDS.items():
        for _ in range(units):
            _bind(dep, "vgpu-one", host, "VGPU", 1, "vgpu")
    _wait_synced(dep)

    print(f"bound and synced {time.monotonic() - started:.1f} s")
    differ: list[Any] = []

    def agree() -> bool:
        differ.clear()
        for name, groups in PROFILES.items():
            explained = _explain_fit(dep, name, len(groups) > 1)[1]
            placed = {h: n for h, n in _placement_fit(dep, groups).items() if n}
            differ.extend((name, d) for d in set(explained.items()) ^ set(placed.items()))
        return not differ
    # a change (a bind, a readied device) reaches Placement a sync later
    deadline = time.monotonic() + TIMEOUT
    while not agree() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert differ == [], sorted(differ)[:10]
    reasons: Counter[str] = Counter()
    for name, groups in PROFILES.items():
        body, explained = _explain_fit(dep, name, len(groups) > 1)
        assert body["count"] == sum(h["count"] for h in body["hosts"])
        assert {h["hostname"] for h in body["not_fitting"]} == set(_H) - set(explained)
        reasons.update(f"{name}:{h['reason']}" for h in body["not_fitting"])

    # every fault shows as its own first reason
    assert reasons["gpu:device_not_ready"] == len(NEVER_READIED)
    assert reasons["gpu:device_unhealthy"] == 3                   # the ECC storm
    assert reasons["gpu:exhausted"] == len(FULL_GPU_HOSTS)
    assert reasons["gpu:device_quarantined"] == 1 and reasons["gpu:device_drained"] == 1
    assert reasons["fpga-d5005:no_resource_class"] == 4           # unplugged
    assert reasons["fpga-d5005:device_disabled"] == 1
    assert reasons["vgpu-pair:device_unhealthy"] == 4             # the failed resets
    assert reasons["vgpu-pair:exhausted"] == 2                    # 0 and 1 vGPU left
    assert reasons["nowhere:missing_trait"] == HOSTS - 4          # the trait comes first
    assert reasons["not-a-t4:forbidden_trait"] == HOSTS
    assert reasons["mig:no_guest_handles"] == len(MIG_READIED)
    assert reasons["mig:device_not_ready"] == HOSTS - len(MIG_READIED)
    vgpu_one = _explain_fit(dep, "vgpu-one", False)[1]
    assert vgpu_one[_H[17]] == 2 and vgpu_one[_H[0]] == 4 and _H[18] not in vgpu_one

    dry = dep.call("POST", "/v2/accelerator_requests/dry_run",
                   {"device_profile_name": "vgpu-pair", "hostname": _H[17]})
    assert dry.status_int == 200 and dry.json["would_bind"] is True
    assert [a["hostname"] for a in dry.json["arqs"]] == [_H[17]] * 2
    dry = dep.call("POST", "/v2/accelerator_requests/dry_run",
                   {"device_profile_name": "vgpu-pair", "hostname": _H[18]})
    assert (dry.json["would_bind"], dry.json["reason"]) == (False, "exhausted")
