"""What Nova 34 does with a hot-plugged ARQ when it re-creates the guest (hard reboot,
stop/start, rebuild with a device profile in the flavor: ``_get_accel_info`` reads the
instance's ARQs): acceld lists the hot-plugged ARQ as Bound with its handle, and Nova's
own libvirt code puts the same device in the new definition; once detached, the ARQ is
no longer the instance's and Nova puts nothing back (docs/hot-plug.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acceld.db.api import Database
from acceld.hw import pci
from acceld.objects import arqs
from acceld.objects import device_profiles as dps
from acceld.virt import fake
from tests.conftest import require_module
from tests.stack import Stack

require_module("nova.virt.libvirt.driver")

from tests import nova_libvirt  # noqa: E402  (after the skip: it imports Nova)
from tests.libvirt_schema import require_domain_schema  # noqa: E402

INSTANCE = "de300001-0000-4000-8000-000000000001"
NOVA = {"X-Auth-Token": "nova-user:proj-hot", "X-Service-Token": "nova"}


@pytest.fixture
def stack(sqlite_db: Database) -> Iterator[Stack]:
    require_domain_schema()
    hv = fake.FakeHypervisor([(INSTANCE, "vm-1")])
    with Stack.reported(sqlite_db, agent_collaborators={"hypervisor": hv}) as s:
        s.ready_all()
        yield s


def _novas_view(stack: Stack) -> list[dict]:
    """``get_arqs_for_instance``: what Nova's compute reads before it defines the guest."""
    resp = stack.call("GET", f"/v2/accelerator_requests?instance={INSTANCE}", headers=NOVA)
    assert resp.status_int == 200, resp.text
    return [a for a in resp.json["arqs"] if a["state"] == "Bound"]


def test_nova_recreating_the_guest_puts_the_hot_plugged_device_back(stack: Stack) -> None:
    dps.create(stack.db, "hot-nova", [{"resources:PGPU": "1"}], None)
    uuid = arqs.create(stack.db, "hot-nova", "proj-hot")[0]["uuid"]
    stack.conductor.hot_attach(uuid, INSTANCE)
    [arq] = _novas_view(stack)
    assert arq["uuid"] == uuid and arq["attach_handle_type"] == "PCI"
    built = nova_libvirt.guest_devices([arq])
    assert built.ignored_types == set(), built.messages
    [device] = built.devices
    assert device.kind == "pci" and device.schema_errors == []
    fields = {k: int(v, 16) for k, v in device.address.items() if k != "type"}
    assert pci.PciAddress(fields["domain"], fields["bus"], fields["slot"],
                          fields["function"]) == pci.from_attach_info(arq["attach_handle_info"])

    stack.conductor.hot_detach(uuid)
    assert _novas_view(stack) == []
    assert nova_libvirt.guest_devices([]).devices == []
