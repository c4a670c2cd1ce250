"""Argument parsing and dispatch for the ``acceld`` operator CLI.

``acceld serve|api|conductor|agent|db`` are dispatched elsewhere; every other argv is
handed to :func:`main`, which talks to the REST API only (``docs/api-v1.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from acceld.cli import commands
from acceld.cli.client import DEFAULT_URL, Client, CliError, keystone_token

Handler = Callable[[Client, argparse.Namespace], int]

FORMATS = ("table", "json")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _add_format(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS keeps a sub-command from overwriting a -f given before the verb.
    parser.add_argument(
        "-f", "--format", choices=FORMATS, default=argparse.SUPPRESS,
        help="output format (default: table)",
    )


def _verb(
    subparsers: Any, name: str, handler: Handler, help_text: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_text, description=help_text
    )
    _add_format(parser)
    parser.set_defaults(handler=handler)
    return parser


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--url", default=env("ACCELD_URL") or DEFAULT_URL,
        help="acceld API endpoint (env ACCELD_URL, default %(default)s)",
    )
    parser.add_argument(
        "--token", default=env("ACCELD_TOKEN"),
        help="token sent as X-Auth-Token (env ACCELD_TOKEN)",
    )
    for opt, var in (
        ("auth-url", "OS_AUTH_URL"),
        ("username", "OS_USERNAME"),
        ("password", "OS_PASSWORD"),
        ("project-name", "OS_PROJECT_NAME"),
        ("user-domain-name", "OS_USER_DOMAIN_NAME"),
        ("project-domain-name", "OS_PROJECT_DOMAIN_NAME"),
    ):
        parser.add_argument(
            f"--os-{opt}", default=env(var),
            help=f"keystone {opt.replace('-', ' ')} (env {var})",
        )
    parser.add_argument(
        "--timeout", type=float, default=30.0,
        help="HTTP timeout in seconds (default %(default)s)",
    )
    parser.add_argument(
        "-f", "--format", choices=FORMATS, default="table",
        help="output format (default: table)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="log requests and show tracebacks"
    )


def _add_accelerator_verbs(subparsers: Any) -> None:
    acc = subparsers.add_parser(
        "accelerator", help="manage accelerators", description="manage accelerators"
    )
    acc_sub = acc.add_subparsers(dest="acc_verb", metavar="ACTION")
    acc_sub.required = True

    p = _verb(acc_sub, "list", commands.acc_list, "list accelerators")
    p.add_argument("--host")
    p.add_argument("--state")
    p.add_argument("--device-type")
    p.add_argument("--instance-uuid")
    p.add_argument("--limit", type=_positive_int)
    p.add_argument("--marker")

    p = _verb(acc_sub, "show", commands.acc_show, "show one accelerator")
    p.add_argument("uuid", metavar="UUID")

    p = _verb(acc_sub, "create", commands.acc_create, "declare an accelerator")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--uuid")

    p = _verb(acc_sub, "set-ready", commands.acc_set_ready, "move to state ready")
    p.add_argument("uuid", metavar="UUID")
    p = _verb(acc_sub, "set-inactive", commands.acc_set_inactive, "move to state inactive")
    p.add_argument("uuid", metavar="UUID")

    p = _verb(acc_sub, "set-specs", commands.acc_set_specs, "replace acc_specs")
    p.add_argument("uuid", metavar="UUID")
    p.add_argument("--specs", required=True, type=_json_object, help="JSON object")
    p.add_argument(
        "--revision", type=_non_negative_int,
        help="expected revision (default: read it from the server first)",
    )

    p = _verb(acc_sub, "attach", commands.acc_attach, "attach to an instance or host")
    p.add_argument("uuid", metavar="UUID")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--instance", metavar="INSTANCE_UUID")
    group.add_argument("--host")

    p = _verb(acc_sub, "detach", commands.acc_detach, "detach an accelerator")
    p.add_argument("uuid", metavar="UUID")

    p = _verb(acc_sub, "stats", commands.acc_stats,
              "current statistics of an accelerator (read from its agent)")
    p.add_argument("uuid", metavar="UUID")


def _add_seed_verbs(subparsers: Any) -> None:
    p = _verb(subparsers, "driver-list", commands.driver_list, "list drivers per host")
    p.add_argument("--host")
    p.add_argument("--long", action="store_true",
                   help="also show errors and why discovery found what it found")

    _verb(subparsers, "service-list", commands.service_list, "list acceld services")

    p = _verb(
        subparsers, "discover-services", commands.discover_services,
        "ask agents to rediscover devices and list the services of each backend",
    )
    p.add_argument("--host")

    p = _verb(subparsers, "deployable-program", commands.deployable_program,
              "load an image into a deployable (an FPGA)")
    p.add_argument("uuid", metavar="DEPLOYABLE_UUID")
    image = p.add_mutually_exclusive_group(required=True)
    image.add_argument("--image-uuid", help="Glance image id")
    image.add_argument("--image-path",
                       help="absolute path on the agent's host ([fpga_driver] "
                            "local_image_dirs)")
    p.add_argument("--sha256", required=True, help="SHA-256 of the image (64 hex digits)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to this long for the programming to finish")

    p = _verb(subparsers, "deployable-program-status", commands.deployable_program_status,
              "show the newest program operation of a deployable")
    p.add_argument("uuid", metavar="DEPLOYABLE_UUID")

    for name, handler in (
        ("install-driver", commands.install_driver),
        ("uninstall-driver", commands.uninstall_driver),
        ("update-driver", commands.update_driver),
    ):
        p = _verb(subparsers, name, handler, name.replace("-", " "))
        p.add_argument("name", metavar="NAME")
        p.add_argument("--host")

    p = _verb(
        subparsers, "attach-instance", commands.attach_instance,
        "attach an accelerator to an instance",
    )
    p.add_argument("instance_uuid", metavar="INSTANCE_UUID")
    p.add_argument("--accelerator", required=True, metavar="UUID")

    p = _verb(
        subparsers, "detach-instance", commands.detach_instance,
        "detach one or all accelerators of an instance",
    )
    p.add_argument("instance_uuid", metavar="INSTANCE_UUID")
    p.add_argument("--accelerator", metavar="UUID")


def _add_placement_verbs(subparsers: Any) -> None:
    placement = subparsers.add_parser("placement", help="Placement sync")
    sub = placement.add_subparsers(dest="placement_verb", metavar="VERB")
    sub.required = True
    p = _verb(sub, "sync", commands.placement_sync,
              "show the plan that makes Placement equal reality, and apply it")
    p.add_argument("--host")
    p.add_argument("--dry-run", action="store_true", help="only show the plan")
    _verb(sub, "status", commands.placement_status, "last sync and sync state per host")


def build_parser() -> argparse.ArgumentParser:
    """Build the argparse tree of global options and verbs."""
    parser = argparse.ArgumentParser(
        prog="acceld", description="acceld operator client (REST API v1)"
    )
    _add_global_options(parser)
    subparsers = parser.add_subparsers(dest="verb", metavar="COMMAND")
    subparsers.required = True
    _add_accelerator_verbs(subparsers)
    _add_placement_verbs(subparsers)
    _add_seed_verbs(subparsers)
    return parser


def _setup_logging(debug: bool) -> None:
    logger = logging.getLogger("acceld.cli")
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    if debug and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("DEBUG: %(message)s"))
        logger.addHandler(handler)


def _resolve_token(args: argparse.Namespace) -> str | None:
    if args.token:
        return str(args.token)
    if args.os_auth_url:
        return keystone_token(
            args.os_auth_url, args.os_username, args.os_password,
            args.os_project_name, args.os_user_domain_name,
            args.os_project_domain_name, args.timeout,
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # usage errors (2) and --help (0)
        return exc.code if isinstance(exc.code, int) else 2
    _setup_logging(args.debug)
    client: Client | None = None
    try:
        client = Client(args.url, _resolve_token(args), args.timeout)
        handler: Handler = args.handler
        return handler(client, args)
    except CliError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI must not dump tracebacks
        if args.debug:
            traceback.print_exc()
        print(f"ERROR: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()


if __name__ == "__main__":
    sys.exit(main())
