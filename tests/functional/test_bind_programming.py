"""Programming at bind: a device profile's ``accel:bitstream_id`` or ``accel:function_id``
makes the bind load the FPGA through its agent before the ARQ is Bound (contract 6.3), on
every database backend, with a real conductor and agent (the fake driver's FPGAs) and
Nova's external-events API as a loopback receiver.

The image comes from the agent's image fetcher (``fetch_image``, its Glance seam): here
one that hands out local files and records what it was asked for, so the test sees the
image reference and the (absent) digest the bind sent. The fake FPGA loads the function
its image names and reports it as its function trait.
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
import webob

from acceld import reports
from tests import helpers
from tests.nova_events import Receiver
from tests.stack import Stack, wait_for

HOST = "host1"
SERVICE = {"X-Service-Token": "x"}
IMAGE = "6b1f4b2e-3c1d-4f6e-9a7b-2d5c8e9f0a11"     # a Glance image of function AES256


class Images:
    """The agent's ``fetch_image``: Glance image ``IMAGE`` and function ``AES256`` are a
    file whose first line names the function (what the fake FPGA loads)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.asked: list[tuple[str, str]] = []

    def __call__(self, conf: Any, image_ref: str, sha256: str, dest_dir: str) -> str:
        self.asked.append((image_ref, sha256))
        if image_ref not in (IMAGE, reports.FUNCTION_IMAGE_PREFIX + "AES256"):
            raise OSError(f"Glance has no image {image_ref}")
        os.makedirs(dest_dir, exist_ok=True)
        path = os.path.join(dest_dir, f"{uuidlib.uuid4().hex}.img")
        with open(path, "wb") as f:
            f.write(b"function: AES256\n" + bytes(64))
        return path


@pytest.fixture
def cloud(db, receiver, tmp_path) -> Iterator[tuple[Stack, Images]]:
    images = Images(str(tmp_path / "images"))
    with Stack.reported(db, hosts=(HOST,), device_count=4,
                        agent_collaborators={"fetch_image": images},
                        nova={"auth_type": "admin_token", "endpoint": receiver.url,
                              "token": "x", "bind_timeout": 30.0}) as stack:
        stack.ready_all()
        yield stack, images



def _fpga(stack: Stack) -> dict[str, Any]:
    return next(d for d in stack.call("GET", "/v2/deployables").json["deployables"]
                if d["name"] == f"{HOST}_fake_3c")


def _bind(stack: Stack, group: dict[str, str]) -> tuple[str, str, webob.Response]:
    name = f"dp-{uuidlib.uuid4().hex[:8]}"
    assert stack.call("POST", "/v2/device_profiles",
                 [{"name": name, "groups": [{"resources:FPGA": "1", **group}]}]
                 ).status_int == 201
    arq = stack.call("POST", "/v2/accelerator_requests",
                {"device_profile_name": name}).json["arqs"][0]["uuid"]
    instance = str(uuidlib.uuid4())
    resp = stack.call("PATCH", "/v2/accelerator_requests",
                      helpers.bind_patch(arq, HOST, _fpga(stack)["rp_uuid"], instance), SERVICE)
    return arq, instance, resp


def _state(stack: Stack, arq: str) -> str:
    return stack.call("GET", f"/v2/accelerator_requests/{arq}").json["state"]


def _events(receiver: Receiver) -> list[dict[str, str]]:
    """Every event Nova got, each request checked as Nova 34 checks it."""
    return [e for batch in receiver.events() for e in batch]


def _program(stack: Stack) -> dict[str, Any]:
    return stack.call("GET", f"/v2/deployables/{_fpga(stack)['uuid']}/program").json[
        "program"]


def test_a_bitstream_id_is_loaded_before_the_arq_is_bound(cloud, receiver):
    stack, images = cloud
    arq, instance, resp = _bind(stack, {"accel:bitstream_id": IMAGE})
    assert resp.status_int == 202, resp.text
    assert wait_for(lambda: _state(stack, arq) == "Bound")
    # the agent fetched upstream's way: a Glance image id, no caller digest
    assert images.asked == [(IMAGE, "")]
    op = _program(stack)
    assert (op["state"], op["arq_uuid"], op["image_ref"]) == ("done", arq, IMAGE)
    assert _fpga(stack)["bitstream_id"] == IMAGE
    assert wait_for(lambda: _events(receiver)) == [{
        "name": "accelerator-request-bound", "server_uuid": instance, "tag": arq,
        "status": "completed"}]
    # loaded already: the next bind asking for it programs nothing
    stack.call("DELETE", f"/v2/accelerator_requests?instance={instance}", headers=SERVICE)
    again, _instance, resp = _bind(stack, {"accel:bitstream_id": IMAGE})
    assert resp.status_int == 202 and _state(stack, again) == "Bound"
    assert len(images.asked) == 1


def test_a_function_id_finds_its_image_and_shows_as_the_function_trait(cloud, receiver):
    stack, images = cloud
    arq, _instance, resp = _bind(stack, {"accel:function_id": "AES256"})
    assert resp.status_int == 202, resp.text
    assert wait_for(lambda: _state(stack, arq) == "Bound")
    assert images.asked == [(reports.FUNCTION_IMAGE_PREFIX + "AES256", "")]
    stack.report_all()                      # what the agent reports after programming
    traits = json.loads(_fpga(stack)["attributes_list"])
    assert {"trait1": reports.function_trait("AES256")} in traits
    # that function is loaded now: another bind of it programs nothing
    stack.call("DELETE", f"/v2/accelerator_requests?arqs={arq}", headers=SERVICE)
    again, _instance, resp = _bind(stack, {"accel:function_id": "aes256"})
    assert resp.status_int == 202 and _state(stack, again) == "Bound"
    assert len(images.asked) == 1


def test_a_failed_programming_fails_the_bind_and_tells_nova(cloud, receiver):
    stack, _images = cloud
    with open(stack.control_file, "w", encoding="utf-8") as f:
        json.dump({"program_fail": True}, f)
    arq, instance, resp = _bind(stack, {"accel:bitstream_id": IMAGE})
    assert resp.status_int == 202, resp.text
    assert wait_for(lambda: _state(stack, arq) == "BindFailed")
    op = _program(stack)
    assert op["state"] == "failed" and "fake programming" in op["message"]
    assert wait_for(lambda: _events(receiver)) == [{
        "name": "accelerator-request-bound", "server_uuid": instance, "tag": arq,
        "status": "failed"}]
    # the handle was freed: the FPGA's one handle binds again (without programming)
    with open(stack.control_file, "w", encoding="utf-8") as f:
        json.dump({}, f)
    stack.call("DELETE", f"/v2/accelerator_requests?arqs={arq}", headers=SERVICE)
    again, _instance, resp = _bind(stack, {})
    assert resp.status_int == 202 and _state(stack, again) == "Bound"


def test_an_image_glance_does_not_have_fails_the_bind(cloud, receiver):
    stack, _images = cloud
    arq, _instance, resp = _bind(stack, {"accel:bitstream_id": str(uuidlib.uuid4())})
    assert resp.status_int == 202, resp.text
    assert wait_for(lambda: _state(stack, arq) == "BindFailed")
    assert "Glance has no image" in _program(stack)["message"]


def test_a_group_naming_both_or_a_bad_bitstream_id_fails_the_bind(cloud, receiver):
    stack, images = cloud
    for group, why in (({"accel:bitstream_id": IMAGE, "accel:function_id": "AES256"},
                        "names both accel:bitstream_id and accel:function_id"),
                       ({"accel:bitstream_id": "not-an-image"}, "is not a Glance image id")):
        arq, _instance, resp = _bind(stack, group)
        assert resp.status_int == 400, resp.text
        assert why in resp.json["errors"][0]["detail"]
        assert _state(stack, arq) == "BindFailed"
        stack.call("DELETE", f"/v2/accelerator_requests?arqs={arq}", headers=SERVICE)
    assert images.asked == []
