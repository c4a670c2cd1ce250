"""How every list is served, whole or by the page, in bounded memory (docs/api-v2.md,
"Lists and paging"): without ``limit`` every item, a long list streamed a batch at a time
(a database failure once it started raises from the body, so the server breaks the
connection rather than end a truncated body as if complete); with ``limit`` one page, and
while a next page exists ``"<key>_links": [{"rel": "next", "href": ...}]``.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol

import webob

from acceld.api import errors, util
from acceld.api.reply import streamed_response

LOG = logging.getLogger(__name__)

Item = dict[str, Any]
Present = Callable[[webob.Request, Item], Item]


class Listing(Protocol):
    """What a list function of ``acceld.objects`` returns: ``acceld.db.paging.Listing``
    (the api layer does not import it)."""

    items: list[Item]
    complete: bool
    limit: int | None

    def rest(self) -> Iterator[list[Item]]: ...


def page_params(req: webob.Request, q: dict[str, str]) -> tuple[int | None, str | None]:
    """``limit`` (None: every item) and ``marker`` (a canonical uuid, or None) of a list
    query whose schema checked their form; 400 for a limit above ``[api] max_limit``."""
    limit = int(q["limit"]) if "limit" in q else None
    most = util.state(req).api.max_limit
    if limit is not None and limit > most:
        raise errors.invalid(f"Invalid query field 'limit': {limit} is more than "
                             f"{most}, the most a page holds ([api] max_limit).")
    marker = util.canonical_uuid(q["marker"]) if "marker" in q else None
    return limit, marker


def respond(req: webob.Request, key: str, found: Listing, present: Present,
            marker_key: str = "uuid") -> util.Reply:
    """The answer ``{key: [...]}`` for ``found`` (see the module's doc), each item as
    ``present`` shows it; the next page's marker is the last item's ``marker_key``."""
    items = [present(req, item) for item in found.items]
    if found.limit is not None:
        body: dict[str, Any] = {key: items}
        if not found.complete:      # the request's URL with the next page's marker
            params = [(k, v) for k, v in req.GET.items() if k != "marker"]
            query = urllib.parse.urlencode([*params, ("marker", found.items[-1][marker_key])])
            href = f"{util.base_url(req)}{req.environ.get('PATH_INFO', '')}?{query}"
            body[f"{key}_links"] = [{"rel": "next", "href": href}]
        return util.json_response(body)
    if found.complete:
        return util.json_response({key: items})
    return streamed_response(_chunks(req, key, items, found.rest(), present))


def _chunks(req: webob.Request, key: str, first: list[Item],
            rest: Iterator[list[Item]], present: Present) -> Generator[bytes, None, None]:
    """``{key: [...]}`` as ``util.json_bytes`` writes it, a batch per chunk: ``first``
    (not empty), then each batch of ``rest`` as it is read."""
    yield util.json_bytes({key: first})[:-2]       # without the closing "]}"
    try:
        for batch in rest:
            yield b", " + util.json_bytes([present(req, item) for item in batch])[1:-1]
    except Exception:
        LOG.exception("%s %s: the list failed after its answer started; the connection "
                      "is broken off", req.method, req.path)
        raise
    yield b"]}"
