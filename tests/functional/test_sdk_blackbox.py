"""Black-box: openstacksdk's accelerator proxy (installed from PyPI) against `acceld serve`.

The SDK is pointed at acceld exactly as at Cyborg behind devstack's `/accelerator` mount.
"""

from __future__ import annotations

import openstack

from tests.functional.test_serve_e2e import _get, served  # noqa: F401 - fixture


def _connect(url: str):
    return openstack.connect(auth_type="admin_token",
                             auth={"endpoint": url, "token": "admin"},
                             accelerator_endpoint_override=f"{url}/accelerator",
                             region_name="RegionOne")


def test_sdk_lists_inventory_and_manages_device_profiles(served):  # noqa: F811
    import time
    url, _proc, started = served
    while time.monotonic() - started < 10:
        body = _get(f"{url}/v1/accelerators")
        if body and len(body["accelerator"]) == 4:
            break
        time.sleep(0.1)
    conn = _connect(url)
    devices = list(conn.accelerator.devices())
    assert sorted(d.type for d in devices) == ["FPGA", "GPU", "NIC", "QAT"]
    assert {d.hostname for d in devices} == {"e2e-host"}
    deployables = list(conn.accelerator.deployables())
    assert len(deployables) == 4

    groups = [{"resources:CUSTOM_QAT": "1", "trait:CUSTOM_QAT_FAKE_4XXX": "required"}]
    dp = conn.accelerator.create_device_profile(name="sdk-profile", groups=groups)
    assert dp.name == "sdk-profile" and dp.uuid
    assert conn.accelerator.get_device_profile(dp.uuid).groups == groups
    assert [p.name for p in conn.accelerator.device_profiles()] == ["sdk-profile"]
    conn.accelerator.delete_device_profile(dp.uuid)
    assert list(conn.accelerator.device_profiles()) == []
