"""The server sub-commands (imported only when one of them runs)."""

from __future__ import annotations

import sys

from oslo_config import cfg

from acceld import conf as config
from acceld import rpc, wiring
from acceld.db import migration

DESCRIPTIONS = {
    "serve": "Run acceld all in one: the REST API, the conductor and an agent for this "
             "host in one process (with [api] processes above one, API worker processes "
             "beside it), on the embedded SQLite database under state_path (or "
             "[database] connection) and the in-process bus. Runs until SIGTERM/SIGINT.",
    "api": "Run the REST API server alone; it reaches the conductor over [DEFAULT] "
           "transport_url (RabbitMQ) and reads the database of [database] connection. "
           "Runs until SIGTERM/SIGINT.",
    "conductor": "Run the conductor: it owns the inventory and the device life cycle, "
                 "answers the API and the agents over [DEFAULT] transport_url and "
                 "publishes to Placement when [placement] is configured.",
    "agent": "Run the agent of this host ([DEFAULT] host): it discovers devices through "
             "the drivers of [agent] enabled_drivers and reports them to the conductor "
             "over [DEFAULT] transport_url.",
    "metrics-collector": "Run the usage collector: it consumes the agents' usage "
                         "notifications over the notification transport ([DEFAULT] "
                         "transport_url) and serves the latest sample of each device as "
                         "Prometheus gauges on [metrics] collector_host/collector_port.",
    "db": "Manage the database schema of [database] connection (the embedded SQLite "
          "database under state_path when unset): `upgrade` applies every pending "
          "migration, `version` prints the schema version; both print it.",
}
DB_ACTIONS = ("upgrade", "version")

# `--host`/`--port` of the servers that listen; [api] host_ip/port when not given
LISTEN_OPTS = [
    cfg.HostAddressOpt("host", dest="listen_host", metavar="ADDRESS",
                       help="Address the API listens on (overrides [api] host_ip)."),
    cfg.PortOpt("port", dest="listen_port", help="Port the API listens on (overrides "
                "[api] port)."),
]


def run(command: str, rest: list[str]) -> int:
    if command == "db":
        return _db(rest)
    listens = command in ("serve", "api")
    conf = config.load(rest, command=command, description=DESCRIPTIONS[command],
                       cli_opts=LISTEN_OPTS if listens else None)
    if listens:
        for given, option in (("listen_host", "host_ip"), ("listen_port", "port")):
            if conf[given] is not None:
                conf.set_override(option, conf[given], group="api")
    wiring.setup_logging(conf)
    if command == "serve":
        return serve(conf, rest)
    _require_bus(conf, command)
    if command == "api":
        return api(conf, rest)
    return {"conductor": conductor, "agent": agent,
            "metrics-collector": metrics_collector}[command](conf)


def _require_bus(conf: cfg.ConfigOpts, command: str) -> None:
    """Every server but ``serve`` talks over RabbitMQ; without it, stop at once."""
    if not conf.transport_url:
        raise SystemExit(f"acceld {command} needs [DEFAULT] transport_url (RabbitMQ); "
                         "use `acceld serve` for the all-in-one default")


def _db(rest: list[str]) -> int:
    action = rest[0] if rest and rest[0] in DB_ACTIONS else None
    conf = config.load(rest[1:] if action else rest,
                       command="db {" + ",".join(DB_ACTIONS) + "}",
                       description=DESCRIPTIONS["db"])
    if action is None:       # (--help has exited already)
        print(f"usage: acceld db {{{','.join(DB_ACTIONS)}}} [options]; see acceld db --help",
              file=sys.stderr)
        return 2
    db = wiring.database(conf)
    if action == "upgrade":
        migration.upgrade(db)
    print(migration.version(db) or "empty")
    return 0


def serve(conf: cfg.ConfigOpts, argv: list[str]) -> int:
    """All in one process (and its API worker processes) on the embedded default."""
    db = wiring.database(conf, api=True, services=True)
    migration.upgrade(db)
    transport = rpc.LocalTransport()
    cond, cond_server = wiring.start_conductor(conf, db, transport)
    agent_mgr, agent_server = wiring.start_agent(conf, transport)
    front = wiring.ApiProcesses(conf, argv, wiring.api_app(conf, db, transport), transport)
    front.start()
    wiring.LOG.info("acceld serve listening on http://%s:%d (database %s)",
                    conf.api.host_ip, front.port, db.url)
    return wiring.until_signal([front.stop, agent_mgr.stop, agent_server.stop,
                                cond_server.stop, cond.stop, transport.close])


def api(conf: cfg.ConfigOpts, argv: list[str]) -> int:
    transport = rpc.make_transport(conf)
    front = wiring.ApiProcesses(conf, argv, wiring.api_app(
        conf, wiring.database(conf, api=True), transport))
    front.start()
    wiring.LOG.info("acceld api listening on http://%s:%d", conf.api.host_ip, front.port)
    return wiring.until_signal([front.stop, transport.close])


def conductor(conf: cfg.ConfigOpts) -> int:
    db = wiring.database(conf, services=True)
    transport = rpc.make_transport(conf)
    manager, server = wiring.start_conductor(conf, db, transport)
    wiring.LOG.info("acceld conductor %s running", conf.host)
    return wiring.until_signal([server.stop, manager.stop, transport.close])


def agent(conf: cfg.ConfigOpts) -> int:
    transport = rpc.make_transport(conf)
    manager, server = wiring.start_agent(conf, transport)
    wiring.LOG.info("acceld agent %s running drivers %s", manager.host,
                    ", ".join(conf.agent.enabled_drivers))
    return wiring.until_signal([manager.stop, server.stop, transport.close])


def metrics_collector(conf: cfg.ConfigOpts) -> int:
    collector = wiring.UsageCollector(conf)
    collector.start()
    wiring.LOG.info("acceld metrics-collector serving /metrics on http://%s:%d",
                    conf.metrics.collector_host, collector.port)
    return wiring.until_signal([collector.stop])
