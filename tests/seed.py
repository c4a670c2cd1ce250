"""Many accelerator requests or devices written straight into a database, for the tests
and the benchmarks of lists (``bench/list_memory.py``, ``bench/list_latency.py``): the
rows by SQLAlchemy Core executemany, a transaction per chunk (for ARQs, after one device
profile made through ``acceld.objects.device_profiles``)."""

from __future__ import annotations

import datetime
import uuid as uuidlib
from collections.abc import Callable

from sqlalchemy import insert, select

from acceld import states
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import device_profiles

_ARQ = m.ExtendedAcceleratorRequest.__table__
_DP = m.DeviceProfile.__table__
_DEVICE = m.Device.__table__


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)


def seed_arqs(db: Database, count: int, *, project_id: str = "seed-project",
              profile: str = "seed-profile", instance_uuid: str | None = None,
              state: str = states.ARQ_INITIAL, chunk: int = 20000,
              progress: Callable[[int], None] | None = None) -> list[str]:
    """``count`` ARQs of a new one-unit profile named ``profile`` in ``project_id`` (of
    ``instance_uuid``, in ``state``); returns their uuids in id order."""
    device_profiles.create(db, profile, [{"resources:FPGA": "1"}])
    with db.rows() as conn:
        dp_id = conn.execute(select(_DP.c.id).where(_DP.c.name == profile)).scalar_one()
    now = _now()
    made: list[str] = []
    while len(made) < count:
        rows = [{"uuid": str(uuidlib.uuid4()), "project_id": project_id, "state": state,
                 "substate": state, "device_profile_id": dp_id, "device_profile_group_id": 0,
                 "instance_uuid": instance_uuid, "created_at": now}
                for _ in range(min(chunk, count - len(made)))]
        with db.write_rows() as conn:
            conn.execute(insert(_ARQ), rows)
        made.extend(r["uuid"] for r in rows)
        if progress is not None:
            progress(len(made))
    return made


def seed_devices(db: Database, count: int, *, hosts: int = 16) -> list[str]:
    """``count`` reported, ready GPU devices spread over ``hosts`` hosts (no deployables);
    returns their uuids in id order."""
    now = _now()
    rows = [{"uuid": str(uuidlib.uuid4()), "name": f"seeded-{i}", "type": "GPU",
             "vendor": "10de", "model": "seeded", "hostname": f"host{i % hosts}",
             "state": states.READY, "status": states.DEVICE_STATUS_ENABLED,
             "health": states.HEALTH_OK, "acc_specs": "{}", "revision": 1, "created_at": now}
            for i in range(count)]
    with db.write_rows() as conn:
        conn.execute(insert(_DEVICE), rows)
    return [r["uuid"] for r in rows]
