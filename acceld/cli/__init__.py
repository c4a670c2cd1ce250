"""Operator command-line client for acceld.

The CLI talks to the acceld REST API (see ``docs/api-v1.md``) only; it never imports
server modules, so it can be installed and run on any operator workstation.
Entry point: :func:`acceld.cli.shell.main`.
"""

# The server commands, run by ``acceld.cmd.main`` before the CLI sees them, and their line
# in ``acceld --help``.
SERVER_COMMANDS = {
    "serve": "API, conductor and agent in one process (SQLite, fake devices)",
    "api": "run the REST API (needs a database and RabbitMQ)",
    "conductor": "run a conductor (needs a database and RabbitMQ)",
    "agent": "run this host's agent (needs RabbitMQ, never the database)",
    "db": "database schema: `db upgrade` or `db version`",
}
