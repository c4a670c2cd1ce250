"""The devices of a simulated host, shaped as the real drivers report them.

A host has a *mix* of device kinds (``gpu_mig=2,vgpu=2,...``); each kind is one real
driver's report of one device: an NVIDIA GPU whole (``gpu``), split into MIG instances
(``gpu_mig``) or offering mdev vGPUs (``vgpu``) as ``nvidia_gpu`` reports them, an
Intel DFL FPGA with one region and a loaded function (``fpga``), and SR-IOV physical
functions whose VFs are the handles (``qat_vf``, ``nic_vf``) as ``sriov`` reports them.
Every value (PCI addresses, serials, GPU and MIG UUIDs, mdev UUIDs, which of the fleet's
few FPGA functions is loaded) is derived from the host name and the device's address, so
every start of the same host reports the same devices.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import uuid as uuidlib
from collections.abc import Callable, Mapping
from typing import Any

from acceld import reports
from acceld.hw import pci

# Namespace of the UUIDs the simulator derives (mdevs, guests).
SIM_NAMESPACE = uuidlib.UUID("0b9e3d52-6c1f-4f7e-9a53-2f1d8c4e7a10")

NVIDIA, INTEL, MELLANOX = "10de", "8086", "15b3"
# The AFUs the FPGAs load at boot: a few bitstreams shared by the fleet, as in a real cloud
# (an id of each board's own would make one Placement trait per host).
FPGA_FUNCTIONS = tuple(hashlib.sha256(name.encode()).hexdigest()[:32]
                       for name in ("crypto", "compression", "packet-filter", "inference"))
QAT_VFS = 16
NIC_VFS = 8
VGPU_INSTANCES = 4
PHYSNET = "physnet1"
# What each real driver declares beyond discovery (acceld.agent.manager.capabilities).
DRIVER_CAPABILITIES = {"nvidia_gpu": (reports.CAP_HOST_WORK,),
                       "fpga": (reports.CAP_PROGRAM,),
                       "sriov": (reports.CAP_HOST_WORK,)}
DRIVER_VERSION = "1.0.0"
# Bus numbers where servers put their accelerators; more devices take the other buses.
_COMMON_BUSES = (0x17, 0x31, 0x3b, 0x4b, 0x5e, 0x86, 0x98, 0xaf, 0xb1, 0xca, 0xd8, 0xe3)
MAX_DEVICES = 64

Builder = Callable[[str, pci.PciAddress, random.Random], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    driver: str
    build: Builder           # (host, address, rng) -> the device as a report holds it
    summary: str


@dataclasses.dataclass(frozen=True)
class SimDevice:
    """One device of a host: its report entry without health (the host adds it)."""

    kind: str
    driver: str
    identity: str
    type: str
    body: Mapping[str, Any]
    function: str | None = None      # FPGA: the function id loaded at boot


def parse_mix(text: str) -> tuple[tuple[str, int], ...]:
    """``"gpu_mig=2,fpga=1"`` -> ``(("gpu_mig", 2), ("fpga", 1))``; ValueError when a kind
    is unknown, a count is not a number >= 0 or there are more than MAX_DEVICES."""
    mix: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, count = part.partition("=")
        name = name.strip()
        if name not in KINDS:
            raise ValueError(f"unknown device kind {name!r} (kinds: {', '.join(KINDS)})")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"{part!r}: a mix entry is KIND=COUNT")
        mix[name] = mix.get(name, 0) + int(count)
    total = sum(mix.values())
    if total > MAX_DEVICES:
        raise ValueError(f"{total} devices per host; at most {MAX_DEVICES}")
    return tuple((name, count) for name, count in mix.items() if count)


def format_mix(mix: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"{name}={count}" for name, count in mix)


def _seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big")


def host_devices(host: str, mix: tuple[tuple[str, int], ...]) -> list[SimDevice]:
    """The devices of ``host`` (in the mix's order), the same at every call."""
    kinds = [KINDS[name] for name, count in mix for _ in range(count)]
    rng = random.Random(_seed(host))
    common = list(_COMMON_BUSES)
    rng.shuffle(common)
    others = [bus for bus in range(0x01, 0xff) if bus not in _COMMON_BUSES]
    buses = sorted(common[:len(kinds)]) + others[:max(0, len(kinds) - len(common))]
    out = []
    for kind, bus in zip(kinds, buses, strict=True):
        address = pci.PciAddress(0, bus, 0, 0)
        body = kind.build(host, address, random.Random(_seed(host, str(address))))
        function = body.pop("_function", None)
        out.append(SimDevice(kind=kind.name, driver=kind.driver, identity=str(address),
                             type=body["type"], body=body, function=function))
    return out


def render(device: SimDevice, health: str, reasons: tuple[str, ...],
           function: str | None) -> dict[str, Any]:
    """The device's report entry with its health and (FPGA) the function loaded now."""
    body = dict(device.body)
    if function is not None:
        body["deployables"] = [_with_function(dep, function) for dep in body["deployables"]]
    body["health"] = {"status": health, "reasons": list(reasons)}
    return body


def _with_function(dep: dict[str, Any], function: str) -> dict[str, Any]:
    attributes = {k: v for k, v in dep["attributes"].items()
                  if not v.startswith(reports.FUNCTION_TRAIT_PREFIX)}
    traits = sum(1 for k in attributes if k.startswith("trait"))
    attributes[f"trait{traits}"] = reports.function_trait(function)
    return {**dep, "attributes": attributes}


# -- shapes shared by the kinds -----------------------------------------------------------

def _numa(address: pci.PciAddress) -> int:
    return 0 if address.bus < 0x80 else 1


def _handle(address: pci.PciAddress, **extra: str) -> dict[str, Any]:
    return {"attach_type": "PCI", "attach_info": {**pci.to_attach_info(address), **extra}}


def _deployable(name: str, rc: str, traits: list[str], handles: list[dict[str, Any]],
                **attributes: str) -> dict[str, Any]:
    return {"name": name, "num_accelerators": len(handles),
            "attributes": {"rc": rc, **{f"trait{i}": t for i, t in enumerate(traits)},
                           **attributes},
            "attach_handles": handles}


def _uuid(rng: random.Random) -> str:
    return str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


def _vfs(pf: pci.PciAddress, count: int) -> list[pci.PciAddress]:
    """The VFs of ``pf``: functions 1.. of its slot, then the next slots (as SR-IOV
    cards number them)."""
    return [pci.PciAddress(pf.domain, pf.bus, n // 8, n % 8) for n in range(1, count + 1)]


def _nvidia(host: str, address: pci.PciAddress, rng: random.Random, *, model: str,
            product: str, memory_mib: int, mig: str,
            deployables: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "identity": str(address), "type": "GPU", "vendor": NVIDIA, "model": model,
        "name": f"{host}_nvidia_{address}",
        "std_board_info": {"vendor_id": NVIDIA, "product_id": model, "class": "030200",
                           "numa_node": str(_numa(address))},
        "vendor_board_info": {"uuid": "GPU-" + _uuid(rng), "product_name": product,
                              "subsystem_id": f"{rng.choice(('1463', '1533', '16c1'))}10de",
                              "mig": mig, "serial": str(rng.randrange(10**12, 10**13)),
                              "memory_mib": str(memory_mib)},
        "controlpath": {"type": "PCI", "info": pci.to_attach_info(address)},
        "deployables": deployables,
    }


# -- the kinds ------------------------------------------------------------------------------

def _gpu(host: str, address: pci.PciAddress, rng: random.Random) -> dict[str, Any]:
    """A whole A100 80GB PCIe: one PGPU."""
    dep = _deployable(f"{host}_{address}", "PGPU",
                      ["CUSTOM_NVIDIA_20B5", "CUSTOM_NVIDIA_GPU_MEMORY_80GB"],
                      [_handle(address)])
    return _nvidia(host, address, rng, model="20b5", product="NVIDIA A100 80GB PCIe",
                   memory_mib=81920, mig="off", deployables=[dep])


# (profile id, profile name, instances) of the MIG layout: 3 + 4 x 1 of 7 slices
_MIG_LAYOUT = ((9, "3g.40gb", 1), (19, "1g.10gb", 4))


def _gpu_mig(host: str, address: pci.PciAddress, rng: random.Random) -> dict[str, Any]:
    """An H100 80GB with MIG on: one deployable per profile, a MIG handle per instance."""
    deps = []
    for profile, name, count in _MIG_LAYOUT:
        handles = [{"attach_type": "MIG",
                    "attach_info": {"parent": str(address), "mig_uuid": "MIG-" + _uuid(rng)}}
                   for _ in range(count)]
        rc = "CUSTOM_NVIDIA_MIG_" + name.upper().replace(".", "_")
        deps.append(_deployable(f"{host}_{address}_mig_{profile}", rc,
                                ["CUSTOM_NVIDIA_2330", f"CUSTOM_NVIDIA_MIG_PROFILE_{profile}"],
                                handles))
    return _nvidia(host, address, rng, model="2330", product="NVIDIA H100 80GB HBM3",
                   memory_mib=81559, mig="on", deployables=deps)


VGPU_TYPE = "nvidia-230"     # GRID T4-4Q: four per T4


def _vgpu(host: str, address: pci.PciAddress, rng: random.Random) -> dict[str, Any]:
    """A T4 offering mdev vGPUs of one type (the legacy mdev layout on the PF)."""
    type_id = VGPU_TYPE.removeprefix("nvidia-")
    handles = [{"attach_type": "MDEV",
                "uuid": str(uuidlib.uuid5(SIM_NAMESPACE, f"{host}|{address}|{VGPU_TYPE}|{slot}")),
                "attach_info": {**pci.to_attach_info(address), "asked_type": VGPU_TYPE,
                                "vgpu_mark": f"{VGPU_TYPE}_{slot}"}}
               for slot in range(VGPU_INSTANCES)]
    dep = _deployable(f"{host}_{address}_vgpu_{type_id}", "VGPU",
                      ["CUSTOM_NVIDIA_1EB8", f"CUSTOM_NVIDIA_VGPU_{type_id}"], handles)
    return _nvidia(host, address, rng, model="1eb8", product="Tesla T4", memory_mib=15360,
                   mig="unsupported", deployables=[dep])


def _fpga(host: str, address: pci.PciAddress, rng: random.Random) -> dict[str, Any]:
    """An Intel PAC D5005 (DFL) with one region: one deployable, its PF the handle;
    ``_function`` is the AFU loaded at boot, one of :data:`FPGA_FUNCTIONS` (the host adds
    its trait)."""
    slug = str(address).replace(":", "_").replace(".", "_")
    return {
        "identity": str(address), "type": "FPGA", "vendor": INTEL, "model": "0b2b",
        "name": f"{host}_fpga_{slug}",
        "std_board_info": {"vendor_id": INTEL, "device_id": "0b2b", "kind": "dfl",
                           "numa_node": _numa(address)},
        "vendor_board_info": {"bitstream_id": f"0x{rng.getrandbits(64):016x}",
                              "bitstream_metadata": f"0x{rng.getrandbits(40):010x}",
                              "socket_id": str(_numa(address))},
        "controlpath": {"type": "PCI", "info": pci.to_attach_info(address)},
        "deployables": [_deployable(f"{host}_fpga_{slug}", "FPGA",
                                    ["CUSTOM_FPGA_INTEL_PAC_D5005"], [_handle(address)])],
        "_function": rng.choice(FPGA_FUNCTIONS),
    }


def _sriov(host: str, address: pci.PciAddress, *, dtype: str, vendor: str, model: str,
           pci_class: str, names: tuple[str, str], rc: str, traits: list[str], vfs: int,
           **extra: str) -> dict[str, Any]:
    """A PF whose VFs are its handles, as the sriov driver reports it."""
    numa = str(_numa(address))
    physnet = {"physical_network": extra["physical_network"]} if "physical_network" in extra \
        else {}
    return {
        "identity": str(address), "type": dtype, "vendor": vendor, "model": model,
        "name": f"{host}_{dtype.lower()}_{address}",
        "std_board_info": {"vendor_id": vendor, "product_id": model, "class": pci_class,
                           "numa_node": numa, "iommu_group": str(address.bus),
                           "sriov_totalvfs": str(vfs)},
        "vendor_board_info": {"vendor_name": names[0], "product_name": names[1]},
        "controlpath": {"type": "PCI", "info": pci.to_attach_info(address)},
        "deployables": [_deployable(f"{host}_{address}", rc, traits,
                                    [_handle(vf, **physnet) for vf in _vfs(address, vfs)],
                                    **extra, numa_node=numa)],
    }


def _qat_vf(host: str, address: pci.PciAddress, rng: random.Random) -> dict[str, Any]:
    """An Intel QAT 4xxx PF with 16 VFs (symmetric and asymmetric crypto)."""
    return _sriov(host, address, dtype="QAT", vendor=INTEL, model="4940", pci_class="0b4000",
                  names=("Intel Corporation", "4xxx"), rc="CUSTOM_QAT",
                  traits=["CUSTOM_QAT_SYM", "CUSTOM_QAT_ASYM"], vfs=QAT_VFS,
                  services="sym;asym")


def _nic_vf(host: str, address: pci.PciAddress, rng: random.Random) -> dict[str, Any]:
    """A ConnectX-6 Dx PF with 8 VFs on physnet1."""
    return _sriov(host, address, dtype="NIC", vendor=MELLANOX, model="101d",
                  pci_class="020000", names=("Mellanox Technologies",
                                             "MT2892 Family [ConnectX-6 Dx]"),
                  rc="CUSTOM_NIC", traits=["CUSTOM_NIC_CX6_DX"], vfs=NIC_VFS,
                  physical_network=PHYSNET)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("gpu", "nvidia_gpu", _gpu, "A100 80GB, whole (PGPU, 1 PCI handle)"),
    Kind("gpu_mig", "nvidia_gpu", _gpu_mig,
         "H100 80GB with MIG on (1 x 3g.40gb + 4 x 1g.10gb MIG handles)"),
    Kind("vgpu", "nvidia_gpu", _vgpu, f"T4 with {VGPU_INSTANCES} mdev vGPUs ({VGPU_TYPE})"),
    Kind("fpga", "fpga", _fpga, "Intel PAC D5005 (DFL), one region, 1 PCI handle"),
    Kind("qat_vf", "sriov", _qat_vf, f"Intel QAT 4xxx PF, {QAT_VFS} VF handles"),
    Kind("nic_vf", "sriov", _nic_vf, f"ConnectX-6 Dx PF, {NIC_VFS} VF handles ({PHYSNET})"),
)}

DEFAULT_MIX = parse_mix("gpu_mig=2,vgpu=2,fpga=1,qat_vf=2,nic_vf=1")
