"""An acceld agent process over a fake host that lives on disk (for the journal tests).

    python -m tests.integration.hw_agent SPEC.json      (run from the repository root)

The agent is the real one (``wiring.start_agent`` on oslo.messaging), its drivers the real
ones; only their collaborators are fakes that the process builds from the spec:

* ``root``: a FakeSysfsBuilder tree; the agent's sysfs is a FakeKernel over it, so writes
  have the kernel's effects on the tree on disk, which the test reads after a crash;
* ``gpus``: H100 descriptions for a fake libnvidia-ml (``tests.fakes.nvml``);
* ``fpga``: true to answer ``fpgaconf``/``xbutil`` with ``tests.fakes.fpga`` tools;
* ``gate``: where to stop dead, to be killed there: ``{"write": suffix, "value": v}``
  right after the first sysfs write to a path ending in ``suffix`` (with value ``v``
  when given), or ``{"command": name}`` when a command named ``name`` is about to run.
  The process then writes ``marker`` and blocks that thread forever.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from acceld import conf as config
from acceld import rpc, wiring
from acceld.agent.drivers import registry
from tests.fakes.kernel import FakeKernel

BLOCK = threading.Event()       # never set: a gated thread waits here until SIGKILL


class Gate:
    def __init__(self, spec: dict[str, Any] | None, marker: str | None) -> None:
        self.spec, self.marker = spec or {}, marker
        self._fired = False

    def _fire(self, what: str) -> None:
        if self._fired:
            return
        self._fired = True
        with open(self.marker, "w", encoding="utf-8") as f:
            f.write(what)
        BLOCK.wait()

    def after_write(self, host_path: str, value: str) -> None:
        suffix = self.spec.get("write")
        wanted = self.spec.get("value")
        if suffix and host_path.endswith(suffix) and (wanted is None
                                                      or value.strip() == wanted):
            self._fire(f"write {host_path} {value}")

    def before_command(self, argv: list[str]) -> None:
        name = self.spec.get("command")
        if name and os.path.basename(str(argv[0])) == name:
            self._fire(" ".join(map(str, argv)))


class GatedKernel(FakeKernel):
    def __init__(self, root: str, gate: Gate) -> None:
        super().__init__(root)
        self._gate = gate

    def write(self, host_path: str, value: str) -> None:
        super().write(host_path, value)
        self._gate.after_write(host_path, value)


class GatedRunner:
    def __init__(self, inner: Any, gate: Gate) -> None:
        self._inner, self._gate = inner, gate

    def run(self, argv: list[str], timeout: float, *, privileged: bool | None = None) -> Any:
        self._gate.before_command(argv)
        return self._inner.run(argv, timeout, privileged=privileged)


def _collaborators(spec: dict[str, Any], gate: Gate) -> dict[str, Any]:
    from tests.fakes.runner import RecordingRunner

    out: dict[str, Any] = {"sysfs": GatedKernel(spec["root"], gate),
                           "sleep": lambda seconds: None}
    runner: Any = RecordingRunner()
    if spec.get("gpus"):
        from acceld.hw.nvml import NvmlBackend
        from tests.fakes.nvml import FakeNvmlLib, NvmlSandbox, h100

        NvmlSandbox().install(FakeNvmlLib([h100(g["index"], g["bus"])
                                           for g in spec["gpus"]]))
        out["nvml"] = NvmlBackend()
    if spec.get("fpga"):
        from tests.fakes.fpga import FakeFpgaTools, FpgaTree
        from tests.fakes.kernel import FakeSysfsBuilder

        tools = FakeFpgaTools(FpgaTree(FakeSysfsBuilder(spec["root"])))
        runner = tools.runner
        registry.load = tools.driver_loader(registry.load)
    out["runner"] = GatedRunner(runner, gate)
    return out


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    conf = config.load(["--config-file", spec["config"]], config_files=[])
    wiring.setup_logging(conf)
    gate = Gate(spec.get("gate"), spec.get("marker"))
    transport = rpc.MessagingTransport(conf)
    manager, server = wiring.start_agent(conf, transport, **_collaborators(spec, gate))
    wiring.LOG.info("hw agent %s running", manager.host)
    return wiring.until_signal([manager.stop, server.stop, transport.close])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
