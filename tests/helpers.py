"""Test helpers shared by the suites (no fixtures here; plain functions)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import tempfile
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy
from oslo_config import cfg

from acceld import conf as config
from acceld.db import models as m
from acceld.db.api import Database


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM a server the test started, SIGKILL it when it has not gone in 20 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def make_conf(**groups: dict[str, Any]) -> cfg.ConfigOpts:
    """A parsed ConfigOpts with overrides: make_conf(DEFAULT={...}, agent={...})."""
    overrides: dict[str, dict[str, Any]] = {"DEFAULT": {"state_path": tempfile.mkdtemp(
        prefix="acceld-test-")}}
    for group, values in groups.items():
        overrides.setdefault(group, {}).update(values)
    return config.load([], config_files=[], overrides=overrides)



@contextlib.contextmanager
def outside_connection(db: Database) -> Iterator[sqlalchemy.Connection]:
    """A connection of its own to ``db``'s database, outside every pool of ``db``: what
    another session sees, or a session to act on ``db``'s from the server's side."""
    engine = sqlalchemy.create_engine(db.url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def server_id(conn: sqlalchemy.Connection) -> int:
    """The server's id of ``conn``'s session (MySQL or PostgreSQL), to act on it from
    an :func:`outside_connection`."""
    if conn.dialect.name == "mysql":
        return int(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar())
    return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar())


def make_qat_inventory(db: Database, handles: int, units: int = 1) -> tuple[str, str]:
    """Rows for one QAT-like device on host1 whose deployable has ``handles`` free PCI
    attach handles, and a device profile asking ``units`` of it. Returns (rp_uuid,
    profile name). The device is ready (an operator readied it), so binds may take it.
    For tests of binding that do not need an agent."""
    rp_uuid = str(uuidlib.uuid4())
    name = f"qat-{rp_uuid[:8]}"
    with db.writer() as s:
        dev = m.Device(uuid=str(uuidlib.uuid4()), name=f"dev-{rp_uuid[:8]}", hostname="host1",
                       driver_name="fake", identity=rp_uuid, type="QAT", state="ready")
        s.add(dev)
        s.flush()
        cpid = m.ControlpathID(uuid=str(uuidlib.uuid4()), device_id=dev.id, cpid_type="PCI",
                               cpid_info="{}")
        dep = m.Deployable(uuid=str(uuidlib.uuid4()), name=f"dep-{rp_uuid[:8]}",
                           num_accelerators=handles, device_id=dev.id, rp_uuid=rp_uuid)
        s.add_all([cpid, dep])
        s.flush()
        s.add_all(m.AttachHandle(uuid=str(uuidlib.uuid4()), deployable_id=dep.id,
                                 cpid_id=cpid.id, attach_type="PCI", in_use=False,
                                 attach_info=json.dumps({"bus": "3d", "device": "00",
                                                         "domain": "0000", "function": str(i)},
                                                        sort_keys=True))
                  for i in range(handles))
        s.add(m.DeviceProfile(uuid=str(uuidlib.uuid4()), name=name, profile_json=json.dumps(
            {"groups": [{"resources:CUSTOM_QAT": str(units)}]})))
    return rp_uuid, name


def bind_patch(arq: str, host: str, rp_uuid: str, instance: str) -> dict[str, Any]:
    """The body of Nova's bind of ``arq`` (``PATCH /v2/accelerator_requests``)."""
    return {arq: [{"op": "add", "path": "/hostname", "value": host},
                  {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                  {"op": "add", "path": "/instance_uuid", "value": instance}]}
