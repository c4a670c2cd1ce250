"""Builds the services from a parsed ConfigOpts (shared by serve/api/conductor/agent)."""

from __future__ import annotations

import logging
import signal
import socketserver
import threading
from typing import Any
from wsgiref import simple_server

from oslo_config import cfg

from acceld import rpc
from acceld.agent.manager import AgentManager
from acceld.api import deploy
from acceld.clients import nova as nova_client
from acceld.clients import placement as placement_client
from acceld.conductor.manager import ConductorManager
from acceld.conductor.placement_apply import PlacementSyncer
from acceld.conf import nova as nova_conf
from acceld.conf import placement as placement_conf
from acceld.db import migration
from acceld.db.api import Database, default_sqlite_url

LOG = logging.getLogger(__name__)


def setup_logging(conf: cfg.ConfigOpts) -> None:
    logging.basicConfig(level=logging.DEBUG if conf.debug else logging.INFO,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s")
    logging.getLogger("oslo.messaging").setLevel(logging.WARNING)
    logging.getLogger("amqp").setLevel(logging.WARNING)


def database(conf: cfg.ConfigOpts) -> Database:
    url = conf.database.connection or default_sqlite_url(conf.state_path)
    return Database(url)


def placement_syncer(conf: cfg.ConfigOpts, db: Database) -> PlacementSyncer | None:
    """The Placement sync of the conductor, or None when [placement] is not configured."""
    if not placement_conf.enabled(conf):
        return None
    client = placement_client.PlacementClient(placement_client.make_adapter(conf))
    return PlacementSyncer(conf, db, client)


def nova_notifier(conf: cfg.ConfigOpts) -> nova_client.NovaClient | None:
    """The client that tells Nova about resolved binds, or None when [nova] is not
    configured (no events: Nova then sees only the binds resolved before its compute
    reads the ARQs)."""
    if not nova_conf.enabled(conf):
        return None
    return nova_client.NovaClient(nova_client.make_adapter(conf))


def start_conductor(conf: cfg.ConfigOpts, db: Database,
                    transport: rpc.Transport) -> tuple[ConductorManager, rpc.Server]:
    manager = ConductorManager(conf, db, rpc.AgentClient(transport, timeout=conf.rpc_timeout),
                               placement=placement_syncer(conf, db),
                               nova=nova_notifier(conf))
    server = transport.serve(rpc.CONDUCTOR_TOPIC, conf.host, manager)
    manager.start()
    server.start()
    return manager, server


def start_agent(conf: cfg.ConfigOpts, transport: rpc.Transport,
                host: str | None = None, **collaborators: Any) -> tuple[AgentManager,
                                                                         rpc.Server]:
    """The agent with its RPC server; ``collaborators`` replace the drivers' real sysfs,
    command runner, NVML, ... (tests and demos on fake hosts)."""
    manager = AgentManager(conf, rpc.ConductorClient(transport), host=host, **collaborators)
    server = transport.serve(rpc.AGENT_TOPIC, manager.host, manager)
    server.start()
    manager.start()
    return manager, server


class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        LOG.debug("%s %s", self.address_string(), format % args)

    def get_environ(self) -> dict[str, Any]:
        """wsgiref's environ, without the ``text/plain`` it invents for a request that
        named no Content-Type (other servers leave CONTENT_TYPE out, and the API answers
        a missing type differently from a wrong one)."""
        environ = super().get_environ()
        if self.headers.get("Content-Type") is None:
            environ.pop("CONTENT_TYPE", None)
        return environ


def make_http_server(conf: cfg.ConfigOpts, app: Any) -> simple_server.WSGIServer:
    return simple_server.make_server(conf.api.host_ip, conf.api.port, app,
                                     server_class=_ThreadingServer,
                                     handler_class=_QuietHandler)


def api_app(conf: cfg.ConfigOpts, db: Database, transport: rpc.Transport) -> Any:
    return deploy.make_app(conf, db, rpc.ConductorClient(transport))


def migrate(db: Database) -> None:
    migration.upgrade(db)


def wait_for_signal(stop: threading.Event) -> None:
    def handler(signum: int, _frame: Any) -> None:
        LOG.info("signal %d: stopping", signum)
        stop.set()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop.wait(1):
        pass
