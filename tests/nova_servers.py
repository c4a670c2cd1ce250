"""Nova's compute API on loopback, as far as a v1 attach or a hot plug asks it: ``GET
/v2.1/servers/{uuid}`` answers a server of :attr:`NovaServers.servers` (its project as
``tenant_id`` and its host as ``OS-EXT-SRV-ATTR:host``, what an admin sees) or 404;
``POST /v2.1/os-server-external-events`` answers every event 200. Point ``[nova]`` at it
with :meth:`NovaServers.acceld_config`.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class NovaServers:
    def __init__(self) -> None:
        self.servers: dict[str, dict[str, str]] = {}   # uuid -> {"tenant_id", "host"}
        nova = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 10

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                uuid = self.path.removeprefix("/v2.1/servers/")
                found = nova.servers.get(uuid)
                if uuid == self.path or found is None:
                    self._answer(404, {"itemNotFound": {"code": 404,
                                                        "message": "Instance not found."}})
                    return
                self._answer(200, {"server": {
                    "id": uuid, "status": "ACTIVE", "tenant_id": found["tenant_id"],
                    "OS-EXT-SRV-ATTR:host": found["host"]}})

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._answer(200, {"events": [dict(e, code=200) for e in body["events"]]})

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
        self.servers[uuid] = {"tenant_id": project, "host": host}

    def acceld_config(self) -> dict[str, Any]:
        """acceld's ``[nova]`` options for this endpoint."""
        return {"auth_type": "admin_token", "endpoint": self.url, "token": "x",
                "connect_retry_delay": 0.01, "status_code_retry_delay": 0.01}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
