"""Schema migrations on every backend: upgrade from empty, idempotence, models == schema.

The alembic scripts are the schema of record in production, the models are what the code
uses; ``compare_metadata`` (the engine of ``alembic revision --autogenerate``) proves they
agree on SQLite, PostgreSQL and MariaDB, column types and nullability included.
"""

from __future__ import annotations

import os
import re

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from oslo_db import exception as db_exc
from sqlalchemy import event, inspect, text

from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import placement as placement_objects

SCRIPTS = ScriptDirectory(os.path.join(os.path.dirname(migration.__file__), "migrations"))
_DDL = re.compile(r"^\s*(CREATE|ALTER|DROP|RENAME)\b", re.IGNORECASE)


@pytest.fixture
def empty_db(backend, make_db_url):
    database = Database(make_db_url(backend))
    yield database
    database.dispose()


def head() -> str:
    heads = SCRIPTS.get_heads()
    assert len(heads) == 1, f"the migration history must be linear, has heads {heads}"
    return heads[0]


def schema_snapshot(db: Database) -> dict:
    insp = inspect(db.engine)
    snap = {}
    for table in sorted(insp.get_table_names()):
        snap[table] = (
            [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(table)],
            sorted((i["name"], tuple(i["column_names"])) for i in insp.get_indexes(table)),
            sorted(str(u["column_names"]) for u in insp.get_unique_constraints(table)),
            sorted((str(f["constrained_columns"]), f["referred_table"])
                   for f in insp.get_foreign_keys(table)),
        )
    return snap


def test_history_starts_from_nothing():
    revs = list(SCRIPTS.walk_revisions())
    assert revs[-1].down_revision is None
    assert revs[0].revision == head()


def test_upgrade_from_empty_reaches_head(empty_db):
    assert migration.version(empty_db) is None
    assert inspect(empty_db.engine).get_table_names() == []
    migration.upgrade(empty_db)
    assert migration.version(empty_db) == head()
    tables = set(inspect(empty_db.engine).get_table_names())
    assert tables == set(m.Base.metadata.tables) | {"alembic_version"}
    with empty_db.reader() as s:
        assert s.execute(text("SELECT version_num FROM alembic_version")).scalars().all() \
            == [head()]


def test_upgrade_twice_is_a_no_op(db):
    with db.writer() as s:
        s.execute(text("INSERT INTO device_profiles (uuid, name, profile_json, created_at) "
                       "VALUES ('11111111-1111-1111-1111-111111111111', 'p', '{}', "
                       "CURRENT_TIMESTAMP)"))
    before = schema_snapshot(db)
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        migration.upgrade(db)
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert [s for s in statements if _DDL.match(s)] == []
    assert not any(re.match(r"\s*(INSERT|UPDATE|DELETE)", s, re.IGNORECASE)
                   for s in statements)
    assert migration.version(db) == head()
    assert schema_snapshot(db) == before
    with db.reader() as s:
        assert s.execute(text("SELECT name FROM device_profiles")).scalars().all() == ["p"]


def _differences(db: Database) -> list:
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                     "compare_server_default": True})
        return compare_metadata(ctx, m.Base.metadata)


def test_schema_matches_models(db):
    diffs = _differences(db)
    # No difference is ignored: the models declare everything the migrations create
    # (named unique constraints, named indexes, RESTRICT foreign keys), and
    # alembic itself discards what a backend adds on its own (MariaDB's implicit indexes
    # for foreign keys, its reflection of unique constraints as unique indexes,
    # Boolean as TINYINT(1), SQLite's unnamed reflected objects).
    assert diffs == [], "\n".join(str(d) for d in diffs)


def test_every_foreign_key_is_indexed(db):
    """A referencing column leads an index (or a unique key, or is the key): a read of
    a row's children and the check of a delete of their parent never scan a table whose
    size grows with the fleet (PostgreSQL and SQLite make no such index themselves)."""
    insp = inspect(db.engine)
    unindexed = []
    for table in insp.get_table_names():
        leads = {tuple(insp.get_pk_constraint(table)["constrained_columns"])}
        leads |= {tuple(i["column_names"]) for i in insp.get_indexes(table)}
        leads |= {tuple(u["column_names"]) for u in insp.get_unique_constraints(table)}
        for fk in insp.get_foreign_keys(table):
            columns = tuple(fk["constrained_columns"])
            if not any(lead[:len(columns)] == columns for lead in leads):
                unindexed.append(f"{table}{columns}")
    assert unindexed == []
    assert len(insp.get_foreign_keys("attach_handles")) == 2   # the check saw the keys


def test_compare_detects_a_drift(db):
    """The comparison is not vacuous: a column the migrations do not have is reported."""
    with db.writer() as s:
        s.execute(text("ALTER TABLE driver_states ADD COLUMN extra_col INTEGER"))
    diffs = _differences(db)
    assert [(d[0], d[2], d[3].name) for d in diffs if isinstance(d, tuple)] == [
        ("remove_column", "driver_states", "extra_col")]


def test_capabilities_become_varchar_and_keep_their_rows(empty_db):
    # 0006 turns driver_states.capabilities from TEXT into VARCHAR(255); a host's driver
    # rows written before it (SQLite rebuilds the table in batch mode) come through as
    # they were, and the unique (host, name) constraint with them.
    migration.upgrade(empty_db, "0005")
    with empty_db.writer() as s:
        s.execute(text(
            "INSERT INTO driver_states (host, name, version, state, device_count, "
            "capabilities, created_at) VALUES ('h1', 'fake', '1.0', 'installed', 2, "
            "'[\"host_work\",\"program\"]', CURRENT_TIMESTAMP)"))
    migration.upgrade(empty_db)
    column = next(c for c in inspect(empty_db.engine).get_columns("driver_states")
                  if c["name"] == "capabilities")
    assert getattr(column["type"], "length", None) == m.CAPABILITIES_LENGTH
    with empty_db.reader() as s:
        assert s.execute(text("SELECT host, name, device_count, capabilities "
                              "FROM driver_states")).all() \
            == [("h1", "fake", 2, '["host_work","program"]')]
    with pytest.raises(db_exc.DBDuplicateEntry), empty_db.writer() as s:
        s.execute(text(
            "INSERT INTO driver_states (host, name, version, state, device_count, "
            "created_at) VALUES ('h1', 'fake', '1.0', 'installed', 0, CURRENT_TIMESTAMP)"))


def test_instance_attachments_start_attached(empty_db):
    # 0013 adds devices.hot_plug: an instance attachment made before it is Attached (so
    # the reconcile keeps it as it did), a host attachment or none has no substate.
    migration.upgrade(empty_db, "0012")
    with empty_db.writer() as s:
        for name, attach_type, target in (("vm", "instance", "i-1"), ("host", "host", "h1"),
                                          ("free", None, None)):
            s.execute(text(
                "INSERT INTO devices (uuid, name, status, state, health, acc_specs, revision,"
                " attach_type, attached_to, lifecycle, maintenance, created_at) VALUES "
                "(:name, :name, 'enabled', 'ready', 'ok', '{}', 1, :type, :target, "
                "'healthy', :no, CURRENT_TIMESTAMP)"),
                {"name": name, "type": attach_type, "target": target, "no": False})
    migration.upgrade(empty_db)
    with empty_db.reader() as s:
        assert s.execute(text("SELECT name, hot_plug FROM devices ORDER BY name")).all() \
            == [("free", None), ("host", None), ("vm", "Attached")]


def test_a_host_synced_before_generations_were_recorded_is_read_whole_once(empty_db):
    # 0014 adds placement_sync.provider_generations: a row written before it keeps its
    # digests and has no generations, so the host's next full sync reads every provider.
    migration.upgrade(empty_db, "0013")
    with empty_db.writer() as s:
        s.execute(text(
            "INSERT INTO placement_sync (host, compute_rp_uuid, provider_digests, in_sync, "
            "conflicts, created_at) VALUES ('h1', 'cn-1', '{\"rp-1\": \"d1\"}', :yes, "
            "'[]', CURRENT_TIMESTAMP)"), {"yes": True})
    migration.upgrade(empty_db)
    state = placement_objects.host_inputs(empty_db, "h1").state
    assert (state.in_sync, state.provider_digests, state.provider_generations) == (
        True, {"rp-1": "d1"}, {})


def test_tables_become_utf8mb4_with_a_binary_collation_and_keep_their_rows(empty_db,
                                                                           backend):
    # 0009 converts the tables of a MariaDB/MySQL database made in 3-byte utf8 with a
    # case-insensitive collation (where an emoji failed the statement, and names that
    # differ in case collided); elsewhere it has nothing to do.
    mysql = backend == "mysql"
    if mysql:
        with empty_db.engine.begin() as conn:
            conn.exec_driver_sql("ALTER DATABASE CHARACTER SET utf8mb3 "
                                 "COLLATE utf8mb3_general_ci")
    migration.upgrade(empty_db, "0008")
    insert = text("INSERT INTO device_profiles (uuid, name, profile_json, description, "
                  "created_at) VALUES (:uuid, :name, '{}', :description, "
                  "CURRENT_TIMESTAMP)")
    with empty_db.writer() as s:
        s.execute(insert, {"uuid": "11111111-1111-1111-1111-111111111111", "name": "Cafe",
                           "description": "\u00e9t\u00e9"})
    if mysql:       # what failed before
        with pytest.raises(db_exc.DBError), empty_db.writer() as s:
            s.execute(insert, {"uuid": "22222222-2222-2222-2222-222222222222",
                               "name": "p2", "description": "\U0001F680"})
    migration.upgrade(empty_db)
    with empty_db.writer() as s:
        s.execute(insert, {"uuid": "22222222-2222-2222-2222-222222222222", "name": "cafe",
                           "description": "\U0001F680"})
    with empty_db.reader() as s:
        assert s.execute(text("SELECT name, description FROM device_profiles ORDER BY id")
                         ).all() == [("Cafe", "\u00e9t\u00e9"), ("cafe", "\U0001F680")]
    if mysql:
        with empty_db.reader() as s:
            tables = dict(s.execute(text(
                "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME != 'alembic_version'")).all())
            columns = set(s.execute(text(
                "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME != 'alembic_version' "
                "AND CHARACTER_SET_NAME IS NOT NULL")).all())
        assert set(tables) == set(m.Base.metadata.tables)
        assert set(tables.values()) == {m.MYSQL_COLLATION}
        assert columns == {(m.MYSQL_CHARSET, m.MYSQL_COLLATION)}
