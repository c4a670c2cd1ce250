"""Kill the agent (SIGKILL of a real process) in the middle of a VF change, a prepare and a
program; restart it; the host (a fake sysfs tree on disk) and the inventory must agree.

The conductor and the API run in this process on oslo.messaging (a RabbitMQ vhost of
the test's own) with a SQLite database; the agent is ``tests/integration/hw_agent.py``,
the real agent and drivers over a FakeKernel tree in ``tmp_path`` that stops dead at a
chosen sysfs write or command (its "gate") so that the kill lands mid-operation:

* VF change: ``install`` of a generic-driver NIC asked for 4 VFs while it has 2: the
  kernel needs 2 -> 0 -> 4, and the agent dies right after the write of 0;
* prepare: the bind of a vGPU (NVIDIA driver, mdev layout) dies right after the mdev was
  created; the conductor's call times out, the bind fails and frees the handle;
* program: FPGA programming dies when ``fpgaconf`` is about to run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webob
from sqlalchemy import select, update

from acceld import exception, rpc, states, wiring
from acceld.agent import programming
from acceld.api import deploy
from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators, arqs, device_profiles
from tests import helpers
from tests.fakes.fpga import FpgaTree, make_gbs
from tests.fakes.kernel import FakeKernel, FakeSysfsBuilder
from tests.integration import procs as p

REPO = Path(__file__).resolve().parents[2]
RPC_TIMEOUT = 3
NIC = "0000:5e:00.0"
GPU = "0000:3b:00.0"
CARD = "0000:af:00.0"
VGPU = "nvidia-471"
AFU_NLB = "d8424dc4-a4a3-c413-f89e-433683f9040b"
AFU_DMA = "331db30c-9885-41ea-9081-f88b8f655caa"
IFACE = "a5f6a2d1-c0b9-4b2d-8e1f-0c3d2b1a0f9e"

pytestmark = pytest.mark.rabbitmq


class World:
    """Conductor + API here; the agent as a process; the fake host in ``root``."""

    def __init__(self, tmp: Path, procs: p.Processes, url: str, db: Database) -> None:
        self.tmp, self.procs, self.url, self.db = tmp, procs, url, db
        self.host = f"hwj-{uuidlib.uuid4().hex[:8]}"
        self.root = tmp / "root"
        self.conf = helpers.make_conf(
            DEFAULT={"host": f"cond-{self.host}", "transport_url": url,
                     "rpc_timeout": RPC_TIMEOUT},
            conductor={"save_interval": 3600.0, "periodic_interval": 3600.0,
                       "operation_wait": 1.0, "operation_timeout": 3600.0})
        self.transport = rpc.MessagingTransport(self.conf)
        self.conductor, self._server = wiring.start_conductor(self.conf, db, self.transport)
        self.app = deploy.make_app(self.conf, db, rpc.ConductorClient(self.transport))
        self.agent: p.Proc | None = None
        self.runs = 0

    def close(self) -> None:
        self._server.stop()
        self.conductor.stop()
        self.transport.close()

    # -- the agent process ---------------------------------------------------------------
    def write_config(self, drivers: list[str], lines: list[str]) -> Path:
        state = self.tmp / "agent-state"
        text = "\n".join([
            "[DEFAULT]", f"host = {self.host}", f"transport_url = {self.url}",
            f"rpc_timeout = {RPC_TIMEOUT}", f"state_path = {state}",
            "[agent]", f"enabled_drivers = {','.join(drivers)}", "report_interval = 0.5",
            "retry_interval = 0.2", f"journal_dir = {state / 'journal'}", *lines, ""])
        path = self.tmp / "agent.conf"
        path.write_text(text, encoding="utf-8")
        return path

    def start_agent(self, config: Path, gate: dict[str, Any] | None = None,
                    **spec: Any) -> Path:
        """Start the agent process; returns the marker its gate writes when reached."""
        self.runs += 1
        marker = self.tmp / f"gate-{self.runs}"
        spec_path = self.tmp / f"spec-{self.runs}.json"
        spec_path.write_text(json.dumps(dict(spec, config=str(config), root=str(self.root),
                                             gate=gate, marker=str(marker))))
        proc = p.Proc(f"agent-{self.runs}",
                      [sys.executable, "-m", "tests.integration.hw_agent", str(spec_path)],
                      self.tmp / f"agent-{self.runs}.log", REPO)
        self.procs.started.append(proc)
        self.agent = proc.start()
        return marker

    def kill_at(self, marker: Path) -> None:
        assert self.agent is not None
        agent = self.agent
        p.wait_until(lambda: marker.exists() or _dead(agent), 60, f"gate {marker.name}")
        assert marker.exists(), f"agent exited before its gate:\n{agent.log_tail()}"
        agent.signal(signal.SIGKILL)
        agent.popen.wait(10)

    # -- views ------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None) -> webob.Response:
        req = webob.Request.blank(path, method=method)
        if body is not None:
            req.content_type = "application/json"
            req.body = json.dumps(body).encode()
        return req.get_response(self.app)

    def device(self, kind: str) -> dict[str, Any] | None:
        found = [a for a in accelerators.list_accelerators(self.db, host=self.host)
                 if a["device_type"] == kind]
        return found[0] if found else None

    def handles(self, kind: str) -> list[tuple[dict[str, str], bool]]:
        with self.db.reader() as s:
            rows = s.execute(select(m.AttachHandle.attach_info, m.AttachHandle.in_use)
                             .join(m.Deployable).join(m.Device)
                             .where(m.Device.hostname == self.host, m.Device.type == kind)
                             ).all()
        return sorted(((json.loads(r.attach_info), bool(r.in_use)) for r in rows),
                      key=lambda h: json.dumps(h[0], sort_keys=True))

    def kernel(self) -> FakeKernel:
        return FakeKernel(self.root)


def _dead(proc: p.Proc) -> bool:
    return not proc.alive


@pytest.fixture
def world(tmp_path, acceld_procs, isolated_rabbit_url, make_db_url) -> Iterator[World]:
    db = Database(make_db_url("sqlite"))
    migration.upgrade(db)
    w = World(tmp_path, acceld_procs, isolated_rabbit_url, db)
    try:
        yield w
    finally:
        acceld_procs.close()
        w.close()
        db.dispose()


def _address(info: dict[str, str]) -> str:
    return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"


# -- a VF change ------------------------------------------------------------------------------

def test_agent_killed_between_the_two_writes_of_a_vf_change(world):
    b = FakeSysfsBuilder(world.root)
    b.driver("ice").driver("iavf").driver("vfio-pci")
    b.pci(NIC, "8086", "1592", "0x020000", driver="ice", totalvfs=8, vf_device="1889",
          vf_driver="iavf")
    b.kernel().set_numvfs(NIC, 2)
    spec = {"vendor_id": "8086", "product_id": "1592", "device_type": "NIC",
            "physical_network": "physnet1", "num_vfs": 4, "vfio": False}
    config = world.write_config(["generic"], ["[generic_driver]",
                                              f"device_spec = {json.dumps(spec)}"])
    marker = world.start_agent(config, gate={"write": "sriov_numvfs", "value": "0"})
    nic = p.wait_until(lambda: world.device("NIC"), 60, "the NIC in the inventory")
    assert len(world.handles("NIC")) == 2

    resp = world.api("PUT", f"/v1/accelerators/{nic['uuid']}/state", {"state": "ready"})
    assert resp.status_int == 200 and resp.json["state"] == "installing", resp.text
    world.kill_at(marker)
    assert world.kernel().read_int(f"/sys/bus/pci/devices/{NIC}/sriov_numvfs") == 0
    assert world.kernel().virtfns(NIC) == []          # the host is mid-way: no VFs at all

    world.start_agent(config)                          # no gate: the restart finishes it

    def done() -> bool:
        dev = accelerators.get_accelerator(world.db, nic["uuid"])
        return dev["state"] == "ready" and len(world.handles("NIC")) == 4
    p.wait_until(done, 60, "the install finished and reported")
    vfs = world.kernel().virtfns(NIC)
    assert len(vfs) == 4
    assert sorted(_address(info) for info, _ in world.handles("NIC")) == sorted(vfs)
    assert all(info["physical_network"] == "physnet1" for info, _ in world.handles("NIC"))


# -- a prepare ------------------------------------------------------------------------------

def _vgpu_host(world: World) -> Path:
    b = FakeSysfsBuilder(world.root)
    b.driver("nvidia").driver("vfio-pci")
    b.pci(GPU, "10de", "20b5", "0x030200", driver="nvidia",
          mdev_types={VGPU: ("GRID A100-4C", 3)})
    return world.write_config(["nvidia_gpu"], ["[nvidia_driver]", f"vgpu_types = {VGPU}"])


def _bind(world: World, rp_uuid: str) -> tuple[str, dict[str, Any]]:
    # The host's devices ready, as an operator's set-ready leaves them: written directly,
    # since its install step on the agent process is not what this test kills.
    with world.db.writer() as s:
        s.execute(update(m.Device).where(m.Device.hostname == world.host)
                  .values(state=states.READY))
    name = f"p-{uuidlib.uuid4().hex[:6]}"
    device_profiles.create(world.db, name, [{"resources:VGPU": "1"}])
    [arq] = arqs.create(world.db, name, "proj1")
    outcome: dict[str, Any] = {}

    def bind() -> None:
        try:
            world.conductor.arq_bind({arq["uuid"]: {
                "hostname": world.host, "device_rp_uuid": rp_uuid,
                "instance_uuid": str(uuidlib.uuid4()), "project_id": "proj1"}}, None)
        except exception.AccelDError as exc:
            outcome["error"] = exc
    thread = threading.Thread(target=bind, daemon=True)
    thread.start()
    return arq["uuid"], {"thread": thread, "outcome": outcome}


def _mdevs(world: World) -> list[str]:
    return world.kernel().listdir("/sys/bus/mdev/devices")


def test_agent_killed_in_the_middle_of_a_prepare(world):
    config = _vgpu_host(world)
    gpus = [{"index": 0, "bus": "00000000:3B:00.0"}]
    marker = world.start_agent(config, gate={"write": "/create"}, gpus=gpus)
    p.wait_until(lambda: len(world.handles("GPU")) == 3, 60, "3 vGPU handles reported")
    with world.db.reader() as s:
        rp_uuid = s.execute(select(m.Deployable.rp_uuid).join(m.Device)
                            .where(m.Device.hostname == world.host)).scalar_one()
    arq_uuid, bind = _bind(world, rp_uuid)
    world.kill_at(marker)
    assert len(_mdevs(world)) == 1                    # created, then the agent died
    bind["thread"].join(RPC_TIMEOUT * 4)
    assert not bind["thread"].is_alive()
    assert isinstance(bind["outcome"].get("error"), exception.HostUnreachable)
    assert arqs.get(world.db, arq_uuid, project_id=None)["state"] == "BindFailed"
    assert [in_use for _, in_use in world.handles("GPU")] == [False] * 3

    world.start_agent(config, gpus=gpus)              # the restart undoes the prepare
    p.wait_until(lambda: not _mdevs(world), 60, "the interrupted mdev removed")
    available = world.kernel().read_int(
        f"/sys/bus/pci/devices/{GPU}/mdev_supported_types/{VGPU}/available_instances")
    assert available == 3
    # host and inventory agree, and the handle can be bound for real now
    again, bind = _bind(world, rp_uuid)
    bind["thread"].join(RPC_TIMEOUT * 4)
    assert "error" not in bind["outcome"], bind["outcome"]
    arq = arqs.get(world.db, again, project_id=None)
    assert arq["state"] == "Bound"
    assert _mdevs(world) == [arq["attach_handle_uuid"]]      # the mdev Nova will find


# -- a program -----------------------------------------------------------------------------

def test_agent_killed_in_the_middle_of_a_program(world, tmp_path):
    FpgaTree(FakeSysfsBuilder(world.root)).dfl_card(CARD, afu_id=AFU_NLB,
                                                    interface_id=IFACE)
    images = tmp_path / "images"
    images.mkdir()
    image = images / "dma.gbs"
    make_gbs(image, AFU_DMA, IFACE)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    config = world.write_config(["fpga"], ["[fpga_driver]", f"local_image_dirs = {images}"])
    marker = world.start_agent(config, gate={"command": "fpgaconf"}, fpga=True)
    p.wait_until(lambda: world.device("FPGA"), 60, "the FPGA in the inventory")
    with world.db.reader() as s:
        dep = s.execute(select(m.Deployable.uuid).join(m.Device)
                        .where(m.Device.hostname == world.host)).scalar_one()
    path = f"/v2/deployables/{dep}/program"
    resp = world.api("PATCH", path, [{"op": "replace", "path": "/program", "value": [
        {"image_path": str(image), "image_sha256": digest}]}])
    assert resp.status_int == 202, resp.text
    world.kill_at(marker)
    assert world.api("GET", path).json["program"]["state"] in ("queued", "running")

    world.start_agent(config, fpga=True)

    def finished() -> dict[str, Any] | None:
        op = world.api("GET", path).json["program"]
        return op if op["state"] in ("done", "failed") else None
    op = p.wait_until(finished, 60, "the program operation to end")
    assert op["state"] == "failed"
    assert op["message"] == programming.RESTART_MESSAGE
    # the card still runs what it ran (fpgaconf never ran) and the inventory says so
    afu = AFU_NLB.replace("-", "")

    def reported() -> bool:
        deployable = world.api("GET", f"/v2/deployables/{dep}").json
        return f"CUSTOM_FPGA_FUNCTION_ID_{afu.upper()}" in deployable["attributes_list"]
    p.wait_until(reported, 30, "the function reported after the restart")
    ports = [n for n in world.kernel().listdir("/sys/bus/platform/devices")
             if n.startswith("dfl-port.")]
    assert [world.kernel().read(f"/sys/bus/platform/devices/{n}/afu_id")
            for n in ports] == [afu]
    # the image fetched before the crash is not left behind
    assert os.listdir(world.tmp / "agent-state" / "journal" / "fpga-images") == []
