"""A database that is down when acceld.db.api's engines are first used
(``Database.autocommit``, which the one-statement reads and writes use): the request
fails at once with DBConnectionError, with no connect-and-retry loop first (oslo.db's own
engine factory waits 10 tries, 10 s apart), and the API answers 503. No server is needed:
nothing listens on the port. (oslo.db's filters translate PyMySQL's refusal; libpq's
newer wording they pass on as SQLAlchemy's OperationalError.)
"""

from __future__ import annotations

import json
import socket

import pytest
import sqlalchemy
import webob
from oslo_db import exception as db_exc

from acceld.api import deploy
from acceld.db.api import Database
from acceld.objects import device_profiles
from acceld.rpc import ConductorClient, LocalTransport
from tests import helpers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# the bound is for a hang (oslo.db's retries would take 100 s), not a measurement
@pytest.mark.timeout(30)
@pytest.mark.parametrize("url", ["mysql+pymysql://root@127.0.0.1:{port}/acceld",
                                 "postgresql+psycopg2://postgres@127.0.0.1:{port}/acceld"])
def test_a_first_use_of_the_autocommit_pool_fails_at_once_when_the_database_is_down(
        url: str) -> None:
    db = Database(url.format(port=_free_port()))
    # oslo.db translates PyMySQL's refusal; libpq's newer wording ("connection to server
    # at ... failed") it passes on as SQLAlchemy's OperationalError, on either pool
    refused = (db_exc.DBConnectionError, sqlalchemy.exc.OperationalError)
    try:
        with pytest.raises(refused), db.autocommit(write=False) as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        db.dispose()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("url", ["mysql+pymysql://root@127.0.0.1:{port}/acceld",
                                 "postgresql+psycopg2://postgres@127.0.0.1:{port}/acceld"])
def test_a_one_statement_write_fails_at_once_as_a_connection_error(url: str) -> None:
    db = Database(url.format(port=_free_port()))
    try:
        with pytest.raises(db_exc.DBConnectionError):
            device_profiles.delete_by_uuid(db, "00000000-0000-0000-0000-000000000000")
    finally:
        db.dispose()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("url", ["mysql+pymysql://root@127.0.0.1:{port}/acceld",
                                 "postgresql+psycopg2://postgres@127.0.0.1:{port}/acceld"])
def test_the_api_answers_503_with_retry_after_when_the_database_is_down(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    db = Database(url.format(port=_free_port()))
    conf = helpers.make_conf(api={"auth_strategy": "noauth"})
    app = deploy.make_app(conf, db, ConductorClient(LocalTransport()))
    try:
        req = webob.Request.blank("/v2/device_profiles", method="POST",
                                  headers={"X-Auth-Token": "admin"})
        req.body = json.dumps([{"name": "secret-name",
                                "groups": [{"resources:FPGA": "1"}]}]).encode()
        req.content_type = "application/json"
        resp = req.get_response(app)
    finally:
        db.dispose()
    assert resp.status_int == 503, resp.text
    assert resp.headers["Retry-After"] == "1"
    assert resp.json["errors"][0]["code"] == "acceld.database_unavailable"
    assert "secret-name" not in caplog.text          # no statement parameters in the log
