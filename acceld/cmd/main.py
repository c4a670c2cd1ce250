"""The ``acceld`` command: the server sub-commands (``acceld.cli.SERVER_COMMANDS``; their
options go to oslo.config: ``--config-file``, ``--config-dir``) run here, every other verb
in the operator CLI. ``acceld help COMMAND`` is ``acceld COMMAND --help``."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

from acceld.cli import SERVER_COMMANDS

# prometheus-client's multiprocess switch (acceld.api.metrics), read when it is imported
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# the commands that serve the API from ``[api] processes`` processes
API_COMMANDS = ("serve", "api")


def _metrics_dir() -> None:
    """An empty directory of its own for the API processes' request metrics, set before
    prometheus-client is imported here or in a worker process (which inherits it), and
    removed when this process exits; one the environment names already is used as it is
    (it must be emptied before each start, as prometheus-client's documentation says)."""
    if os.environ.get(METRICS_DIR_ENV):
        return
    path = tempfile.mkdtemp(prefix="acceld-metrics-")
    os.environ[METRICS_DIR_ENV] = path
    atexit.register(shutil.rmtree, path, ignore_errors=True)


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["help"] and len(argv) == 2 and argv[1] in SERVER_COMMANDS:
        argv = [argv[1], "--help"]
    if not argv or argv[0] not in SERVER_COMMANDS:
        from acceld.cli import shell
        return shell.main(argv)
    if argv[0] in API_COMMANDS and "--help" not in argv and "-h" not in argv:
        _metrics_dir()
    # Server modules are imported only here, so the operator CLI starts fast.
    from acceld.cmd import servers
    return servers.run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
