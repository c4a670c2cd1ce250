"""Hostile input on every database: each cause of a 5xx a fuzzing run found is a 400 (or
is stored and read back, for text every database can hold), and the documented limits
(acceld.limits, [api] max_arqs_per_profile) answer 400 naming the field and the limit.

The requests go through the whole WSGI pipeline (request id, noauth, router, handler) to
a real SQLite, PostgreSQL or MariaDB database; the path and the query string are put into
the environ as a server hands them (percent-decoded into latin-1 code points, and raw).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy
import webob

from acceld import limits, rpc
from acceld.api import deploy
from acceld.db import models as m
from acceld.db.api import Database
from tests import helpers
from tests.stack import Stack

V2 = {"OpenStack-API-Version": "accelerator 2.3"}
UUID = "8e45a2ea-5364-4b0d-a252-bf8becaa606e"


@pytest.fixture
def app(db: Database):
    conf = helpers.make_conf(api={"auth_strategy": "noauth"})
    transport = rpc.LocalTransport()
    yield deploy.make_app(conf, db, rpc.ConductorClient(transport))
    transport.close()


def send(app, method: str, path: str, body: bytes | None = None, query: str = "",
         **headers: str) -> webob.Response:
    """A request whose PATH_INFO and QUERY_STRING are exactly ``path`` and ``query``."""
    req = webob.Request.blank("/", method=method,
                              headers={"X-Auth-Token": "admin", **V2, **headers})
    if body is not None:
        req.body = body
        req.content_type = "application/json"
    req.environ["PATH_INFO"], req.environ["QUERY_STRING"] = path, query
    return req.get_response(app)


def post(app, path: str, data: Any, **headers: str) -> webob.Response:
    return send(app, "POST", path, json.dumps(data).encode(), **headers)


def profile(name: str = "p1", groups: Any = None, **fields: Any) -> list[dict[str, Any]]:
    return [{"name": name, "groups": groups or [{"resources:FPGA": "1"}], **fields}]


def error(resp: webob.Response, status: int = 400) -> str:
    """The one error's detail, after checking the status and the shape."""
    assert resp.status_int == status, resp.text
    (err,) = resp.json["errors"]
    assert err["status"] == status
    return err["detail"]


def profile_names(app) -> list[str]:
    resp = send(app, "GET", "/v2/device_profiles")
    assert resp.status_int == 200, resp.text
    return [p["name"] for p in resp.json["device_profiles"]]


# -- strings: UTF-8, surrogates, NUL ----------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_an_escaped_nul_or_surrogate_is_refused_in_a_utf16_or_32_body(app, encoding):
    for escape, what in (("\\u0000", "a NUL"), ("\\ud800", "a lone surrogate")):
        text = ('[{"name": "p1", "groups": [{"resources:FPGA": "1", "trait:T": '
                f'"required{escape}"}}]}}]')
        detail = error(send(app, "POST", "/v2/device_profiles", text.encode(encoding)))
        assert f"'0/groups/0/trait:T' holds {what} character" in detail, detail


def test_a_lone_surrogate_is_refused_escaped_or_raw(app):
    detail = error(send(app, "POST", "/v2/device_profiles",
                        b'[{"name": "p1", "groups": [{"resources:FPGA": "1"}], '
                        b'"description": "\\ud800"}]'))
    assert "lone surrogate" in detail and "0/description" in detail
    detail = error(send(app, "POST", "/v1/accelerators", b'{"name": "\\udfff x"}'))
    assert "lone surrogate" in detail and "name" in detail
    # a surrogate encoded as UTF-8 bytes is not UTF-8
    detail = error(send(app, "POST", "/v1/accelerators", b'{"name": "\xed\xa0\x80"}'))
    assert "utf-8" in detail
    # a pair of escapes is one character, stored and read back
    resp = post(app, "/v2/device_profiles", profile(description="\U0001F680"))
    assert resp.status_int == 201, resp.text
    assert send(app, "GET", "/v2/device_profiles").json["device_profiles"][0][
        "description"] == "\U0001F680"


def test_nul_is_refused_in_every_string(app):
    detail = error(post(app, "/v2/device_profiles", profile(description="a\x00b")))
    assert "NUL" in detail and "description" in detail
    detail = error(post(app, "/v2/device_profiles",
                        profile(groups=[{"accel:x\x00": "1"}])))
    assert "NUL" in detail and "key" in detail
    assert "NUL" in error(post(app, "/v2/accelerator_requests",
                               {"device_profile_name": "p\x00"}))
    assert "NUL" in error(send(app, "GET", "/v2/device_profiles", query="name=a%00b"))
    assert "NUL" in error(send(app, "GET", "/v2/devices", query="hostname=%00"))
    assert "NUL" in error(send(app, "GET", "/v2/device_profiles/a\x00b"))
    assert "NUL" in error(send(app, "DELETE", "/v2/device_profiles", query="value=a%00"))
    assert profile_names(app) == []


@pytest.mark.parametrize("path,query", [
    ("/v2/device_profiles/\xff", ""),                      # %ff in the path
    ("/v2/device_profiles/\xc3", ""),                      # a truncated sequence
    ("/v2/device_profiles/\xed\xa0\x80", ""),              # an encoded surrogate
    ("/v1/accelerators/\xe9", ""),
    ("/v2/device_profiles", "name=%ff"),
    ("/v2/device_profiles", "%ff=1"),
    ("/v2/device_profiles", "name=%zz"),                   # malformed percent-encoding
    ("/v2/device_profiles", "name=a%f"),
    ("/v2/device_profiles", "name=\xff"),                  # a raw byte that is not UTF-8
])
def test_bytes_that_are_not_utf8_in_the_path_or_query_are_400(app, path, query):
    detail = error(send(app, "GET", path, query=query))
    assert "UTF-8" in detail or "percent-encoding" in detail


def test_utf8_in_the_path_and_query_is_read_as_text(app):
    assert post(app, "/v2/device_profiles", profile("p1")).status_int == 201
    # a name nobody has: a 404 in Cyborg's words, with the decoded name
    assert "name=d\u00e9j\u00e0" in error(send(app, "GET", "/v2/device_profiles/d\xc3\xa9j"
                                                "\xc3\xa0"), 404)
    resp = send(app, "GET", "/v2/device_profiles", query="name=p1,%C3%A9")
    assert resp.status_int == 200 and len(resp.json["device_profiles"]) == 1


def test_a_query_of_too_many_fields_is_400(app):
    detail = error(send(app, "GET", "/v2/devices",
                        query="&".join(["type=GPU"] * (limits.QUERY_FIELDS + 1))))
    assert str(limits.QUERY_FIELDS) in detail


def test_text_beyond_the_bmp_is_stored_and_read_back(app, db):
    """An emoji stored, and looked up: MariaDB failed both while its tables and its
    connection were 3-byte utf8."""
    text = "fast \U0001F680 \u00e9t\u00e9 \u4e2d"
    resp = post(app, "/v2/device_profiles", profile(description=text))
    assert resp.status_int == 201, resp.text
    assert resp.json["description"] == text
    with db.reader() as s:
        assert s.execute(sqlalchemy.select(m.DeviceProfile.description)).scalar() == text
    assert "name=\U0001F680" in error(post(app, "/v2/accelerator_requests",
                                           {"device_profile_name": "\U0001F680"}), 404)
    resp = send(app, "GET", "/v2/device_profiles", query="name=%F0%9F%9A%80")
    assert resp.status_int == 200 and resp.json["device_profiles"] == []
    with Stack.reported(db, device_count=1) as stack:
        resp = stack.call("POST", "/v1/accelerators", {"name": text},
                          headers={"X-Auth-Token": "admin"})
        assert resp.status_int == 201, resp.text
        with db.reader() as s:
            assert s.execute(sqlalchemy.select(m.Device.name).where(
                m.Device.name == text)).scalar() == text


@pytest.mark.mysql
def test_a_mysql_url_without_a_charset_still_connects_in_utf8mb4(make_db_url):
    """oslo.db connects MySQL in 3-byte utf8 unless the URL names a charset."""
    url = make_db_url("mysql").replace("?charset=utf8mb4", "")
    database = Database(url)
    try:
        assert database.url.endswith("?charset=utf8mb4")
        with database.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT @@character_set_connection").scalar() \
                == "utf8mb4"
    finally:
        database.dispose()


def test_a_noauth_project_the_database_cannot_keep_is_401(app):
    """noauth's project becomes an ARQ's project_id (255 characters)."""
    assert post(app, "/v2/device_profiles", profile("p1")).status_int == 201
    for token in ("u:" + "p" * 256, "u:p\x01", "u\x00:p", "u" * 256 + ":p"):
        resp = post(app, "/v2/accelerator_requests", {"device_profile_name": "p1"},
                    **{"X-Auth-Token": token})
        assert "noauth expects" in error(resp, 401)
    resp = post(app, "/v2/accelerator_requests", {"device_profile_name": "p1"},
                **{"X-Auth-Token": "u:" + "p" * 255})
    assert resp.status_int == 201, resp.text
    assert resp.json["arqs"][0]["project_id"] == "p" * 255


def test_nesting_deeper_than_the_limit_is_400(app):
    """Deep nesting reaches no encoder or walk that could run out of stack."""
    def nested(levels: int) -> Any:
        value: Any = "x"
        for _ in range(levels - 1):         # the body is one more
            value = {"a": value}
        return value

    for levels in (limits.JSON_DEPTH + 1, 900):
        detail = error(send(app, "PUT", f"/v1/accelerators/{UUID}/acc_specs", json.dumps(
            {"acc_specs": nested(levels), "revision": 1}).encode()))
        assert detail.startswith("Invalid body: field 'acc_specs/a/") and \
            detail.endswith(f"' nests deeper than {limits.JSON_DEPTH} levels."), detail
    # at the limit: through to the accelerator's lookup
    assert "not found" in error(send(app, "PUT", f"/v1/accelerators/{UUID}/acc_specs",
                                     json.dumps({"acc_specs": nested(limits.JSON_DEPTH),
                                                 "revision": 1}).encode()), 404)


# -- numbers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"])
def test_nan_infinity_and_out_of_range_floats_are_refused(app, literal):
    body = b'[{"name": "p1", "groups": [{"resources:FPGA": "1"}], "description": ' + \
        literal + b"}]"
    assert "Malformed JSON" in error(send(app, "POST", "/v2/device_profiles", body))
    assert profile_names(app) == []


@pytest.mark.parametrize("value", [2**63, 2**64 + 1, -(2**63) - 1, 2**31])
def test_integers_out_of_range_are_400_before_the_database(app, value):
    assert "deployable_id" in error(post(app, "/v2/attributes", {
        "deployable_id": value, "key": "k", "value": "v"}))
    resp = send(app, "PUT", f"/v1/accelerators/{UUID}/acc_specs",
                json.dumps({"acc_specs": {}, "revision": value}).encode())
    assert "revision" in error(resp)
    if abs(value) >= 2**63:                     # a number stored as text: 64 bits
        detail = error(post(app, "/v2/device_profiles",
                            profile(groups=[{"resources:FPGA": "1", "accel:x": value}])))
        assert "groups/0/accel:x" in detail
    assert profile_names(app) == []


def test_an_if_match_out_of_range_is_400(db):
    with Stack.reported(db, device_count=1) as stack:
        with db.reader() as s:
            uuid = s.execute(sqlalchemy.select(m.Device.uuid)).scalar_one()
        for tag in (str(2**63), str(2**31), "-1", "99999999999999999999999"):
            resp = stack.call("PUT", f"/v1/accelerators/{uuid}/acc_specs", {"acc_specs": {}},
                              headers={"X-Auth-Token": "admin", "If-Match": f'"{tag}"'})
            assert "If-Match" in error(resp)


def test_bind_values_longer_than_their_columns_are_400(db):
    """An instance or resource provider id longer than a UUID failed the bind's write
    in the conductor (a 5xx on PostgreSQL and MariaDB)."""
    with Stack.reported(db, device_count=1) as stack:
        stack.ready_all()
        with db.reader() as s:
            rp = s.execute(sqlalchemy.select(m.Deployable.rp_uuid)).scalars().first()
        assert stack.call("POST", "/v2/device_profiles", profile(
            groups=[{"resources:GPU": "1"}]), headers={"X-Auth-Token": "admin"}) \
            .status_int == 201
        for field, instance, rp_uuid in (("instance_uuid", "i" * 37, rp),
                                         ("device_rp_uuid", UUID, "r" * 100)):
            arq = stack.call("POST", "/v2/accelerator_requests",
                             {"device_profile_name": "p1"},
                             headers={"X-Auth-Token": "admin"}).json["arqs"][0]["uuid"]
            resp = stack.call("PATCH", "/v2/accelerator_requests",
                              helpers.bind_patch(arq, "host1", rp_uuid, instance),
                              headers={"X-Auth-Token": "admin", "X-Service-Token": "x"})
            detail = error(resp)
            assert f"{arq}/{field}" in detail and str(limits.UUID_LENGTH) in detail
            assert stack.call("GET", f"/v2/accelerator_requests/{arq}",
                              headers={"X-Auth-Token": "admin"}).json["state"] == "Initial"


# -- names and free text ----------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["a\x07b", "ab\n", "a\x7fb", "a\x85b", "a\u202eb",
                                 "a\u2066b\u2069", "\u202d"])
def test_names_refuse_control_and_bidi_override_characters(app, bad):
    assert "name" in error(post(app, "/v1/accelerators", {"name": bad}))
    assert "groups/0" in error(post(app, "/v2/device_profiles",
                                    profile(groups=[{"resources:FPGA": "1",
                                                     f"accel:{bad}": "x"}])))
    assert "groups/0" in error(post(app, "/v2/device_profiles",
                                    profile(groups=[{"resources:FPGA": "1",
                                                     "accel:x": bad}])))
    assert "key" in error(post(app, "/v2/attributes",
                               {"deployable_id": 1, "key": bad, "value": "v"}))
    assert "value" in error(post(app, "/v2/attributes",
                                 {"deployable_id": 1, "key": "k", "value": bad}))
    assert "profile name" not in error(post(app, "/v2/device_profiles", profile(bad)))
    assert profile_names(app) == []


def test_free_text_takes_lines_tabs_and_bidi_but_no_other_control(app):
    text = "line one\n\tline two\r\n\u202bRTL\u202c"
    resp = post(app, "/v2/device_profiles", profile("p1", description=text))
    assert resp.status_int == 201, resp.text
    assert resp.json["description"] == text
    for bad in ("a\x07", "a\x1b[31m", "a\x9b"):
        assert "description" in error(post(app, "/v2/device_profiles",
                                           profile("p2", description=bad)))
    assert profile_names(app) == ["p1"]


# -- limits -----------------------------------------------------------------------------------

def test_a_profile_asking_for_too_many_accelerators_is_400_naming_the_limit(app):
    limit = limits.PROFILE_ARQS
    for groups in ([{"resources:FPGA": "1000000"}], [{"resources:FPGA": "9" * 200}],
                   [{"resources:FPGA": limit + 1}],
                   [{"resources:FPGA": "40"}, {"resources:GPU": "40"}],
                   [{"resources:FPGA": str(limit), "resources:GPU": "1"}]):
        detail = error(post(app, "/v2/device_profiles", profile(groups=groups)))
        assert str(limit) in detail and "max_arqs_per_profile" in detail
        assert "9" * 50 not in detail                   # a short prefix of the value
    assert "less than" in error(post(app, "/v2/device_profiles", profile(
        groups=[{"resources:FPGA": str(-(2**40))}])))
    assert profile_names(app) == []
    # at the limit, and zero or less (asks for nothing, as in Cyborg), are fine
    ok = post(app, "/v2/device_profiles", profile("at", [{"resources:FPGA": str(limit)},
                                                          {"resources:GPU": "-1"}]))
    assert ok.status_int == 201, ok.text
    resp = post(app, "/v2/accelerator_requests", {"device_profile_name": "at"})
    assert resp.status_int == 201, resp.text
    assert len(resp.json["arqs"]) == limit


def test_the_accelerator_limit_is_an_option(db):
    conf = helpers.make_conf(api={"auth_strategy": "noauth", "max_arqs_per_profile": 2})
    app = deploy.make_app(conf, db, rpc.ConductorClient(rpc.LocalTransport()))
    detail = error(post(app, "/v2/device_profiles", profile(groups=[{"resources:FPGA": 3}])))
    assert "more than 2" in detail
    assert post(app, "/v2/device_profiles", profile(groups=[{"resources:FPGA": 2}])) \
        .status_int == 201


def test_a_stored_profile_asking_for_millions_makes_no_arq_and_can_be_deleted(app, db):
    """A profile stored before the limit (a million FPGAs, or 400 digits of them): an ARQ
    create is a 400 that creates nothing, and the profile is deleted as any other."""
    for name, amount in (("million", "1000000"), ("digits", "9" * 400)):
        with db.writer() as s:
            s.add(m.DeviceProfile(uuid=f"00000000-0000-4000-8000-00000000000{len(name)}",
                                  name=name, created_at=m.utcnow(),
                                  profile_json=json.dumps(
                                      {"groups": [{"resources:FPGA": amount}]})))
        detail = error(post(app, "/v2/accelerator_requests", {"device_profile_name": name}))
        assert "max_arqs_per_profile" in detail and str(limits.PROFILE_ARQS) in detail
    with db.reader() as s:
        assert s.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(
            m.ExtendedAcceleratorRequest)).scalar() == 0
    assert send(app, "DELETE", "/v2/device_profiles/million").status_int == 204
    assert send(app, "DELETE", "/v2/device_profiles",
                query="value=00000000-0000-4000-8000-000000000006").status_int == 204
    assert profile_names(app) == []


def test_group_counts_and_lengths_have_limits(app):
    too_many_groups = [{"resources:FPGA": "0"}] * (limits.PROFILE_GROUPS + 1)
    assert "groups" in error(post(app, "/v2/device_profiles", profile(
        groups=too_many_groups)))
    many_keys = {f"accel:k{i}": "v" for i in range(limits.GROUP_KEYS + 1)}
    assert "groups/0" in error(post(app, "/v2/device_profiles", profile(groups=[many_keys])))
    long_key = {"resources:CUSTOM_" + "X" * limits.NAME_LENGTH: "1"}
    assert "groups/0" in error(post(app, "/v2/device_profiles", profile(groups=[long_key])))
    long_value = {"resources:FPGA": "1", "accel:x": "v" * (limits.NAME_LENGTH + 1)}
    detail = error(post(app, "/v2/device_profiles", profile(groups=[long_value])))
    assert "groups/0/accel:x" in detail and "v" * 100 not in detail
    detail = error(post(app, "/v2/device_profiles", profile("n" * (limits.NAME_LENGTH + 1))))
    assert "name" in detail and "n" * 100 not in detail
    detail = error(post(app, "/v2/device_profiles", profile(
        description="d" * (limits.TEXT_LENGTH + 1))))
    assert "description" in detail and "d" * 100 not in detail
    detail = error(post(app, "/v2/attributes", {"deployable_id": 1, "key": "k",
                                                "value": "v" * (limits.TEXT_LENGTH + 1)}))
    assert "value" in detail and "v" * 100 not in detail
    assert profile_names(app) == []


def test_groups_too_large_to_store_are_400(db):
    wide = [{f"accel:{g}-{k}-" + "\u00e9" * 40: "\u00e9" * 40 for k in range(limits.GROUP_KEYS)}
            for g in range(limits.PROFILE_GROUPS)]
    body = json.dumps(profile(groups=wide), ensure_ascii=False).encode()
    conf = helpers.make_conf(api={"auth_strategy": "noauth",
                                  "max_request_body_size": 2 * len(body)})
    app = deploy.make_app(conf, db, rpc.ConductorClient(rpc.LocalTransport()))
    detail = error(send(app, "POST", "/v2/device_profiles", body))
    assert str(limits.STORED_JSON_BYTES) in detail
    assert profile_names(app) == []


def test_acc_specs_too_large_to_store_are_400(app):
    specs = {f"k{i}": "x" * 2000 for i in range(40)}
    detail = error(send(app, "PUT", f"/v1/accelerators/{UUID}/acc_specs",
                        json.dumps({"acc_specs": specs, "revision": 1}).encode()))
    assert "acc_specs" in detail and str(limits.STORED_JSON_BYTES) in detail


# -- a sweep ----------------------------------------------------------------------------------

EMOJI = "\U0001F680"
SWEEP = [
    ("GET", "/v2/attributes", "deployable_id=" + "9" * 18, None),
    ("GET", "/v2/attributes", f"key={EMOJI}", None),
    ("GET", "/v2/devices", f"hostname={EMOJI}&vendor={'v' * 255}", None),
    ("GET", "/v2/device_profiles/" + "n" * 300, "", None),
    ("GET", f"/v2/device_profiles/{EMOJI}", "", None),
    ("DELETE", "/v2/device_profiles", "value=" + ",".join(["x" * 255] * 20), None),
    ("DELETE", "/v2/accelerator_requests", "arqs=" + ",".join([UUID] * 100), None),
    ("GET", "/v1/accelerators", f"host={EMOJI}&limit=9999", None),
    ("GET", "/v1/drivers", "host=" + "h" * 255, None),
    ("POST", "/v2/accelerator_requests", "", {"device_profile_name": 1e308}),
    ("POST", "/v2/accelerator_requests", "", {"device_profile_name": "n" * 5000}),
    ("POST", "/v2/attributes", "", {"deployable_id": 1.5, "key": EMOJI * 2000,
                                    "value": EMOJI}),
    ("POST", "/v2/attributes", "", {"deployable_id": limits.INT_MAX, "key": "k",
                                    "value": "v"}),
    ("POST", "/v2/device_profiles", "", profile(f"e{'x' * 254}", description=EMOJI * 8192)),
    ("POST", "/v1/accelerators", "", {"name": EMOJI * 255}),
    ("POST", "/v1/discover", "", {"host": EMOJI * 255}),
    ("POST", "/v1/drivers/" + "d" * 300 + "/action", "", {"action": "update"}),
]


@pytest.mark.parametrize("method,path,query,body", SWEEP,
                         ids=[f"{m} {p[:30]}?{q[:20]}" for m, p, q, _ in SWEEP])
def test_hostile_requests_are_never_5xx(db, method, path, query, body):
    with Stack.reported(db, device_count=1) as stack:
        data = None if body is None else json.dumps(body).encode()
        resp = send(stack.app, method, path.encode().decode("latin-1"), data,
                    query=query.encode().decode("latin-1"))
        assert resp.status_int < 500, resp.text
        assert resp.status_int in (200, 201, 202, 204, 400, 404, 409), resp.text
