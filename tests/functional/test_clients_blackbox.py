"""Black-box: upstream's clients (openstacksdk, python-cyborgclient through `openstack`, and
Nova's Cyborg client when nova is installed) against a real `acceld serve` process.

Each client is pointed at acceld exactly as at Cyborg behind devstack's `/accelerator`
mount (shared/peers/README.md): `admin_token` auth and the endpoint `<url>/accelerator`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import types
import uuid

import openstack
import pytest
from openstack import exceptions as sdk_exc

from tests.functional.test_serve_e2e import _cli, _get, served  # noqa: F401 - fixture

OPENSTACK = shutil.which("openstack", path=os.path.dirname(sys.executable))
QAT_GROUP = {"resources:CUSTOM_QAT": "2", "trait:CUSTOM_QAT_FAKE_4XXX": "required"}


def _wait_for_devices(url: str, started: float) -> None:
    while time.monotonic() - started < 60:      # bounded wait, not a timing claim
        body = _get(f"{url}/v2/deployables")
        if body and len(body["deployables"]) == 4:
            return
        time.sleep(0.1)
    raise AssertionError("the 4 fake deployables were not listed within 60 s")


def _connect(url: str):
    return openstack.connect(auth_type="admin_token",
                             auth={"endpoint": url, "token": "admin"},
                             accelerator_endpoint_override=f"{url}/accelerator",
                             region_name="RegionOne")


def test_sdk_lists_inventory_and_manages_device_profiles(served):  # noqa: F811
    url, _proc, started = served
    _wait_for_devices(url, started)
    conn = _connect(url)
    devices = list(conn.accelerator.devices())
    assert sorted(d.type for d in devices) == ["FPGA", "GPU", "NIC", "QAT"]
    assert {d.hostname for d in devices} == {"e2e-host"}
    assert len(list(conn.accelerator.deployables())) == 4

    groups = [{"resources:CUSTOM_QAT": "1", "trait:CUSTOM_QAT_FAKE_4XXX": "required"}]
    dp = conn.accelerator.create_device_profile(name="sdk-profile", groups=groups)
    assert dp.name == "sdk-profile" and dp.uuid
    assert conn.accelerator.get_device_profile(dp.uuid).groups == groups
    assert [p.name for p in conn.accelerator.device_profiles()] == ["sdk-profile"]
    conn.accelerator.delete_device_profile(dp.uuid)
    assert list(conn.accelerator.device_profiles()) == []

def test_sdk_creates_lists_gets_and_deletes_accelerator_requests(served):  # noqa: F811
    url, _proc, started = served
    _wait_for_devices(url, started)
    conn = _connect(url)
    conn.accelerator.create_device_profile(name="sdk-arq-profile", groups=[QAT_GROUP])

    # The SDK keeps only the first ARQ of the {"arqs": [...]} answer.
    first = conn.accelerator.create_accelerator_request(device_profile_name="sdk-arq-profile")
    assert first.state == "Initial"
    assert first.device_profile_name == "sdk-arq-profile"
    assert first.device_profile_group_id == 0
    assert uuid.UUID(first.uuid)

    arqs = list(conn.accelerator.accelerator_requests())
    assert len(arqs) == 2  # resources:CUSTOM_QAT: "2" -> two ARQs of group 0
    assert first.uuid in {a.uuid for a in arqs}
    assert {(a.state, a.device_profile_name, a.device_profile_group_id) for a in arqs} == {
        ("Initial", "sdk-arq-profile", 0)}

    got = conn.accelerator.get_accelerator_request(first.uuid)
    assert got.uuid == first.uuid and got.state == "Initial"
    assert got.hostname is None and got.device_rp_uuid is None
    assert got.instance_uuid is None
    assert got.attach_handle_type == "" and got.attach_handle_info == {}

    for arq in arqs:
        conn.accelerator.delete_accelerator_request(arq.uuid, ignore_missing=False)
    assert list(conn.accelerator.accelerator_requests()) == []
    with pytest.raises(sdk_exc.NotFoundException):
        conn.accelerator.get_accelerator_request(first.uuid)
    with pytest.raises(sdk_exc.NotFoundException):
        conn.accelerator.delete_accelerator_request(first.uuid, ignore_missing=False)
    conn.accelerator.delete_device_profile("sdk-arq-profile")
    assert list(conn.accelerator.device_profiles()) == []


def _osc(url: str, *args: str, json_out: bool = True, mount: str = "/accelerator/v2",
         version: str | None = None, want_rc: int = 0) -> object:
    """`openstack` with the cyborgclient plugin; the endpoint as devstack's catalog has it."""
    opts = ["--os-accelerator-api-version", version] if version else []
    out = subprocess.run(
        [OPENSTACK, "--os-auth-type", "admin_token", "--os-token", "admin",
         "--os-endpoint", f"{url}{mount}", *opts, *args,
         *(["-f", "json"] if json_out else [])],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "OS_CLOUD": "", "OS_CLIENT_CONFIG_FILE": os.devnull})
    assert out.returncode == want_rc, f"openstack {' '.join(args)}: {out.stderr}"
    if want_rc:
        return out.stderr
    return json.loads(out.stdout) if json_out else out.stdout


@pytest.mark.skipif(OPENSTACK is None, reason="python-openstackclient is not installed")
def test_openstack_cli_with_cyborgclient_plugin(served):  # noqa: F811
    url, _proc, started = served
    _wait_for_devices(url, started)

    devices = _osc(url, "accelerator", "device", "list")
    assert sorted(d["type"] for d in devices) == ["FPGA", "GPU", "NIC", "QAT"]
    assert {d["hostname"] for d in devices} == {"e2e-host"}

    deployables = _osc(url, "accelerator", "deployable", "list")
    assert len(deployables) == 4
    assert all(d["name"].startswith("e2e-host_") for d in deployables)

    created = _osc(url, "accelerator", "device", "profile", "create", "cli-profile",
                   "--group", "resources:CUSTOM_QAT=2,trait:CUSTOM_QAT_FAKE_4XXX=required")
    assert created["name"] == "cli-profile"
    assert created["groups"] == [QAT_GROUP]
    dp_uuid = created["uuid"]
    assert uuid.UUID(dp_uuid)

    listed = _osc(url, "accelerator", "device", "profile", "list")
    assert [(p["uuid"], p["name"]) for p in listed] == [(dp_uuid, "cli-profile")]
    shown = _osc(url, "accelerator", "device", "profile", "show", dp_uuid)
    assert shown["uuid"] == dp_uuid and shown["name"] == "cli-profile"
    assert shown["groups"] == [QAT_GROUP]
    # By name: microversion 2.2 (the CLI sends 2.0 unless told); below it, 406.
    by_name = _osc(url, "accelerator", "device", "profile", "show", "cli-profile",
                   version="2.2")
    assert by_name["uuid"] == dp_uuid and by_name["groups"] == [QAT_GROUP]
    err = _osc(url, "accelerator", "device", "profile", "show", "cli-profile", want_rc=1)
    assert "Not Acceptable" in err

    arq = _osc(url, "accelerator", "arq", "create", "cli-profile")
    assert arq["state"] == "Initial"
    assert arq["device_profile_name"] == "cli-profile"
    assert (arq["hostname"], arq["device_rp_uuid"], arq["instance_uuid"]) == (None,) * 3
    assert (arq["attach_handle_type"], arq["attach_handle_info"]) == ("", {})
    arq_list = _osc(url, "accelerator", "arq", "list")
    assert len(arq_list) == 2
    assert arq["uuid"] in {a["uuid"] for a in arq_list}
    assert {a["state"] for a in arq_list} == {"Initial"}
    arq_shown = _osc(url, "accelerator", "arq", "show", arq["uuid"])
    assert arq_shown["uuid"] == arq["uuid"] and arq_shown["state"] == "Initial"
    assert arq_shown["device_profile_name"] == "cli-profile"

    _osc(url, "accelerator", "arq", "delete", *[a["uuid"] for a in arq_list], json_out=False)
    assert _osc(url, "accelerator", "arq", "list") == []
    _osc(url, "accelerator", "device", "profile", "delete", dp_uuid, json_out=False)
    assert _osc(url, "accelerator", "device", "profile", "list") == []


@pytest.mark.skipif(OPENSTACK is None, reason="python-openstackclient is not installed")
def test_openstack_cli_at_the_unversioned_accelerator_endpoint(served):  # noqa: F811
    """shared/peers/README.md points the CLI at `<url>/accelerator`. The SDK discovers the
    versions document there but then requests `<url>/accelerator/devices`, which Cyborg
    serves as `/v2/devices` (its root controller inserts `v2`, contract 1.1), so
    `openstack accelerator device list` works against Cyborg (peers/results/smoke-*.txt)."""
    url, _proc, started = served
    _wait_for_devices(url, started)
    devices = _osc(url, "accelerator", "device", "list", mount="/accelerator")
    assert sorted(d["type"] for d in devices) == ["FPGA", "GPU", "NIC", "QAT"]
    assert {d["hostname"] for d in devices} == {"e2e-host"}


def _nova_cyborg_client(url: str, with_service_token: bool):
    """Nova's `_CyborgClient` with the adapter `nova.utils.get_sdk_adapter` builds: an
    openstacksdk `accelerator` proxy on a keystoneauth session whose auth is the user's
    token wrapped, as `service_auth.get_service_user_token_auth_plugin` does when
    `[service_user] send_service_user_token = true`, in a `ServiceTokenAuthWrapper`."""
    from keystoneauth1 import service_token, session, token_endpoint
    from nova.accelerator import cyborg

    endpoint = f"{url}/accelerator/v2"  # devstack's catalog entry
    auth = token_endpoint.Token(endpoint, "admin")
    if with_service_token:
        auth = service_token.ServiceTokenAuthWrapper(
            user_auth=auth, service_auth=token_endpoint.Token(endpoint, "nova-service"))
    conn = openstack.connection.Connection(session=session.Session(auth=auth),
                                           service_types={"accelerator"},
                                           accelerator_endpoint_override=endpoint)
    client = cyborg._CyborgClient(context=None)
    client._adapter = conn.accelerator
    return client


def test_nova_cyborg_client_boot_rebuild_evacuate_and_delete_flow(served):  # noqa: F811
    pytest.importorskip(
        "nova.accelerator.cyborg",
        reason="the `nova` package (nova==34.0.0) is not installed in this venv")
    from nova import exception as nova_exc
    from nova import objects
    objects.register_all()

    url, _proc, started = served
    _wait_for_devices(url, started)
    qat_rp = next(d["rp_uuid"] for d in _get(f"{url}/v2/deployables")["deployables"]
                  if {"rc": "CUSTOM_QAT"} in json.loads(d["attributes_list"]))
    group = {"resources:CUSTOM_QAT": "1", "trait:CUSTOM_QAT_FAKE_4XXX": "required"}
    _connect(url).accelerator.create_device_profile(name="nova-qat", groups=[group])
    # The operator readies the QAT card (only ready devices are bound).
    qat = next(a for a in _cli(url, "accelerator", "list") if a["device_type"] == "QAT")
    assert _cli(url, "accelerator", "set-ready", qat["uuid"])["state"] == "ready"
    client = _nova_cyborg_client(url, with_service_token=True)

    # API: the flavor's accel:device_profile becomes Placement request groups.
    assert client.get_device_profile_groups("nova-qat") == [group]
    (rg,) = client.get_device_request_groups([group], owner=None)
    assert rg.requester_id == "device_profile_0"
    assert rg.resources == {"CUSTOM_QAT": 1}
    assert rg.required_traits == {"CUSTOM_QAT_FAKE_4XXX"}
    with pytest.raises(nova_exc.DeviceProfileError):
        client.get_device_profile_groups("no-such-profile")

    # Conductor: create the ARQs and match them to the allocation's RPs.
    (arq,) = client.create_arqs_and_match_resource_providers(
        "nova-qat", {"device_profile_0": [qat_rp]})
    assert arq["state"] == "Initial" and arq["device_profile_group_id"] == 0
    assert arq["device_rp_uuid"] == qat_rp
    instance = str(uuid.uuid4())
    bindings = {arq["uuid"]: {"hostname": "e2e-host", "device_rp_uuid": qat_rp,
                              "instance_uuid": instance}}

    # Without the service token the bind is refused (CVE-2026-40214 gate).
    with pytest.raises(nova_exc.AcceleratorRequestBindingFailed):
        _nova_cyborg_client(url, with_service_token=False).bind_arqs(bindings)
    client.bind_arqs(bindings)

    # Compute: wait for the ARQs to resolve, then read the attach handles.
    deadline = time.monotonic() + 10
    resolved = client.get_arqs_for_instance(instance, only_resolved=True)
    while not resolved and time.monotonic() < deadline:
        time.sleep(0.1)
        resolved = client.get_arqs_for_instance(instance, only_resolved=True)
    (bound,) = resolved
    assert bound["uuid"] == arq["uuid"] and bound["state"] == "Bound"
    assert (bound["hostname"], bound["device_rp_uuid"], bound["instance_uuid"]) == (
        "e2e-host", qat_rp, instance)
    assert bound["attach_handle_type"] in ("PCI", "TEST_PCI")
    assert uuid.UUID(bound["attach_handle_uuid"])
    info = bound["attach_handle_info"]
    assert {"domain", "bus", "device", "function"} <= set(info)
    assert all(isinstance(info[k], str) for k in ("domain", "bus", "device", "function"))
    assert client.get_arq_by_uuid(arq["uuid"])["state"] == "Bound"

    # Rebuild on the same host: the conductor passes the bound ARQs' uuids to the
    # compute, which reads them again (nova/conductor/manager.py rebuild_instance,
    # compute _get_bound_arq_resources).
    server = types.SimpleNamespace(uuid=instance)
    assert client.get_arq_uuids_for_instance(server) == [arq["uuid"]]
    (again,) = client.get_arqs_for_instance(instance, only_resolved=True)
    assert again["attach_handle_uuid"] == bound["attach_handle_uuid"]

    # Evacuate: the ARQs are deleted and created and bound again for the new host.
    client.delete_arqs_for_instance(instance)
    with pytest.raises(nova_exc.AcceleratorRequestOpFailed):  # Nova's "none left"
        client.get_arq_uuids_for_instance(server)
    (arq2,) = client.create_arqs_and_match_resource_providers(
        "nova-qat", {"device_profile_0": [qat_rp]})
    client.bind_arqs({arq2["uuid"]: {"hostname": "e2e-host-2", "device_rp_uuid": qat_rp,
                                     "instance_uuid": instance}})
    deadline = time.monotonic() + 10
    resolved = client.get_arqs_for_instance(instance, only_resolved=True)
    while not resolved and time.monotonic() < deadline:
        time.sleep(0.1)
        resolved = client.get_arqs_for_instance(instance, only_resolved=True)
    (moved,) = resolved
    assert (moved["uuid"], moved["state"], moved["hostname"]) == (
        arq2["uuid"], "Bound", "e2e-host-2")
    assert client.get_arq_uuids_for_instance(server) == [arq2["uuid"]]

    # Delete the server: unbind and delete by instance, twice (idempotent).
    client.delete_arqs_for_instance(instance)
    client.delete_arqs_for_instance(instance)
    with pytest.raises(nova_exc.AcceleratorRequestOpFailed):
        client.get_arqs_for_instance(instance)

    # A failed boot: clean up unbound ARQs by uuid (a second call only logs the 404).
    arqs = client.create_arqs("nova-qat")
    client.delete_arqs_by_uuid([a["uuid"] for a in arqs])
    client.delete_arqs_by_uuid([a["uuid"] for a in arqs])
    assert _get(f"{url}/v2/accelerator_requests")["arqs"] == []
    _connect(url).accelerator.delete_device_profile("nova-qat")
