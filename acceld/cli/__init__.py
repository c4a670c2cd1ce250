"""Operator command-line client of the acceld REST API (``docs/api-v1.md``); it imports
no server module, so it runs on any operator workstation."""

# The server commands, run by ``acceld.cmd.main`` before the CLI sees them, and their line
# in ``acceld --help``.
SERVER_COMMANDS = {
    "serve": "API, conductor and agent in one process (SQLite, fake devices)",
    "api": "run the REST API (needs a database and RabbitMQ)",
    "conductor": "run a conductor (needs a database and RabbitMQ)",
    "agent": "run this host's agent (needs RabbitMQ, never the database)",
    "metrics-collector": "serve the agents' device usage as Prometheus metrics (needs "
                         "RabbitMQ)",
    "db": "database schema: `db upgrade` or `db version`",
}
