"""The health life cycle and drain through the API with a real conductor and agent, on
every database backend: policy first (403 for a project member), schema (400 naming the
field), 409 naming the states on a move the life cycle does not allow, a reset refused
while a bind holds the device, and binds and v1 attaches refused while a device is
quarantined or drained (the same compare-and-swap reads as the binder's).
"""

from __future__ import annotations

import uuid as uuidlib

import pytest
from sqlalchemy import select

from acceld.db import models as m
from tests import helpers
from tests.stack import Stack

SERVICE = {"X-Service-Token": "x"}
MEMBER = {"X-Auth-Token": "user1:proj1"}
HOST = "host1"


@pytest.fixture
def stack(db):
    with Stack.reported(db, hosts=(HOST,), device_count=4) as s:
        s.ready_all()
        yield s


def _device(stack: Stack, kind: str) -> tuple[str, str]:
    with stack.db.reader() as s:
        row = s.execute(select(m.Device.uuid, m.Deployable.rp_uuid)
                        .join(m.Deployable, m.Deployable.device_id == m.Device.id)
                        .where(m.Device.type == kind)).one()
    return row.uuid, row.rp_uuid


def _arq(stack: Stack, rc: str) -> str:
    name = f"dp-{uuidlib.uuid4().hex[:8]}"
    assert stack.call("POST", "/v2/device_profiles",
                      [{"name": name, "groups": [{f"resources:{rc}": "1"}]}]).status_int == 201
    return stack.call("POST", "/v2/accelerator_requests",
                      {"device_profile_name": name}).json["arqs"][0]["uuid"]


def _bind(stack: Stack, rp: str, rc: str = "CUSTOM_QAT"):
    arq = _arq(stack, rc)
    return arq, stack.call("PATCH", "/v2/accelerator_requests",
                           helpers.bind_patch(arq, HOST, rp, str(uuidlib.uuid4())), SERVICE)


def _act(stack: Stack, dev: str, action: str, headers=None):
    return stack.call("POST", f"/v1/accelerators/{dev}/health", {"action": action}, headers)


def test_a_project_member_is_refused_before_anything_is_read(stack):
    dev, _rp = _device(stack, "GPU")
    for method, path, body in (("GET", "health", None), ("POST", "health", {"action": "x"}),
                               ("PUT", "maintenance", None),
                               ("DELETE", "maintenance", None)):
        resp = stack.call(method, f"/v1/accelerators/{dev}/{path}", body, MEMBER)
        assert resp.status_int == 403, (method, path, resp.text)
    assert stack.call("GET", f"/v1/accelerators/{dev}").json["lifecycle"] == "healthy"


def test_the_body_is_validated(stack):
    dev, _rp = _device(stack, "GPU")
    resp = _act(stack, dev, "reboot")
    assert resp.status_int == 400 and "action" in resp.json["errors"][0]["detail"]
    resp = stack.call("PUT", f"/v1/accelerators/{dev}/maintenance", {"why": "x"})
    assert resp.status_int == 400 and "why" in resp.json["errors"][0]["detail"]
    resp = _act(stack, str(uuidlib.uuid4()), "quarantine")
    assert resp.status_int == 404


@pytest.mark.parametrize(("path", "action", "conflict"), [
    ((), "reset", "is healthy: it cannot go to resetting (only from failed, quarantined)"),
    (("quarantine",), "reset", None),
    (("quarantine", "reset"), "quarantine", None),      # re-admitted: healthy again
    (("quarantine",), "quarantine", None),              # there already: nothing to do
])
def test_moves_the_life_cycle_does_not_allow_are_409_naming_the_states(stack, path, action,
                                                                        conflict):
    dev, _rp = _device(stack, "GPU")
    for step in path:
        assert _act(stack, dev, step).status_int == 200
    resp = _act(stack, dev, action)
    if conflict is None:
        assert resp.status_int == 200, resp.text
        return
    assert resp.status_int == 409, resp.text
    error = resp.json["errors"][0]
    assert error["code"] == "acceld.device.health_conflict"
    assert error["detail"] == f"Device {dev} {conflict}."


def test_a_release_does_not_end_a_reset_and_release_of_healthy_changes_nothing(stack):
    dev, _rp = _device(stack, "GPU")
    resp = _act(stack, dev, "release")
    assert (resp.status_int, resp.json["transition"]["changed"]) == (200, False)
    with stack.db.writer() as s:      # a reset in flight, as its conductor left it
        s.get(m.Device, s.execute(select(m.Device.id).where(m.Device.uuid == dev))
              .scalar_one()).lifecycle = "resetting"
    resp = _act(stack, dev, "release")
    assert resp.status_int == 409
    assert "is resetting: it cannot go to healthy (only from quarantined, suspect)" in \
        resp.json["errors"][0]["detail"]


def test_quarantine_lists_the_bound_guest_and_refuses_new_binds_and_the_reset(stack):
    dev, rp = _device(stack, "QAT")
    arq, resp = _bind(stack, rp)
    assert resp.status_int == 202
    resp = _act(stack, dev, "quarantine")
    assert resp.status_int == 200
    assert [b["accelerator_request"] for b in resp.json["bound"]] == [arq]
    assert resp.json["schedulable"] is False
    _other, resp = _bind(stack, rp)
    assert resp.status_int == 409
    error = resp.json["errors"][0]
    assert error["code"] == "acceld.arq.device_not_usable" and "is quarantined" in \
        error["detail"]
    resp = _act(stack, dev, "reset")             # not under a running guest
    assert resp.status_int == 409
    assert resp.json["errors"][0]["code"] == "acceld.device.in_use" and arq in \
        resp.json["errors"][0]["detail"]
    assert stack.call("GET", f"/v2/accelerator_requests/{arq}").json["state"] == "Bound"


def test_a_drained_device_is_not_attached_through_v1_and_others_are(stack):
    gpu, _rp = _device(stack, "GPU")
    fpga, _rp = _device(stack, "FPGA")
    assert stack.call("PUT", f"/v1/accelerators/{gpu}/maintenance").json["maintenance"] == \
        "drained"
    resp = stack.call("PUT", f"/v1/accelerators/{gpu}", {"host": HOST})
    assert resp.status_int == 409 and "in maintenance" in resp.json["errors"][0]["detail"]
    assert stack.call("PUT", f"/v1/accelerators/{fpga}", {"host": HOST}).status_int == 200
    # a drain twice changes nothing; undrain puts it back
    resp = stack.call("PUT", f"/v1/accelerators/{gpu}/maintenance")
    assert resp.json["transition"]["changed"] is False
    assert stack.call("DELETE", f"/v1/accelerators/{gpu}/maintenance").json[
        "schedulable"] is True
    assert stack.call("PUT", f"/v1/accelerators/{gpu}", {"host": HOST}).status_int == 200


def test_a_project_sees_draining_while_another_projects_bind_holds_the_device(stack):
    dev, rp = _device(stack, "QAT")
    arq, resp = _bind(stack, rp)
    assert resp.status_int == 202
    assert stack.call("PUT", f"/v1/accelerators/{dev}/maintenance").json["maintenance"] == \
        "draining"
    view = stack.call("GET", f"/v1/accelerators/{dev}", headers=MEMBER).json
    assert (view["allocations"], view["maintenance"]) == ([], "draining")
    listed = stack.call("GET", "/v1/accelerators", headers=MEMBER).json["accelerator"]
    assert {a["uuid"]: a["maintenance"] for a in listed}[dev] == "draining"
    assert stack.call("DELETE", f"/v2/accelerator_requests/{arq}",
                      headers=SERVICE).status_int == 204
    assert stack.call("GET", f"/v1/accelerators/{dev}", headers=MEMBER).json[
        "maintenance"] == "drained"
