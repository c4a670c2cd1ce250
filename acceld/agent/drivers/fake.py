"""The fake driver: deterministic devices for demos and tests.

Devices are seeded by the host name; ``profile = cyborg`` reports upstream Cyborg's fake
device instead. ``[fake_driver] control_file`` (JSON, read at every discovery) changes
the host while the agent runs: ``device_count``, ``vf_count``, ``fpga_function``,
``fail``, ``fail_install``, ``install_seconds``, ``health``, ``skipped``,
``program_fail``, ``program_seconds``. An image names its function on a first line
``function: NAME`` (else: its SHA-256's first 8 hex digits).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from typing import Any

from oslo_config import cfg

from acceld import reports
from acceld.agent import fileutil
from acceld.agent.drivers import base
from acceld.agent.drivers.base import BaseDriver, Check, DriverError, Health, Skipped
from acceld.hw import pci

_KINDS = (
    # type, vendor, product, resource class, trait, handles
    ("GPU", "10de", "20b5", "PGPU", "CUSTOM_FAKE_GPU_A100", 1),
    ("FPGA", "8086", "0b30", "FPGA", "CUSTOM_FPGA_FAKE_ARRIA10", 1),
    ("QAT", "8086", "4941", "CUSTOM_QAT", "CUSTOM_QAT_FAKE_4XXX", 4),
    ("NIC", "15b3", "101e", "CUSTOM_NIC", "CUSTOM_NIC_FAKE_CX6", 2),
)
# upstream Cyborg's fake driver: one FPGA card with 16 functions, trait CUSTOM_FAKE_DEVICE
_CYBORG = ("FPGA", "abcd", "abcd", "FPGA", "CUSTOM_FAKE_DEVICE", 16)
# Usage figures per kind (stats()): memory in GiB (0: none), then temperature and power
# as idle value plus a slope per utilisation point, and ECC counters (GPUs only).
_USAGE = {"GPU": (40, 32.0, 0.45, 55.0, 3.0, True), "FPGA": (8, 38.0, 0.3, 25.0, 0.9, False),
          "QAT": (0, 40.0, 0.2, 15.0, 0.4, False), "NIC": (0, 45.0, 0.15, 12.0, 0.2, False)}
_FUNCTION_LINE = re.compile(rb"^function:\s*([A-Za-z0-9_]{1,64})\s*$")
_PROGRAM_STEPS = 10

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("profile", default="acceld", choices=[
        ("acceld", "device_count devices cycling through device_types (the default)"),
        ("cyborg", "upstream Cyborg's fake device, as Nova's functional tests, test clouds "
                   "and client test suites expect it: one FPGA device per host with one "
                   "deployable <host>_FakeDevice of 16 PCI attach handles, resource class "
                   "FPGA, trait CUSTOM_FAKE_DEVICE (device_count, device_types and handles "
                   "do not apply; traits and physical_networks do)")],
               help="The shape of the fake host."),
    cfg.IntOpt("device_count", default=4, min=0, max=256,
               help="How many fake devices each host has (types cycle GPU, FPGA, QAT, NIC)."),
    cfg.ListOpt("device_types", default=[kind[0] for kind in _KINDS],
                item_type=cfg.types.String(choices=[kind[0] for kind in _KINDS]),
                help="The kinds of fake devices, cycled in this order. A benchmark that "
                     "mirrors upstream Cyborg's fake driver uses FPGA alone."),
    cfg.IntOpt("handles", min=1, max=255,
               help="Attach handles per fake deployable, for every kind (default: 1 for "
                    "GPU and FPGA, 4 for QAT, 2 for NIC; the control file's vf_count "
                    "still wins)."),
    cfg.DictOpt("traits", default={},
                help="Traits per kind, replacing the kind's own (several separated by "
                     "spaces), e.g. 'FPGA:CUSTOM_FAKE_DEVICE CUSTOM_MY_FUNCTION'."),
    cfg.DictOpt("physical_networks", default={"NIC": "physnet1"},
                help="Physical network per kind: every attach handle of that kind carries "
                     "it in its attach_info (Nova puts it into the binding of an "
                     "accelerator port), e.g. 'NIC:physnet1,FPGA:physnet2'."),
    cfg.StrOpt("control_file",
               help="Optional JSON file read at every discovery: {\"device_count\": N, "
                    "\"fail\": bool, \"fail_install\": bool}. Lets demos and tests change "
                    "the fake host while the agent runs."),
]


class FakeDriver(BaseDriver):
    name = "fake"
    version = "1.0.0"
    conf_group = "fake_driver"
    conf_opts = OPTS
    state_file = "fake-driver-state.json"

    def __init__(self, ctx: base.DriverContext) -> None:
        super().__init__(ctx)
        conf = self.conf
        self._cyborg = conf.profile == "cyborg"
        self._count = 1 if self._cyborg else conf.device_count
        self._kinds = [_CYBORG] if self._cyborg else (
            [k for t in conf.device_types for k in _KINDS if k[0] == t] or list(_KINDS))
        self._traits = {kind: tuple(value.split()) for kind, value in conf.traits.items()}
        self._usage_seeds: dict[str, tuple[float, ...]] = {}

    def _control(self) -> dict[str, Any]:
        path = self.conf.control_file
        return (fileutil.read_json(path) if path else None) or {}

    def discover(self) -> list[reports.Device]:
        control = self._control()
        if control.get("fail"):
            raise DriverError("fake discovery failure (control file says fail)")
        count = 1 if self._cyborg else int(control.get("device_count", self._count))
        seed = int.from_bytes(hashlib.sha256(self.ctx.host.encode()).digest()[:8], "big")
        rng = random.Random(seed)
        programmed = self._state().get("programmed", {})
        devices = [self._device(i, rng, control, programmed) for i in range(count)]
        self._explanation = base.Explanation(
            checks=(Check("control file", True,
                          self.conf.control_file or "none configured: defaults"),),
            expected=self._count, found=len(devices),
            skipped=tuple(Skipped(s["address"], s["reason"])
                          for s in control.get("skipped", ())))
        return devices

    def _device(self, index: int, rng: random.Random, control: dict[str, Any],
                programmed: dict[str, str]) -> reports.Device:
        dtype, vendor, product, rc, trait, nhandles = self._kinds[index % len(self._kinds)]
        if self.conf.handles and not self._cyborg:
            nhandles = self.conf.handles
        if nhandles > 1 and "vf_count" in control and not self._cyborg:
            nhandles = max(1, int(control["vf_count"]))
        bus = 0x0c if self._cyborg else 0x3b + index
        identity = str(pci.PciAddress(0, bus, 0, 0))
        traits = list(self._traits.get(dtype, (trait,)))
        function = programmed.get(identity) or control.get("fpga_function")
        if dtype == "FPGA" and function:
            traits.append(reports.function_trait(function))
        serial = f"FAKE{rng.randrange(16**8):08X}"
        first = 1 if nhandles > 1 else 0      # a multi-function card keeps function 0
        physnets = self.conf.physical_networks
        physnet = {"physical_network": physnets[dtype]} if dtype in physnets else {}
        handles = [base.pci_handle(str(pci.PciAddress(0, bus, n // 8, n % 8)), **physnet)
                   for n in range(first, first + nhandles)]
        host = self.ctx.host
        name = f"{host}-fake-{dtype.lower()}-{index}"
        deployable = f"{host}_fake_{bus:02x}"
        if self._cyborg:
            name = deployable = re.sub(r"[^A-Za-z0-9_-]", "_", f"{host}_FakeDevice")
        return reports.make_device(
            identity=identity, type=dtype, vendor=vendor, model=product, name=name,
            std_board_info={"product_id": product, "class": "fake"},
            vendor_board_info={"serial": serial},
            controlpath={"type": "PCI", "info": pci.to_attach_info(identity)},
            deployables=[base.deployable(deployable, rc, traits, handles)])

    def health(self) -> dict[str, Health]:
        return {identity: Health(h.get("status", "ok"), tuple(h.get("reasons", ())))
                for identity, h in self._control().get("health", {}).items()}

    def stats(self) -> dict[str, dict[str, float]]:
        """Plausible figures that move: each device's own level, swing and period
        (seeded by host and identity) on the context's clock; in the usage
        notification's names (acceld.notify.payloads.METRICS)."""
        count = 1 if self._cyborg else int(self._control().get("device_count", self._count))
        now = self.ctx.clock()
        out = {}
        for i in range(count):
            identity = str(pci.PciAddress(0, 0x0c if self._cyborg else 0x3b + i, 0, 0))
            out[identity] = self._usage(identity, self._kinds[i % len(self._kinds)][0], now)
        return out

    def _usage(self, identity: str, dtype: str, now: float) -> dict[str, float]:
        seed = self._usage_seeds.get(identity)
        if seed is None:
            rng = random.Random(f"{self.ctx.host}|{identity}")
            seed = self._usage_seeds[identity] = (
                rng.uniform(10, 70), rng.uniform(5, 30), rng.uniform(60, 600),
                rng.uniform(0, 2 * math.pi), rng.uniform(0, 3), float(rng.randrange(50)))
        level, swing, period, phase, ecc_rate, ecc_base = seed
        gib, temp0, temp_slope, power0, power_slope, ecc = _USAGE[dtype]
        util = min(100.0, max(0.0, level + swing * math.sin(2 * math.pi * now / period
                                                            + phase)))
        out = {"utilization_percent": round(util, 1),
               "temperature_celsius": round(temp0 + temp_slope * util, 1),
               "power_watts": round(power0 + power_slope * util, 1)}
        if gib:
            total = float(gib << 30)
            out.update(memory_total_bytes=total,
                       memory_used_bytes=float(int(total * (0.1 + 0.8 * util / 100))))
        if ecc:
            out.update(ecc_corrected_total=ecc_base + int(ecc_rate * max(now, 0.0) / 3600),
                       ecc_uncorrected_total=0.0)
        return out

    def _set_member(self, key: str, identity: str, present: bool) -> None:
        state = self._state()
        members = set(state.get(key, []))
        if (identity in members) == present:
            return
        state[key] = sorted(members | {identity} if present else members - {identity})
        self._save_state(state)

    def install(self, identity: str) -> None:
        control = self._control()
        if seconds := float(control.get("install_seconds", 0)):
            self.ctx.sleep(seconds)
        if control.get("fail_install"):
            raise DriverError(f"fake install of {identity} failed (control file)")
        self._set_member("installed", identity, True)

    def uninstall(self, identity: str) -> None:
        self._set_member("installed", identity, False)

    def attach_host(self, identity: str) -> None:
        self._set_member("host_attached", identity, True)

    def detach_host(self, identity: str) -> None:
        self._set_member("host_attached", identity, False)

    def installed(self) -> list[str]:
        """Identities the fake host has installed (for tests and demos)."""
        return list(self._state().get("installed", []))

    # -- programming (the fake FPGAs) ------------------------------------------------------
    def program(self, identity: str, image_path: str, *, progress: base.ProgressFn,
                timeout: float) -> dict[str, str]:
        """Load ``image_path`` into the fake FPGA ``identity`` in ten steps."""
        if not any(d.identity == identity and d.type == "FPGA" for d in self.discover()):
            raise DriverError(f"{identity} is not a fake FPGA of {self.ctx.host}")
        control = self._control()
        function = _image_function(image_path)
        step = float(control.get("program_seconds", 0)) / _PROGRAM_STEPS
        started = self.ctx.clock()
        for i in range(_PROGRAM_STEPS):
            if self.ctx.clock() - started > timeout:
                raise DriverError(f"programming {identity} timed out after {timeout:.0f} s")
            if control.get("program_fail") and i == _PROGRAM_STEPS // 2:
                raise DriverError(f"fake programming of {identity} failed (control file)")
            progress(i * 100 // _PROGRAM_STEPS, f"writing block {i + 1}/{_PROGRAM_STEPS}")
            if step:
                self.ctx.sleep(step)
        state = self._state()
        state.setdefault("programmed", {})[identity] = function
        self._save_state(state)
        progress(100, f"function {function} loaded")
        return {"function": function}


def _image_function(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    first = data.split(b"\n", 1)[0]
    match = _FUNCTION_LINE.match(first)
    if match:
        return match.group(1).decode().upper()
    return hashlib.sha256(data).hexdigest()[:8].upper()
