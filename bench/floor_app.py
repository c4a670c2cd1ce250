"""The floor under the device profile scenario of ``vs_cyborg.py --floor``.

A WSGI app that does only what a device profile POST and DELETE cannot go without: parse
the JSON body, INSERT the row and answer it as JSON (201); DELETE the row by uuid (204, or
404 when none). Each statement commits by itself on one DBAPI connection per process,
with the same durability as acceld's (the server's defaults on MariaDB and PostgreSQL;
WAL with ``synchronous = NORMAL`` on SQLite). No framework, no authentication, policy,
validation, request ids or error bodies: no real API can be faster on the same server,
database and client, so acceld's throughput divided by this app's says how much of the
remaining time is acceld's own.

The database (acceld's bench database: the same table and indexes) comes from
``FLOOR_DB_URL``: ``mysql+pymysql://...``, ``postgresql+psycopg2://...`` or
``sqlite:////path``.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from typing import Any
from urllib.parse import unquote, urlsplit

_INSERT = ("INSERT INTO device_profiles (uuid, name, description, profile_json, created_at, "
           "updated_at) VALUES ({p}, {p}, {p}, {p}, {p}, NULL)")
_DELETE = "DELETE FROM device_profiles WHERE uuid = {p}"
_conn: Any = None
_mark = "%s"


def _connect() -> Any:
    global _mark
    url = urlsplit(os.environ["FLOOR_DB_URL"])
    scheme = url.scheme.split("+")[0]
    if scheme == "sqlite":
        import sqlite3
        conn = sqlite3.connect(unquote(url.path[1:]), isolation_level=None,
                               check_same_thread=False)
        for pragma in ("busy_timeout = 30000", "journal_mode = WAL", "synchronous = NORMAL"):
            conn.execute(f"PRAGMA {pragma}")
        _mark = "?"
        return conn
    if scheme == "mysql":
        import pymysql
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


def _execute(sql: str, params: tuple[Any, ...]) -> int:
    global _conn
    if _conn is None:
        _conn = _connect()
    cursor = _conn.cursor()
    try:
        cursor.execute(sql.format(p=_mark), params)
        return cursor.rowcount
    finally:
        cursor.close()


def application(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    if method == "POST" and path.rstrip("/") == "/v2/device_profiles":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        profile = json.loads(environ["wsgi.input"].read(length))[0]
        row_uuid = str(uuid.uuid4())
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)
        _execute(_INSERT, (row_uuid, profile["name"], profile.get("description"),
                           json.dumps({"groups": profile["groups"]}), now))
        body = json.dumps({
            "uuid": row_uuid, "name": profile["name"],
            "description": profile.get("description"), "groups": profile["groups"],
            "created_at": now.isoformat() + "+00:00", "updated_at": None,
            "links": [{"href": f"/v2/device_profiles/{row_uuid}", "rel": "self"}],
        }).encode()
        start_response("201 Created", [("Content-Type", "application/json"),
                                       ("Content-Length", str(len(body)))])
        return [body]
    if method == "DELETE" and path.startswith("/v2/device_profiles/"):
        found = _execute(_DELETE, (path.rsplit("/", 1)[1],))
        start_response("204 No Content" if found else "404 Not Found", [])
        return [b""]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"the floor app serves device profile POST and DELETE only\n"]
