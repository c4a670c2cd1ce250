"""The FPGA driver: Intel cards through the kernel's DFL layout, Xilinx/AMD Alveo cards
through XRT (``xbutil examine``), programming through the vendors' tools.

Each card (DFL: its PF; XRT: its user function) is one FPGA device with one deployable
whose traits name the model and the loaded functions; the last function seen is kept in
``<state_dir>/fpga-functions.json`` for while a guest holds the card. The sysfs and
``xbutil`` layouts read are in ``docs/drivers/fpga.md``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import struct
import tempfile
import threading
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from acceld import reports
from acceld.agent.drivers import base
from acceld.agent.drivers.base import BaseDriver, Check, DriverError, ProgressFn, Skipped
from acceld.hw import pci
from acceld.hw.sysfs import PciDevice

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("fpgaconf_path", default="fpgaconf",
               help="The OPAE `fpgaconf` tool that loads green bitstreams (.gbs) into Intel "
                    "DFL cards: a bare name is looked up on PATH, or an absolute path."),
    cfg.StrOpt("xbutil_path", default="xbutil",
               help="The XRT `xbutil` tool that examines Xilinx/AMD Alveo cards and loads "
                    ".xclbin images: a bare name is looked up on PATH, or an absolute path."),
    cfg.FloatOpt("examine_timeout", default=60.0, min=1,
                 help="Seconds one `xbutil examine` of a card may take during discovery "
                      "before the card is skipped."),
    cfg.FloatOpt("program_timeout", default=600.0, min=1,
                 help="Seconds a programming (fpgaconf / xbutil program) may take before the "
                      "agent gives up and reports the bind as failed."),
    cfg.IntOpt("expected_devices", min=0,
               help="How many FPGAs this host should have. Only used to explain discovery "
                    "(`driver-list --long` shows expected versus found); unset means "
                    "unknown."),
    cfg.ListOpt("local_image_dirs", default=[],
                help="Absolute directories that image references may point into directly "
                     "(instead of a Glance image id). A path outside them, or one that "
                     "escapes them through `..` or symlinks, is refused."),
    cfg.IntOpt("max_image_bytes", default=1024 ** 3, min=1,
               help="Largest image (bytes) the agent downloads or copies before programming; "
                    "a bigger one is refused and its partial copy removed."),
    cfg.StrOpt("image_dir",
               help="Where fetched images are kept while a card is programmed (default: "
                    "<agent state dir>/fpga-images). Needs room for max_image_bytes."),
]


FPGA_REGIONS = "/sys/class/fpga_region"
PLATFORM_DEVICES = "/sys/bus/platform/devices"

KIND_DFL = "dfl"
KIND_XRT = "xrt"

VENDOR_INTEL = "8086"
VENDOR_XILINX = "10ee"
VENDOR_SILICOM = "1c2c"

# Trait names from numeric ids (never from display names).
_VENDOR_TRAIT = {VENDOR_INTEL: "INTEL", VENDOR_XILINX: "XILINX", VENDOR_SILICOM: "SILICOM"}
_MODEL_TRAIT = {
    (VENDOR_INTEL, "09c4"): "PAC_A10", (VENDOR_INTEL, "0b2b"): "PAC_D5005",
    (VENDOR_INTEL, "0b30"): "PAC_N3000", (VENDOR_SILICOM, "1000"): "N5010",
    (VENDOR_SILICOM, "1001"): "N5011",
    (VENDOR_XILINX, "5000"): "U200", (VENDOR_XILINX, "5001"): "U200",
    (VENDOR_XILINX, "5004"): "U250", (VENDOR_XILINX, "5005"): "U250",
    (VENDOR_XILINX, "500c"): "U280", (VENDOR_XILINX, "500d"): "U280",
    (VENDOR_XILINX, "5020"): "U50", (VENDOR_XILINX, "5021"): "U50",
}
# PF ids dfl-pci binds (drivers/fpga/dfl-pci.c).
_DFL_PF_IDS = frozenset({(VENDOR_INTEL, d) for d in ("bcbd", "bcc0", "09c4", "0b30", "0b2b",
                                                     "bcce", "af00")}
                        | {(VENDOR_SILICOM, "1000"), (VENDOR_SILICOM, "1001")})

XRT_USER_FUNCTION = 1
XRT_MGMT_FUNCTION = 0

# FME/port error files that are not error bits: the AER-style revision, the write-only
# clear, the injection register, and the logs of the first/next error (they repeat
# what the error registers already say).
_NOT_ERROR_BITS = frozenset({"revision", "clear", "inject_errors", "first_error",
                             "next_error", "first_malformed_req"})
_FATAL_ERRORS = frozenset({"catfatal_errors"})

GBS_GUID = uuidlib.UUID("58656f6e-4650-4741-b747-425376303031").bytes
XCLBIN_MAGIC = b"xclbin2\0"
_XCLBIN_UUID_AT = 304 + 112     # struct axlf: m_header at 304; its uuid at 112
_MAX_GBS_METADATA = 1024 * 1024

_EXAMINE_TTL = 5.0             # seconds an examine answers discover/health/stats alike
_TAIL = 600
_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def function_id(raw: str | None) -> str | None:
    """An AFU id / xclbin UUID as 32 lower-case hex digits; None when none is loaded."""
    text = (raw or "").strip().lower().replace("-", "").removeprefix("0x")
    if not _HEX32.match(text) or not int(text, 16):
        return None
    return text


def model_trait(vendor: str, device: str) -> str:
    vname = _VENDOR_TRAIT.get(vendor, vendor.upper())
    model = _MODEL_TRAIT.get((vendor, device), device.upper())
    return f"CUSTOM_FPGA_{vname}_{model}"


@dataclasses.dataclass(frozen=True)
class Card:

    kind: str                           # KIND_DFL or KIND_XRT
    identity: str                       # DFL: the PF; XRT: the user function
    vendor: str
    device: str
    control: str                        # controlpath: the PF / the management function
    handles: tuple[str, ...]            # PCI attach handles
    functions: tuple[str, ...]          # loaded function ids
    live: bool                          # functions read from the hardware just now
    numa_node: int | None = None
    fme: str | None = None              # DFL: dfl-fme.N
    ports: tuple[str, ...] = ()         # DFL: ports on the PF (programmable)
    vf_ports: tuple[str, ...] = ()      # DFL: ports the host sees on VFs
    driver: str | None = None           # XRT: the user function's driver
    examine: dict[str, Any] | None = dataclasses.field(default=None, compare=False)
    problem: str | None = None          # why the card could not be fully read
    board: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass
class _Scan:
    cards: dict[str, Card] = dataclasses.field(default_factory=dict)
    checks: list[Check] = dataclasses.field(default_factory=list)
    skipped: list[Skipped] = dataclasses.field(default_factory=list)


class FpgaDriver(BaseDriver):
    name = "fpga"
    version = "1.0.0"
    conf_group = "fpga_driver"
    conf_opts = OPTS
    state_file = "fpga-functions.json"

    def __init__(self, ctx: base.DriverContext, *,
                 which: Callable[[str], str | None] | None = None) -> None:
        super().__init__(ctx)
        self._tool = which or shutil.which         # a configured tool's path, or None
        self._examined: dict[str, tuple[float, dict[str, Any]]] = {}
        self._locks: dict[str, threading.Lock] = {}     # per card (setdefault is atomic)

    # -- the protocol ------------------------------------------------------------------
    def discover(self) -> list[reports.Device]:
        scan = self._scan()
        self._remember({c.identity: list(c.functions) for c in scan.cards.values()
                        if c.live})
        self._explanation = base.Explanation(tuple(scan.checks), self.conf.expected_devices,
                                             len(scan.cards), tuple(scan.skipped))
        return [self._report(card) for card in scan.cards.values()]

    def health(self) -> dict[str, base.Health]:
        return {card.identity: self._health(card) for card in self._scan().cards.values()}

    def stats(self) -> dict[str, dict[str, float]]:
        return {card.identity: values for card in self._scan().cards.values()
                if (values := self._dfl_stats(card) if card.kind == KIND_DFL
                    else _xrt_stats(card))}

    def program(self, identity: str, image_path: str, *, progress: ProgressFn,
                timeout: float) -> dict[str, str]:
        """Load ``image_path`` into the card ``identity``; the new function id."""
        addr = base.pci_address(identity, "an FPGA identity (a PCI address)")
        with self._locks.setdefault(addr, threading.Lock()):
            progress(0, f"programming {addr} with {os.path.basename(image_path)}")
            card = self._scan().cards.get(addr)
            if card is None:
                raise DriverError(f"no FPGA {addr} on this host")
            if card.kind == KIND_DFL:
                fid = self._program_dfl(card, image_path, progress, timeout)
            else:
                fid = self._program_xrt(card, image_path, progress, timeout)
            self._remember({addr: [fid]})
            progress(100, f"{addr} now runs function {fid}")
            return {"function_id": fid, "trait": reports.function_trait(fid)}

    # -- scanning ----------------------------------------------------------------------
    def _scan(self) -> _Scan:
        scan = _Scan()
        devices = {d.address: d for d in self.sysfs.pci_devices()}
        self._scan_dfl(devices, scan)
        self._scan_xrt(devices, scan)
        if not scan.checks:
            scan.checks.append(Check("fpga devices", False,
                                     "no Intel DFL (dfl-pci) or Xilinx (10ee) PCI functions "
                                     "on this host"))
        return scan

    def _tool_check(self, configured: str, needed_for: str) -> Check:
        found = self._tool(configured)
        return Check(os.path.basename(configured), found is not None,
                     found or f"{configured} not found (needed to {needed_for})")

    # DFL --------------------------------------------------------------------------------
    def _regions(self) -> dict[str, tuple[list[str], list[str]]]:
        """PCI address -> (FMEs, ports) of its FPGA region(s)."""
        out: dict[str, tuple[list[str], list[str]]] = {}
        for region in self.sysfs.listdir(FPGA_REGIONS):
            addr = _pci_parent(self.sysfs.realpath(FPGA_REGIONS, region))
            if addr is None:
                continue
            entries = self.sysfs.listdir(FPGA_REGIONS, region)
            fmes, ports = out.setdefault(addr, ([], []))
            fmes.extend(e for e in entries if e.startswith("dfl-fme."))
            ports.extend(e for e in entries if e.startswith("dfl-port."))
        return out

    def _scan_dfl(self, devices: dict[str, PciDevice], scan: _Scan) -> None:
        regions = self._regions()
        candidates = [d for d in devices.values()
                      if (d.vendor, d.device) in _DFL_PF_IDS or d.driver == "dfl-pci"]
        if not regions and not candidates:
            return
        scan.checks.append(Check("dfl-pci", self.sysfs.driver_loaded("dfl-pci"),
                                 "kernel DFL driver for Intel FPGA cards"))
        scan.checks.append(self._tool_check(self.conf.fpgaconf_path,
                                            "program Intel DFL cards"))
        vf_ports: dict[str, list[str]] = {}
        for addr, (fmes, ports) in regions.items():
            dev = devices.get(addr)
            if fmes or dev is None:
                continue
            if dev.physfn is None:
                scan.skipped.append(Skipped(addr, "FPGA region without FME on a function "
                                                  "that is not a VF"))
            else:
                vf_ports.setdefault(dev.physfn, []).extend(ports)
        for addr, (fmes, ports) in sorted(regions.items()):
            if fmes and addr in devices:
                scan.cards[addr] = self._dfl_card(devices[addr], fmes[0], ports,
                                                  vf_ports.get(addr, []))
        for dev in candidates:
            if dev.address in scan.cards or dev.is_vf:
                continue
            if dev.driver == "dfl-pci":
                reason = "bound to dfl-pci but has no FPGA region (DFL enumeration failed?)"
            else:
                reason = f"Intel DFL FPGA bound to {dev.driver or 'no driver'}, not dfl-pci"
            scan.skipped.append(Skipped(dev.address, reason))

    def _dfl_card(self, pf: PciDevice, fme: str, ports: list[str],
                  vf_ports: list[str]) -> Card:
        afus = [function_id(self.sysfs.read(PLATFORM_DEVICES, p, "afu_id"))
                for p in [*ports, *vf_ports]]
        seen = sorted({a for a in afus if a})
        total = self.sysfs.read_int(PLATFORM_DEVICES, fme, "ports_num")
        live = total is None or len(afus) >= total
        functions = tuple(seen) if live else tuple(self._recalled(pf.address) or seen)
        board = {k: v for k in ("bitstream_id", "bitstream_metadata", "socket_id")
                 if (v := self.sysfs.read(PLATFORM_DEVICES, fme, k)) is not None}
        return Card(kind=KIND_DFL, identity=pf.address, vendor=pf.vendor, device=pf.device,
                    control=pf.address, handles=tuple(pf.virtfns) or (pf.address,),
                    functions=functions, live=live, numa_node=pf.numa_node, fme=fme,
                    ports=tuple(sorted(ports, key=self._port_id)),
                    vf_ports=tuple(vf_ports), board=board)

    def _port_id(self, port: str) -> int:
        value = self.sysfs.read_int(PLATFORM_DEVICES, port, "id")
        return value if value is not None else 1 << 16

    # XRT --------------------------------------------------------------------------------
    def _scan_xrt(self, devices: dict[str, PciDevice], scan: _Scan) -> None:
        slots: dict[tuple[int, int, int], dict[int, PciDevice]] = {}
        for dev in devices.values():
            if dev.vendor == VENDOR_XILINX:
                a = pci.parse(dev.address)
                slots.setdefault((a.domain, a.bus, a.device), {})[a.function] = dev
        if not slots and not self.sysfs.driver_loaded("xocl"):
            return
        scan.checks.append(Check("xocl", self.sysfs.driver_loaded("xocl"),
                                 "XRT user-function driver for Xilinx/AMD Alveo cards"))
        xbutil = self._tool(self.conf.xbutil_path)
        scan.checks.append(self._tool_check(self.conf.xbutil_path,
                                            "examine and program Xilinx/AMD Alveo cards"))
        for functions in (slots[k] for k in sorted(slots)):
            user = functions.get(XRT_USER_FUNCTION)
            mgmt = functions.get(XRT_MGMT_FUNCTION)
            if user is None:
                for dev in functions.values():
                    scan.skipped.append(Skipped(dev.address, "Xilinx function without a "
                                                             "user function 1 on its slot"))
                continue
            if user.driver not in ("xocl", "vfio-pci"):
                scan.skipped.append(Skipped(user.address, f"user function bound to "
                                            f"{user.driver or 'no driver'}, not xocl"))
                continue
            scan.cards[user.address] = self._xrt_card(user, mgmt, xbutil)

    def _xrt_card(self, user: PciDevice, mgmt: PciDevice | None, xbutil: str | None) -> Card:
        examine, problem = None, None   # not on xocl: a guest has it, nothing to ask
        if user.driver == "xocl" and xbutil is None:
            problem = f"{self.conf.xbutil_path} not found: cannot examine the card"
        elif user.driver == "xocl":
            try:
                examine = self._examine(xbutil, user.address)
            except DriverError as exc:
                problem = str(exc)
        functions = (tuple(sorted(_xclbins(examine))) if examine is not None
                     else tuple(self._recalled(user.address)))
        static = _get(_first(examine, "platforms"), "static_region") or {}
        board = {k: str(v) for k in ("vbnv", "logic_uuid", "fpga_name")
                 if isinstance(static, dict) and (v := static.get(k))}
        return Card(kind=KIND_XRT, identity=user.address, vendor=user.vendor,
                    device=user.device, control=mgmt.address if mgmt else user.address,
                    handles=(user.address,), functions=functions, live=examine is not None,
                    numa_node=user.numa_node, driver=user.driver, examine=examine,
                    problem=problem, board=board)

    def _examine(self, xbutil: str, bdf: str, *, fresh: bool = False) -> dict[str, Any]:
        """The card's ``xbutil examine -r all -f JSON`` entry (cached briefly)."""
        now = self.ctx.clock()
        cached = self._examined.get(bdf)
        if cached and not fresh and now - cached[0] < _EXAMINE_TTL:
            return cached[1]
        os.makedirs(self.ctx.state_dir, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="xbutil-", dir=self.ctx.state_dir) as tmp:
            out = os.path.join(tmp, "examine.json")
            self._run([xbutil, "examine", "-d", bdf, "-r", "all", "-f", "JSON", "-o", out],
                      f"xbutil examine of {bdf}", self.conf.examine_timeout,
                      f"xbutil examine of {bdf} timed out after "
                      f"{self.conf.examine_timeout:g} s", privileged=False)
            try:
                with open(out, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                raise DriverError(f"xbutil examine of {bdf} wrote no readable JSON: "
                                  f"{exc}") from exc
        entry = _examine_entry(data, bdf)
        if entry is None:
            raise DriverError(f"xbutil examine of {bdf} did not report that device")
        self._examined[bdf] = (now, entry)
        return entry

    # -- the report --------------------------------------------------------------------
    def _report(self, card: Card) -> reports.Device:
        slug = card.identity.replace(":", "_").replace(".", "_")
        std = {"vendor_id": card.vendor, "device_id": card.device, "kind": card.kind}
        if card.numa_node is not None:
            std["numa_node"] = card.numa_node     # an int, as reports always had it
        return reports.make_device(
            identity=card.identity, type="FPGA", vendor=card.vendor, model=card.device,
            name=f"{self.ctx.host}_fpga_{slug}", std_board_info=std,
            vendor_board_info=dict(card.board),
            controlpath={"type": "PCI", "info": pci.to_attach_info(card.control)},
            deployables=[base.deployable(
                f"{self.ctx.host}_fpga_{slug}", "FPGA",
                [model_trait(card.vendor, card.device),
                 *map(reports.function_trait, card.functions)],
                [base.pci_handle(h) for h in card.handles])])

    # -- health and stats --------------------------------------------------------------
    def _health(self, card: Card) -> base.Health:
        failed: list[str] = []
        degraded: list[str] = []
        (self._dfl_errors if card.kind == KIND_DFL else _xrt_problems)(card, failed, degraded)
        return base.Health.of(failed, degraded)

    def _dfl_errors(self, card: Card, failed: list[str], degraded: list[str]) -> None:
        for dev in filter(None, (card.fme, *card.ports, *card.vf_ports)):
            for name in self.sysfs.listdir(PLATFORM_DEVICES, dev, "errors"):
                if name in _NOT_ERROR_BITS:
                    continue
                value = self.sysfs.read_int(PLATFORM_DEVICES, dev, "errors", name)
                if value:
                    reason = f"{dev} errors/{name} = {value:#x}"
                    (failed if name in _FATAL_ERRORS else degraded).append(reason)
        temp, crit = self._hwmon(card, "temp1_input"), self._hwmon(card, "temp1_crit")
        if temp is not None and crit and temp >= crit:
            degraded.append(f"{card.fme} temperature {temp / 1000:g} C at or above the "
                            f"critical {crit / 1000:g} C")

    def _hwmon(self, card: Card, attribute: str) -> int | None:
        """The first FME hwmon device with ``attribute`` (one is for heat, one for power)."""
        if card.fme is None:
            return None
        values = (self.sysfs.read_int(PLATFORM_DEVICES, card.fme, "hwmon", hw, attribute)
                  for hw in self.sysfs.listdir(PLATFORM_DEVICES, card.fme, "hwmon"))
        return next((value for value in values if value is not None), None)

    def _dfl_stats(self, card: Card) -> dict[str, float]:
        temp = self._hwmon(card, "temp1_input")         # millidegrees Celsius
        power = self._hwmon(card, "power1_input")       # microwatts
        out = {} if temp is None else {"temperature_c": temp / 1000.0}
        if power is not None:
            out["power_w"] = power / 1_000_000.0
        return {**out, "functions_loaded": float(len(card.functions))}

    # -- programming -------------------------------------------------------------------
    def _program_dfl(self, card: Card, image: str, progress: ProgressFn,
                     timeout: float) -> str:
        expected = gbs_function(image)
        progress(10, f"image is a green bitstream for AFU {expected}")
        if not card.ports:
            raise DriverError(f"{card.identity} has no port on its PF: ports released to "
                              f"VFs cannot be reprogrammed; disable SR-IOV and assign the "
                              f"port back first")
        tool = self._require_tool(self.conf.fpgaconf_path)
        a = pci.parse(card.identity)
        argv = [tool, *(["--segment", f"{a.domain:#06x}"] if a.domain else []),
                "-B", f"{a.bus:#04x}", "-D", f"{a.device:#04x}", "-F", f"{a.function:#x}", image]
        progress(50, "fpgaconf started")
        self._run(argv, "fpgaconf", timeout, f"programming timed out after {timeout:g} s "
                  "(fpgaconf)")
        progress(90, "reading the AFU id back")
        loaded = function_id(self.sysfs.read(PLATFORM_DEVICES, card.ports[0], "afu_id"))
        if loaded != expected:
            raise DriverError(f"fpgaconf finished but {card.ports[0]} reports AFU "
                              f"{loaded or 'none'}, the image declares {expected}")
        return loaded

    def _program_xrt(self, card: Card, image: str, progress: ProgressFn,
                     timeout: float) -> str:
        expected = xclbin_function(image)
        progress(10, f"image is an xclbin with UUID {expected}")
        if card.driver != "xocl":
            raise DriverError(f"{card.identity} is bound to {card.driver or 'no driver'}, "
                              f"not xocl (assigned to a guest?): it cannot be programmed")
        tool = self._require_tool(self.conf.xbutil_path)
        progress(50, "xbutil program started")
        self._run([tool, "program", "-d", card.identity, "-u", image], "xbutil program",
                  timeout, f"programming timed out after {timeout:g} s (xbutil program)")
        progress(90, "reading the xclbin UUID back")
        loaded = _xclbins(self._examine(tool, card.identity, fresh=True))
        if expected not in loaded:
            raise DriverError(f"xbutil program finished but {card.identity} reports "
                              f"{', '.join(sorted(loaded)) or 'no xclbin'}, the image is "
                              f"{expected}")
        return expected

    def _require_tool(self, configured: str) -> str:
        tool = self._tool(configured)
        if tool is None:
            raise DriverError(f"{configured} not found: install the vendor tools or set "
                              f"[fpga_driver] {os.path.basename(configured)}_path")
        return tool

    def _run(self, argv: list[str], what: str, timeout: float, timed_out: str, *,
             privileged: bool = True) -> None:
        """Run a vendor tool; DriverError (``timed_out``, or the output's tail) on failure."""
        result = self.runner.run(argv, timeout, privileged=privileged)
        if result.timed_out:
            raise DriverError(timed_out)
        if result.rc != 0:
            text = (result.stderr or result.stdout or "").strip()
            raise DriverError(f"{what} failed (rc {result.rc}): "
                              f"{text[-_TAIL:] if text else 'no output'}")

    # -- remembered functions ----------------------------------------------------------
    def _recalled(self, identity: str) -> list[str]:
        return [f for f in self._state().get(identity, []) if function_id(f)]

    def _remember(self, functions: dict[str, list[str]]) -> None:
        """Record what is loaded where (only when it changed: discovery runs often)."""
        if not functions:
            return
        state = self._state()
        merged = {**state, **functions}
        if merged != state:
            self._save_state(merged)


# -- image checks ------------------------------------------------------------------------


def gbs_function(path: str) -> str:
    """The AFU id a green bitstream declares (GBS GUID, u32 length, JSON metadata)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
            if len(head) < 20 or head[:16] != GBS_GUID:
                raise DriverError(f"{path} is not an OPAE green bitstream (.gbs)")
            (length,) = struct.unpack("<I", head[16:20])
            if length > _MAX_GBS_METADATA:
                raise DriverError(f"{path}: implausible GBS metadata length {length}")
            meta = json.loads(f.read(length))
    except OSError as exc:
        raise DriverError(f"cannot read image {path}: {exc}") from exc
    except ValueError as exc:
        raise DriverError(f"{path}: GBS metadata is not JSON: {exc}") from exc
    try:
        raw = meta["afu-image"]["accelerator-clusters"][0]["accelerator-type-uuid"]
    except (KeyError, IndexError, TypeError) as exc:
        raise DriverError(f"{path}: GBS metadata names no accelerator-type-uuid") from exc
    fid = function_id(raw)
    if fid is None:
        raise DriverError(f"{path}: GBS accelerator-type-uuid {raw!r} is not a UUID")
    return fid


def xclbin_function(path: str) -> str:
    """The UUID an xclbin carries (``struct axlf``: magic ``xclbin2``, header uuid)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_XCLBIN_UUID_AT + 16)
    except OSError as exc:
        raise DriverError(f"cannot read image {path}: {exc}") from exc
    if len(head) < _XCLBIN_UUID_AT + 16 or head[:8] != XCLBIN_MAGIC:
        raise DriverError(f"{path} is not an xclbin (no xclbin2 magic)")
    fid = function_id(head[_XCLBIN_UUID_AT:_XCLBIN_UUID_AT + 16].hex())
    if fid is None:
        raise DriverError(f"{path}: the xclbin has no UUID")
    return fid


# -- small helpers -----------------------------------------------------------------------


def _pci_parent(host_path: str) -> str | None:
    """The PCI function a region lives under (``.../0000:3b:00.0/fpga_region/region0``)."""
    for part in reversed(host_path.split("/")):
        if pci.is_address(part):
            return pci.normalize(part)
    return None


def _as_list(value: Any) -> list[Any]:
    """boost's JSON writer emits an empty list as ``""``."""
    return value if isinstance(value, list) else []


def _xclbins(entry: dict[str, Any]) -> set[str]:
    """The function ids of the xclbins an examine entry says are loaded."""
    return {f for r in _as_list(entry.get("dynamic_regions"))
            if (f := function_id(_get(r, "xclbin_uuid")))}


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _first(entry: dict[str, Any] | None, key: str) -> Any:
    items = _as_list(_get(entry, key))
    return items[0] if items else None


def _examine_entry(data: Any, bdf: str) -> dict[str, Any] | None:
    for entry in _as_list(_get(data, "devices")):
        raw = _get(entry, "device_id")
        if isinstance(raw, str) and pci.is_address(raw) and pci.normalize(raw) == bdf:
            return entry
    return None


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _xrt_problems(card: Card, failed: list[str], degraded: list[str]) -> None:
    if card.problem:
        degraded.append(card.problem)
    entry = card.examine
    if entry is None:
        return
    status = _get(entry, "device_status")
    if status == "HANG":
        failed.append(f"xbutil reports device_status {status}")
    mig = _get(_get(_first(entry, "platforms"), "status"), "mig_calibrated")
    if mig == "false":
        degraded.append("memory controllers not calibrated (mig_calibrated false)")


def _xrt_stats(card: Card) -> dict[str, float]:
    entry = card.examine
    if entry is None:
        return {}
    out = {}
    temps = [t for s in _as_list(entry.get("thermals"))
             if _get(s, "is_present") == "true" and (t := _float(_get(s, "temp_C"))) is not None]
    if temps:
        out["temperature_c"] = max(temps)
    power = _float(_get(_get(entry, "electrical"), "power_consumption_watts"))
    if power is not None:
        out["power_w"] = power
    out["functions_loaded"] = float(len(card.functions))
    return out
