"""Host work of binds, FPGA programming and report v3, through a real in-process stack.

The fake driver plays the hardware; a small subclass of it records the host work the
agent is asked for (``prepare``/``release``) and can make it fail. Restarts are
in-process here (a second manager over the same journal, the first one abandoned as after
a crash); ``tests/integration/test_hw_journal.py`` kills real agent processes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
import webob
from sqlalchemy import select, update

from acceld import exception, reports, rpc, states
from acceld.agent import journal as jmod
from acceld.agent import programming
from acceld.agent.drivers import registry
from acceld.agent.drivers.base import DriverError
from acceld.agent.drivers.fake import FakeDriver
from acceld.conf.hypervisor import DEMO_INSTANCES
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators, arqs, device_profiles
from acceld.objects import program as program_objects
from tests import helpers
from tests.stack import Stack, wait_for

HOST = "host1"
PROJECT = "proj1"
DEMO = DEMO_INSTANCES[0].partition(":")[0]   # a guest of the default fake hypervisor


class HostWorkFake(FakeDriver):
    """The fake driver with host work: records prepare/release, fails on request."""

    calls: list[tuple[str, str, dict[str, str]]] = []
    fail_prepare = False

    def prepare(self, identity: str, attach_info: dict[str, str]) -> dict[str, str]:
        HostWorkFake.calls.append(("prepare", identity, dict(attach_info)))
        if HostWorkFake.fail_prepare:
            raise DriverError(f"no room for {attach_info} on {identity}")
        return attach_info

    def release(self, identity: str, attach_info: dict[str, str]) -> None:
        HostWorkFake.calls.append(("release", identity, dict(attach_info)))


class MdevFake(FakeDriver):
    """The fake driver whose QAT handles are MDEV handles (no prepare of its own)."""

    def discover(self) -> list[reports.Device]:
        out = []
        for dev in super().discover():
            if dev.type == "QAT":
                deps = [{"name": d.name, "num_accelerators": d.num_accelerators,
                         "attributes": dict(d.attributes),
                         "attach_handles": [{"attach_type": "MDEV", "attach_info": {
                             "parent": dev.identity, "type": "fake-1",
                             "uuid": str(uuidlib.uuid5(uuidlib.NAMESPACE_URL,
                                                       dev.identity + h.info_key))}}
                             for h in d.attach_handles]} for d in dev.deployables]
                dev = reports.make_device(
                    identity=dev.identity, type=dev.type, vendor=dev.vendor,
                    model=dev.model, name=dev.name,
                    controlpath={"type": dev.controlpath_type,
                                 "info": dict(dev.controlpath_info)}, deployables=deps)
            out.append(dev)
        return out


@pytest.fixture
def use_driver(monkeypatch: pytest.MonkeyPatch):
    """Make the agents load ``cls`` for the name "fake" (the registry is the seam)."""
    def use(cls: type) -> None:
        HostWorkFake.calls = []
        HostWorkFake.fail_prepare = False
        monkeypatch.setattr(registry, "load", lambda name, ctx: cls(ctx))
    return use


@pytest.fixture
def images(tmp_path) -> dict[str, str]:
    directory = tmp_path / "images"
    directory.mkdir()
    data = b"function: SHA3\n" + bytes(range(200))
    path = directory / "sha3.gbs"
    path.write_bytes(data)
    return {"dir": str(directory), "path": str(path),
            "sha256": hashlib.sha256(data).hexdigest()}


@pytest.fixture
def make_stack(sqlite_db: Database, images) -> Iterator[Any]:
    stacks: list[Stack] = []

    def make(**conf: dict[str, Any]) -> Stack:
        groups = {"DEFAULT": {"host": "conductor1"},
                  "fpga_driver": {"local_image_dirs": [images["dir"]]}}
        for group, values in conf.items():
            groups.setdefault(group, {}).update(values)
        stack = Stack(sqlite_db, hosts=(HOST,), device_count=4, **groups)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop()


def _control(stack: Stack, **values: Any) -> None:
    with open(stack.control_file, "w", encoding="utf-8") as f:
        json.dump(values, f)


def _device(stack: Stack, kind: str) -> dict[str, Any]:
    return next(a for a in accelerators.list_accelerators(stack.db)
                if a["device_type"] == kind)


def _deployable(stack: Stack, kind: str) -> m.Deployable:
    with stack.db.reader() as s:
        return s.execute(select(m.Deployable).join(m.Device).where(m.Device.type == kind)
                         ).scalars().first()


def _api(stack: Stack, method: str, path: str, body: Any = None) -> webob.Response:
    req = webob.Request.blank(path, method=method)
    if body is not None:
        req.content_type = "application/json"
        req.body = json.dumps(body).encode()
    return req.get_response(stack.app)


def _arq_for(stack: Stack, kind: str, rc: str) -> tuple[str, dict[str, str]]:
    name = f"p-{uuidlib.uuid4().hex[:6]}"
    device_profiles.create(stack.db, name, [{f"resources:{rc}": "1"}])
    [arq] = arqs.create(stack.db, name, PROJECT)
    fields = {"hostname": HOST, "device_rp_uuid": _deployable(stack, kind).rp_uuid,
              "instance_uuid": str(uuidlib.uuid4()), "project_id": PROJECT}
    return arq["uuid"], fields


def _arq(stack: Stack, uuid: str) -> dict[str, Any]:
    return arqs.get(stack.db, uuid, project_id=None)


# -- report v3: explanation, capabilities, health ------------------------------------------------

def test_report_stores_explanations_capabilities_and_health(make_stack):
    stack = make_stack()
    gpu_id, fpga_id = "0000:3b:00.0", "0000:3c:00.0"
    _control(stack, health={gpu_id: {"status": "degraded", "reasons": ["12 corrected ECC"]},
                            fpga_id: {"status": "failed", "reasons": ["fabric hang"]}},
             skipped=[{"address": "0000:99:00.0", "reason": "not in any spec"}])
    stack.report_all()
    gpu, fpga = _device(stack, "GPU"), _device(stack, "FPGA")
    assert (gpu["health"], gpu["health_reasons"]) == ("degraded", ["12 corrected ECC"])
    assert (fpga["health"], fpga["health_reasons"]) == ("failed", ["fabric hang"])
    assert _device(stack, "QAT")["health"] == "ok"
    [driver] = _api(stack, "GET", "/v1/drivers?long=true").json["drivers"]
    assert driver["capabilities"] == ["program"]
    assert driver["explanation"]["skipped"] == [{"address": "0000:99:00.0",
                                                 "reason": "not in any spec"}]
    # A degraded device is still usable; a failed one is not.
    for dev in (gpu, fpga):
        assert _api(stack, "PUT", f"/v1/accelerators/{dev['uuid']}/state",
                    {"state": "ready"}).json["state"] == "ready"
    instance = {"instance_uuid": DEMO}     # a guest of the agent's fake hypervisor
    assert _api(stack, "PUT", f"/v1/accelerators/{gpu['uuid']}", instance).status_int == 200
    resp = _api(stack, "PUT", f"/v1/accelerators/{fpga['uuid']}", instance)
    assert resp.status_int == 409 and "health failed" in resp.json["errors"][0]["detail"]
    # Healthy again: the next report says so and the reasons go.
    _control(stack)
    stack.report_all()
    fpga = _device(stack, "FPGA")
    assert (fpga["health"], fpga["health_reasons"]) == ("ok", [])


def test_an_unchanged_report_with_stats_is_still_skipped(make_stack):
    """Stats are not in the report, so the digest of an idle host does not move."""
    stack = make_stack()
    stack.report_all()
    agent = stack.agents[HOST]
    first = agent.build_report()
    assert first.content_digest() == agent.build_report().content_digest()
    assert 0.0 <= agent.device_stats("fake", "0000:3d:00.0")["utilization_percent"] <= 100.0


# -- host work of binds ----------------------------------------------------------------------

def test_bind_and_unbind_run_the_drivers_host_work(make_stack, use_driver):
    use_driver(HostWorkFake)
    stack = make_stack()
    stack.report_all()
    stack.ready_all()
    [driver] = _api(stack, "GET", "/v1/drivers?long=true").json["drivers"]
    assert driver["capabilities"] == ["host_work", "program"]
    uuid, fields = _arq_for(stack, "QAT", "CUSTOM_QAT")
    stack.conductor.arq_bind({uuid: fields}, None)
    arq = _arq(stack, uuid)
    assert arq["state"] == states.ARQ_BOUND
    assert HostWorkFake.calls == [("prepare", "0000:3d:00.0", arq["attach_handle_info"])]
    stack.conductor.arq_unbind([uuid], None)
    assert HostWorkFake.calls[-1] == ("release", "0000:3d:00.0", arq["attach_handle_info"])
    assert stack.agents[HOST].journal.inflight() == []


@pytest.mark.parametrize("host_work", [False, True])
def test_an_api_unbind_asks_the_conductor_only_for_host_work(make_stack, use_driver,
                                                            monkeypatch, host_work):
    """PATCH unbind: a handle that needs no host work is freed by the API process itself,
    with no RPC; one whose host must release it goes to the conductor, and the release
    has run by the time the 202 comes back."""
    if host_work:
        use_driver(HostWorkFake)
    stack = make_stack()
    stack.report_all()
    stack.ready_all()
    asked: list[list[str]] = []
    unbind = rpc.ConductorClient.arq_unbind

    def recording(self, uuids: list[str], project_id: str | None) -> None:
        asked.append(list(uuids))
        unbind(self, uuids, project_id)

    monkeypatch.setattr(rpc.ConductorClient, "arq_unbind", recording)
    uuid, fields = _arq_for(stack, "QAT", "CUSTOM_QAT")
    stack.conductor.arq_bind({uuid: fields}, None)
    info = _arq(stack, uuid)["attach_handle_info"]
    req = webob.Request.blank("/v2/accelerator_requests", method="PATCH",
                              headers={"X-Service-Token": "nova"})
    req.content_type = "application/json"
    req.body = json.dumps({uuid: [{"op": "remove", "path": "/hostname"}]}).encode()
    assert req.get_response(stack.app).status_int == 202
    assert _arq(stack, uuid)["state"] == states.ARQ_UNBOUND
    with stack.db.reader() as s:
        assert s.execute(select(m.AttachHandle).where(m.AttachHandle.in_use.is_(True))
                         ).first() is None
    if host_work:
        assert asked == [[uuid]]
        assert HostWorkFake.calls[-1] == ("release", "0000:3d:00.0", info)
    else:
        assert asked == []


@pytest.mark.parametrize("by", ["instance", "arqs"])
def test_deleting_bound_arqs_releases_their_handles_on_the_host(make_stack, use_driver, by):
    """Nova deletes a server's ARQs without unbinding first (``DELETE ?instance=``); the
    host state the bind prepared must not outlive them."""
    use_driver(HostWorkFake)
    stack = make_stack()
    stack.report_all()
    stack.ready_all()
    uuid, fields = _arq_for(stack, "QAT", "CUSTOM_QAT")
    stack.conductor.arq_bind({uuid: fields}, None)
    info = _arq(stack, uuid)["attach_handle_info"]
    query = f"instance={fields['instance_uuid']}" if by == "instance" else f"arqs={uuid}"
    req = webob.Request.blank(f"/v2/accelerator_requests?{query}", method="DELETE",
                              headers={"X-Service-Token": "nova"})
    assert req.get_response(stack.app).status_int == 204
    assert wait_for(lambda: ("release", "0000:3d:00.0", info) in HostWorkFake.calls)
    assert [c[0] for c in HostWorkFake.calls] == ["prepare", "release"]
    with stack.db.reader() as s:
        assert s.execute(select(m.AttachHandle).where(m.AttachHandle.in_use.is_(True))
                         ).first() is None


def test_a_failed_prepare_fails_the_bind_and_frees_the_handle(make_stack, use_driver):
    use_driver(HostWorkFake)
    stack = make_stack()
    stack.report_all()
    stack.ready_all()
    HostWorkFake.fail_prepare = True
    uuid, fields = _arq_for(stack, "QAT", "CUSTOM_QAT")
    with pytest.raises(exception.OperationFailed, match="no room for"):
        stack.conductor.arq_bind({uuid: fields}, None)
    assert _arq(stack, uuid)["state"] == states.ARQ_BIND_FAILED
    with stack.db.reader() as s:
        assert s.execute(select(m.AttachHandle).where(m.AttachHandle.in_use.is_(True))
                         ).first() is None
    # the freed handle was released on the host too
    assert [c[0] for c in HostWorkFake.calls] == ["prepare", "release"]


def test_mdev_handles_always_go_to_the_agent(make_stack, use_driver):
    use_driver(MdevFake)
    stack = make_stack()
    stack.report_all()
    stack.ready_all()
    stack._agent_servers[HOST].stop()           # the agent stops answering
    mdev, mdev_fields = _arq_for(stack, "QAT", "CUSTOM_QAT")
    with pytest.raises(exception.HostUnreachable):
        stack.conductor.arq_bind({mdev: mdev_fields}, None)
    assert _arq(stack, mdev)["state"] == states.ARQ_BIND_FAILED
    # A PCI handle of a driver without host work binds without the agent.
    pci, pci_fields = _arq_for(stack, "GPU", "PGPU")
    stack.conductor.arq_bind({pci: pci_fields}, None)
    assert _arq(stack, pci)["state"] == states.ARQ_BOUND
    stack._agent_servers[HOST].start()
    stack.conductor.arq_unbind([mdev], None)
    again, again_fields = _arq_for(stack, "QAT", "CUSTOM_QAT")
    stack.conductor.arq_bind({again: again_fields}, None)
    arq = _arq(stack, again)
    assert arq["state"] == states.ARQ_BOUND
    assert arq["attach_handle_type"] == "MDEV" and arq["attach_handle_info"]["type"] == "fake-1"


def _journal_handle_op(stack: Stack, kind: str) -> dict[str, Any]:
    op = {"op_id": str(uuidlib.uuid4()), "kind": kind, "driver": "fake",
          "identity": "0000:3d:00.0", "handle_uuid": str(uuidlib.uuid4()),
          "attach_info": {"domain": "0000", "bus": "3d", "device": "00", "function": "2"}}
    assert stack.agents[HOST].journal.begin(op)
    return op


@pytest.mark.parametrize("kind", [jmod.KIND_PREPARE, jmod.KIND_RELEASE])
def test_interrupted_handle_work_is_released_at_restart(make_stack, use_driver, kind):
    """A prepare the agent died in is undone (its bind failed with the agent); a release
    it died in is finished. Either way the driver's release runs, once."""
    use_driver(HostWorkFake)
    stack = make_stack()
    op = _journal_handle_op(stack, kind)             # ... and the agent dies here
    agent = stack.restart_agent(HOST)
    assert [o["op_id"] for o in agent.journal.inflight()] == [op["op_id"]]
    agent.recover()
    assert HostWorkFake.calls == [("release", op["identity"], op["attach_info"])]
    assert agent.journal.inflight() == [] and agent.journal.results() == []


# -- programming ------------------------------------------------------------------------------

def _program(stack: Stack, kind: str, images: dict[str, str],
             sha256: str | None = None) -> webob.Response:
    dep = _deployable(stack, kind)
    return _api(stack, "PATCH", f"/v2/deployables/{dep.uuid}/program",
                [{"op": "replace", "path": "/program",
                  "value": [{"image_path": images["path"],
                             "image_sha256": sha256 or images["sha256"]}]}])


def _operation(stack: Stack, kind: str) -> dict[str, Any] | None:
    return program_objects.latest(stack.db, _deployable(stack, kind).uuid)


def _finished(stack: Stack, kind: str) -> dict[str, Any] | None:
    op = _operation(stack, kind)
    return op if op and op["state"] in (states.PROGRAM_DONE, states.PROGRAM_FAILED) else None


def test_program_reports_progress_and_changes_the_function_trait(make_stack, images):
    stack = make_stack()
    stack.report_all()
    _control(stack, program_seconds=0.5)
    seen: list[int] = []
    resp = _program(stack, "FPGA", images)
    assert resp.status_int == 202, resp.text
    assert resp.json["program"]["state"] == "queued"

    def running() -> bool:
        op = _operation(stack, "FPGA")
        seen.append(op["progress"])
        return op["state"] == states.PROGRAM_DONE
    wait_for(running, timeout=20, interval=0.01)
    assert 0 < max(p for p in seen if p < 100)      # progress was visible on the way
    assert seen == sorted(seen)                      # and never went backwards
    stack.report_all()
    dep = _deployable(stack, "FPGA")
    with stack.db.reader() as s:
        traits = set(s.execute(select(m.Attribute.value).where(
            m.Attribute.deployable_id == dep.id, m.Attribute.key.like("trait%"))).scalars())
    assert "CUSTOM_FPGA_FUNCTION_ID_SHA3" in traits
    # The outcome was delivered (the agent forgets it once the delivery call returns).
    wait_for(lambda: stack.agents[HOST].journal.results() == [])


def test_program_timeout_fails_the_operation(make_stack, images):
    stack = make_stack(fpga_driver={"program_timeout": 1.0})
    stack.report_all()
    _control(stack, program_seconds=3.0)
    assert _program(stack, "FPGA", images).status_int == 202
    op = wait_for(lambda: _finished(stack, "FPGA"), timeout=20)
    assert op["state"] == states.PROGRAM_FAILED
    assert "timed out after 1 s" in op["message"]


def test_a_stuck_driver_is_failed_by_the_watchdog(tmp_path):
    """The driver ignores its timeout: the watchdog reports the program failed."""
    conf = helpers.make_conf(fpga_driver={"program_timeout": 1.0})
    journal = jmod.Journal(str(tmp_path))
    release = threading.Event()
    finished = threading.Event()

    class Stuck:
        def program(self, identity, image_path, *, progress, timeout):  # noqa: ANN001
            release.wait(10)
            return {}

    class Conductor:
        def program_progress(self, op_id, progress, message):  # noqa: ANN001
            pass

    image = tmp_path / "img"
    image.write_bytes(b"x")
    prog = programming.Programmer(conf, journal, Conductor(), lambda name: Stuck(),
                                  finished.set, str(tmp_path),
                                  fetch=lambda conf, ref, sha, d: str(image), grace=0.1)
    op = {"op_id": "p1", "kind": "program", "driver": "fpga", "identity": "x",
          "image_ref": "/i", "image_sha256": "ab" * 32}
    journal.begin(op)
    prog.start(op)
    assert finished.wait(5)
    [result] = journal.results()
    assert result["ok"] is False and "did not finish within 1 s" in result["error"]
    release.set()
    prog.join(5)
    assert journal.results() == [result]       # the late return changes nothing


def test_program_interrupted_by_a_restart_is_reported_failed(make_stack, images):
    stack = make_stack()
    stack.report_all()
    stack._agent_servers[HOST].stop()          # the cast is lost: the operation stays queued
    assert _program(stack, "FPGA", images).status_int == 202
    op = _operation(stack, "FPGA")
    assert op["state"] == states.PROGRAM_QUEUED
    # what the conductor sends the agent for it (all that is queued is this operation)
    [agent_op] = program_objects.stalled(stack.db, m.utcnow() + datetime.timedelta(days=1))
    stack.agents[HOST].journal.begin(dict(agent_op, kind=jmod.KIND_PROGRAM))  # then: crash
    agent = stack.restart_agent(HOST)
    agent.recover()
    assert agent.deliver_results()
    op = _operation(stack, "FPGA")
    assert op["state"] == states.PROGRAM_FAILED
    assert op["message"] == programming.RESTART_MESSAGE
    assert agent._wake.is_set()               # a rediscovery was asked for


def test_a_lost_program_is_sent_again(make_stack, images):
    stack = make_stack(conductor={"operation_timeout": 1.0})
    stack.report_all()
    stack._agent_servers[HOST].stop()
    assert _program(stack, "FPGA", images).status_int == 202
    stack._agent_servers[HOST].start()
    with stack.db.writer() as s:             # as if the conductor sent it long ago
        past = m.utcnow().replace(year=2000)
        s.execute(update(m.ProgramOperation).values(created_at=past, updated_at=past))
    stack.conductor.redrive_operations()
    op = wait_for(lambda: _finished(stack, "FPGA"), timeout=20)
    assert op["state"] == states.PROGRAM_DONE


def test_programming_needs_a_programmable_driver(make_stack, images):
    stack = make_stack()
    stack.report_all()
    with stack.db.writer() as s:
        s.execute(update(m.DriverState).values(capabilities=None))
    resp = _program(stack, "FPGA", images)
    assert resp.status_int == 409
    assert resp.json["errors"][0]["code"] == "acceld.program.not_programmable"
    assert "does not program devices" in resp.json["errors"][0]["detail"]


def test_progress_never_reopens_a_finished_operation(make_stack, images):
    stack = make_stack()
    stack.report_all()
    stack._agent_servers[HOST].stop()
    op = _program(stack, "FPGA", images).json["program"]
    assert program_objects.progress(stack.db, op["uuid"], 40, "writing")
    assert not program_objects.progress(stack.db, op["uuid"], 30, "late cast")
    assert program_objects.finish(stack.db, op["uuid"], False, "card on fire")
    assert not program_objects.finish(stack.db, op["uuid"], True, None)   # a duplicate
    assert not program_objects.progress(stack.db, op["uuid"], 90, "very late")
    final = _operation(stack, "FPGA")
    assert (final["state"], final["progress"], final["message"]) == (
        states.PROGRAM_FAILED, 40, "card on fire")
