"""Nova's compute API on loopback, as far as acceld calls it: ``POST
/v2.1/os-server-external-events``, and ``GET /v2.1/servers/{uuid}`` for a v1 attach or
a hot plug (a server of :attr:`Receiver.servers`, with its project as ``tenant_id`` and
its host as ``OS-EXT-SRV-ATTR:host``, as an admin sees it; else 404). The ``receiver``
fixture (``tests/conftest.py``) gives a test one; :meth:`Receiver.events` checks every
body against the schema Nova 34.0.0 itself applies at microversion 2.82.
"""

from __future__ import annotations

import http.server
import json
import threading
import warnings
from typing import Any

import jsonschema

with warnings.catch_warnings():  # nova's imports pull in eventlet (not patched: no warning)
    warnings.simplefilter("ignore")
    from nova.api.openstack.compute.schemas import server_external_events as nova_schema


class Receiver:
    """Nova's API endpoint on 127.0.0.1: records each request, answers ``reply``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: tuple[int, Any] = (200, None)   # None: echo the events, code 200
        self.hold: threading.Event | None = None    # set: answer (each waits at most 10 s)
        self.answered = 0
        self.servers: dict[str, dict[str, str]] = {}   # uuid -> {"tenant_id", "host"}
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 10

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                uuid = self.path.removeprefix("/v2.1/servers/")
                found = receiver.servers.get(uuid)
                if uuid == self.path or found is None:
                    self._answer(404, {"itemNotFound": {"code": 404,
                                                        "message": "Instance not found."}})
                    return
                self._answer(200, {"server": {
                    "id": uuid, "status": "ACTIVE", "tenant_id": found["tenant_id"],
                    "OS-EXT-SRV-ATTR:host": found["host"]}})

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.requests.append({"path": self.path, "body": body,
                                          "headers": dict(self.headers)})
                if receiver.hold is not None:
                    receiver.hold.wait(10)
                status, reply = receiver.reply
                if reply is None:
                    reply = {"events": [dict(e, code=200) for e in body["events"]]}
                receiver.answered += 1      # before the client can have the answer
                self._answer(status, reply)

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v2.1"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def add(self, uuid: str, project: str, host: str) -> None:
        """A server Nova knows: ``project``'s, running on ``host``."""
        self.servers[uuid] = {"tenant_id": project, "host": host}

    def acceld_config(self) -> dict[str, Any]:
        """acceld's ``[nova]`` options for this endpoint."""
        return {"auth_type": "admin_token", "endpoint": self.url, "token": "x",
                "connect_retry_delay": 0.01, "status_code_retry_delay": 0.01}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def events(self) -> list[list[dict[str, str]]]:
        """Each request's events, after checking it is what Nova 34.0.0 accepts."""
        out = []
        for req in self.requests:
            assert req["path"] == "/v2.1/os-server-external-events"
            assert req["headers"]["OpenStack-API-Version"] == "compute 2.82"
            assert req["headers"]["X-Auth-Token"] == "x"
            jsonschema.validate(req["body"], nova_schema.create_v282,
                                format_checker=jsonschema.FormatChecker())
            out.append(req["body"]["events"])
        return out
