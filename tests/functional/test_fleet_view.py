"""The fleet web view (acceld/api/handlers/ui.py, acceld/api/ui/): its files are served
without a token, with their media types, revalidation and a Content-Security-Policy; the
script puts API data in the page as text only; and every API path and field it reads is
one the API has. (Its rendering in headless Chromium against `acceld serve` is
test_fleet_view_browser.py; its speed with 1,000 devices, bench/webview.py.)"""

from __future__ import annotations

import re

import pytest
import webob

from acceld.api import auth, deploy, openapi, router
from acceld.api.handlers import ui
from acceld.api.schemas import responses as r
from tests import helpers

FILES = {"/ui": "text/html", "/ui/": "text/html", "/ui/fleet.js": "text/javascript",
         "/ui/fleet.css": "text/css"}
SCRIPT = ui.source("fleet.js")
PAGE = ui.source("index.html")
SAMPLE = "5e5e5e5e-0000-4000-8000-000000000001"   # what a path's ${...} stands for


@pytest.fixture
def app(sqlite_db):
    return deploy.make_app(helpers.make_conf(), sqlite_db, conductor=None)


def _get(app, path: str, method: str = "GET", **headers: str) -> webob.Response:
    return webob.Request.blank(path, method=method, headers=headers).get_response(app)


@pytest.mark.parametrize("path", [*FILES, *("/accelerator" + p for p in FILES)])
def test_each_file_is_served_without_a_token_with_its_headers(app, path):
    # a token noauth refuses changes nothing: the files are public, like /openapi.json
    resp = _get(app, path, **{"X-Auth-Token": "not a token noauth knows"})
    assert resp.status_int == 200, resp.body
    media = FILES[path.removeprefix("/accelerator")]
    assert resp.headers["Content-Type"] == f"{media}; charset=utf-8"
    assert int(resp.headers["Content-Length"]) == len(resp.body) > 0
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["Content-Security-Policy"] == ui.CSP
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    assert re.fullmatch(r'"[0-9a-f]{32}"', resp.headers["ETag"])
    assert resp.headers["x-openstack-request-id"].startswith("req-")


def test_the_policy_forbids_inline_code_frames_and_other_origins():
    directives = dict(d.strip().split(" ", 1) for d in ui.CSP.split(";"))
    assert directives["default-src"] == "'none'"
    for name in ("script-src", "style-src", "connect-src"):
        assert directives[name] == "'self'", name
    assert directives["frame-ancestors"] == directives["base-uri"] == "'none'"
    assert "unsafe" not in ui.CSP


@pytest.mark.parametrize("path", ["/ui/", "/ui/fleet.js"])
def test_a_file_is_revalidated_by_its_etag(app, path):
    first = _get(app, path)
    again = _get(app, path, **{"If-None-Match": first.headers["ETag"]})
    assert again.status_int == 304
    assert again.body == b""
    assert again.headers["ETag"] == first.headers["ETag"]
    assert again.headers["Content-Security-Policy"] == ui.CSP
    stale = _get(app, path, **{"If-None-Match": '"0123456789abcdef0123456789abcdef"'})
    assert (stale.status_int, stale.body) == (200, first.body)


def test_head_answers_the_headers_without_the_body(app):
    resp = _get(app, "/ui/fleet.css", method="HEAD")
    assert resp.status_int == 200
    assert resp.body == b""
    assert int(resp.headers["Content-Length"]) == len(_get(app, "/ui/fleet.css").body)


def test_the_page_points_at_its_mount(app):
    """Its assets and the script's API calls are under the mount the router strips
    (devstack's /accelerator), else at the root; the mount is written HTML-escaped."""
    bare = _get(app, "/ui").text
    mounted = _get(app, "/accelerator/ui/").text
    assert 'data-root=""' in bare and 'src="/ui/fleet.js"' in bare
    assert 'data-root="/accelerator"' in mounted
    assert 'href="/accelerator/ui/fleet.css"' in mounted
    assert 'src="/accelerator/ui/fleet.js"' in mounted
    assert _get(app, "/ui").headers["ETag"] != _get(app, "/accelerator/ui").headers["ETag"]
    odd = webob.Request.blank("/ui", environ={"SCRIPT_NAME": '/a"><b'}).get_response(app)
    assert 'data-root="/a&quot;&gt;&lt;b"' in odd.text and '"><b' not in odd.text


def test_a_file_that_does_not_exist_is_not_public(app):
    assert _get(app, "/ui/other.js").status_int == 404
    assert _get(app, "/ui/other.js", **{"X-Auth-Token": "bad token"}).status_int == 401


# -- the script -----------------------------------------------------------------------------

def _code(source: str) -> str:
    """The script without its comments (which may name what it never does)."""
    return re.sub(r"//[^\n]*", "", source)


def test_the_script_never_writes_markup():
    """Data reaches the page as text (textContent) only: no API that parses HTML."""
    code = _code(SCRIPT)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                 "DOMParser", "createContextualFragment", "eval(", "Function(",
                 "setAttribute", ".srcdoc"):
        assert sink not in code, sink
    assert "textContent" in code


def test_the_page_has_no_inline_code_the_policy_would_block():
    assert re.findall(r"<script\b[^>]*>", PAGE) == \
        ['<script src="{{root}}/ui/fleet.js" defer>']
    assert "<style" not in PAGE and " style=" not in PAGE
    assert not re.search(r"\son[a-z]+=", PAGE)


def _api_paths() -> set[str]:
    """The API paths in the script: its strings, and its templates with ``{}`` for each
    ``${...}``."""
    code = _code(SCRIPT)
    templates = re.findall(r"`(/v[12]/[^`]*)`", code)
    return (set(re.findall(r'"(/v[12]/[a-z_/]+)"', code))
            | {re.sub(r"\$\{[^}]*\}", "{}", path) for path in templates})


def test_every_api_path_the_script_reads_is_a_get_route():
    paths = _api_paths()
    assert paths == {"/v1/services", "/v1/accelerators", "/v2/accelerator_requests",
                     "/v1/ledger", "/v1/usage", "/v2/device_profiles",
                     "/v1/accelerators/{}/stats", "/v2/device_profiles/{}/availability"}
    routes = router.Router()
    for path in paths:
        concrete = path.replace("{}", SAMPLE)
        found = routes.match(concrete)
        assert found is not None and "GET" in router.OPERATIONS[found[0]], path
        assert found[0].count("{") == path.count("{}"), (path, found[0])
        assert not auth.is_public({"PATH_INFO": concrete}), path     # read with the token


def _fields(name: str) -> set[str]:
    """What the script reads of an object it names ``name`` (``name.field``)."""
    return set(re.findall(rf"\b{name}\.([a-z_]+)\b", _code(SCRIPT)))


@pytest.mark.parametrize("names, schema", [
    (("dev", "d"), r.ACCELERATOR),
    (("svc", "s", "agent"), r.SERVICES["properties"]["services"]["items"]),
    (("arq",), r.ARQ),
    (("entry",), r.LEDGER_ENTRY),
    (("prof",), r.DEVICE_PROFILE),
    # a usage row is {<group_by>, ...}: the script asks for the default, per project
    (("use",), {"properties": {"project": {}, **r.USAGE["properties"]["usage"]["items"][
        "properties"]}}),
])
def test_every_field_the_script_reads_is_in_the_answer(names, schema):
    read = set().union(*(_fields(name) for name in names)) - {"length"}
    assert read, names
    assert read <= set(schema["properties"]), read - set(schema["properties"])


def _availability_fields() -> dict[str, set[str]]:
    props = r.AVAILABILITY["properties"]
    return {"fit": set(props), "place": set(props["hosts"]["items"]["properties"]),
            "miss": set(props["not_fitting"]["items"]["properties"])}


def test_the_explain_answer_the_script_reads_is_the_documented_one():
    for name, fields in _availability_fields().items():
        read = _fields(name) - {"length"}
        assert read and read <= fields, (name, read - fields)


def test_the_script_reads_the_list_keys_the_api_answers():
    for key, schema in (("accelerator", r.ACCELERATORS), ("services", r.SERVICES),
                        ("arqs", r.ARQS), ("ledger", r.LEDGER), ("usage", r.USAGE),
                        ("device_profiles", r.DEVICE_PROFILES), ("stats", r.DEVICE_STATS)):
        assert key in schema["properties"], key
        assert f"body.{key}" in SCRIPT, key
    # an accelerator's allocations are [{"accelerator_request", "instance_uuid"}]
    # (acceld/objects/accelerators.py; the schema says only "object")
    assert _fields("alloc") == {"instance_uuid"}


def test_the_document_describes_the_files_as_public_text():
    doc = openapi.document()
    for path, media in (("/ui", "text/html"), ("/ui/fleet.js", "text/javascript"),
                        ("/ui/fleet.css", "text/css")):
        op = doc["paths"][path]["get"]
        assert op["security"] == []
        assert list(op["responses"]["200"]["content"]) == [f"{media}; charset=utf-8"]
        assert "ETag" in op["responses"]["304"]["headers"]
        assert "content" not in op["responses"]["304"]
        assert "401" not in op["responses"]
