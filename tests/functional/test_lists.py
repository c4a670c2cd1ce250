"""Lists of any length (acceld.api.listing, acceld.db.paging): every item without
``limit`` (streamed past one batch), pages with ``<key>_links`` that walk every item once,
the 423 of ``bind_state=resolved`` decided before anything is sent, and the 400s of a bad
``limit`` or ``marker``. The ARQs are written straight into the database
(``tests.seed``); the app is served on loopback, and upstream's client (openstacksdk) lists
them as Nova's tooling would.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import threading
import urllib.request
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import openstack
import pytest
import webob
from oslo_db import exception as db_exc

from acceld import rpc, states, wiring
from acceld.api import deploy, util
from acceld.db import paging
from acceld.objects import arqs
from tests import helpers
from tests.functional.test_clients_blackbox import OPENSTACK, _osc
from tests.placement_server import LoopbackWSGIServer, QuietHandler
from tests.seed import seed_arqs, seed_devices

PROJECT = "seed-project"
LONG = 2 * paging.BATCH + 37          # three batches: streamed


def _app(db: Any) -> Any:
    return deploy.make_app(helpers.make_conf(), db, rpc.ConductorClient(rpc.LocalTransport()))


@contextlib.contextmanager
def _serve(db: Any) -> Iterator[tuple[str, Any]]:
    """The API of ``db`` on loopback: (url, db)."""
    server = LoopbackWSGIServer(("127.0.0.1", 0), QuietHandler)
    server.set_app(_app(db))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", db
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


@pytest.fixture
def served(db: Any) -> Iterator[tuple[str, Any]]:
    """On each backend."""
    with _serve(db) as both:
        yield both


@pytest.fixture
def served_sqlite(sqlite_db: Any) -> Iterator[tuple[str, Any]]:
    with _serve(sqlite_db) as both:
        yield both


def _get(url: str, token: str = "admin") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"X-Auth-Token": token})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _connect(url: str) -> Any:
    return openstack.connect(auth_type="admin_token", auth={"endpoint": url, "token": "admin"},
                             accelerator_endpoint_override=f"{url}/accelerator",
                             region_name="RegionOne")


def test_openstacksdk_lists_every_one_of_5000_arqs(served_sqlite):
    url, db = served_sqlite
    made = seed_arqs(db, 5000)
    conn = _connect(url)
    assert [a.uuid for a in conn.accelerator.accelerator_requests()] == made


@pytest.mark.skipif(OPENSTACK is None, reason="python-openstackclient is not installed")
def test_openstack_arq_list_shows_every_arq_of_a_streamed_list(served_sqlite):
    url, db = served_sqlite
    made = seed_arqs(db, LONG)
    listed = _osc(url, "accelerator", "arq", "list")
    assert [a["uuid"] for a in listed] == made


def test_openstacksdk_asking_for_pages_follows_the_links_to_the_end(served_sqlite):
    url, db = served_sqlite
    made = seed_arqs(db, LONG)
    conn = _connect(url)
    assert [a.uuid for a in conn.accelerator.accelerator_requests(limit=400)] == made


def test_pages_walk_every_item_once_and_the_whole_list_streams_the_same(served):
    url, db = served
    made = seed_arqs(db, LONG)
    base = f"{url}/accelerator/v2/accelerator_requests"
    seen, pages, href = [], [], f"{base}?limit=97"
    while href is not None:
        assert len(pages) <= math.ceil(LONG / 97)          # bounded: no endless walk
        status, headers, body = _get(href)
        assert status == 200 and "Content-Length" in headers
        page = json.loads(body)
        pages.append(page)
        seen.extend(a["uuid"] for a in page["arqs"])
        links = page.get("arqs_links")
        href = links[0]["href"] if links else None
        if links:
            assert links[0]["rel"] == "next"
            assert href.startswith(f"{base}?limit=97&marker=")
    assert seen == made
    assert len(pages) == math.ceil(LONG / 97)

    status, headers, streamed = _get(base)
    assert status == 200 and "Content-Length" not in headers     # streamed
    whole = json.loads(streamed)
    assert whole == {"arqs": [a for page in pages for a in page["arqs"]]}
    assert streamed == util.json_bytes(whole)                   # as json.dumps writes it
    # after a marker, without limit: the rest, whole
    status, _, body = _get(f"{base}?marker={made[9]}")
    assert status == 200 and [a["uuid"] for a in json.loads(body)["arqs"]] == made[10:]


def test_a_list_of_another_project_sees_only_its_own(served_sqlite):
    url, db = served_sqlite
    mine = seed_arqs(db, paging.BATCH + 3, project_id="p1", profile="p1-profile")
    seed_arqs(db, 5, project_id="p2", profile="p2-profile")
    status, _, body = _get(f"{url}/v2/accelerator_requests", token="u:p1")
    assert status == 200 and [a["uuid"] for a in json.loads(body)["arqs"]] == mine


def _resolved_list(url: str, instance: str, query: str = "") -> tuple[int, dict[str, Any]]:
    status, _, body = _get(f"{url}/v2/accelerator_requests?instance={instance}"
                           f"&bind_state=resolved{query}")
    return status, json.loads(body)


def test_423_is_decided_before_the_answer_starts(served):
    url, db = served
    small, large, paged = (str(uuidlib.uuid4()) for _ in range(3))
    seed_arqs(db, 2, profile="small-bound", instance_uuid=small, state=states.ARQ_BOUND)
    seed_arqs(db, 1, profile="small-binding", instance_uuid=small,
              state=states.ARQ_BIND_STARTED)
    status, body = _resolved_list(url, small)
    assert status == 423 and "not resolved" in body["errors"][0]["detail"]

    # more ARQs than a batch, all resolved: every one, streamed
    bound = seed_arqs(db, paging.BATCH + 5, profile="large-bound", instance_uuid=large,
                      state=states.ARQ_BOUND)
    status, body = _resolved_list(url, large)
    assert status == 200 and [a["uuid"] for a in body["arqs"]] == bound
    # one still binding after the first batch: 423 all the same
    seed_arqs(db, 1, profile="large-binding", instance_uuid=large,
              state=states.ARQ_BIND_STARTED)
    assert _resolved_list(url, large)[0] == 423

    # a page whose own ARQs are resolved, of an instance that has one still binding
    first = seed_arqs(db, 3, profile="paged-bound", instance_uuid=paged,
                      state=states.ARQ_BOUND)
    seed_arqs(db, 1, profile="paged-binding", instance_uuid=paged,
              state=states.ARQ_BIND_STARTED)
    assert _resolved_list(url, paged, "&limit=2")[0] == 423
    assert _resolved_list(url, paged, f"&limit=1&marker={first[0]}")[0] == 423


def test_bind_state_resolved_without_an_instance_leaves_out_the_unresolved(served_sqlite):
    url, db = served_sqlite
    bound = seed_arqs(db, paging.BATCH + 1, profile="b", state=states.ARQ_BOUND)
    seed_arqs(db, 2, profile="s", state=states.ARQ_BIND_STARTED)
    status, _, body = _get(f"{url}/v2/accelerator_requests?bind_state=resolved")
    assert status == 200 and [a["uuid"] for a in json.loads(body)["arqs"]] == bound


@pytest.mark.parametrize(("query", "named"), [
    ("limit=1001", "1001 is more than 1000"),
    ("limit=0", "limit"),
    ("limit=ten", "limit"),
    ("marker=not-a-uuid", "marker"),
    (f"marker={uuidlib.UUID(int=7)}", f"marker {uuidlib.UUID(int=7)} is not"),
])
def test_a_bad_limit_or_marker_is_a_400_naming_it(served_sqlite, query, named):
    url, _db = served_sqlite
    for path in ("/v2/accelerator_requests", "/v2/devices", "/v2/deployables",
                 "/v2/attributes", "/v2/device_profiles", "/v1/accelerators"):
        status, _, body = _get(f"{url}{path}?{query}")
        assert status == 400, (path, query)
        assert named in json.loads(body)["errors"][0]["detail"], (path, query)


def test_a_marker_of_another_projects_arq_is_a_400(served_sqlite):
    url, db = served_sqlite
    theirs = seed_arqs(db, 1, project_id="p2", profile="p2-profile")[0]
    status, _, body = _get(f"{url}/v2/accelerator_requests?marker={theirs}", token="u:p1")
    assert status == 400 and theirs in json.loads(body)["errors"][0]["detail"]


def test_head_of_a_streamed_list_sends_no_body_and_reads_no_more(sqlite_db, monkeypatch):
    seed_arqs(sqlite_db, paging.BATCH + 1)
    reads: list[int] = []
    real = paging.Listing.rest

    def counted(self):
        for batch in real(self):
            reads.append(len(batch))
            yield batch

    monkeypatch.setattr(paging.Listing, "rest", counted)
    app = _app(sqlite_db)
    head = webob.Request.blank("/v2/accelerator_requests", method="HEAD",
                               headers={"X-Auth-Token": "admin"}).get_response(app)
    assert head.status_int == 200 and head.body == b"" and reads == []
    got = webob.Request.blank("/v2/accelerator_requests",
                              headers={"X-Auth-Token": "admin"}).get_response(app)
    assert len(got.json["arqs"]) == paging.BATCH + 1 and reads == [1]


def _blank(app: Any, path: str) -> webob.Response:
    return webob.Request.blank(path, headers={"X-Auth-Token": "admin"}).get_response(app)


def test_a_long_inventory_list_streams_and_is_never_stored(sqlite_db, dispatched):
    made = seed_devices(sqlite_db, paging.BATCH + 2)
    app = _app(sqlite_db)
    for _ in range(2):
        whole = _blank(app, "/v2/devices")
        assert whole.status_int == 200 and whole.content_length is None     # streamed
        assert [d["uuid"] for d in whole.json["devices"]] == made
    assert dispatched == ["/v2/devices"] * 2          # neither answer was kept
    for _ in range(2):                             # a page is small: kept, then answered
        page = _blank(app, "/v2/devices?limit=2")
        assert [d["uuid"] for d in page.json["devices"]] == made[:2]
    assert dispatched[2:] == ["/v2/devices?limit=2"]


def test_a_database_failure_mid_stream_breaks_the_connection_off(sqlite_db, monkeypatch):
    """The status line went out with the first batch: a later batch that fails must not
    end the body as if complete (chunked: no last chunk), so the client sees the break."""
    seed_arqs(sqlite_db, paging.BATCH + 1)
    real = arqs.page_arqs

    def failing(db, *, after, **kw):
        if after:
            raise db_exc.DBConnectionError("the database went away")
        return real(db, after=after, **kw)

    monkeypatch.setattr(arqs, "page_arqs", failing)
    conf = helpers.make_conf(api={"host_ip": "127.0.0.1", "port": 0})
    server = wiring.HttpServer(conf, _app(sqlite_db), wiring.listen(conf))
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/v2/accelerator_requests", headers={"X-Auth-Token": "admin"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
        conn.close()
    finally:
        server.stop()
