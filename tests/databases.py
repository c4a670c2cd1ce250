"""Throwaway databases on the local PostgreSQL and MariaDB servers (the tests' fixtures
and the benchmarks): each ``create_*`` makes a new empty database and returns its URL
and the function that drops it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

PG_HOST = os.environ.get("ACCELD_TEST_PG_HOST", "127.0.0.1")
PG_USER = os.environ.get("ACCELD_TEST_PG_USER", "postgres")
MYSQL_HOST = os.environ.get("ACCELD_TEST_MYSQL_HOST", "127.0.0.1")
MYSQL_USER = os.environ.get("ACCELD_TEST_MYSQL_USER", "root")


def create_postgresql() -> tuple[str, Callable[[], None]]:
    import psycopg2
    name = f"acceld_test_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(host=PG_HOST, user=PG_USER, dbname="postgres")
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        cur = admin.cursor()
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.close()
    return f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:5432/{name}", drop


def create_mysql() -> tuple[str, Callable[[], None]]:
    import pymysql
    name = f"acceld_test_{uuid.uuid4().hex[:10]}"
    admin = pymysql.connect(host=MYSQL_HOST, user=MYSQL_USER, password="", autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")

    def drop() -> None:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()
    return f"mysql+pymysql://{MYSQL_USER}@{MYSQL_HOST}:3306/{name}?charset=utf8mb4", drop
