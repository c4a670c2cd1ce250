"""v1 attach/detach and v2 binding share the attach-handle claims: the two APIs never
disagree about which accelerator an instance holds (on every database backend)."""

from __future__ import annotations

import uuid

import pytest

from acceld.conf.hypervisor import DEMO_INSTANCES
from tests import helpers
from tests.stack import Stack

SERVICE = {"X-Service-Token": "x"}  # the caller's token (admin here) plus a service token
# guests of the agent's fake hypervisor (a v1 attach needs an instance its host runs)
DEMO_1, DEMO_2 = (entry.partition(":")[0] for entry in DEMO_INSTANCES[:2])


@pytest.fixture
def stack(db):
    with Stack.reported(db, hosts=("host1",), device_count=4) as s:
        yield s



def _qat(stack) -> tuple[str, str]:
    acc = next(a for a in stack.call("GET", "/v1/accelerators").json["accelerator"]
               if a["device_type"] == "QAT")
    rp = next(d["rp_uuid"] for d in stack.call("GET", "/v2/deployables").json["deployables"]
              if d["name"] == "host1_fake_3d")
    assert stack.call("PUT", f"/v1/accelerators/{acc['uuid']}/state",
                 {"state": "ready"}).json["state"] == "ready"
    return acc["uuid"], rp


def _bound_arq(stack, rp: str, instance: str) -> tuple[str, int]:
    stack.call("POST", "/v2/device_profiles",
          [{"name": f"dp-{instance[:8]}", "groups": [{"resources:CUSTOM_QAT": "1"}]}])
    arq = stack.call("POST", "/v2/accelerator_requests",
                {"device_profile_name": f"dp-{instance[:8]}"}).json["arqs"][0]["uuid"]
    resp = stack.call("PATCH", "/v2/accelerator_requests",
                      helpers.bind_patch(arq, "host1", rp, instance), SERVICE)
    return arq, resp.status_int


def test_a_v2_binding_shows_in_v1_and_blocks_v1_attach_and_detach(stack):
    acc, rp = _qat(stack)
    instance = DEMO_1
    arq, status = _bound_arq(stack, rp, instance)
    assert status == 202
    view = stack.call("GET", f"/v1/accelerators/{acc}").json
    assert view["allocations"] == [{"accelerator_request": arq, "instance_uuid": instance}]
    held = stack.call("GET", f"/v1/accelerators?instance_uuid={instance}").json
    assert [a["uuid"] for a in held["accelerator"]] == [acc]
    resp = stack.call("PUT", f"/v1/accelerators/{acc}", {"instance_uuid": DEMO_2})
    assert resp.status_int == 409 and "accelerator requests" in resp.json["errors"][0]["detail"]
    assert stack.call("DELETE", f"/v1/accelerators/{acc}").status_int == 409

    assert stack.call("DELETE", f"/v2/accelerator_requests?arqs={arq}",
                 headers=SERVICE).status_int == 204
    assert stack.call("GET", f"/v1/accelerators/{acc}").json["allocations"] == []
    assert stack.call("PUT", f"/v1/accelerators/{acc}",
                 {"instance_uuid": instance}).status_int == 200


def test_a_v1_attachment_blocks_v2_binds_until_detached(stack):
    acc, rp = _qat(stack)
    assert stack.call("PUT", f"/v1/accelerators/{acc}",
                 {"instance_uuid": DEMO_1}).status_int == 200
    _arq, status = _bound_arq(stack, rp, str(uuid.uuid4()))
    assert status == 404                       # no free attach handle: BindFailed
    assert stack.call("DELETE", f"/v1/accelerators/{acc}").status_int == 204
    _arq, status = _bound_arq(stack, rp, str(uuid.uuid4()))
    assert status == 202
