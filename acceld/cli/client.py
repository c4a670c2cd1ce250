"""HTTP client for the acceld REST API, with the CLI's error model: :class:`ApiError` for a
non-2xx answer, :class:`CliError` for a failed connection, :class:`TimedOut` for none in
time (it may still take effect). The token (``X-Auth-Token``) is never logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import requests

LOG = logging.getLogger("acceld.cli")

DEFAULT_URL = "http://127.0.0.1:6666"


class CliError(Exception):
    """A failure the CLI reports as ``ERROR: <message>`` and exit status ``exit_code``."""

    exit_code = 1


class TimedOut(CliError):
    """Not finished in time (``--wait``, ``--timeout``; it may still finish): exit 3."""

    exit_code = 3


class ApiError(CliError):
    """A non-2xx answer from the server."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status} {detail}")
        self.status = status
        self.detail = detail


def error_detail(response: requests.Response) -> str:
    """``errors[0].detail`` (or ``title``) of an error body, else the raw text."""
    try:
        first = response.json()["errors"][0]
        if first.get("detail") or first.get("title"):
            return str(first.get("detail") or first.get("title"))
    except (ValueError, LookupError, TypeError, AttributeError):
        pass
    return (response.text or "").strip() or (response.reason or "").strip() or "(empty response)"


def _short_reason(exc: requests.RequestException) -> str:
    """Reduce urllib3's nested retry error to its root cause for a one-line message."""
    inner = exc.args[0] if exc.args else None
    reason = getattr(inner, "reason", None)
    return str(reason or exc)


class Client:
    """A thin JSON client bound to one acceld endpoint."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers.update({"Accept": "application/json", "User-Agent": "acceld-cli"})
        if token:
            self._session.headers["X-Auth-Token"] = token

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                body: Any = None) -> tuple[Any, Mapping[str, str]]:
        """Send one request: (decoded body, headers), or ApiError / CliError."""
        url = self.url + path
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        data = None if body is None else json.dumps(body)
        LOG.debug("REQ %s %s params=%s body=%s", method, url, clean, data)
        try:
            resp = self._session.request(
                method, url, params=clean or None, data=data, timeout=self.timeout,
                headers=None if data is None else {"Content-Type": "application/json"})
        except requests.Timeout as exc:
            raise TimedOut(f"no answer from acceld at {self.url} within {self.timeout:g}s "
                           "(--timeout)") from exc
        except requests.ConnectionError as exc:
            raise CliError(f"cannot reach acceld at {self.url}: {_short_reason(exc)}") from exc
        except requests.RequestException as exc:  # e.g. a streamed answer broken off
            raise CliError(f"{method} {path}: the answer of acceld at {self.url} broke off: "
                           f"{_short_reason(exc)}") from exc
        LOG.debug("RESP %s %s request_id=%s", resp.status_code, url,
                  resp.headers.get("x-openstack-request-id"))
        if not 200 <= resp.status_code < 300:
            raise ApiError(resp.status_code, error_detail(resp))
        try:
            parsed = resp.json() if resp.content else None
        except ValueError as exc:
            raise CliError(f"invalid JSON in {resp.status_code} answer from {url}") from exc
        return parsed, resp.headers     # header names case-insensitive

    def close(self) -> None:
        self._session.close()

    # the decoded body of one request
    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)[0]

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)[0]

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)[0]

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body=body)[0]

    def delete(self, path: str) -> Any:
        """The answer's body (None for a 204)."""
        return self.request("DELETE", path)[0]


def keystone_token(auth_url: str, username: str | None, password: str | None,
                   project_name: str | None, user_domain_name: str | None,
                   project_domain_name: str | None, timeout: float) -> str:
    """Get a token from Keystone through keystoneauth1 (an optional dependency)."""
    try:
        from keystoneauth1 import exceptions as ks_exc
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3
    except ImportError as exc:
        raise CliError("keystone auth needs the keystoneauth1 package") from exc
    auth = v3.Password(auth_url=auth_url, username=username, password=password,
                       project_name=project_name,
                       user_domain_name=user_domain_name or "Default",
                       project_domain_name=project_domain_name or "Default")
    try:
        token = ks_session.Session(auth=auth, timeout=timeout).get_token()
    except ks_exc.ClientException as exc:
        raise CliError(f"keystone authentication at {auth_url} failed: {exc}") from exc
    if not token:
        raise CliError(f"keystone at {auth_url} returned no token")
    return str(token)
