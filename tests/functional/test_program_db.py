"""Program operations and host-work lookups on every database backend.

One queued/running operation per deployable is the unique ``active_key`` (NULL once
finished); state changes are compare-and-swaps; both must hold on SQLite, PostgreSQL and
MariaDB alike, also when two requests race.
"""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import select, update

from acceld import exception, reports, states
from acceld.conductor.binding import Binder
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import arqs, hostwork
from acceld.objects import program as program_objects
from tests import helpers

SHA = "ab" * 32
VM = "5d1c1b7e-3f1f-4d5e-8c4a-2a9b8c7d6e5f"


def _programmable(db: Database, capabilities: list[str]) -> str:
    """A device on host1 (fake driver) whose driver has ``capabilities``; returns its
    deployable's uuid."""
    rp_uuid, _profile = helpers.make_qat_inventory(db, handles=2)
    with db.writer() as s:
        s.add(m.DriverState(host="host1", name="fake", version="1", state="installed",
                            device_count=1, capabilities=json.dumps(capabilities)))
        return s.execute(select(m.Deployable.uuid).where(m.Deployable.rp_uuid == rp_uuid)
                         ).scalar_one()


def _bound_arq(db: Database, dep_uuid: str) -> str:
    """An ARQ of instance VM bound to the deployable (through the real bind)."""
    with db.reader() as s:
        rp_uuid = s.execute(select(m.Deployable.rp_uuid).where(m.Deployable.uuid == dep_uuid)
                            ).scalar_one()
        profile = s.execute(select(m.DeviceProfile.name)).scalars().first()
    [arq] = arqs.create(db, profile, "p1")
    Binder(db).bind({arq["uuid"]: {"hostname": "host1", "device_rp_uuid": rp_uuid,
                                   "instance_uuid": VM, "project_id": None}}, None)
    return arq["uuid"]


def test_one_operation_at_a_time_per_deployable(db):
    dep = _programmable(db, [reports.CAP_PROGRAM])
    first = program_objects.begin(db, dep, "/img/a.gbs", SHA.upper())
    assert (first["state"], first["image_sha256"]) == (states.PROGRAM_QUEUED, SHA)
    assert first["agent_op"]["op_id"] == first["uuid"]
    with pytest.raises(exception.ProgramInProgress, match=first["uuid"]):
        program_objects.begin(db, dep, "/img/b.gbs", SHA)
    assert program_objects.progress(db, first["uuid"], 30, "writing")
    assert not program_objects.progress(db, first["uuid"], 20, "late")
    assert program_objects.finish(db, first["uuid"], True, None)
    assert not program_objects.finish(db, first["uuid"], False, "duplicate")
    second = program_objects.begin(db, dep, "6b1f4b2e-3c1d-4f6e-9a7b-2d5c8e9f0a11", SHA)
    assert program_objects.finish(db, second["uuid"], True, None)
    latest = program_objects.latest(db, dep)
    assert (latest["uuid"], latest["state"], latest["progress"]) == (
        second["uuid"], states.PROGRAM_DONE, 100)
    with db.reader() as s:       # a Glance image is recorded as the deployable's bitstream
        assert s.execute(select(m.Deployable.bitstream_id).where(
            m.Deployable.uuid == dep)).scalar() == "6b1f4b2e-3c1d-4f6e-9a7b-2d5c8e9f0a11"


def test_racing_program_requests_queue_exactly_one(db):
    dep = _programmable(db, [reports.CAP_PROGRAM])
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def request() -> None:
        barrier.wait()
        try:
            program_objects.begin(db, dep, "/img/a.gbs", SHA)
            outcomes.append("queued")
        except exception.ProgramInProgress:
            outcomes.append("409")

    threads = [threading.Thread(target=request) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["409", "409", "409", "queued"]


def test_refusals_name_the_reason(db):
    dep = _programmable(db, [])
    with pytest.raises(exception.NotProgrammable, match="does not program devices"):
        program_objects.begin(db, dep, "/img/a.gbs", SHA)
    with db.writer() as s:
        s.execute(update(m.DriverState).values(capabilities=json.dumps(["program"])))
    arq = _bound_arq(db, dep)
    with pytest.raises(exception.DeployableInUse,
                       match=f"held by accelerator request {arq} \\(Bound, instance {VM}\\)"):
        program_objects.begin(db, dep, "/img/a.gbs", SHA)
    with pytest.raises(exception.NotFound):
        program_objects.begin(db, "0b7f3e2c-6a3a-4f59-9f0c-1d2e3f405060", "/i", SHA)
    with pytest.raises(exception.ProgramNotFound):
        program_objects.get(db, "0b7f3e2c-6a3a-4f59-9f0c-1d2e3f405060")


def test_handle_target_names_host_driver_and_host_work(db):
    _programmable(db, [reports.CAP_HOST_WORK])
    with db.reader() as s:
        handle, identity = s.execute(
            select(m.AttachHandle.uuid, m.Device.identity).select_from(m.AttachHandle)
            .join(m.Deployable, m.Deployable.id == m.AttachHandle.deployable_id)
            .join(m.Device, m.Device.id == m.Deployable.device_id)).first()
    target = hostwork.handle_target(db, handle)
    assert target == hostwork.HandleTarget("host1", "fake", identity, host_work=True)
    with db.writer() as s:
        s.execute(update(m.DriverState).values(capabilities=None))
    assert not hostwork.handle_target(db, handle).host_work
    assert hostwork.handle_target(db, "0b7f3e2c-6a3a-4f59-9f0c-1d2e3f405060") is None
