"""The server sub-commands (imported only when one of them runs)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from oslo_config import cfg

from acceld import conf as config
from acceld import rpc
from acceld.cmd import wiring


def run(command: str, rest: list[str]) -> int:
    if command == "db":
        return _db(rest)
    conf = config.load(rest)
    wiring.setup_logging(conf)
    return {"serve": serve, "api": api, "conductor": conductor, "agent": agent}[command](conf)


def _db(rest: list[str]) -> int:
    if not rest or rest[0] not in ("upgrade", "version"):
        print("usage: acceld db upgrade|version [--config-file F]", file=sys.stderr)
        return 2
    conf = config.load(rest[1:])
    db = wiring.database(conf)
    if rest[0] == "upgrade":
        wiring.migrate(db)
    print(wiring.migration.version(db) or "empty")
    return 0


def serve(conf: cfg.ConfigOpts) -> int:
    """All in one process on the embedded default."""
    db = wiring.database(conf)
    wiring.migrate(db)
    transport = rpc.LocalTransport()
    cond, cond_server = wiring.start_conductor(conf, db, transport)
    agent_mgr, agent_server = wiring.start_agent(conf, transport)
    httpd = wiring.make_http_server(conf, wiring.api_app(conf, db, transport))
    wiring.LOG.info("acceld serve listening on http://%s:%d (database %s)",
                    conf.api.host_ip, conf.api.port, db.url)
    return _run_http(httpd, [agent_mgr.stop, agent_server.stop, cond_server.stop, cond.stop,
                             transport.close])


def _until_signal(stops: list[Callable[[], object]]) -> int:
    """Run until SIGTERM/SIGINT, then call ``stops`` in order."""
    try:
        wiring.wait_for_signal(threading.Event())
    finally:
        for fn in stops:
            fn()
    return 0


def _run_http(httpd: object, stops: list[Callable[[], object]]) -> int:
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    return _until_signal([httpd.shutdown, *stops])


def _require_bus(conf: cfg.ConfigOpts, what: str) -> None:
    if not conf.transport_url:
        raise SystemExit(f"acceld {what} needs [DEFAULT] transport_url (RabbitMQ); "
                         "use `acceld serve` for the all-in-one default")


def api(conf: cfg.ConfigOpts) -> int:
    _require_bus(conf, "api")
    db = wiring.database(conf)
    transport = rpc.make_transport(conf)
    httpd = wiring.make_http_server(conf, wiring.api_app(conf, db, transport))
    wiring.LOG.info("acceld api listening on http://%s:%d", conf.api.host_ip, conf.api.port)
    return _run_http(httpd, [transport.close])


def conductor(conf: cfg.ConfigOpts) -> int:
    _require_bus(conf, "conductor")
    db = wiring.database(conf)
    transport = rpc.make_transport(conf)
    manager, server = wiring.start_conductor(conf, db, transport)
    wiring.LOG.info("acceld conductor %s running", conf.host)
    return _until_signal([server.stop, manager.stop, transport.close])


def agent(conf: cfg.ConfigOpts) -> int:
    _require_bus(conf, "agent")
    transport = rpc.make_transport(conf)
    manager, server = wiring.start_agent(conf, transport)
    wiring.LOG.info("acceld agent %s running drivers %s", manager.host,
                    ", ".join(conf.agent.enabled_drivers))
    return _until_signal([manager.stop, server.stop, transport.close])

