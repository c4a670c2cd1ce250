"""``Database.autocommit``: one statement is its own transaction, on MySQL and
PostgreSQL, with no COMMIT or ROLLBACK round trip (the ARQ and device profile reads,
device profile create and delete, the one-ARQ create and the delete of an ARQ that holds
nothing); a statement on a generation's tables is refused there, as its bump needs a
transaction's commit.
"""

from __future__ import annotations

import uuid as uuidlib

import pytest
from oslo_db import exception as db_exc
from sqlalchemy import text

from acceld import exception
from acceld.conductor.binding import Binder
from acceld.db.api import Database
from acceld.objects import arqs, device_profiles
from tests import helpers
from tests.conftest import BACKENDS
from tests.functional.test_statement_count import StatementCounter

pytestmark = pytest.mark.parametrize("backend",
                                     [b for b in BACKENDS if b.values[0] != "sqlite"])


_SESSION = ("SELECT CONNECTION_ID()",
            "SHOW SESSION STATUS WHERE Variable_name IN ('Com_commit', 'Com_rollback')")


def _mysql_session(db: Database) -> tuple[int, int, int]:
    """(connection id, COMMITs, ROLLBACKs) of the session autocommit() hands out."""
    with db.autocommit(write=False) as conn:
        cid = int(conn.exec_driver_sql(_SESSION[0]).scalar())
        status = dict(conn.exec_driver_sql(_SESSION[1]).all())
    return cid, int(status["Com_commit"]), int(status["Com_rollback"])


def _profile_count(db: Database, name: str) -> int:
    """Counted on a connection of its own: what every other session sees."""
    with helpers.outside_connection(db) as conn:
        return int(conn.execute(text("SELECT count(*) FROM device_profiles WHERE name = :n"),
                                {"n": name}).scalar())


def test_one_statement_is_its_own_transaction(db: Database) -> None:
    mysql = db.dialect == "mysql"
    before = _mysql_session(db) if mysql else None
    made = device_profiles.create(db, "solo", [{"resources:FPGA": "1"}])
    assert _profile_count(db, "solo") == 1            # committed, seen by every session
    arq = arqs.create(db, "solo", None)[0]            # reads the profile: a transaction
    arq = arqs.create(db, "solo", None)[0]            # the profile known: one statement
    assert arqs.get(db, arq["uuid"], project_id=None)["uuid"] == arq["uuid"]
    assert len(list(arqs.list_arqs(db, project_id=None))) == 2
    arqs.delete_by_uuids(db, [a["uuid"] for a in arqs.list_arqs(db, project_id=None)],
                         project_id=None, service=True)
    device_profiles.delete_by_uuid(db, made["uuid"])
    assert _profile_count(db, "solo") == 0
    with db.autocommit(write=False) as conn:
        assert db.engine.dialect.detect_autocommit_setting(conn.connection.dbapi_connection)
    if before is not None:
        after = _mysql_session(db)
        assert after[0] == before[0]                  # the same session throughout
        # it sent no COMMIT or ROLLBACK (the first create and the delete are
        # transactions on the other pool's sessions)
        assert after[1:] == before[1:]


def test_a_statement_on_a_generations_table_is_refused(db: Database) -> None:
    # (oslo.db's exception filters hand the listener's refusal on as a DBError)
    with pytest.raises(db_exc.DBError, match="needs a transaction"), \
            db.autocommit(write=True) as conn:
        conn.execute(text("UPDATE devices SET vendor = vendor"))


def test_deleting_an_arq_that_holds_nothing_is_one_statement(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    free, bound = (arqs.create(db, profile, "p")[0]["uuid"] for _ in range(2))
    Binder(db).bind({bound: {"hostname": "host1", "device_rp_uuid": rp_uuid,
                             "instance_uuid": str(uuidlib.uuid4()), "project_id": "p"}}, "p")
    with StatementCounter(db) as counter:
        assert arqs.delete_by_uuids(db, [free], project_id="p", service=False) == []
    assert [s.split()[0].upper() for s in counter.statements] == ["DELETE"]
    # one tied to an instance: the DELETE matches nothing, and the locked path refuses it
    # without a service token, changing nothing
    with pytest.raises(exception.Forbidden):
        arqs.delete_by_uuids(db, [bound], project_id="p", service=False)
    assert arqs.get(db, bound, project_id="p")["state"] == "Bound"
    freed = arqs.delete_by_uuids(db, [bound], project_id="p", service=True)
    assert len(freed) == 1                            # its handle freed for the host
    with pytest.raises(exception.ARQNotFound):
        arqs.delete_by_uuids(db, [free], project_id="p", service=True)
