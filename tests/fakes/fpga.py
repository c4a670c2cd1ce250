"""Fake FPGA hardware and vendor tools for the FPGA driver's tests.

:class:`FpgaTree` adds the kernel's DFL layout (Linux ``Documentation/fpga/dfl.rst``) to a
:class:`tests.fakes.kernel.FakeSysfsBuilder` tree::

    <pf>/fpga_region/region0/                     sys/class/fpga_region/region0 -> it
        dfl-fme.0/{ports_num,bitstream_id,bitstream_metadata,socket_id,errors/*,
                   hwmon/hwmon0/{name,temp1_input,temp1_crit},hwmon/hwmon1/power1_input,
                   dfl-fme-region.1/fpga_region/region1/compat_id}  (region1 is listed
                   in sys/class/fpga_region too: the PR region)
        dfl-port.0/{id,afu_id,power_state,errors/*}
    sys/bus/platform/devices/dfl-fme.0 -> ...,  dfl-port.0 -> ...

Releasing a port to a VF (``DFL_FPGA_FME_PORT_RELEASE`` then ``sriov_numvfs``) moves the
port out of the PF's region; each VF bound to ``dfl-pci`` gets its own region holding
one port, and a VF rebound to ``vfio-pci`` loses it (the DFL driver is gone from it).

:class:`FakeFpgaTools` answers a :class:`tests.fakes.runner.RecordingRunner` as OPAE's
``fpgaconf`` and XRT's ``xbutil`` would, with their effects: ``fpgaconf`` checks the green
bitstream's interface id against the FME's PR ``compat_id`` and writes the new AFU id
into the port's ``afu_id``; ``xbutil examine -o`` writes a JSON report of the shape
XRT 2.x produces (:func:`xbutil_examine_json`) and ``xbutil program`` changes the
xclbin UUID it reports. Either can be scripted to fail or to hang (the runner's timeout
answer: rc 124, ``timed_out``), without sleeping.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acceld.hw import pci
from acceld.hw.runner import RC_TIMEOUT, Result
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.fakes.runner import RecordingRunner

FPGACONF = "/opt/opae/bin/fpgaconf"
XBUTIL = "/opt/xilinx/xrt/bin/xbutil"

GBS_GUID = uuidlib.UUID("58656f6e-4650-4741-b747-425376303031").bytes  # "XeonFPGA.GBSv001"
XCLBIN_MAGIC = b"xclbin2\0"
XCLBIN_UUID_OFFSET = 304 + 112   # struct axlf: m_header at 304, uuid at 112 within it

FME_ERROR_FILES = ("catfatal_errors", "nonfatal_errors", "pcie0_errors", "pcie1_errors",
                   "fme_errors", "inject_errors", "first_error", "next_error")
PORT_ERROR_FILES = ("errors", "first_error", "first_malformed_req")


# -- images ----------------------------------------------------------------------------


def make_gbs(path: str | os.PathLike[str], afu_id: str, interface_id: str,
             payload: bytes = b"\x5a" * 512) -> bytes:
    """Write an OPAE green bitstream: GUID, u32 metadata length, JSON metadata, payload."""
    meta = json.dumps({
        "version": 640, "platform-name": "PAC",
        "afu-image": {"magic-no": 488605312, "interface-uuid": interface_id,
                      "clock-frequency-high": 250, "power": 50,
                      "accelerator-clusters": [{"name": "afu", "total-contexts": 1,
                                                "accelerator-type-uuid": afu_id}]},
    }).encode()
    data = GBS_GUID + struct.pack("<I", len(meta)) + meta + payload
    Path(path).write_bytes(data)
    return data


def make_xclbin(path: str | os.PathLike[str], xclbin_uuid: str,
                vbnv: str = "xilinx_u250_gen3x16_xdma_shell_4_1") -> bytes:
    """Write a minimal axlf: magic, header with the platform VBNV and the xclbin UUID."""
    data = bytearray(1024)
    data[0:8] = XCLBIN_MAGIC
    struct.pack_into("<i", data, 8, -1)                     # no signature
    struct.pack_into("<Q", data, 304, len(data))            # m_header.m_length
    data[304 + 48:304 + 48 + len(vbnv)] = vbnv.encode()
    data[XCLBIN_UUID_OFFSET:XCLBIN_UUID_OFFSET + 16] = uuidlib.UUID(xclbin_uuid).bytes
    Path(path).write_bytes(bytes(data))
    return bytes(data)


def read_gbs_afu(path: str) -> tuple[str, str] | None:
    """(afu id, interface id) from a green bitstream, None when it is not one."""
    data = Path(path).read_bytes()
    if data[:16] != GBS_GUID or len(data) < 20:
        return None
    (length,) = struct.unpack_from("<I", data, 16)
    try:
        meta = json.loads(data[20:20 + length])
        image = meta["afu-image"]
        return image["accelerator-clusters"][0]["accelerator-type-uuid"], image[
            "interface-uuid"]
    except (ValueError, KeyError, IndexError):
        return None


# -- xbutil examine JSON ---------------------------------------------------------------

# The shape of `xbutil examine -d <user bdf> -r all -f JSON -o <file>` for an Alveo U250
# (XRT 2.x), modelled on XRT's report code (produce_reports: schema_version, system.host,
# devices[] with interface_type/device_id/device_status and one child per report), not
# recorded from a card: boost property_tree JSON, so every value is a string and an
# empty child such as "no xclbin loaded" is written as "" instead of []. Reports the
# driver does not read (aie, debug-ip-status, memory, qspi-status, ...) are left out.
_U250_EXAMINE: dict[str, Any] = {
    "schema_version": {"schema": "JSON", "creation_date": "Tue Mar 12 10:15:42 2024 GMT"},
    "system": {"host": {
        "os": {"sysname": "Linux", "release": "5.15.0-97-generic", "machine": "x86_64",
               "distribution": "Ubuntu 22.04.4 LTS", "model": "PowerEdge R740",
               "cores": "48", "memory_bytes": "0x2ed2e68000"},
        "xrt": {"version": "2.16.204", "branch": "2023.2",
                "hash": "fa4fb8c2e7a3d0e2b1b58e1b6a4fa7e3d3f2a0c1",
                "build_date": "2023-10-12 06:09:03",
                "drivers": [{"name": "xocl", "version": "2.16.204",
                             "hash": "fa4fb8c2e7a3d0e2b1b58e1b6a4fa7e3d3f2a0c1"},
                            {"name": "xclmgmt", "version": "2.16.204",
                             "hash": "fa4fb8c2e7a3d0e2b1b58e1b6a4fa7e3d3f2a0c1"}]},
        "devices": [{"bdf": "0000:3b:00.1", "vbnv": "xilinx_u250_gen3x16_xdma_shell_4_1",
                     "id": "0x5e9d3e17b0b9e7a0", "instance": "user(inst=128)",
                     "is_ready": "true"}]}},
    "devices": [{
        "interface_type": "pcie",
        "device_id": "0000:3b:00.1",
        "device_status": "HEALTHY",
        "platforms": [{
            "static_region": {"vbnv": "xilinx_u250_gen3x16_xdma_shell_4_1",
                              "logic_uuid": "1e8d2f07d1c64f3e39c7a22f2d1d0ba5",
                              "interface_uuid": "c4f4a8b2b4d6e1e0a0b8d6e7f1c2a3b4",
                              "jtag_idcode": "0x4b57093",
                              "fpga_name": "xcu250-figd2104-2L-e"},
            "off_chip_board_info": {"ddr_size_bytes": "0x1000000000", "ddr_count": "4",
                                    "revision": "", "mfg_date": ""},
            "status": {"mig_calibrated": "true", "p2p_status": "disabled"},
            "controller": {"satellite_controller": {"version": "4.6.20",
                                                    "expected_version": "4.6.20"},
                           "card_mgmt_controller": {"serial_number": "XFL1ABCDEF12",
                                                    "oem_id": "0x10da"}},
            "macs": [{"address": "00:0A:35:0C:1D:2E"}, {"address": "00:0A:35:0C:1D:2F"}],
            "clocks": {"clocks": [
                {"id": "DATA_CLK", "description": "Data", "freq_mhz": "300"},
                {"id": "KERNEL_CLK", "description": "Kernel", "freq_mhz": "500"}]},
        }],
        "dynamic_regions": [{
            "id": "0",
            "xclbin_uuid": "5d9e1c3a-8f0b-4d2e-9a61-7c3b2e4f1a09",
            "compute_units": [{"name": "vadd:vadd_1", "base_address": "0x1800000",
                               "usage": "0", "type": "PL",
                               "status": {"bit_mask": "0x4"}}],
        }],
        "thermals": [
            {"location_id": "pcb_top_front", "description": "PCB Top Front",
             "is_present": "true", "temp_C": "38"},
            {"location_id": "pcb_top_rear", "description": "PCB Top Rear",
             "is_present": "true", "temp_C": "33"},
            {"location_id": "fpga0", "description": "FPGA", "is_present": "true",
             "temp_C": "52"},
            {"location_id": "vccint", "description": "Int Vcc", "is_present": "false",
             "temp_C": "0"},
        ],
        "electrical": {"power_consumption_max_watts": "225",
                       "power_consumption_watts": "28.2",
                       "power_consumption_warning": "false",
                       "power_rails": [{"id": "12v_pex", "description": "12 Volts PCI Express",
                                        "voltage": {"volts": "12.131", "is_present": "true"},
                                        "current": {"amps": "1.112",
                                                    "is_present": "true"}}]},
        "pcie_info": {"vendor": "0x10ee", "device": "0x5005", "sub_device": "0x000e",
                      "sub_vendor": "0x10ee", "link_speed_gbit_sec": "3",
                      "expected_link_speed_gbit_sec": "3", "express_lane_width_count": "16",
                      "expected_express_lane_width_count": "16", "dma_thread_count": "2",
                      "cpu_affinity": "0-23", "max_shared_host_mem_aperture_bytes": "0",
                      "shared_host_mem_size_bytes": "0", "enabled_host_mem_size_bytes": "0"},
    }],
}


def xbutil_examine_json(bdf: str, *, xclbin_uuid: str | None, status: str = "HEALTHY",
                        mig_calibrated: bool = True, fpga_temp: int = 52,
                        device: str = "5005",
                        vbnv: str = "xilinx_u250_gen3x16_xdma_shell_4_1") -> dict[str, Any]:
    """The U250 report above for a given card state (``xclbin_uuid`` None: nothing
    loaded, which XRT writes as ``"dynamic_regions": ""``)."""
    data = copy.deepcopy(_U250_EXAMINE)
    host_dev = data["system"]["host"]["devices"][0]
    host_dev["bdf"], host_dev["vbnv"] = bdf, vbnv
    dev = data["devices"][0]
    dev["device_id"], dev["device_status"] = bdf, status
    dev["platforms"][0]["static_region"]["vbnv"] = vbnv
    dev["platforms"][0]["status"]["mig_calibrated"] = "true" if mig_calibrated else "false"
    dev["pcie_info"]["device"] = f"0x{device}"
    dev["thermals"][2]["temp_C"] = str(fpga_temp)
    if xclbin_uuid is None:
        dev["dynamic_regions"] = ""
    else:
        dev["dynamic_regions"][0]["xclbin_uuid"] = xclbin_uuid
    return data


# -- the DFL tree ----------------------------------------------------------------------


class FpgaTree:
    """Builds Intel DFL and Xilinx XRT cards into a fake sysfs tree."""

    def __init__(self, builder: FakeSysfsBuilder) -> None:
        self.b = builder
        self.sys = builder.sys
        self._next_region = 0
        self._next_port = 0
        self._next_fme = 0
        (self.sys / "class/fpga_region").mkdir(parents=True, exist_ok=True)
        (self.sys / "bus/platform/devices").mkdir(parents=True, exist_ok=True)
        self.released: dict[str, list[str]] = {}      # PF -> AFU ids of released ports
        self.kernel: FakeKernel = builder.kernel()

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _files(directory: Path, files: dict[str, str]) -> None:
        for rel, value in files.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_text(value + "\n")

    def _region(self, address: str) -> Path:
        devdir = self.b.device_dir(address)
        rdir = devdir / "fpga_region" / f"region{self._next_region}"
        rdir.mkdir(parents=True)
        self.b._link(self.sys / "class/fpga_region" / rdir.name, rdir)
        self.b._link(rdir / "device", devdir)
        self._next_region += 1
        return rdir

    def _platform(self, rdir: Path, name: str) -> Path:
        pdir = rdir / name
        pdir.mkdir()
        self.b._link(self.sys / "bus/platform/devices" / name, pdir)
        return pdir

    def _port(self, rdir: Path, afu_id: str | None, port_id: int) -> str:
        name = f"dfl-port.{self._next_port}"
        self._next_port += 1
        pdir = self._platform(rdir, name)
        afu = (afu_id or "0" * 32).replace("-", "").lower()
        self._files(pdir, {"id": str(port_id), "afu_id": afu, "power_state": "0",
                           "dev": f"247:{port_id}"})
        self._files(pdir, {f"errors/{f}": "0x0" for f in PORT_ERROR_FILES})
        (pdir / "errors" / "clear").write_text("")
        return name

    def region_dir(self, address: str) -> Path | None:
        """The fpga_region directory of a PCI function (None when it has none)."""
        base = self.b.device_dir(address) / "fpga_region"
        regions = sorted(base.iterdir()) if base.is_dir() else []
        return regions[0] if regions else None

    def platform_dir(self, name: str) -> Path:
        return Path(os.path.realpath(self.sys / "bus/platform/devices" / name))

    def ports_of(self, address: str) -> list[str]:
        rdir = self.region_dir(address)
        return sorted(p.name for p in rdir.iterdir() if p.name.startswith("dfl-port.")) \
            if rdir else []

    def fme_of(self, address: str) -> str | None:
        rdir = self.region_dir(address)
        names = sorted(p.name for p in rdir.iterdir() if p.name.startswith("dfl-fme.")) \
            if rdir else []
        return names[0] if names else None

    # -- building ------------------------------------------------------------------------
    def dfl_card(self, address: str, device: str = "0b30", *, afu_id: str | None,
                 ports: int = 1, numa: int = -1, interface_id: str | None = None,
                 vf_device: str | None = None, totalvfs: int | None = None,
                 temp_c: float = 41.0, temp_crit_c: float = 95.0,
                 power_w: float | None = 38.5, bound: bool = True) -> str:
        """An Intel PAC/N3000-style card on ``dfl-pci`` with FME and ``ports`` ports all
        loaded with ``afu_id``. ``bound=False``: the PCI function exists but no DFL
        driver took it (no region at all)."""
        self.b.driver("dfl-pci", "dfl_pci")
        addr = self.b.pci(address, "8086", device, "0x120000", numa=numa,
                          driver="dfl-pci" if bound else None, totalvfs=totalvfs,
                          vf_device=vf_device or _VF_IDS.get(device, device),
                          vf_driver="dfl-pci")
        if not bound:
            return addr
        rdir = self._region(addr)
        fme = self._platform(rdir, f"dfl-fme.{self._next_fme}")
        self._next_fme += 1
        iface = (interface_id or "a5f6a2d1c0b94b2d8e1f0c3d2b1a0f9e").replace("-", "").lower()
        self._files(fme, {"ports_num": str(ports), "bitstream_id": "0x23000410010309",
                          "bitstream_metadata": "0x2018110",
                          "cache_size": "0x0", "fabric_version": "0x0", "socket_id": "0",
                          "dev": "246:0"})
        self._files(fme, {f"errors/{f}": "0x0" for f in FME_ERROR_FILES})
        self._files(fme, {"errors/revision": "0x1"})
        (fme / "errors" / "clear").write_text("")
        hw = {"hwmon/hwmon0/name": "dfl_fme_thermal",
              "hwmon/hwmon0/temp1_input": str(int(temp_c * 1000)),
              "hwmon/hwmon0/temp1_crit": str(int(temp_crit_c * 1000))}
        if power_w is not None:
            hw["hwmon/hwmon1/name"] = "dfl_fme_power"
            hw["hwmon/hwmon1/power1_input"] = str(int(power_w * 1_000_000))
        self._files(fme, hw)
        # The FME's PR region is an fpga_region too (listed in class/fpga_region, with
        # no feature devices in it): what fpgaconf checks the GBS interface id against.
        pr = fme / "dfl-fme-region.1" / "fpga_region" / f"region{self._next_region}"
        self._files(pr, {"compat_id": iface})
        self.b._link(self.sys / "class/fpga_region" / pr.name, pr)
        self._next_region += 1
        for port_id in range(ports):
            self._port(rdir, afu_id, port_id)
        return addr

    def set_fme_error(self, address: str, name: str, value: int) -> None:
        fme = self.fme_of(address)
        assert fme is not None
        (self.platform_dir(fme) / "errors" / name).write_text(f"0x{value:x}\n")

    def set_port_error(self, port: str, value: int) -> None:
        (self.platform_dir(port) / "errors" / "errors").write_text(f"0x{value:x}\n")

    def release_ports_to_vfs(self, pf: str, count: int) -> list[str]:
        """``DFL_FPGA_FME_PORT_RELEASE`` for ``count`` ports, then ``sriov_numvfs``:
        the ports leave the PF's region and reappear, one per VF, in the VFs' regions
        (the VFs bind to dfl-pci). Returns the VF addresses."""
        rdir = self.region_dir(pf)
        assert rdir is not None
        ports = self.ports_of(pf)[:count]
        afus = []
        for name in ports:
            pdir = self.platform_dir(name)
            afus.append((pdir / "afu_id").read_text().strip())
            (self.sys / "bus/platform/devices" / name).unlink()
            for child in sorted(pdir.rglob("*"), reverse=True):
                child.unlink() if not child.is_dir() or child.is_symlink() else child.rmdir()
            pdir.rmdir()
        self.released[pf] = afus
        self.kernel.set_numvfs(pf, count, autoprobe=True)
        vfs = self.kernel.virtfns(pf)
        for vf, afu in zip(vfs, afus, strict=True):
            if self.kernel.driver_of(vf) == "dfl-pci":
                self._port(self._region(vf), afu, 0)
        return vfs

    def vf_to_vfio(self, vf: str) -> None:
        """Hand a port VF to vfio-pci (passthrough): the DFL driver and its region go."""
        rdir = self.region_dir(vf)
        if rdir is not None:
            for name in [p.name for p in rdir.iterdir() if p.name.startswith("dfl-")]:
                (self.sys / "bus/platform/devices" / name).unlink()
            (self.sys / "class/fpga_region" / rdir.name).unlink()
            for child in sorted(rdir.rglob("*"), reverse=True):
                child.unlink() if not child.is_dir() or child.is_symlink() else child.rmdir()
            rdir.rmdir()
        self.b.driver("vfio-pci", "vfio_pci")
        self.kernel.bind_driver(vf, "vfio-pci")

    def xrt_card(self, slot: str, device: str = "5004", *, user_driver: str | None = "xocl",
                 mgmt_driver: str | None = "xclmgmt", numa: int = 0,
                 with_user: bool = True) -> tuple[str, str | None]:
        """An Alveo card: function 0 (management, xclmgmt) and function 1 (user, xocl).
        ``slot`` is ``dddd:bb:dd``. Returns (mgmt, user) addresses."""
        for drv, mod in (("xclmgmt", "xclmgmt"), ("xocl", "xocl")):
            if drv in (user_driver, mgmt_driver):
                self.b.driver(drv, mod)
        mgmt = self.b.pci(f"{slot}.0", "10ee", device, "0x120000", numa=numa,
                          driver=mgmt_driver)
        user = None
        if with_user:
            user_id = f"{int(device, 16) + 1:04x}"
            user = self.b.pci(f"{slot}.1", "10ee", user_id, "0x120000", numa=numa,
                              driver=user_driver)
        return mgmt, user


# Intel DFL PF -> VF device ids (drivers/fpga/dfl-pci.c).
_VF_IDS = {"09c4": "09c5", "0b30": "0b31", "0b2b": "0b2c", "bcce": "bccf", "bcc0": "bcc1"}


# -- the tools -------------------------------------------------------------------------


def _opt(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[i + 1]
    return None


class FakeFpgaTools:
    """``fpgaconf`` and ``xbutil`` behind a RecordingRunner, acting on an FpgaTree."""

    def __init__(self, tree: FpgaTree, runner: RecordingRunner | None = None) -> None:
        self.tree = tree
        self.runner = runner or RecordingRunner()
        self.xrt: dict[str, dict[str, Any]] = {}      # user bdf -> card state
        self.runner.script([FPGACONF], self._fpgaconf)
        self.runner.script([XBUTIL, "examine"], self._examine)
        self.runner.script([XBUTIL, "program"], self._program)

    def add_xrt(self, user_bdf: str, *, xclbin_uuid: str | None, **state: Any) -> None:
        """What xbutil will report for a card (see :func:`xbutil_examine_json`)."""
        self.xrt[pci.normalize(user_bdf)] = {"xclbin_uuid": xclbin_uuid, **state}

    def fail(self, tool: str, rc: int = 1, stderr: str = "ERROR: failed") -> None:
        """The next calls of ``tool`` (``fpgaconf`` or ``xbutil program``) fail."""
        self.runner.script(self._prefix(tool), Result(rc, "", stderr))

    def hang(self, tool: str) -> None:
        """The next calls of ``tool`` run into the runner's timeout."""
        self.runner.script(self._prefix(tool), lambda argv: Result(
            RC_TIMEOUT, "", "timed out", timed_out=True))

    @staticmethod
    def _prefix(tool: str) -> list[str]:
        if tool == "fpgaconf":
            return [FPGACONF]
        return [XBUTIL, *tool.split()[1:]] if tool.startswith("xbutil") else [tool]

    def which(self, name: str) -> str | None:
        """A ``shutil.which`` stand-in: both tools are installed."""
        return {"fpgaconf": FPGACONF, "xbutil": XBUTIL}.get(os.path.basename(name))

    def driver_loader(self, load: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
        """A ``registry.load`` (where the agent builds its drivers) whose FPGA driver finds
        the tools through :meth:`which` (they live at paths that do not exist here); other
        drivers are ``load``'s."""
        from acceld.agent.drivers.fpga import FpgaDriver
        return lambda name, ctx: (FpgaDriver(ctx, which=self.which) if name == "fpga"
                                  else load(name, ctx))

    # -- fpgaconf ------------------------------------------------------------------------
    def _fpgaconf(self, argv: list[str]) -> Result:
        image = argv[-1]
        segment = int(_opt(argv, "--segment") or "0", 0)
        bus, dev, fn = (_opt(argv, "-B", "--bus"), _opt(argv, "-D", "--device"),
                        _opt(argv, "-F", "--function"))
        if bus is None:
            return Result(1, "", "Error: more than one compatible FPGA, give -B")
        addr = str(pci.PciAddress(segment, int(bus, 0), int(dev or "0", 0), int(fn or "0", 0)))
        fme = self.tree.fme_of(addr) if self.tree.kernel.driver_of(addr) == "dfl-pci" \
            else None
        if fme is None:
            return Result(1, "", "Error: no suitable slots found.")
        parsed = read_gbs_afu(image) if os.path.exists(image) else None
        if parsed is None:
            return Result(1, "", f"Error: {image}: invalid bitstream (no GBS metadata)")
        afu, iface = parsed
        [pr] = (self.tree.platform_dir(fme) / "dfl-fme-region.1" / "fpga_region").iterdir()
        compat = (pr / "compat_id").read_text().strip()
        if iface.replace("-", "").lower() != compat:
            return Result(1, "", f"Error: bitstream interface id {iface} does not match "
                                 f"the FIM's PR interface id {compat}")
        ports = self.tree.ports_of(addr)
        if not ports:
            return Result(1, "", "Error: no port on the PF (released?)")
        port = min(ports, key=lambda n: int((self.tree.platform_dir(n) / "id").read_text()))
        (self.tree.platform_dir(port) / "afu_id").write_text(
            afu.replace("-", "").lower() + "\n")
        return Result(0, "Programming done.\n", "")

    # -- xbutil --------------------------------------------------------------------------
    def _card(self, argv: list[str]) -> tuple[str | None, dict[str, Any] | None]:
        raw = _opt(argv, "-d", "--device")
        if raw is None or not pci.is_address(raw):
            return raw, None
        bdf = pci.normalize(raw)
        if self.tree.kernel.driver_of(bdf) != "xocl":
            return bdf, None
        return bdf, self.xrt.get(bdf)

    def _examine(self, argv: list[str]) -> Result:
        bdf, card = self._card(argv)
        if card is None:
            return Result(1, "", f"ERROR: Specified device BDF '{bdf}' not found")
        out = _opt(argv, "-o", "--output")
        if _opt(argv, "-f", "--format") != "JSON" or out is None:
            return Result(0, "text report\n", "")
        if os.path.exists(out) and "--force" not in argv:
            return Result(1, "", f"ERROR: The output file '{out}' already exists.")
        device = self.tree.kernel.pci_device(bdf)
        data = xbutil_examine_json(bdf, device=device.device if device else "5005", **card)
        Path(out).write_text(json.dumps(data, indent=4))
        return Result(0, f"Successfully wrote the JSON file: {out}\n", "")

    def _program(self, argv: list[str]) -> Result:
        bdf, card = self._card(argv)
        if card is None:
            return Result(1, "", f"ERROR: Specified device BDF '{bdf}' not found")
        image = _opt(argv, "-u", "--user")
        if image is None or not os.path.exists(image):
            return Result(1, "", f"ERROR: Cannot open file '{image}'")
        data = Path(image).read_bytes()
        if data[:8] != XCLBIN_MAGIC or len(data) < XCLBIN_UUID_OFFSET + 16:
            return Result(1, "", f"ERROR: '{image}' is not a valid xclbin")
        card["xclbin_uuid"] = str(uuidlib.UUID(
            bytes=data[XCLBIN_UUID_OFFSET:XCLBIN_UUID_OFFSET + 16]))
        return Result(0, f"INFO: xbutil program succeeded on {bdf}.\n", "")
