"""The device health life cycle and the drain of one device, end to end on the fake
driver, with Placement's ``reserved`` read back from the real Placement at every step.

healthy -> suspect (ECC counter rising by the threshold between two reports) ->
quarantined (reserved at once) -> reset that fails -> failed (still reserved) -> reset
that works -> healthy (offered again); a drain with a bound ARQ reserves that device
only, keeps the bind, refuses new ones, reads drained once the ARQ is gone.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from acceld.db import models as m
from tests import helpers
from tests.placement_server import PlacementServer
from tests.stack import Stack

SERVICE = {"X-Service-Token": "x"}
GPU = "0000:3b:00.0"          # the fake driver's first device (a GPU, one PGPU)


@pytest.fixture(scope="module")
def placement():
    with PlacementServer() as server:
        yield server


class _Env:
    def __init__(self, stack: Stack, placement: PlacementServer, host: str, compute: str):
        self.stack, self.host, self.compute = stack, host, compute
        self.admin = placement.admin_session()

    def report(self) -> None:
        self.stack.report_all()
        self.settle()

    def settle(self) -> None:
        assert self.stack.conductor.placement.wait_idle(60)

    def reserved(self) -> dict[str, tuple[int, int]]:
        """Per child provider name: (reserved, total) of its one inventory, as Placement
        holds it now."""
        body = self.admin.get(f"/resource_providers?in_tree={self.compute}").json()
        out = {}
        for rp in body["resource_providers"]:
            if rp["uuid"] == self.compute:
                continue
            invs = self.admin.get(f"/resource_providers/{rp['uuid']}/inventories").json()
            (inv,) = invs["inventories"].values()
            out[rp["name"]] = (inv["reserved"], inv["total"])
        return out

    def device(self, kind: str) -> tuple[str, str, str]:
        """(device uuid, deployable rp_uuid, provider name) of the fake ``kind``."""
        with self.stack.db.reader() as s:
            row = s.execute(select(m.Device.uuid, m.Deployable.rp_uuid, m.Deployable.name)
                            .join(m.Deployable, m.Deployable.device_id == m.Device.id)
                            .where(m.Device.hostname == self.host, m.Device.type == kind)
                            ).one()
        return row.uuid, row.rp_uuid, row.name

    def health(self, dev: str, action: str, **body):
        return self.stack.call("POST", f"/v1/accelerators/{dev}/health",
                               {"action": action, **body})


@pytest.fixture
def env(placement, tmp_path):
    host = f"cn-{uuid.uuid4().hex[:8]}"
    stack = Stack.syncing_to(placement, tmp_path / "acceld.sqlite", (host,))
    (compute,) = placement.admin_session().get(
        f"/resource_providers?name={host}").json()["resource_providers"]
    env = _Env(stack, placement, host, compute["uuid"])
    env.report()
    stack.ready_all()
    env.settle()
    yield env
    stack.stop()


def test_full_life_cycle_with_a_failed_reset(env):
    gpu, _rp, name = env.device("GPU")
    before = env.reserved()
    assert before[name] == (0, 1)
    # a first report of counters is the baseline: still healthy, offered
    env.stack.set_control(health={GPU: {"status": "ok", "counters": {"ecc": 3, "xid": 0}}})
    env.report()
    view = env.stack.call("GET", f"/v1/accelerators/{gpu}/health").json
    assert (view["lifecycle"], view["schedulable"]) == ("healthy", True)

    # ECC errors rise by the threshold (10 by default): suspect, still offered
    env.stack.set_control(health={GPU: {"status": "ok", "counters": {"ecc": 13, "xid": 0}}})
    env.report()
    view = env.stack.call("GET", f"/v1/accelerators/{gpu}/health").json
    assert view["lifecycle"] == "suspect"
    assert "ecc errors rose by 10 (from 3 to 13; threshold 10)" in view["lifecycle_reason"]
    assert env.reserved()[name] == (0, 1)

    # the operator quarantines it: reserved at once
    resp = env.health(gpu, "quarantine", reason="ECC rising")
    assert resp.status_int == 200, resp.text
    assert (resp.json["lifecycle"], resp.json["transition"]["before"]) == (
        "quarantined", "suspect")
    env.settle()
    assert env.reserved()[name] == (1, 1)

    # a reset that fails: failed, still reserved
    env.stack.set_control(health={GPU: {"status": "ok", "counters": {"ecc": 13, "xid": 0}}},
                          reset_fail=[GPU])
    resp = env.health(gpu, "reset")
    assert resp.status_int == 200, resp.text
    assert resp.json["lifecycle"] == "failed"
    assert "did not come back" in resp.json["lifecycle_reason"]
    env.settle()
    assert env.reserved()[name] == (1, 1)
    # a failed device is not released by hand: it needs a reset that works
    resp = env.health(gpu, "release")
    assert resp.status_int == 409
    assert "is failed" in resp.json["errors"][0]["detail"]

    # a reset that works: re-admitted, offered again
    env.stack.set_control(health={GPU: {"status": "ok", "counters": {"ecc": 13, "xid": 0}}})
    resp = env.health(gpu, "reset")
    assert (resp.status_int, resp.json["lifecycle"]) == (200, "healthy"), resp.text
    env.settle()
    assert env.reserved()[name] == (0, 1)
    # the other devices of the host were never touched
    assert env.reserved() == before


def test_quarantine_then_release_and_driver_degraded_makes_suspect(env):
    gpu, _rp, name = env.device("GPU")
    env.stack.set_control(health={GPU: {"status": "degraded", "reasons": ["too hot"]}})
    env.report()
    view = env.stack.call("GET", f"/v1/accelerators/{gpu}/health").json
    assert view["lifecycle"] == "suspect"
    assert "the driver reports it degraded: too hot" in view["lifecycle_reason"]
    assert env.health(gpu, "quarantine").json["lifecycle"] == "quarantined"
    env.settle()
    assert env.reserved()[name] == (1, 1)
    assert env.health(gpu, "release").json["lifecycle"] == "healthy"
    env.settle()
    assert env.reserved()[name] == (0, 1)      # degraded health is still usable


def test_drain_keeps_the_bind_refuses_new_ones_and_touches_no_other_device(env):
    qat, rp, name = env.device("QAT")
    before = env.reserved()
    assert before[name] == (0, 4)
    arq = _arq(env.stack, "CUSTOM_QAT")
    instance = str(uuid.uuid4())
    assert env.stack.call("PATCH", "/v2/accelerator_requests",
                          helpers.bind_patch(arq, env.host, rp, instance),
                          SERVICE).status_int == 202

    resp = env.stack.call("PUT", f"/v1/accelerators/{qat}/maintenance",
                          {"reason": "swap the card"})
    assert resp.status_int == 200, resp.text
    assert resp.json["maintenance"] == "draining"
    assert resp.json["bound"] == [{"accelerator_request": arq, "instance_uuid": instance,
                                   "state": "Bound"}]
    env.settle()
    after = env.reserved()
    assert after[name] == (4, 4)
    assert {n: v for n, v in after.items() if n != name} == \
        {n: v for n, v in before.items() if n != name}

    # a new bind is refused; the existing one is left alone
    other = _arq(env.stack, "CUSTOM_QAT")
    resp = env.stack.call("PATCH", "/v2/accelerator_requests",
                          helpers.bind_patch(other, env.host, rp, str(uuid.uuid4())), SERVICE)
    assert resp.status_int == 409
    assert "is in maintenance" in resp.json["errors"][0]["detail"]
    assert env.stack.call("GET", f"/v2/accelerator_requests/{arq}").json["state"] == "Bound"
    view = env.stack.call("GET", f"/v1/accelerators/{qat}").json
    assert (view["maintenance"], view["maintenance_reason"]) == ("draining", "swap the card")

    # once the guest is gone the device reads drained; undrain offers it again
    assert env.stack.call("DELETE", f"/v2/accelerator_requests?instance={instance}",
                          headers=SERVICE).status_int == 204
    assert env.stack.call("GET", f"/v1/accelerators/{qat}/health").json["maintenance"] == \
        "drained"
    resp = env.stack.call("DELETE", f"/v1/accelerators/{qat}/maintenance")
    assert (resp.status_int, resp.json["maintenance"]) == (200, None)
    env.settle()
    assert env.reserved() == before


def _arq(stack: Stack, rc: str) -> str:
    name = f"dp-{uuid.uuid4().hex[:8]}"
    assert stack.call("POST", "/v2/device_profiles",
                      [{"name": name, "groups": [{f"resources:{rc}": "1"}]}]).status_int == 201
    return stack.call("POST", "/v2/accelerator_requests",
                      {"device_profile_name": name}).json["arqs"][0]["uuid"]
