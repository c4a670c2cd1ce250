"""Every attach handle every acceld driver produces, through Nova 34's own libvirt code.

Five fake hosts (``HOSTS``) cover every topology the drivers know: NVIDIA whole GPUs,
vGPU on mdev (parent the PF, and parent its SR-IOV VFs), vGPU through NVIDIA's
vendor-specific VFIO framework (VFs) and MIG; SR-IOV NIC (with a physical network) and
QAT VFs; generic PCI PFs and VFs; Intel DFL FPGA PFs and port VFs and Xilinx XRT user
functions; the fake driver in both profiles. The hosts are fake kernels
(``tests/fakes/kernel.py``), a fake libnvidia-ml under the real nvidia-ml-py
(``tests/fakes/nvml.py``) and fake FPGA trees and tools (``tests/fakes/fpga.py``), run by
the real agent, conductor and API (``tests/stack.py``).

For each host the test binds every attach handle of every deployable the drivers report,
through acceld's real path: the agent's report, an operator readying the devices, a
device profile asking the deployable's resource class and a trait only it has, an ARQ
created through ``POST /v2/accelerator_requests``, the deployable's provider (what
Placement would answer: only it has that trait), the conductor's bind, and the
ARQ read back through ``GET /v2/accelerator_requests/{uuid}`` as Nova reads it. Then it
gives each ARQ to Nova's own code (``tests/nova_libvirt.py``) and proves:

* a PCI handle becomes one ``<hostdev mode="subsystem" type="pci" managed="yes">`` whose
  source address is the handle's (0x-prefixed hex, function 0-7), with no error;
* an MDEV handle's mdev exists in the fake kernel after the bind, Nova finds it by the
  ARQ's ``attach_handle_uuid`` and creates none, and the guest gets ``<hostdev
  type="mdev" model="vfio-pci">`` naming that UUID; after a host reboot (mdev gone) Nova
  creates exactly that mdev (parent, type, UUID) itself; after the unbind no mdev is left;
* a handle with a ``physical_network`` also makes Nova's port binding profile (the
  physical network and the ``pci_slot`` Neutron matches) and the port's device, for both
  accelerator vnic types;
* a MIG handle's bind is refused (DeviceNotUsable, the ARQ BindFailed), so Nova never
  gets a handle it would skip; no bound ARQ is ever in Nova's ``ignored_types``.

The handle types are taken from what the drivers actually report: each fake device must
report exactly the handle type its topology declares, and every (driver, attach type,
attach_info keys) must be in ``HANDLE_TYPES``, so a driver that starts reporting a new
kind of handle fails here until the kind is covered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from acceld import exception
from acceld.agent.drivers import registry
from acceld.db.api import Database
from acceld.hw import pci
from acceld.hw.nvml import NvmlBackend
from tests.conftest import require_module
from tests.fakes.fpga import FakeFpgaTools, FpgaTree
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.fakes.nvml import GIB, FakeNvmlLib, NvmlSandbox, h100, mig
from tests.fakes.runner import RecordingRunner
from tests.stack import Stack

require_module("nova.virt.libvirt.driver")

from tests import nova_libvirt  # noqa: E402  (after the skip: it imports Nova)
from tests.libvirt_schema import require_domain_schema  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def libvirt_schema() -> None:
    """Every device Nova builds is checked against libvirt's schema: there must be one
    (under CI=true its absence fails)."""
    require_domain_schema()


HOSTNAME = "compute1"
PROJECT = "proj-nova"
NOVA_HEADERS = {"X-Auth-Token": f"nova-user:{PROJECT}", "X-Service-Token": "nova"}

Signature = tuple[str, str, frozenset[str]]     # (driver, attach type, attach_info keys)

PCI_KEYS = frozenset({"domain", "bus", "device", "function"})
NIC_KEYS = PCI_KEYS | {"physical_network"}
VF_VGPU_KEYS = PCI_KEYS | {"vgpu_type"}
MDEV_KEYS = PCI_KEYS | {"asked_type", "vgpu_mark"}
MIG_KEYS = frozenset({"parent", "mig_uuid"})

#: Every kind of attach handle the drivers produce, and what Nova makes of it: ``pci``
#: (a PCI hostdev), ``mdev`` (an mdev hostdev) or ``refused`` (the bind fails).
HANDLE_TYPES: dict[Signature, str] = {
    ("nvidia_gpu", "PCI", PCI_KEYS): "pci",
    ("nvidia_gpu", "PCI", VF_VGPU_KEYS): "pci",
    ("nvidia_gpu", "MDEV", MDEV_KEYS): "mdev",
    ("nvidia_gpu", "MIG", MIG_KEYS): "refused",
    ("sriov", "PCI", PCI_KEYS): "pci",
    ("sriov", "PCI", NIC_KEYS): "pci",
    ("generic", "PCI", PCI_KEYS): "pci",
    ("generic", "PCI", NIC_KEYS): "pci",
    ("fpga", "PCI", PCI_KEYS): "pci",
    ("fake", "PCI", PCI_KEYS): "pci",
    ("fake", "PCI", NIC_KEYS): "pci",
}


@dataclasses.dataclass(frozen=True)
class Topology:
    """One fake device: what it is, and the one kind of handle its driver must report."""

    label: str
    driver: str
    attach_type: str
    keys: frozenset[str]

    @property
    def signature(self) -> Signature:
        return (self.driver, self.attach_type, self.keys)


@dataclasses.dataclass
class Rig:
    """What a host builder made: the fake kernel, the agent's collaborators, the config."""

    kernel: FakeKernel | None
    collaborators: dict[str, Any]
    conf: dict[str, dict[str, Any]]


Builder = Callable[[Path, pytest.MonkeyPatch, contextlib.ExitStack], Rig]


# -- the fake hosts ------------------------------------------------------------------------

GPU_WHOLE, GPU_MDEV_PF, GPU_MDEV_VF = "0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"
GPU_VFIO_VF, GPU_MIG = "0000:af:00.0", "0000:d8:00.0"
VGPU_PF_TYPES = {471: "NVIDIA H100-4C"}
VGPU_VF_TYPES = {472: "NVIDIA H100-8C"}
VGPU_VFIO_TYPES = {557: "NVIDIA H100-1-10C", 558: "NVIDIA H100-2-20C"}


def _nvidia_host(root: Path, monkeypatch: pytest.MonkeyPatch,
                 cleanup: contextlib.ExitStack) -> Rig:
    b = FakeSysfsBuilder(root).driver("nvidia").driver("vfio-pci")
    gpu = {"vendor": "10de", "device": "2330", "pci_class": "0x030200", "driver": "nvidia"}
    b.pci(GPU_WHOLE, **gpu, numa=0)
    b.pci(GPU_MDEV_PF, **gpu, numa=0, mdev_types={
        f"nvidia-{t}": (name, 2) for t, name in VGPU_PF_TYPES.items()})
    b.pci(GPU_MDEV_VF, **gpu, numa=1, totalvfs=4, vf_driver="nvidia", vf_mdev_types={
        f"nvidia-{t}": (name, 1) for t, name in VGPU_VF_TYPES.items()})
    b.pci(GPU_VFIO_VF, **gpu, numa=1, totalvfs=16, vf_driver="nvidia",
          vf_nvidia_vgpu_types=VGPU_VFIO_TYPES)
    b.pci(GPU_MIG, **gpu, numa=1)
    kernel = b.kernel()
    kernel.set_numvfs(GPU_MDEV_VF, 2)
    kernel.set_numvfs(GPU_VFIO_VF, 8)        # 00.1-00.7 and 01.0: the slot carries over
    sandbox = NvmlSandbox()
    cleanup.callback(sandbox.restore)
    sandbox.install(FakeNvmlLib([
        h100(0, "00000000:3B:00.0"),
        h100(1, "00000000:5E:00.0", vgpu_types=VGPU_PF_TYPES),
        h100(2, "00000000:86:00.0", vgpu_types=VGPU_VF_TYPES),
        h100(3, "00000000:AF:00.0", vgpu_types=VGPU_VFIO_TYPES),
        h100(4, "00000000:D8:00.0", mig_mode=(1, 1), migs=[
            mig(4, 0, 19, 9, 10 * GIB), mig(4, 1, 19, 10, 10 * GIB),
            mig(4, 2, 14, 3, 20 * GIB)])]))
    enabled = [*(f"nvidia-{t}" for t in (*VGPU_PF_TYPES, *VGPU_VF_TYPES)), "557"]
    return Rig(kernel, {"sysfs": kernel, "runner": RecordingRunner(), "nvml": NvmlBackend(),
                        "sleep": lambda seconds: None},
               {"agent": {"enabled_drivers": ["nvidia_gpu"]},
                "nvidia_driver": {"vgpu_types": enabled}})


SRIOV_NIC, SRIOV_QAT = "0000:5e:00.0", "0000:3d:00.0"
GENERIC_PF, GENERIC_VFS, GENERIC_NIC = "0000:af:00.0", "0000:b1:00.0", "0000:86:00.0"


def _pci_host(root: Path, monkeypatch: pytest.MonkeyPatch,
              cleanup: contextlib.ExitStack) -> Rig:
    b = FakeSysfsBuilder(root, vf_device_ids={"4940": "4941"})
    b.driver("vfio-pci").driver("ice").driver("iavf").driver("4xxxvf", module="qat_4xxx")
    # a NIC whose VFs start at slot 01 (offset 8, as on a dual-port card)
    b.pci(SRIOV_NIC, "8086", "1592", "0x020000", numa=0, driver="ice", totalvfs=8,
          vf_device="1889", vf_driver="iavf", sriov_offset=8)
    b.pci(SRIOV_QAT, "8086", "4940", "0x0b4000", numa=1, driver="qat_4xxx", totalvfs=16,
          vf_driver="4xxxvf", attrs={"qat/state": "up", "qat/cfg_services": "sym;asym"})
    b.pci(GENERIC_PF, "1d0f", "8061", "0x120000", numa=1, driver="neuron")
    b.pci(GENERIC_VFS, "8086", "4940", "0x0b4000", numa=1, driver="qat_4xxx", totalvfs=16,
          vf_driver="4xxxvf", attrs={"qat/state": "up", "qat/cfg_services": "dc"})
    b.pci(GENERIC_NIC, "8086", "1592", "0x020000", numa=0, driver="ice", totalvfs=8,
          vf_device="1889", vf_driver="iavf")
    kernel = b.kernel()
    for pf in (SRIOV_NIC, SRIOV_QAT, GENERIC_VFS, GENERIC_NIC):
        kernel.set_numvfs(pf, 2)
    pf_spec = [{"address": SRIOV_NIC, "device_type": "NIC", "physical_network": "physnet1",
                "traits": ["CUSTOM_SRIOV_NIC"]},
               {"address": SRIOV_QAT, "traits": ["CUSTOM_SRIOV_QAT"]}]
    device_spec = [{"address": GENERIC_PF, "traits": ["CUSTOM_GENERIC_PF"]},
                   {"address": GENERIC_VFS, "traits": ["CUSTOM_GENERIC_VFS"]},
                   {"address": GENERIC_NIC, "device_type": "NIC", "physical_network":
                    "physnet2", "vfio": False, "traits": ["CUSTOM_GENERIC_NIC"]}]
    return Rig(kernel, {"sysfs": kernel, "runner": RecordingRunner()},
               {"agent": {"enabled_drivers": ["sriov", "generic"]},
                "sriov_driver": {"pf_spec": [json.dumps(s) for s in pf_spec]},
                "generic_driver": {"device_spec": [json.dumps(s) for s in device_spec]}})


DFL_PF, DFL_VFS, XRT_SLOT, XRT_USER = "0000:3b:00.0", "0000:5e:00.0", "0000:af:00", "0000:af:00.1"


def _fpga_host(root: Path, monkeypatch: pytest.MonkeyPatch,
               cleanup: contextlib.ExitStack) -> Rig:
    tree = FpgaTree(FakeSysfsBuilder(root))
    tree.b.driver("vfio-pci")
    tree.dfl_card(DFL_PF, "0b30", afu_id="d8424dc4-a4a3-c413-f89e-433683f9040b")
    tree.dfl_card(DFL_VFS, "09c4", afu_id="331db30c-9885-41ea-9081-f88b8f655caa", ports=2,
                  totalvfs=2)
    tree.release_ports_to_vfs(DFL_VFS, 2)
    tree.xrt_card(XRT_SLOT, "5004")
    tools = FakeFpgaTools(tree)
    tools.add_xrt(XRT_USER, xclbin_uuid="5d9e1c3a-8f0b-4d2e-9a61-7c3b2e4f1a09")
    monkeypatch.setattr(registry, "load", tools.driver_loader(registry.load))
    return Rig(tree.kernel, {"sysfs": tree.kernel, "runner": tools.runner},
               {"agent": {"enabled_drivers": ["fpga"]}})


def _fake_host(profile: str) -> Builder:
    def build(root: Path, monkeypatch: pytest.MonkeyPatch,
              cleanup: contextlib.ExitStack) -> Rig:
        return Rig(None, {}, {"agent": {"enabled_drivers": ["fake"]},
                              "fake_driver": {"profile": profile, "device_count": 4}})
    return build


#: name -> (builder, device identity -> its topology)
HOSTS: dict[str, tuple[Builder, dict[str, Topology]]] = {
    "nvidia": (_nvidia_host, {
        GPU_WHOLE: Topology("whole GPU", "nvidia_gpu", "PCI", PCI_KEYS),
        GPU_MDEV_PF: Topology("vGPU, mdev on the PF", "nvidia_gpu", "MDEV", MDEV_KEYS),
        GPU_MDEV_VF: Topology("vGPU, mdev on SR-IOV VFs", "nvidia_gpu", "MDEV", MDEV_KEYS),
        GPU_VFIO_VF: Topology("vGPU, vendor-specific VFIO VFs", "nvidia_gpu", "PCI",
                              VF_VGPU_KEYS),
        GPU_MIG: Topology("MIG instances", "nvidia_gpu", "MIG", MIG_KEYS),
    }),
    "pci": (_pci_host, {
        SRIOV_NIC: Topology("SR-IOV NIC VFs (physnet)", "sriov", "PCI", NIC_KEYS),
        SRIOV_QAT: Topology("SR-IOV QAT VFs", "sriov", "PCI", PCI_KEYS),
        GENERIC_PF: Topology("generic PCI PF", "generic", "PCI", PCI_KEYS),
        GENERIC_VFS: Topology("generic PCI VFs", "generic", "PCI", PCI_KEYS),
        GENERIC_NIC: Topology("generic NIC VFs (physnet)", "generic", "PCI", NIC_KEYS),
    }),
    "fpga": (_fpga_host, {
        DFL_PF: Topology("Intel DFL FPGA PF", "fpga", "PCI", PCI_KEYS),
        DFL_VFS: Topology("Intel DFL FPGA port VFs", "fpga", "PCI", PCI_KEYS),
        XRT_USER: Topology("Xilinx XRT user function", "fpga", "PCI", PCI_KEYS),
    }),
    "fake": (_fake_host("acceld"), {
        "0000:3b:00.0": Topology("fake GPU", "fake", "PCI", PCI_KEYS),
        "0000:3c:00.0": Topology("fake FPGA", "fake", "PCI", PCI_KEYS),
        "0000:3d:00.0": Topology("fake QAT", "fake", "PCI", PCI_KEYS),
        "0000:3e:00.0": Topology("fake NIC (physnet)", "fake", "PCI", NIC_KEYS),
    }),
    "fake-cyborg": (_fake_host("cyborg"), {
        "0000:0c:00.0": Topology("upstream Cyborg's fake FPGA (16 functions)", "fake",
                                 "PCI", PCI_KEYS),
    }),
}


# -- the stack and what the drivers reported --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Handle:
    """One attach handle as a driver reported it."""

    driver: str
    identity: str
    deployable: str
    attach_type: str
    info: tuple[tuple[str, str], ...]
    uuid: str | None

    @property
    def signature(self) -> Signature:
        return (self.driver, self.attach_type, frozenset(dict(self.info)))

    @property
    def label(self) -> str:
        return f"{self.driver} {self.deployable} {self.attach_type} {dict(self.info)}"


@dataclasses.dataclass
class Host:
    stack: Stack
    kernel: FakeKernel | None
    topologies: dict[str, Topology]

    def reported(self) -> list[Handle]:
        """Every attach handle in the agent's report, as its drivers discovered them."""
        report = self.stack.agents[HOSTNAME].build_report()
        return [Handle(drv.name, dev.identity, dep.name, h.attach_type,
                       tuple(sorted(h.attach_info)), h.uuid)
                for drv in report.drivers for dev in drv.devices
                for dep in dev.deployables for h in dep.attach_handles]

    def deployables(self) -> dict[str, dict[str, Any]]:
        """name -> deployable as ``GET /v2/deployables`` shows it, with ``rc``/``traits``."""
        resp = self.stack.call("GET", "/v2/deployables")
        assert resp.status_int == 200, resp.text
        out = {}
        for dep in resp.json["deployables"]:
            attrs = {k: v for item in json.loads(dep["attributes_list"])
                     for k, v in item.items()}
            traits = {v for k, v in attrs.items() if k.startswith("trait")}
            out[dep["name"]] = dict(dep, rc=attrs["rc"], traits=traits)
        return out


@pytest.fixture(params=sorted(HOSTS))
def host(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         sqlite_db: Database) -> Iterator[Host]:
    build, topologies = HOSTS[request.param]
    with contextlib.ExitStack() as cleanup:
        rig = build(tmp_path / "root", monkeypatch, cleanup)
        stack = cleanup.enter_context(Stack.reported(
            sqlite_db, hosts=(HOSTNAME,), agent_collaborators=rig.collaborators, **rig.conf))
        stack.ready_all()             # an operator readies the devices: binds need that
        yield Host(stack, rig.kernel, topologies)


# -- binding through acceld, as Nova does it ---------------------------------------------------

ARQ = dict[str, Any]


def _unique_trait(name: str, deployables: dict[str, dict[str, Any]]) -> str:
    others = set().union(*(d["traits"] for n, d in deployables.items() if n != name))
    unique = sorted(deployables[name]["traits"] - others)
    assert unique, f"deployable {name} has no trait of its own to ask for"
    return unique[0]


def _create_arqs(host: Host, name: str, deployables: dict[str, dict[str, Any]]
                 ) -> tuple[list[str], str]:
    """A device profile asking one unit of ``name``'s resource class and its own trait,
    one ARQ of it per attach handle; the ARQ uuids and the provider Nova would pick (the
    one with that trait: every acceld deployable is one provider)."""
    dep = deployables[name]
    group = {f"resources:{dep['rc']}": "1",
             f"trait:{_unique_trait(name, deployables)}": "required"}
    profile = f"dp-{uuidlib.uuid4().hex[:8]}"
    resp = host.stack.call("POST", "/v2/device_profiles",
                           [{"name": profile, "groups": [group]}])
    assert resp.status_int == 201, resp.text
    uuids = []
    for _ in range(dep["num_accelerators"]):
        resp = host.stack.call("POST", "/v2/accelerator_requests",
                               {"device_profile_name": profile}, NOVA_HEADERS)
        assert resp.status_int == 201, resp.text
        uuids += [arq["uuid"] for arq in resp.json["arqs"]]
    return uuids, dep["rp_uuid"]


def _nova_get(host: Host, path: str) -> Any:
    resp = host.stack.call("GET", path, headers=NOVA_HEADERS)
    assert resp.status_int == 200, resp.text
    return resp.json


def _bind(host: Host, arq_uuid: str, rp_uuid: str) -> ARQ:
    """The conductor's bind with the fields of Nova's ``PATCH`` (one server per ARQ), then
    the ARQ as Nova reads it: by uuid (``get_arq_by_uuid``, for ports), the same as by
    instance (``get_arqs_for_instance``, at spawn)."""
    instance = str(uuidlib.uuid4())
    host.stack.conductor.arq_bind({arq_uuid: {
        "hostname": HOSTNAME, "device_rp_uuid": rp_uuid, "instance_uuid": instance,
        "project_id": PROJECT}}, None)
    arq = _nova_get(host, f"/v2/accelerator_requests/{arq_uuid}")
    assert _nova_get(host, f"/v2/accelerator_requests?instance={instance}")["arqs"] == [arq]
    return arq


def _handle_of(arq: ARQ, handles: list[Handle]) -> Handle:
    """The reported handle an ARQ was bound to (for an mdev, also by the driver's uuid)."""
    info = tuple(sorted(arq["attach_handle_info"].items()))
    [handle] = [h for h in handles
                if (h.attach_type, h.info) == (arq["attach_handle_type"], info)]
    if handle.uuid is not None:
        assert arq["attach_handle_uuid"] == handle.uuid
    return handle


def _bind_every_handle(host: Host, name: str, deployables: dict[str, dict[str, Any]],
                       handles: list[Handle], failures: list[str]) -> list[tuple[ARQ, Handle]]:
    """One ARQ per attach handle of deployable ``name``, each bound; together they must
    have taken every handle once."""
    arq_uuids, rp_uuid = _create_arqs(host, name, deployables)
    bound: list[tuple[ARQ, Handle]] = []
    for arq_uuid in arq_uuids:
        with _noted(failures, f"{name}: bind of ARQ {arq_uuid}"):
            arq = _bind(host, arq_uuid, rp_uuid)
            assert arq["state"] == "Bound", arq
            bound.append((arq, _handle_of(arq, handles)))
    with _noted(failures, f"{name}: the handles its ARQs took"):
        assert sorted(h.label for _, h in bound) == sorted(h.label for h in handles)
    return bound


# -- what Nova built ---------------------------------------------------------------------------


def _nova_address(address: Mapping[str, str]) -> pci.PciAddress:
    """The PCI address in a ``<source><address>`` Nova wrote: every field 0x-prefixed hex,
    the function 0-7 (libvirt's schema allows no more)."""
    fields = {k: v for k, v in address.items() if k != "type"}
    assert set(fields) == {"domain", "bus", "slot", "function"}, address
    assert all(v.startswith("0x") for v in fields.values()), address
    assert 0 <= int(fields["function"], 16) <= 7, address
    return pci.PciAddress(int(fields["domain"], 16), int(fields["bus"], 16),
                          int(fields["slot"], 16), int(fields["function"], 16))


def _one_device(built: nova_libvirt.GuestDevices, kind: str) -> nova_libvirt.Device:
    """The one host device Nova put in the guest, of ``kind``; nothing ignored."""
    assert built.ignored_types == set(), built.messages
    assert [d.kind for d in built.devices] == [kind], built.xml
    [device] = built.devices
    assert device.schema_errors == [], device.schema_errors
    return device


def _nodedev(address: str) -> str:
    """libvirt's node device suffix of a PCI address: ``0000_3b_00_0``."""
    return pci.normalize(address).replace(":", "_").replace(".", "_")


def _mdev_nodedevs(kernel: FakeKernel) -> list[str]:
    """The mdevs in the fake kernel, named as ``virsh nodedev-list --cap mdev`` names them."""
    return [f"mdev_{uuid.replace('-', '_')}_{_nodedev(kernel.mdev_parent_of(uuid) or '')}"
            for uuid in kernel.listdir("/sys/bus/mdev/devices")]


def check_pci(host: Host, arq: ARQ) -> None:
    """Nova passes the handle's PCI function through, managed by libvirt."""
    address = pci.from_attach_info(arq["attach_handle_info"])
    if host.kernel is not None:
        assert host.kernel.pci_device(str(address)) is not None, f"{address}: no such device"
    device = _one_device(nova_libvirt.guest_devices([arq]), "pci")
    assert device.attrib == {"mode": "subsystem", "type": "pci", "managed": "yes"}
    assert _nova_address(device.address) == address


def check_vf_vgpu_type(host: Host, arq: ARQ) -> None:
    """A vGPU VF reaches the guest with its vGPU type set (the bind's host work)."""
    info = arq["attach_handle_info"]
    vf = str(pci.from_attach_info(info))
    assert host.kernel is not None
    current = host.kernel.read(host.kernel.device_path(vf, "nvidia", "current_vgpu_type"))
    assert current == info["vgpu_type"]


def check_mdev(host: Host, arq: ARQ) -> None:
    """The bind made the mdev; Nova finds it and attaches it; after a reboot Nova makes
    exactly that mdev again."""
    kernel, info, uuid = host.kernel, arq["attach_handle_info"], arq["attach_handle_uuid"]
    assert kernel is not None
    parent = str(pci.from_attach_info(info))
    assert (kernel.mdev_parent_of(uuid), kernel.mdev_type_of(uuid)) == (
        parent, info["asked_type"])
    name = f"mdev_{uuid.replace('-', '_')}_{_nodedev(parent)}"
    assert name in _mdev_nodedevs(kernel)

    built = nova_libvirt.guest_devices([arq], gpus=[parent],
                                       existing_mdevs=_mdev_nodedevs(kernel))
    assert (built.lookups, built.mdevs_created, built.mdevs_defined) == ([name], [], [])
    assert built.mdev_uuids == [uuid]
    device = _one_device(built, "mdev")
    assert (device.attrib["type"], device.attrib["model"]) == ("mdev", "vfio-pci")
    assert device.address == {"uuid": uuid}

    kernel.mdev_remove(uuid)                   # a host reboot: the mdev is gone
    built = nova_libvirt.guest_devices([arq], gpus=[parent],
                                       existing_mdevs=_mdev_nodedevs(kernel))
    assert [(m.parent, m.type, m.uuid) for m in built.mdevs_created] == [
        (f"pci_{_nodedev(parent)}", info["asked_type"], uuid)]
    # Nova 34 also defines it persistently, autostarted: a libvirt (mdevctl) definition
    # that the unbind's sysfs remove leaves behind
    assert built.mdevs_defined == [name]
    assert _one_device(built, "mdev").address == {"uuid": uuid}
    kernel.mdev_create(parent, info["asked_type"], uuid)     # what libvirt did for Nova


def check_port(host: Host, arq: ARQ) -> None:
    """Nova's accelerator port: the binding profile it sends Neutron and the device its
    VIF driver makes of the port, for both accelerator vnic types."""
    info = arq["attach_handle_info"]
    address = pci.from_attach_info(info)
    profile = nova_libvirt.port_binding_profile(arq)
    # Neutron's SR-IOV agent matches pci_slot textually, in the sysfs spelling
    assert profile == {"physical_network": info["physical_network"],
                       "pci_slot": str(address), "arq_uuid": arq["uuid"]}
    for vnic, kind in (("accelerator-direct", "interface"),
                       ("accelerator-direct-physical", "pci")):
        vif = nova_libvirt.port_vif(arq, vnic_type=vnic)
        device = _one_device(nova_libvirt.guest_devices([], network_info=[vif]), kind)
        assert device.attrib.get("managed") == "yes"
        assert _nova_address(device.address) == address


def _checks_for(arq: ARQ) -> list[Callable[[Host, ARQ], None]]:
    keys = set(arq["attach_handle_info"])
    checks = [check_mdev] if arq["attach_handle_type"] == "MDEV" else [check_pci]
    if "vgpu_type" in keys:
        checks.append(check_vf_vgpu_type)
    if "physical_network" in keys:
        checks.append(check_port)
    return checks


def check_refused(host: Host, name: str, deployables: dict[str, dict[str, Any]],
                  handle: Handle) -> None:
    """A handle Nova cannot attach (MIG) fails the bind, saying why, and the ARQ Nova
    reads is BindFailed with no handle; given the handle, Nova would have dropped it with
    a log line and started the guest without it."""
    [arq_uuid, *_], rp_uuid = _create_arqs(host, name, deployables)
    with pytest.raises(exception.DeviceNotUsable,
                       match=f"of type {handle.attach_type}, which Nova cannot"):
        _bind(host, arq_uuid, rp_uuid)
    arq = _nova_get(host, f"/v2/accelerator_requests/{arq_uuid}")
    assert (arq["state"], arq["attach_handle_type"], arq["attach_handle_info"]) == (
        "BindFailed", "", {})
    skipped = nova_libvirt.guest_devices([dict(
        arq, state="Bound", attach_handle_type=handle.attach_type,
        attach_handle_info=dict(handle.info))])
    assert (skipped.devices, skipped.ignored_types) == ([], {handle.attach_type})


@contextlib.contextmanager
def _noted(failures: list[str], what: str) -> Iterator[None]:
    """Run a check; record its failure (a failed assert, or what Nova raised, such as a
    KeyError for a missing attach_info key) instead of stopping at the first."""
    try:
        yield
    except Exception as exc:  # every handle is checked and every failure shown
        failures.append(f"{what}: {type(exc).__name__}: {exc}")


# -- the tests ---------------------------------------------------------------------------------


def test_every_handle_type_of_every_driver_is_covered() -> None:
    """The hosts exercise every driver and every handle type in ``HANDLE_TYPES``."""
    declared = {t.signature for _, topologies in HOSTS.values() for t in topologies.values()}
    assert declared == set(HANDLE_TYPES)
    assert {driver for driver, _, _ in declared} == set(registry.available())


def test_each_device_reports_the_handle_type_of_its_topology(host: Host) -> None:
    handles = host.reported()
    seen: dict[str, set[Signature]] = {}
    for handle in handles:
        seen.setdefault(handle.identity, set()).add(handle.signature)
    assert seen == {identity: {t.signature} for identity, t in host.topologies.items()}, \
        {identity: t.label for identity, t in host.topologies.items()}
    assert {h.signature for h in handles} <= set(HANDLE_TYPES)
    assert len({(h.attach_type, h.info) for h in handles}) == len(handles)   # all distinct


def test_every_handle_binds_and_nova_builds_its_device(host: Host) -> None:
    handles = host.reported()
    deployables = host.deployables()
    assert set(deployables) == {h.deployable for h in handles}
    failures: list[str] = []
    bound: list[tuple[ARQ, Handle]] = []
    for name in sorted(deployables):
        mine = [h for h in handles if h.deployable == name]
        if {HANDLE_TYPES.get(h.signature) for h in mine} == {"refused"}:
            with _noted(failures, f"{name}: the refused bind"):
                check_refused(host, name, deployables, mine[0])
        else:
            bound += _bind_every_handle(host, name, deployables, mine, failures)

    for arq, handle in bound:
        for check in _checks_for(arq):
            with _noted(failures, f"{handle.label}: {check.__name__}"):
                check(host, arq)

    with _noted(failures, "unbinding every ARQ"):
        host.stack.conductor.arq_unbind([arq["uuid"] for arq, _ in bound], None)
        assert {_nova_get(host, f"/v2/accelerator_requests/{arq['uuid']}")["state"]
                for arq, _ in bound} == {"Unbound"}
        if host.kernel is not None:
            assert _mdev_nodedevs(host.kernel) == [], "mdevs left behind"
    assert not failures, "\n".join(failures)
