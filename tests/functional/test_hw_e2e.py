"""End to end on one fake host: the generic and NVIDIA drivers through agent, conductor,
API and the real Placement; then FPGA programming with the FPGA driver.

The host (a FakeKernel tree in ``tmp_path`` and a fake libnvidia-ml under the real
nvidia-ml-py): two H100s, the second with MIG on (two 1g.10gb and one 2g.20gb
instances); an E810-like NIC with 4 VFs; an FPGA card. ``[generic_driver] device_spec``
takes the NIC (backend ``net``) and the FPGA (backend ``fpga``); the NVIDIA driver takes
the GPUs. The API must then show the devices, deployables, attach handles (through ARQ
binds, whose host work moves a VF to vfio-pci in the tree) and traits, and Placement the
providers with those traits; host attach/detach moves the FPGA between the host's driver
and vfio-pci.

Programming: an Intel DFL card (``tests/fakes/fpga.py``: the tree plus fake ``fpgaconf``
behind the command runner) is loaded through ``PATCH /v2/deployables/{uuid}/program``
with a local green bitstream; the operation ends ``done`` and Placement's function
trait of the card's provider changes.
"""

from __future__ import annotations

import hashlib
import json
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
import webob

from acceld import exception
from acceld.agent.drivers import registry
from acceld.db import migration
from acceld.db.api import Database
from acceld.hw.nvml import NvmlBackend
from acceld.objects import arqs, device_profiles
from acceld.reports import function_trait
from tests.fakes.fpga import FakeFpgaTools, FpgaTree, make_gbs
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.fakes.nvml import GIB, FakeNvmlLib, NvmlSandbox, h100, mig
from tests.fakes.runner import RecordingRunner
from tests.placement_server import PlacementServer
from tests.stack import Stack, wait_for

GPU_A, GPU_B = "0000:3b:00.0", "0000:86:00.0"
NIC, FPGA = "0000:5e:00.0", "0000:af:00.0"
NIC_SPEC = {"vendor_id": "8086", "product_id": "1592", "device_type": "NIC",
            "physical_network": "physnet1", "backend": "net", "services": "vlan;flat",
            "traits": ["CUSTOM_NIC_E810"], "vfio": False, "count": 1}
FPGA_SPEC = {"vendor_id": "8086", "product_id": "0b30", "device_type": "FPGA",
             "backend": "fpga", "services": "aes;sha3", "traits": ["CUSTOM_FPGA_N3000"],
             "count": 1}
PROJECT = "proj1"


def build_host(root: Any) -> FakeKernel:
    b = FakeSysfsBuilder(root)
    for drv in ("nvidia", "vfio-pci", "ice", "iavf", "dfl-pci"):
        b.driver(drv)
    b.pci(GPU_A, "10de", "2330", "0x030200", numa=0, driver="nvidia")
    b.pci(GPU_B, "10de", "2330", "0x030200", numa=1, driver="nvidia")
    b.pci(NIC, "8086", "1592", "0x020000", numa=0, driver="ice", totalvfs=8,
          vf_device="1889", vf_driver="iavf")
    b.pci(FPGA, "8086", "0b30", "0x120000", numa=1, driver="dfl-pci")
    kernel = b.kernel()
    kernel.set_numvfs(NIC, 4)
    return kernel


def nvml_gpus() -> list[Any]:
    return [h100(0, "00000000:3B:00.0", utilization=(37, 12)),
            h100(1, "00000000:86:00.0", mig_mode=(1, 1),
                 migs=[mig(1, 0, 19, 9, 10 * GIB), mig(1, 1, 19, 10, 10 * GIB),
                       mig(1, 2, 14, 3, 20 * GIB)])]


@pytest.fixture(scope="module")
def placement() -> Iterator[PlacementServer]:
    with PlacementServer() as server:
        yield server


@pytest.fixture
def hw(placement, tmp_path) -> Iterator[Any]:
    sandbox = NvmlSandbox()
    sandbox.install(FakeNvmlLib(nvml_gpus()))
    kernel = build_host(tmp_path / "root")
    host = f"hw-{uuidlib.uuid4().hex[:8]}"
    compute = placement.create_compute_node(host)
    db = Database(f"sqlite:///{tmp_path / 'acceld.sqlite'}")
    migration.upgrade(db)
    stack = Stack(db, hosts=(host,), agent_collaborators={
        "sysfs": kernel, "runner": RecordingRunner(), "nvml": NvmlBackend(),
        "sleep": lambda seconds: None},
        agent={"enabled_drivers": ["generic", "nvidia_gpu"]},
        generic_driver={"device_spec": [json.dumps(NIC_SPEC), json.dumps(FPGA_SPEC)]},
        conductor={"operation_wait": 10.0},
        placement=dict(placement.acceld_config(), sync_interval=3600.0))
    try:
        stack.report_all()
        assert stack.conductor.placement.wait_idle(60)
        yield _Hw(stack, kernel, placement, compute, host)
    finally:
        stack.stop()
        db.dispose()
        sandbox.restore()


class _Hw:
    def __init__(self, stack: Stack, kernel: FakeKernel, placement: PlacementServer,
                 compute: str, host: str) -> None:
        self.stack, self.kernel, self.placement = stack, kernel, placement
        self.compute, self.host = compute, host

    def api(self, method: str, path: str, body: Any = None) -> webob.Response:
        req = webob.Request.blank(path, method=method)
        if body is not None:
            req.content_type = "application/json"
            req.body = json.dumps(body).encode()
        resp = req.get_response(self.stack.app)
        assert resp.status_int < 500 or resp.status_int == 502, resp.text
        return resp

    def get(self, path: str) -> Any:
        resp = self.api("GET", path)
        assert resp.status_int == 200, resp.text
        return resp.json

    def deployables(self) -> dict[str, dict[str, Any]]:
        """name -> deployable, attributes as a dict."""
        out = {}
        for dep in self.get("/v2/deployables")["deployables"]:
            attrs: dict[str, str] = {}
            for item in json.loads(dep["attributes_list"]):
                attrs.update(item)
            out[dep["name"]] = dict(dep, attributes=attrs)
        return out

    def providers(self) -> dict[str, dict[str, Any]]:
        admin = self.placement.admin_session()
        rps = admin.get(f"/resource_providers?in_tree={self.compute}").json()
        out = {}
        for rp in rps["resource_providers"]:
            if rp["uuid"] == self.compute:
                continue
            inv = admin.get(f"/resource_providers/{rp['uuid']}/inventories").json()
            traits = admin.get(f"/resource_providers/{rp['uuid']}/traits").json()
            out[rp["name"]] = {"inventories": inv["inventories"],
                               "traits": set(traits["traits"])}
        return out

    def bind(self, rp_uuid: str, rc: str) -> dict[str, Any]:
        self.stack.ready_all()
        name = f"p-{uuidlib.uuid4().hex[:6]}"
        device_profiles.create(self.stack.db, name, [{f"resources:{rc}": "1"}])
        [arq] = arqs.create(self.stack.db, name, PROJECT)
        self.stack.conductor.arq_bind({arq["uuid"]: {
            "hostname": self.host, "device_rp_uuid": rp_uuid,
            "instance_uuid": str(uuidlib.uuid4()), "project_id": PROJECT}}, None)
        return arqs.get(self.stack.db, arq["uuid"], project_id=None)


def test_api_and_placement_show_the_host(hw):
    devices = hw.get("/v2/devices")["devices"]
    assert sorted((d["type"], d["vendor"], d["model"]) for d in devices) == [
        ("FPGA", "8086", "0b30"), ("GPU", "10de", "2330"), ("GPU", "10de", "2330"),
        ("NIC", "8086", "1592")]
    assert {d["hostname"] for d in devices} == {hw.host}
    accs = hw.get(f"/v1/accelerators?host={hw.host}")["accelerator"]
    assert sorted((a["driver"], a["device_type"]) for a in accs) == [
        ("generic", "FPGA"), ("generic", "NIC"), ("nvidia_gpu", "GPU"), ("nvidia_gpu", "GPU")]
    assert {a["health"] for a in accs} == {"ok"}

    deps = hw.deployables()
    assert len(deps) == 5
    whole = deps[f"{hw.host}_{GPU_A}"]
    assert (whole["attributes"]["rc"], whole["num_accelerators"]) == ("PGPU", 1)
    migs = {d["attributes"]["rc"]: d for n, d in deps.items() if "_mig_" in n}
    assert sorted((rc, d["num_accelerators"]) for rc, d in migs.items()) == [
        ("CUSTOM_NVIDIA_MIG_1G_10GB", 2), ("CUSTOM_NVIDIA_MIG_2G_20GB", 1)]
    nic = deps[f"{hw.host}_{NIC}"]
    assert (nic["attributes"]["rc"], nic["num_accelerators"]) == ("CUSTOM_NIC", 4)
    assert nic["attributes"]["trait0"] == "CUSTOM_NIC_E810"
    assert (nic["attributes"]["backend"], nic["attributes"]["services"]) == ("net", "vlan;flat")
    fpga = deps[f"{hw.host}_{FPGA}"]
    assert (fpga["attributes"]["rc"], fpga["num_accelerators"]) == ("FPGA", 1)

    providers = hw.providers()
    assert set(providers) == set(deps)
    nic_rp = providers[f"{hw.host}_{NIC}"]
    assert nic_rp["inventories"]["CUSTOM_NIC"]["total"] == 4
    assert {"OWNER_CYBORG", "CUSTOM_NIC_E810", "CUSTOM_VENDOR_8086"} <= nic_rp["traits"]
    assert "CUSTOM_FPGA_N3000" in providers[f"{hw.host}_{FPGA}"]["traits"]
    assert "CUSTOM_NVIDIA_2330" in providers[f"{hw.host}_{GPU_A}"]["traits"]
    mig_rp = providers[f"{hw.host}_{GPU_B}_mig_19"]
    assert mig_rp["inventories"]["CUSTOM_NVIDIA_MIG_1G_10GB"]["total"] == 2
    assert "CUSTOM_NVIDIA_MIG_PROFILE_19" in mig_rp["traits"]


def test_placement_offers_guests_only_what_nova_can_attach(hw):
    """Once both GPUs are ready, the whole GPU is offered and the raw MIG instances are
    not (all reserved): no guest is scheduled onto a handle its bind would refuse."""
    hw.stack.ready_all()
    hw.stack.conductor.placement.sync_host(hw.host, full=True, dry_run=False)
    providers = hw.providers()
    whole = providers[f"{hw.host}_{GPU_A}"]["inventories"]["PGPU"]
    assert (whole["total"], whole["reserved"]) == (1, 0)
    for profile, rc, total in ((19, "CUSTOM_NVIDIA_MIG_1G_10GB", 2),
                               (14, "CUSTOM_NVIDIA_MIG_2G_20GB", 1)):
        inventory = providers[f"{hw.host}_{GPU_B}_mig_{profile}"]["inventories"][rc]
        assert (inventory["total"], inventory["reserved"]) == (total, total)


def test_drivers_explain_and_backends_list_services(hw):
    drivers = {d["name"]: d for d in hw.get("/v1/drivers?long=true")["drivers"]}
    generic, nvidia = drivers["generic"], drivers["nvidia_gpu"]
    assert generic["capabilities"] == ["host_work"]
    assert (generic["explanation"]["expected"], generic["explanation"]["found"]) == (2, 2)
    checks = {c["name"]: c for c in generic["explanation"]["checks"]}
    assert checks["iommu"]["ok"] and checks["vfio-pci"]["ok"]
    skipped = {s["address"] for s in generic["explanation"]["skipped"]}
    assert skipped == set()       # the VFs are not candidates of any spec's ids
    assert nvidia["explanation"]["found"] == 2 and nvidia["device_count"] == 2
    backends = hw.get(f"/v1/backends?host={hw.host}")["backends"]
    assert [(b["driver"], b["backend"], b["services"], b["devices"], b["deployables"])
            for b in backends] == [("generic", "fpga", ["aes", "sha3"], 1, 1),
                                   ("generic", "net", ["flat", "vlan"], 1, 1)]


def test_binds_show_the_attach_handles_and_do_the_host_work(hw):
    deps = hw.deployables()
    nic = deps[f"{hw.host}_{NIC}"]
    arq = hw.bind(nic["rp_uuid"], "CUSTOM_NIC")
    assert arq["state"] == "Bound" and arq["attach_handle_type"] == "PCI"
    info = arq["attach_handle_info"]
    assert info["physical_network"] == "physnet1" and info["bus"] == "5e"
    vf = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
    assert vf in hw.kernel.virtfns(NIC)
    assert hw.kernel.driver_of(vf) == "vfio-pci"           # prepare moved it
    hw.stack.conductor.arq_unbind([arq["uuid"]], None)
    assert hw.kernel.driver_of(vf) == "iavf"               # release gave it back

    # A raw MIG instance is no device a hypervisor attaches: the bind (always Nova's)
    # fails with the reason instead of giving Nova a handle it would skip.
    mig_dep = next(d for n, d in deps.items() if n.endswith("_mig_19"))
    with pytest.raises(exception.DeviceNotUsable, match="of type MIG, which Nova cannot"):
        hw.bind(mig_dep["rp_uuid"], "CUSTOM_NVIDIA_MIG_1G_10GB")
    assert hw.stack.agents[hw.host].journal.inflight() == []


def test_host_attach_and_detach_move_the_device_between_drivers(hw):
    fpga = next(a for a in hw.get(f"/v1/accelerators?host={hw.host}")["accelerator"]
                if a["device_type"] == "FPGA")
    path = f"/v1/accelerators/{fpga['uuid']}"
    resp = hw.api("PUT", f"{path}/state", {"state": "ready"})
    assert resp.json["state"] == "ready", resp.text
    assert hw.kernel.driver_of(FPGA) == "vfio-pci"         # install: passthrough
    resp = hw.api("PUT", path, {"host": hw.host})
    assert resp.status_int == 200 and resp.json["attached_to"] == {"type": "host",
                                                                   "id": hw.host}
    assert hw.kernel.driver_of(FPGA) == "dfl-pci"          # host use: its own driver
    assert hw.api("DELETE", path).status_int == 204
    assert hw.kernel.driver_of(FPGA) == "vfio-pci"         # back to passthrough
    resp = hw.api("PUT", f"{path}/state", {"state": "inactive"})
    assert resp.json["state"] == "inactive", resp.text
    assert hw.kernel.driver_of(FPGA) == "dfl-pci"          # uninstall restores it


def test_a_mig_gpu_goes_to_a_host_never_to_an_instance(hw):
    gpu = next(a for a in hw.get(f"/v1/accelerators?host={hw.host}")["accelerator"]
               if a["device_type"] == "GPU" and a["name"].endswith(GPU_B))
    path = f"/v1/accelerators/{gpu['uuid']}"
    assert hw.api("PUT", f"{path}/state", {"state": "ready"}).json["state"] == "ready"
    resp = hw.api("PUT", path, {"instance_uuid": str(uuidlib.uuid4())})
    assert resp.status_int == 409
    assert resp.json["errors"][0]["detail"].endswith(
        "offers attach handles of type MIG, which no hypervisor attaches to an instance; "
        "attach it to a host.")
    resp = hw.api("PUT", path, {"host": hw.host})
    assert resp.status_int == 200 and resp.json["attached_to"] == {"type": "host",
                                                                   "id": hw.host}


def test_a_failing_host_detach_keeps_the_device_attached(hw):
    nic = next(a for a in hw.get(f"/v1/accelerators?host={hw.host}")["accelerator"]
               if a["device_type"] == "NIC")
    path = f"/v1/accelerators/{nic['uuid']}"
    assert hw.api("PUT", f"{path}/state", {"state": "ready"}).json["state"] == "ready"
    hw.kernel.builder.remove_driver("vfio-pci")             # vfio-pci unloaded meanwhile
    resp = hw.api("PUT", path, {"host": hw.host})
    assert resp.status_int == 200                            # giving back needs no vfio
    resp = hw.api("DELETE", path)
    assert resp.status_int == 502
    assert "vfio-pci is not loaded" in resp.json["errors"][0]["detail"]
    assert hw.get(path)["attached_to"] == {"type": "host", "id": hw.host}


def test_stats_are_read_from_the_driver_on_demand(hw):
    gpu = next(a for a in hw.get(f"/v1/accelerators?host={hw.host}")["accelerator"]
               if a["device_type"] == "GPU" and a["name"].endswith(GPU_A))
    stats = hw.get(f"/v1/accelerators/{gpu['uuid']}/stats")["stats"]
    assert stats, stats
    assert any(value == 37.0 for value in stats.values()), stats


# -- FPGA programming ----------------------------------------------------------------------------

CARD = "0000:3b:00.0"
AFU_NLB = "d8424dc4-a4a3-c413-f89e-433683f9040b"
AFU_DMA = "331db30c-9885-41ea-9081-f88b8f655caa"
IFACE = "a5f6a2d1-c0b9-4b2d-8e1f-0c3d2b1a0f9e"


@pytest.fixture
def fpga(placement, tmp_path, monkeypatch) -> Iterator[Any]:
    tree = FpgaTree(FakeSysfsBuilder(tmp_path / "root"))
    tree.dfl_card(CARD, afu_id=AFU_NLB, interface_id=IFACE)
    tools = FakeFpgaTools(tree)
    monkeypatch.setattr(registry, "load", tools.driver_loader(registry.load))
    images = tmp_path / "images"
    images.mkdir()
    host = f"fpga-{uuidlib.uuid4().hex[:8]}"
    compute = placement.create_compute_node(host)
    db = Database(f"sqlite:///{tmp_path / 'acceld.sqlite'}")
    migration.upgrade(db)
    stack = Stack(db, hosts=(host,), agent_collaborators={
        "sysfs": tree.kernel, "runner": tools.runner},
        agent={"enabled_drivers": ["fpga"]},
        fpga_driver={"local_image_dirs": [str(images)]},
        placement=dict(placement.acceld_config(), sync_interval=3600.0))
    try:
        stack.report_all()
        assert stack.conductor.placement.wait_idle(60)
        yield _Hw(stack, tree.kernel, placement, compute, host), tools, images
    finally:
        stack.stop()
        db.dispose()


def _fid(uuid: str) -> str:
    return uuid.replace("-", "").lower()


def test_programming_an_fpga_changes_its_function_trait_in_placement(fpga):
    hw, tools, images = fpga
    [dep] = hw.get("/v2/deployables")["deployables"]
    [provider] = hw.providers().values()
    assert function_trait(_fid(AFU_NLB)) in provider["traits"]
    image = images / "dma.gbs"
    make_gbs(image, AFU_DMA, IFACE)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    path = f"/v2/deployables/{dep['uuid']}/program"
    resp = hw.api("PATCH", path, [{"op": "replace", "path": "/program", "value": [
        {"image_path": str(image), "image_sha256": digest}]}])
    assert resp.status_int == 202, resp.text
    op = wait_for(lambda: (lambda o: o if o["state"] in ("done", "failed") else None)(
        hw.get(path)["program"]), timeout=30)
    assert (op["state"], op["progress"]) == ("done", 100), op
    assert any(argv[0].endswith("fpgaconf") for argv in tools.runner.argvs())
    hw.stack.report_all()                      # the agent's loop would do it on its own
    assert hw.stack.conductor.placement.wait_idle(60)
    [provider] = hw.providers().values()
    assert function_trait(_fid(AFU_DMA)) in provider["traits"]
    assert function_trait(_fid(AFU_NLB)) not in provider["traits"]


def test_a_failing_vendor_tool_fails_the_operation_with_its_message(fpga):
    hw, tools, images = fpga
    [dep] = hw.get("/v2/deployables")["deployables"]
    image = images / "dma.gbs"
    make_gbs(image, AFU_DMA, IFACE)
    tools.fail("fpgaconf", stderr="Error: PR IP rejected the bitstream")
    path = f"/v2/deployables/{dep['uuid']}/program"
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    assert hw.api("PATCH", path, [{"op": "replace", "path": "/program", "value": [
        {"image_path": str(image), "image_sha256": digest}]}]).status_int == 202
    op = wait_for(lambda: (lambda o: o if o["state"] in ("done", "failed") else None)(
        hw.get(path)["program"]), timeout=30)
    assert op["state"] == "failed"
    assert "PR IP rejected the bitstream" in op["message"]
    hw.stack.report_all()
    [provider] = hw.providers().values()
    assert function_trait(_fid(AFU_NLB)) in provider["traits"]
