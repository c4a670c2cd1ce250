"""Many accelerator requests written straight into a database, for the tests and the
benchmark of long lists (``bench/list_memory.py``): one device profile through
``acceld.objects.device_profiles``, then the ARQ rows by SQLAlchemy Core executemany, a
transaction per chunk."""

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


def seed_arqs(db: Database, count: int, *, project_id: str = "seed-project",
              profile: str = "seed-profile", instance_uuid: str | None = None,
              state: str = states.ARQ_INITIAL, chunk: int = 20000,
              progress: Callable[[int], None] | None = None) -> list[str]:
    """``count`` ARQs of a new one-unit profile named ``profile`` in ``project_id`` (of
    ``instance_uuid``, in ``state``); returns their uuids in id order."""
    device_profiles.create(db, profile, [{"resources:FPGA": "1"}])
    with db.rows() as conn:
        dp_id = conn.execute(select(_DP.c.id).where(_DP.c.name == profile)).scalar_one()
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)
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
