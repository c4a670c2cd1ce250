"""Responses as plain WSGI apps, what every handler and error returns: what webob's
Response sends for these answers, without its header bookkeeping. HEAD gets the headers
and no body; a long list's body is :class:`Streamed` (no ``Content-Length``).
"""

from __future__ import annotations

import http
from collections.abc import Callable, Generator, Iterable
from typing import Any

import webob.exc

# Status lines as webob wrote them (its reason phrases, which stay put across Python
# versions; 3.13 renamed 413 and 422 in http.HTTPStatus), HTTPStatus's for the rest.
_REASONS = {status.value: f"{status.value} {status.phrase}" for status in http.HTTPStatus}
_REASONS.update({code: f"{code} {cls.title}" for code, cls in webob.exc.status_map.items()})


class Streamed:
    """A body produced while it is sent: the WSGI iterable of a generator's chunks, which
    ``close()`` (the server's, when the answer ends, PEP 3333) closes."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: Generator[bytes, None, None]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Generator[bytes, None, None]:
        return self._chunks

    def close(self) -> None:
        self._chunks.close()


class Reply:
    """A finished response: a status, header tuples and the body (bytes or :class:`Streamed`)."""

    __slots__ = ("status_int", "headerlist", "body")

    def __init__(self, status: int, body: bytes | Streamed,
                 headerlist: list[tuple[str, str]]) -> None:
        self.status_int, self.body, self.headerlist = status, body, headerlist

    @property
    def status(self) -> str:
        return _REASONS.get(self.status_int, str(self.status_int))

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response(self.status, self.headerlist)
        return self.iterable(environ)

    def iterable(self, environ: dict[str, Any]) -> Iterable[bytes]:
        """The WSGI iterable of the body for this request (HEAD: none; a streamed body
        is closed unread)."""
        body = self.body
        if environ.get("REQUEST_METHOD") != "HEAD":
            return [body] if isinstance(body, bytes) else body
        if not isinstance(body, bytes):
            body.close()
        return []


def body_response(body: bytes, status: int = 200,
                  headers: dict[str, str] | None = None) -> Reply:
    """A response carrying ``body``, JSON already encoded."""
    headerlist = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if headers:
        headerlist.extend(headers.items())
    return Reply(status, body, headerlist)


def streamed_response(chunks: Generator[bytes, None, None]) -> Reply:
    """A 200 JSON answer whose body is ``chunks``, sent as they come (no length)."""
    return Reply(200, Streamed(chunks), [("Content-Type", "application/json")])


def empty_response(status: int, headers: dict[str, str] | None = None) -> Reply:
    """No body: ``Content-Length: 0``, except on the statuses that cannot have one."""
    headerlist = [] if status in (204, 304) else [("Content-Length", "0")]
    if headers:
        headerlist.extend(headers.items())
    return Reply(status, b"", headerlist)
