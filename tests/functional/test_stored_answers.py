"""Whole answers of the cached inventory lists, kept by the router (listcache.Replies).

A repeated GET with the same inputs is answered without routing, the handler or its
query validation, but never without the checks a handler makes first: the policy rules
it checked, asked again for this caller, and the inventory generation. These tests drive
the real pipeline (request id, noauth, router) over each database backend.
"""

from __future__ import annotations

import os

import pytest
import webob

from acceld import rpc
from acceld.api import deploy, listcache, util
from acceld.objects import v2_inventory as v2
from tests.functional.test_statement_count import HOST
from tests.stack import Stack


@pytest.fixture
def stack(db):
    with Stack.reported(db, hosts=(HOST,), device_count=2) as s:
        yield s


def _get(app, path, token="admin", version="2.3", host="localhost:80"):
    return webob.Request.blank(path, headers={
        "X-Auth-Token": token, "OpenStack-API-Version": f"accelerator {version}",
        "Host": host}).get_response(app)


def test_a_repeated_list_is_answered_from_the_store_with_its_own_request_id(stack,
                                                                           dispatched):
    first, second = _get(stack.app, "/v2/devices"), _get(stack.app, "/v2/devices")
    assert first.status_int == second.status_int == 200
    assert dispatched == ["/v2/devices"]                   # the second was stored
    assert second.body == first.body and len(first.json["devices"]) == 2
    assert first.headers["x-openstack-request-id"] != second.headers["x-openstack-request-id"]
    assert [h for h in first.headerlist if h[0] != "x-openstack-request-id"] == \
        [h for h in second.headerlist if h[0] != "x-openstack-request-id"]
    assert second.headers["OpenStack-API-Version"] == "accelerator 2.3"


def test_every_input_of_the_answer_is_part_of_its_key(stack, dispatched):
    """Another query, microversion, host or caller is its own answer."""
    base = _get(stack.app, "/v2/devices")
    assert "status" not in _get(stack.app, "/v2/devices", version="2.0").json["devices"][0]
    assert _get(stack.app, f"/v2/devices?hostname={HOST}").json == base.json
    assert _get(stack.app, "/v2/devices?hostname=elsewhere").json == {"devices": []}
    link = _get(stack.app, "/v2/devices", host="b.example:1").json["devices"][0]["links"]
    assert link[0]["href"].startswith("http://b.example:1/")
    assert _get(stack.app, "/v2/devices", token="u:p", version="2.3").status_int == 403
    assert len(dispatched) == 6
    # and each is stored: the same six again reach no handler
    _get(stack.app, "/v2/devices", version="2.0")
    _get(stack.app, f"/v2/devices?hostname={HOST}")
    _get(stack.app, "/v2/devices", host="b.example:1")
    assert len(dispatched) == 6


def test_an_invalid_query_is_never_stored(stack, dispatched):
    for _ in range(2):
        assert _get(stack.app, "/v2/devices?colour=red").status_int == 400
    assert len(dispatched) == 2


def test_a_write_to_the_inventory_ends_the_stored_answer(stack, db, dispatched):
    before = _get(stack.app, "/v2/devices").json
    device = before["devices"][0]["uuid"]
    v2.set_device_status(db, device, "maintaining")
    after = {d["uuid"]: d["status"] for d in _get(stack.app, "/v2/devices").json["devices"]}
    assert after[device] == "maintaining"
    assert len(dispatched) == 2


def test_a_stored_answer_follows_the_policy_file(stack, db, dispatched, tmp_path,
                                                monkeypatch):
    """An operator who takes the list away from everyone by editing policy.yaml is obeyed
    at once, though the answer was stored under a decision that allowed it."""
    monkeypatch.setattr(util._PolicyDecisions, "RECHECK_S", 0.0)
    path = tmp_path / "policy.yaml"
    path.write_text("{}\n", encoding="utf-8")
    stack.conf.set_override("policy_file", str(path), group="oslo_policy")
    app = deploy.make_app(stack.conf, db, rpc.ConductorClient(stack.transport))
    assert _get(app, "/v2/devices").status_int == 200
    assert _get(app, "/v2/devices").status_int == 200
    assert len(dispatched) == 1
    path.write_text('"cyborg:device:get_all": "!"\n', encoding="utf-8")
    later = os.stat(path).st_mtime + 10
    os.utime(path, (later, later))      # a new mtime: oslo.policy reads the file again
    denied = _get(app, "/v2/devices")
    assert denied.status_int == 403, denied.body
    assert "cyborg:device:get_all" in denied.json["errors"][0]["detail"]


def _answer(generation: int, body: bytes = b"x") -> tuple:
    return ("inventory", generation, ("cyborg:device:get_all",), "200 OK", [], body)


def test_the_store_keeps_the_newest_generation_and_stays_bounded(monkeypatch):
    store = listcache.Replies()
    store.put("k", _answer(6))
    store.put("k", _answer(5))              # a slow request that read before the write
    assert store.get("k")[1] == 6
    store.put("k", _answer(7))
    assert store.get("k")[1] == 7
    monkeypatch.setattr(listcache.Replies, "MAX_ENTRIES", 3)
    for key in ("a", "b"):
        store.put(key, _answer(1))
    store.put("c", _answer(1))              # a fourth distinct key: start over
    assert [store.get(k) is not None for k in ("k", "a", "b", "c")] == [
        False, False, False, True]
    monkeypatch.setattr(listcache.Replies, "MAX_BYTES", 10)
    store.put("d", _answer(1, b"123456789"))    # 1 + 9 bytes: still within
    assert store.get("c") is not None
    store.put("e", _answer(1, b"12"))           # over the byte bound: start over
    assert store.get("c") is None and store.get("d") is None
    assert store.get("e") is not None
