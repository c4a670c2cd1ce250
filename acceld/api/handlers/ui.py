"""The fleet web view (``acceld/api/ui/``): a page, its script and its stylesheet, served
without authentication like version discovery. They hold no data: the script reads the
JSON API (``/v1/services``, ``/v1/accelerators``, ``/v2/accelerator_requests``,
``/v2/device_profiles``, ``/v1/ledger``, ``/v1/usage``; a device's ``/stats`` and a
profile's ``/availability`` when asked) with the user's token, so what it shows is what
those routes' policies let that user read (docs/fleet-view.md).

Each file is revalidated on every use (``Cache-Control: no-cache``) against its ETag (a
digest of its bytes, so a new release is picked up at once); a matching ``If-None-Match``
is a 304. Every answer carries a Content-Security-Policy that allows only this origin's
script, stylesheet and API (no inline code, no frames, no other origin).
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.resources

import webob

from acceld.api.reply import Reply

# The page's placeholder for where the API is mounted (``SCRIPT_NAME``: "" or devstack's
# "/accelerator"), which its asset URLs and the script's API URLs start with.
_ROOT_MARK = "{{root}}"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_COMMON = [("Cache-Control", "no-cache"), ("Content-Security-Policy", CSP),
           ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer")]
MEDIA_TYPES = {"index.html": "text/html; charset=utf-8",
               "fleet.js": "text/javascript; charset=utf-8",
               "fleet.css": "text/css; charset=utf-8"}


def source(name: str) -> str:
    """The text of one of the view's files, as shipped in the package."""
    return importlib.resources.files("acceld.api").joinpath("ui", name).read_text("utf-8")


@functools.lru_cache(maxsize=16)
def _file(name: str, root: str) -> tuple[bytes, str]:
    """(body, entity tag, unquoted) of ``name``; the page with its root filled in
    (HTML-escaped)."""
    text = source(name)
    if name == "index.html":
        text = text.replace(_ROOT_MARK, html.escape(root, quote=True))
    body = text.encode("utf-8")
    return body, hashlib.sha256(body).hexdigest()[:32]


def _serve(req: webob.Request, name: str) -> Reply:
    body, tag = _file(name, req.script_name if name == "index.html" else "")
    headers = [("ETag", f'"{tag}"'), *_COMMON]
    if tag in req.if_none_match:        # webob's matcher: "*", or the tags it lists
        return Reply(304, b"", headers)
    return Reply(200, body, [("Content-Type", MEDIA_TYPES[name]),
                             ("Content-Length", str(len(body))), *headers])


def page(req: webob.Request) -> Reply:
    """GET /ui -> 200 the fleet view's page (public; ``/ui/`` too): hosts, their devices
    and a summary, the ledger, a device's usage and a profile's fit, read from the API
    with the token the user gives it; 304 when ``If-None-Match`` names its ETag."""
    return _serve(req, "index.html")


def script(req: webob.Request) -> Reply:
    """GET /ui/fleet.js -> 200 the fleet view's script (public); 304 as the page."""
    return _serve(req, "fleet.js")


def stylesheet(req: webob.Request) -> Reply:
    """GET /ui/fleet.css -> 200 the fleet view's stylesheet (public); 304 as the page."""
    return _serve(req, "fleet.css")
