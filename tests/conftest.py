"""Shared fixtures: real databases (SQLite always; PostgreSQL and MariaDB when present).

Under ``CI=true`` a missing PostgreSQL, MariaDB or RabbitMQ fails the test instead of
skipping it, so CI can never go green without having exercised them.
"""

from __future__ import annotations

import importlib
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from acceld.db import migration
from acceld.db.api import Database
from tests import databases
from tests.databases import MYSQL_HOST, PG_HOST

IN_CI = os.environ.get("CI", "").lower() == "true"

RABBIT_URL = os.environ.get("ACCELD_TEST_RABBIT_URL", "rabbit://guest:guest@127.0.0.1:5672/")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or, under CI=true, fail) when a real service is not reachable."""
    if _port_open(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if IN_CI:
        pytest.fail(f"{message}, and CI=true requires it (.ci/run starts it)")
    pytest.skip(f"{message}; start it to run this test (CI=true makes this a failure)")


def require_module(name: str) -> None:
    """Skip the calling test module (or, under CI=true, fail its collection) when ``name``,
    a test dependency the ``[test]`` extra installs, cannot be imported."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if IN_CI:
            raise RuntimeError(f"{name} cannot be imported ({exc}), and CI=true requires it "
                               "(pip install -e '.[test]')") from exc
        pytest.skip(f"{name} cannot be imported: {exc} (CI=true makes this a failure)",
                    allow_module_level=True)


@pytest.fixture
def make_db_url(tmp_path) -> Iterator[callable]:
    """Returns ``make(backend) -> url`` for an empty, throwaway database."""
    drops = []

    def make(backend: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / f'acceld-{uuid.uuid4().hex[:6]}.sqlite'}"
        if backend == "postgresql":
            require_service("PostgreSQL", PG_HOST, 5432)
            url, drop = databases.create_postgresql()
        elif backend == "mysql":
            require_service("MariaDB", MYSQL_HOST, 3306)
            url, drop = databases.create_mysql()
        else:
            raise ValueError(backend)
        drops.append(drop)
        return url

    yield make
    for drop in drops:
        drop()


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def db(backend, make_db_url) -> Iterator[Database]:
    """A migrated database on each backend (the test runs once per backend)."""
    database = Database(make_db_url(backend))
    migration.upgrade(database)
    yield database
    database.dispose()


@pytest.fixture
def sqlite_db(make_db_url) -> Iterator[Database]:
    database = Database(make_db_url("sqlite"))
    migration.upgrade(database)
    yield database
    database.dispose()


@pytest.fixture
def rabbit_url() -> str:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    return RABBIT_URL


@pytest.fixture
def redis_url() -> str:
    """The coordination backend of conductors that share hosts: the local Redis, in a
    namespace of this test's own (tooz keeps every key under it)."""
    require_service("Redis", "127.0.0.1", 6379)
    return f"redis://127.0.0.1:6379?namespace=acceld-test-{uuid.uuid4().hex[:12]}"



_GABBI_MODULE = "tests/functional/test_gabbi.py"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection_modifyitems(items):
    """Keep gabbi's pytest plugin off the tests that are not gabbi tests.

    The plugin (loaded by tests/functional/test_gabbi.py) takes any collected test whose
    parameter id contains ":" for one of its own and fails the whole collection with a
    KeyError, e.g. on a parametrized JSON string. While the collection is sorted, such a
    test's name shows "." instead of ":"; its node id (what reports and -k use) is kept.
    """
    renamed = [(item, item.name) for item in items
               if ":" in item.name and not item.nodeid.startswith(_GABBI_MODULE)]
    for item, name in renamed:
        item.name = name.replace(":", ".")
    try:
        yield
    finally:
        for item, name in renamed:
            item.name = name


@pytest.fixture(scope="session")
def ks() -> Any:
    """The test process's real Keystone (``tests.keystone_server``; skipped without
    keystone installed, a failure under CI=true)."""
    from tests import keystone_server
    return keystone_server.session_keystone()


@pytest.fixture
def receiver() -> Iterator[Any]:
    """Nova's external-events API on loopback (``tests.nova_events.Receiver``)."""
    from tests.nova_events import Receiver
    r = Receiver()
    yield r
    r.close()
