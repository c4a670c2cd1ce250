"""Nothing is taken from under a holder, and nothing unusable is handed to a guest (on
every database backend, through the API with a real conductor and agent).

While a bound ARQ or a v1 attachment holds a device: set-inactive (which would run the
driver's uninstall under the guest), disable, removing its driver and programming it
answer 409 naming the holder. A bind lands only on a ready, enabled, healthy device, and
Placement reserves every device a bind would refuse.
"""

from __future__ import annotations

import uuid as uuidlib

import pytest
import webob
from sqlalchemy import select, update

from acceld.db import models as m
from acceld.objects import placement as placement_objects
from tests import helpers
from tests.stack import Stack

SERVICE = {"X-Service-Token": "x"}
HOST = "host1"


@pytest.fixture
def stack(db):
    with Stack.reported(db, hosts=(HOST,), device_count=4) as s:
        yield s



def _device(stack: Stack, kind: str) -> tuple[str, str]:
    """(device uuid, its deployable's rp_uuid) of the fake device of ``kind``."""
    dev = next(d for d in stack.call("GET", "/v2/devices").json["devices"]
               if d["type"] == kind)
    with stack.db.reader() as s:
        rp = s.execute(select(m.Deployable.rp_uuid)
                       .join(m.Device, m.Device.id == m.Deployable.device_id)
                       .where(m.Device.uuid == dev["uuid"])).scalar_one()
    return dev["uuid"], rp


def _set_state(stack: Stack, uuid: str, state: str) -> webob.Response:
    return stack.call("PUT", f"/v1/accelerators/{uuid}/state", {"state": state})


def _arq(stack: Stack, rc: str) -> str:
    name = f"dp-{uuidlib.uuid4().hex[:8]}"
    assert stack.call("POST", "/v2/device_profiles",
                 [{"name": name, "groups": [{f"resources:{rc}": "1"}]}]).status_int == 201
    return stack.call("POST", "/v2/accelerator_requests",
                 {"device_profile_name": name}).json["arqs"][0]["uuid"]


def _bind(stack: Stack, arq: str, rp: str, instance: str) -> webob.Response:
    return stack.call("PATCH", "/v2/accelerator_requests",
                      helpers.bind_patch(arq, HOST, rp, instance), SERVICE)


def _state_of(stack: Stack, arq: str) -> str:
    return stack.call("GET", f"/v2/accelerator_requests/{arq}").json["state"]


def _schedulable(stack: Stack, rp: str) -> bool:
    rows = placement_objects.host_inputs(stack.db, HOST).rows
    return next(r["schedulable"] for r in rows if r["rp_uuid"] == rp)


def test_a_bound_arq_keeps_its_device_in_service(stack):
    dev, rp = _device(stack, "QAT")
    assert _set_state(stack, dev, "ready").json["state"] == "ready"
    arq, instance = _arq(stack, "CUSTOM_QAT"), str(uuidlib.uuid4())
    assert _bind(stack, arq, rp, instance).status_int == 202
    holder = f"accelerator request {arq} (Bound, instance {instance})"

    resp = _set_state(stack, dev, "inactive")
    assert resp.status_int == 409, resp.text
    assert resp.json["errors"][0]["code"] == "acceld.device.in_use"
    assert holder in resp.json["errors"][0]["detail"]
    resp = stack.call("POST", f"/v2/devices/{dev}/disable")
    assert resp.status_int == 409 and holder in resp.json["errors"][0]["detail"]
    resp = stack.call("POST", "/v1/drivers/fake/action",
                 {"action": "uninstall", "host": HOST})
    assert resp.status_int == 409 and holder in resp.json["errors"][0]["detail"]
    # nothing changed: still ready, enabled, installed, and the guest's ARQ still Bound
    view = stack.call("GET", f"/v1/accelerators/{dev}").json
    assert (view["state"], view["allocations"]) == (
        "ready", [{"accelerator_request": arq, "instance_uuid": instance}])
    assert stack.call("GET", f"/v2/devices/{dev}",
                 headers={"OpenStack-API-Version": "accelerator 2.3"}).json["status"] == \
        "enabled"
    assert [(d["name"], d["state"]) for d in stack.call("GET", "/v1/drivers").json[
        "drivers"]] == [("fake", "installed")]
    assert _state_of(stack, arq) == "Bound"

    # released, every one of them goes through
    assert stack.call("DELETE", f"/v2/accelerator_requests?instance={instance}",
                 headers=SERVICE).status_int == 204
    assert stack.call("POST", f"/v2/devices/{dev}/disable").status_int == 200
    assert _set_state(stack, dev, "inactive").json["state"] == "inactive"


def test_an_fpga_another_caller_holds_is_not_programmed(stack):
    dev, rp = _device(stack, "FPGA")
    assert _set_state(stack, dev, "ready").json["state"] == "ready"
    arq, instance = _arq(stack, "FPGA"), str(uuidlib.uuid4())
    assert _bind(stack, arq, rp, instance).status_int == 202
    dep = next(d["uuid"] for d in stack.call("GET", "/v2/deployables").json["deployables"]
               if d["rp_uuid"] == rp)
    resp = stack.call("PATCH", f"/v2/deployables/{dep}/program", [
        {"op": "replace", "path": "/program",
         "value": [{"image_uuid": str(uuidlib.uuid4()), "image_sha256": "ab" * 32}]}])
    assert resp.status_int == 409, resp.text
    assert resp.json["errors"][0]["code"] == "acceld.program.in_use"
    assert f"accelerator request {arq} (Bound, instance {instance})" in \
        resp.json["errors"][0]["detail"]


@pytest.mark.parametrize("why", ["inactive", "disabled", "failed"])
def test_a_bind_refuses_a_device_that_may_not_go_to_a_guest(stack, why):
    dev, rp = _device(stack, "QAT")
    if why != "inactive":
        assert _set_state(stack, dev, "ready").json["state"] == "ready"
    if why == "disabled":
        assert stack.call("POST", f"/v2/devices/{dev}/disable").status_int == 200
    if why == "failed":     # what a driver's health report leaves on the row
        with stack.db.writer() as s:
            s.execute(update(m.Device).where(m.Device.uuid == dev).values(health="failed"))
    assert not _schedulable(stack, rp)         # Placement reserves all of it
    arq = _arq(stack, "CUSTOM_QAT")
    resp = _bind(stack, arq, rp, str(uuidlib.uuid4()))
    assert resp.status_int == 409, resp.text
    error = resp.json["errors"][0]
    assert error["code"] == "acceld.arq.device_not_usable"
    expected = {"inactive": "is inactive, not ready", "disabled": "is disabled (maintaining)",
                "failed": "has health failed"}[why]
    assert f"Device {dev} of resource provider {rp} {expected}" in error["detail"]
    assert _state_of(stack, arq) == "BindFailed"
    with stack.db.reader() as s:               # no handle was claimed
        assert not s.query(m.AttachHandle).filter(m.AttachHandle.in_use.is_(True)).count()


def test_a_ready_enabled_healthy_device_is_bound_and_offered(stack):
    dev, rp = _device(stack, "QAT")
    assert _set_state(stack, dev, "ready").json["state"] == "ready"
    assert _schedulable(stack, rp)
    arq = _arq(stack, "CUSTOM_QAT")
    assert _bind(stack, arq, rp, str(uuidlib.uuid4())).status_int == 202
    assert _state_of(stack, arq) == "Bound"
