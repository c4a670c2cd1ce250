"""The ``acceld`` command: the server sub-commands (``acceld.cli.SERVER_COMMANDS``; their
options go to oslo.config: ``--config-file``, ``--config-dir``) run here, every other verb
in the operator CLI. ``acceld help COMMAND`` is ``acceld COMMAND --help``."""

from __future__ import annotations

import sys

from acceld.cli import SERVER_COMMANDS


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["help"] and len(argv) == 2 and argv[1] in SERVER_COMMANDS:
        argv = [argv[1], "--help"]
    if not argv or argv[0] not in SERVER_COMMANDS:
        from acceld.cli import shell
        return shell.main(argv)
    # Server modules are imported only here, so the operator CLI starts fast.
    from acceld.cmd import servers
    return servers.run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
