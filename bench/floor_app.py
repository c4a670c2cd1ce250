"""The floor under the write scenarios of ``vs_cyborg.py --floor``.

A WSGI app that does only what each write cannot go without, on acceld's bench database
(the same tables and indexes), one DBAPI connection per process:

- device profile POST: parse the body, INSERT the row, answer it (201); DELETE by uuid
  (204, or 404 when none).
- ARQ POST ``{"device_profile_name": ...}``: one ARQ row per requested unit, answered as
  ``{"arqs": [...]}`` (201). A profile this process has read before, asking for one unit,
  costs one ``INSERT ... SELECT`` that matches it by id and uuid (as acceld does: a
  profile deleted since inserts nothing and is read again); otherwise the profile is read
  by name and its rows are one multi-row INSERT.
- ARQ PATCH with the bind triple: the free handles behind the resource provider are read,
  then one is claimed with a compare-and-swap (still free) together with the ARQ (still
  Initial or Unbound) -> Bound: one two-table UPDATE on MySQL and MariaDB, a transaction
  of the two UPDATEs elsewhere (both or neither). PATCH with the removes (unbind): the
  handle the ARQ holds is read, then the ARQ (still holding it) is reset to Unbound and the
  handle freed, both or neither in the same way. 202, or 409 when no claim succeeded.
- ARQ GET by uuid (the life cycle reads the state after the bind): one SELECT.
- ARQ DELETE ``?arqs=uuid[,uuid...]``: one DELETE of those that hold no handle (204, or
  404 when some are missing or still bound).

Each statement outside those transactions commits by itself, with the same durability as
acceld's (the server's defaults on MariaDB and PostgreSQL; WAL with ``synchronous =
NORMAL`` on SQLite, where a transaction is ``BEGIN IMMEDIATE``). No framework, no
authentication, policy, validation, request ids or error bodies: no real API can be faster
on the same server, database and client, so acceld's throughput divided by this app's
says how much of the remaining time is acceld's own.

The database comes from ``FLOOR_DB_URL``: ``mysql+pymysql://...``,
``postgresql+psycopg2://...`` or ``sqlite:////path``.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_DP_INSERT = ("INSERT INTO device_profiles (uuid, name, description, profile_json, created_at, "
              "updated_at) VALUES ({p}, {p}, {p}, {p}, {p}, NULL)")
_DP_DELETE = "DELETE FROM device_profiles WHERE uuid = {p}"
_PROFILE = "SELECT id, uuid, profile_json FROM device_profiles WHERE name = {p}"
_ARQ_COLUMNS = ("INSERT INTO extended_accelerator_requests (uuid, state, substate, "
                "device_profile_id, device_profile_group_id, created_at) ")
_ARQ_ROW = "({p}, 'Initial', 'Initial', {p}, {p}, {p})"
_ARQ_KNOWN = (_ARQ_COLUMNS + "SELECT {p}, 'Initial', 'Initial', id, {p}, {p} "
              "FROM device_profiles WHERE id = {p} AND uuid = {p}")
_FREE = ("SELECT h.id, h.deployable_id FROM attach_handles h JOIN deployables d "
         "ON d.id = h.deployable_id WHERE d.rp_uuid = {p} AND h.in_use = false "
         "ORDER BY h.id LIMIT 4")
_TAKE = ("UPDATE attach_handles SET in_use = true, updated_at = {p} "
         "WHERE id = {p} AND in_use = false")
_BIND = ("UPDATE extended_accelerator_requests SET state = 'Bound', hostname = {p}, "
         "device_rp_uuid = {p}, instance_uuid = {p}, attach_handle_id = {p}, "
         "deployable_id = {p}, updated_at = {p} WHERE uuid = {p} "
         "AND state IN ('Initial', 'Unbound')")
_TAKE_AND_BIND = (   # MySQL and MariaDB: both rows in one statement
    "UPDATE attach_handles h, extended_accelerator_requests a SET h.in_use = true, "
    "h.updated_at = {p}, a.state = 'Bound', a.hostname = {p}, a.device_rp_uuid = {p}, "
    "a.instance_uuid = {p}, a.attach_handle_id = h.id, a.deployable_id = h.deployable_id, "
    "a.updated_at = {p} WHERE h.id = {p} AND h.in_use = false AND a.uuid = {p} "
    "AND a.state IN ('Initial', 'Unbound')")
_HELD = "SELECT attach_handle_id FROM extended_accelerator_requests WHERE uuid = {p}"
_RESET = ("UPDATE extended_accelerator_requests SET state = 'Unbound', hostname = NULL, "
          "device_rp_uuid = NULL, instance_uuid = NULL, attach_handle_id = NULL, "
          "deployable_id = NULL, updated_at = {p} WHERE uuid = {p} AND attach_handle_id ")
_RELEASE = "UPDATE attach_handles SET in_use = false, updated_at = {p} WHERE id = {p}"
_RESET_AND_RELEASE = (   # MySQL and MariaDB
    "UPDATE extended_accelerator_requests a, attach_handles h SET a.state = 'Unbound', "
    "a.hostname = NULL, a.device_rp_uuid = NULL, a.instance_uuid = NULL, "
    "a.attach_handle_id = NULL, a.deployable_id = NULL, a.updated_at = {p}, "
    "h.in_use = false, h.updated_at = {p} "
    "WHERE a.uuid = {p} AND a.attach_handle_id = h.id AND h.id = {p}")
_GET = ("SELECT a.uuid, a.state, d.name, a.device_profile_group_id, a.hostname, "
        "a.device_rp_uuid, a.instance_uuid, a.project_id, h.attach_type, h.uuid, "
        "h.attach_info, a.created_at, a.updated_at FROM extended_accelerator_requests a "
        "LEFT JOIN device_profiles d ON d.id = a.device_profile_id "
        "LEFT JOIN attach_handles h ON h.id = a.attach_handle_id WHERE a.uuid = {p}")
_ARQ_FIELDS = ("uuid", "state", "device_profile_name", "device_profile_group_id", "hostname",
               "device_rp_uuid", "instance_uuid", "project_id", "attach_handle_type",
               "attach_handle_uuid", "attach_handle_info", "created_at", "updated_at")
_DELETE = ("DELETE FROM extended_accelerator_requests WHERE uuid IN ({marks}) "
           "AND attach_handle_id IS NULL")
_conn: Any = None
_mark = "%s"
_begin = "BEGIN"
_mysql = False
_profiles: dict[str, tuple[int, str, list[int]]] = {}   # name -> (id, uuid, unit groups)


def _connect() -> Any:
    global _mark, _begin, _mysql
    url = urlsplit(os.environ["FLOOR_DB_URL"])
    scheme = url.scheme.split("+")[0]
    if scheme == "sqlite":
        import sqlite3
        conn = sqlite3.connect(unquote(url.path[1:]), isolation_level=None,
                               check_same_thread=False)
        for pragma in ("busy_timeout = 30000", "journal_mode = WAL", "synchronous = NORMAL"):
            conn.execute(f"PRAGMA {pragma}")
        _mark, _begin = "?", "BEGIN IMMEDIATE"
        return conn
    if scheme == "mysql":
        import pymysql
        _mysql = True
        return pymysql.connect(host=url.hostname, port=url.port or 3306,
                               user=unquote(url.username or "root"),
                               password=unquote(url.password or ""),
                               database=url.path.lstrip("/"), charset="utf8mb4",
                               autocommit=True)
    import psycopg2
    conn = psycopg2.connect(host=url.hostname, port=url.port or 5432,
                            user=unquote(url.username or "postgres"),
                            dbname=url.path.lstrip("/"))
    conn.autocommit = True
    return conn


def _execute(sql: str, params: tuple[Any, ...] = ()) -> tuple[int, list[Any]]:
    """(row count, rows) of one statement."""
    global _conn
    if _conn is None:
        _conn = _connect()
    cursor = _conn.cursor()
    try:
        cursor.execute(sql.format(p=_mark), params)
        return cursor.rowcount, cursor.fetchall() if cursor.description else []
    finally:
        cursor.close()


def _both(first: tuple[str, tuple[Any, ...]], then: tuple[str, tuple[Any, ...]]) -> bool:
    """Two UPDATEs in one transaction, committed when each changed one row."""
    _execute(_begin)
    try:
        done = _execute(*first)[0] == 1 and _execute(*then)[0] == 1
    except BaseException:
        _execute("ROLLBACK")
        raise
    _execute("COMMIT" if done else "ROLLBACK")
    return done


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)


def _create_arqs(name: str) -> list[dict[str, Any]]:
    now, known = _now(), _profiles.get(name)
    rows = [(str(uuid.uuid4()), known[2][0])] if known and len(known[2]) == 1 else []
    if not rows or _execute(_ARQ_KNOWN, (rows[0][0], rows[0][1], now, known[0],
                                         known[1]))[0] != 1:
        dp_id, dp_uuid, profile_json = _execute(_PROFILE, (name,))[1][0]
        groups = [g for g, group in enumerate(json.loads(profile_json)["groups"])
                  for _ in range(sum(int(v) for k, v in group.items()
                                     if k.startswith("resources:")))]
        _profiles[name] = (dp_id, dp_uuid, groups)
        rows = [(str(uuid.uuid4()), g) for g in groups]
        _execute(_ARQ_COLUMNS + "VALUES " + ", ".join([_ARQ_ROW] * len(rows)),
                 tuple(v for u, g in rows for v in (u, dp_id, g, now)))
    created = now.isoformat() + "+00:00"
    return [dict(zip(_ARQ_FIELDS, (u, "Initial", name, g, None, None, None, None, "", None,
                                   {}, created, None), strict=True)) for u, g in rows]


def _bind(arq: str, host: str, rp_uuid: str, instance: str) -> bool:
    now = _now()
    for _ in range(3):      # candidates read again when racing binds took all of them
        for handle, deployable in _execute(_FREE, (rp_uuid,))[1]:
            if _mysql:
                done = _execute(_TAKE_AND_BIND, (now, host, rp_uuid, instance, now, handle,
                                                 arq))[0] > 0
            else:
                done = _both((_TAKE, (now, handle)),
                             (_BIND, (host, rp_uuid, instance, handle, deployable, now, arq)))
            if done:
                return True
    return False


def _unbind(arq: str) -> bool:
    now, rows = _now(), _execute(_HELD, (arq,))[1]
    if not rows:
        return False
    handle = rows[0][0]
    if handle is None:
        return _execute(_RESET + "IS NULL", (now, arq))[0] == 1
    if _mysql:
        return _execute(_RESET_AND_RELEASE, (now, now, arq, handle))[0] > 0
    return _both((_RESET + "= {p}", (now, arq, handle)), (_RELEASE, (now, handle)))


def _answer(start_response: Any, status: str, body: Any = None) -> list[bytes]:
    data = b"" if body is None else json.dumps(body, default=str).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))] if data else [])
    return [data]


def application(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "").rstrip("/")
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = json.loads(environ["wsgi.input"].read(length)) if length else None
    if method == "POST" and path == "/v2/device_profiles":
        profile, row_uuid, now = body[0], str(uuid.uuid4()), _now()
        _execute(_DP_INSERT, (row_uuid, profile["name"], profile.get("description"),
                              json.dumps({"groups": profile["groups"]}), now))
        return _answer(start_response, "201 Created", {
            "uuid": row_uuid, "name": profile["name"],
            "description": profile.get("description"), "groups": profile["groups"],
            "created_at": now.isoformat() + "+00:00", "updated_at": None,
            "links": [{"href": f"/v2/device_profiles/{row_uuid}", "rel": "self"}]})
    if method == "DELETE" and path.startswith("/v2/device_profiles/"):
        found = _execute(_DP_DELETE, (path.rsplit("/", 1)[1],))[0]
        return _answer(start_response, "204 No Content" if found else "404 Not Found")
    if path == "/v2/accelerator_requests":
        if method == "POST":
            return _answer(start_response, "201 Created",
                           {"arqs": _create_arqs(body["device_profile_name"])})
        if method == "PATCH":
            for arq, ops in body.items():
                values = {op["path"].lstrip("/"): op.get("value") for op in ops}
                if not (_unbind(arq) if ops[0]["op"] == "remove" else
                        _bind(arq, values["hostname"], values["device_rp_uuid"],
                              values["instance_uuid"])):
                    return _answer(start_response, "409 Conflict")
            return _answer(start_response, "202 Accepted")
        if method == "DELETE":
            uuids = parse_qs(environ.get("QUERY_STRING", ""))["arqs"][0].split(",")
            sql = _DELETE.replace("{marks}", ", ".join(["{p}"] * len(uuids)))
            done = _execute(sql, tuple(uuids))[0] == len(uuids)
            return _answer(start_response, "204 No Content" if done else "404 Not Found")
    if method == "GET" and path.startswith("/v2/accelerator_requests/"):
        rows = _execute(_GET, (path.rsplit("/", 1)[1],))[1]
        if rows:
            return _answer(start_response, "200 OK", dict(zip(_ARQ_FIELDS, rows[0], strict=True)))
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"the floor app serves the benchmark's writes only\n"]
