"""Argument parsing and dispatch of the ``acceld`` operator CLI (every verb but the server
ones, which :mod:`acceld.cmd.main` runs and which are listed here for ``--help``)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from acceld.cli import SERVER_COMMANDS, commands
from acceld.cli.client import DEFAULT_URL, Client, CliError, TimedOut, keystone_token
from acceld.cli.output import print_error, safe

Handler = Callable[[Client, argparse.Namespace], int]

FORMATS = ("table", "json")

EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 130
EXIT_FAILED, EXIT_TIMED_OUT = CliError.exit_code, TimedOut.exit_code
EXIT_STATUS = f"""exit status:
  {EXIT_OK}    done
  {EXIT_FAILED}    failed: acceld refused it or could not do it, could not be reached, or
       only part of a multi-host or multi-device operation succeeded
  {EXIT_USAGE}    usage error (also: acceld without a command)
  {EXIT_TIMED_OUT}    timed out: a --wait or the HTTP --timeout ran out; it may still finish
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
Every failure prints one line, "ERROR: <reason>", on stderr; waits print progress on
stderr; stdout carries only the result (a table, or JSON with -f json)."""
VERB_EPILOG = "exit status: 0 done, 1 failed, 2 usage error, 3 timed out (acceld --help explains)"


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _number(kind: Callable[[str], Any], minimum: float, what: str, rule: str
            ) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` of at least ``minimum`` (else ``rule``)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from exc
        if not minimum <= value < math.inf:   # NaN and infinities too
            raise argparse.ArgumentTypeError(rule)
        return value
    return parse


_seconds = _number(float, 0, "a number of seconds", "must be a finite number >= 0")
_page_size = _number(int, 1, "an integer", "must be >= 1")


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _verb(subparsers: Any, name: str, handler: Handler, help_text: str,
          description: str | None = None, uuid: str | None = None,
          formats: tuple[str, ...] = FORMATS) -> argparse.ArgumentParser:
    """A verb: its line in the list of commands, its --help's head, its UUID argument,
    the output ``formats`` it offers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_text, description=description or help_text, epilog=VERB_EPILOG)
    # SUPPRESS keeps a sub-command from overwriting a -f given before the verb.
    parser.add_argument("-f", "--format", choices=formats, default=argparse.SUPPRESS,
                        help="output format (default: table)")
    parser.set_defaults(handler=handler)
    if uuid:
        parser.add_argument("uuid", metavar=uuid)
    return parser


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--url", default=env("ACCELD_URL") or DEFAULT_URL,
                        help="acceld API endpoint (env ACCELD_URL, default %(default)s)")
    parser.add_argument("--token", default=env("ACCELD_TOKEN"),
                        help="token sent as X-Auth-Token (env ACCELD_TOKEN)")
    for opt in ("auth-url", "username", "password", "project-name", "user-domain-name",
                "project-domain-name"):
        var = "OS_" + opt.replace("-", "_").upper()
        parser.add_argument(f"--os-{opt}", default=env(var),
                            help=f"keystone {opt.replace('-', ' ')} (env {var})")
    parser.add_argument("--timeout", type=_positive_seconds, default=30.0,
                        help="seconds to wait for each HTTP answer (default %(default)s)")
    parser.add_argument("-f", "--format", choices=FORMATS, default="table",
                        help="output format (default: table)")
    parser.add_argument("--debug", action="store_true", help="log requests and show tracebacks")


def _add_accelerator_verbs(subparsers: Any) -> None:
    acc = subparsers.add_parser(
        "accelerator", help="manage accelerators (list, show, set-ready, attach, detach, ...)",
        description="manage accelerators", epilog=VERB_EPILOG)
    acc_sub = acc.add_subparsers(dest="acc_verb", metavar="ACTION", required=True)

    p = _verb(acc_sub, "list", commands.acc_list, "list accelerators")
    for option in ("--host", "--state", "--device-type", "--instance-uuid"):
        p.add_argument(option)
    p.add_argument("--limit", type=_page_size)
    p.add_argument("--marker")

    _verb(acc_sub, "show", commands.acc_show, "show one accelerator", uuid="UUID")

    p = _verb(acc_sub, "create", commands.acc_create, "declare an accelerator")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--uuid")

    for target, step in (("ready", "install"), ("inactive", "uninstall")):
        p = _verb(acc_sub, f"set-{target}", commands.acc_set_state,
                  f"move to state {target} (the driver's {step})",
                  f"move to state {target}: the device's agent runs the driver's {step} "
                  "step (fails when the device ends in state error)", uuid="UUID")
        p.set_defaults(target=target)
        p.add_argument("--wait", type=_seconds, default=60.0, metavar="SECONDS",
                       help=f"wait up to this long for the {step} to finish, with progress "
                            "on stderr; 0: do not wait (default %(default)s)")

    p = _verb(acc_sub, "set-specs", commands.acc_set_specs, "replace acc_specs", uuid="UUID")
    p.add_argument("--specs", required=True, type=_json_object, help="JSON object")
    p.add_argument("--revision", type=_number(int, 0, "an integer", "must be >= 0"),
                   help="expected revision (default: read it from the server first)")

    p = _verb(acc_sub, "attach", commands.acc_attach, "attach to an instance or host", uuid="UUID")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--instance", metavar="INSTANCE_UUID")
    group.add_argument("--host")

    _verb(acc_sub, "detach", commands.acc_detach, "detach an accelerator",
          "detach an accelerator (fails when it is not attached)", uuid="UUID")
    _verb(acc_sub, "stats", commands.acc_stats,
          "current statistics of an accelerator (read from its agent)", uuid="UUID")


def _add_seed_verbs(subparsers: Any) -> None:
    p = _verb(subparsers, "driver-list", commands.driver_list, "list drivers per host")
    p.add_argument("--host")
    p.add_argument("--long", action="store_true",
                   help="also show errors and why discovery found what it found")

    _verb(subparsers, "service-list", commands.service_list, "list acceld services")

    p = _verb(subparsers, "discover-services", commands.discover_services,
              "ask agents to rediscover; list the services of each backend",
              "ask agents to rediscover devices and list the services of each backend (fails "
              "when an agent does not answer)")
    p.add_argument("--host")

    p = _verb(subparsers, "deployable-program", commands.deployable_program,
              "load an image into a deployable (an FPGA)", uuid="DEPLOYABLE_UUID")
    image = p.add_mutually_exclusive_group(required=True)
    image.add_argument("--image-uuid", help="Glance image id")
    image.add_argument("--image-path",
                       help="absolute path on the agent's host ([fpga_driver] "
                            "local_image_dirs)")
    p.add_argument("--sha256", required=True, help="SHA-256 of the image (64 hex digits)")
    p.add_argument("--wait", type=_seconds, default=0.0, metavar="SECONDS",
                   help="wait up to this long for the programming to finish, with "
                        "progress on stderr (default %(default)s: do not wait)")

    _verb(subparsers, "deployable-program-status", commands.deployable_program_status,
          "show the newest program operation of a deployable", uuid="DEPLOYABLE_UUID")

    for action in ("install", "uninstall", "update"):
        p = _verb(subparsers, f"{action}-driver", commands.driver_action,
                  f"{action} a driver on one agent host or all",
                  f"{action} a driver on one agent host or all (fails when it fails on any)")
        p.set_defaults(action=action)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--host")

    p = _verb(subparsers, "attach-instance", commands.acc_attach,
              "attach an accelerator to an instance")
    p.set_defaults(host=None)
    p.add_argument("instance", metavar="INSTANCE_UUID")
    p.add_argument("--accelerator", dest="uuid", required=True, metavar="UUID")

    p = _verb(subparsers, "detach-instance", commands.detach_instance,
              "detach one or all accelerators of an instance",
              "detach one or all accelerators of an instance (fails when any stays attached)")
    p.add_argument("instance_uuid", metavar="INSTANCE_UUID")
    p.add_argument("--accelerator", metavar="UUID")


def _add_hot_plug_verbs(subparsers: Any) -> None:
    p = _verb(subparsers, "guest-list", commands.guest_list,
              "list the instances the agents' hypervisors run (hot plug's targets)",
              "list the instances the agents' hypervisors run (fails when an agent does "
              "not answer)")
    p.add_argument("--host")
    p = _verb(subparsers, "arq-attach", commands.arq_attach,
              "attach an accelerator request's device to a running instance (live)",
              uuid="ARQ_UUID")
    p.add_argument("--instance", required=True, metavar="INSTANCE_UUID")
    p = _verb(subparsers, "arq-detach", commands.arq_detach,
              "detach an accelerator request's device from its instance (live)",
              "detach an accelerator request's device from its instance: done when the "
              "guest released it (fails after --wait while it has not)", uuid="ARQ_UUID")
    p.add_argument("--wait", type=_seconds, default=60.0, metavar="SECONDS",
                   help="ask again up to this long while the guest has not released the "
                        "device, with progress on stderr (default %(default)s)")


def _add_ledger_verbs(subparsers: Any) -> None:
    when = ("an ISO 8601 date or UTC date and time (2026-01-31, 2026-01-31T08:00:00Z, "
            "or with an offset)")
    p = _verb(subparsers, "usage", commands.usage,
              "device-hours per project (or device, host, instance) from the ledger",
              "device-hours held in [--since, --until) from the allocation ledger, per "
              "project or --group-by; a holding still open counts up to --until (default: "
              "now). Administrators only.", formats=(*FORMATS, "csv"))
    p.add_argument("--project", help="only this project's holdings")
    p.add_argument("--since", required=True, help=when)
    p.add_argument("--until", help=f"{when}; default: now")
    p.add_argument("--group-by", choices=("project", "device", "host", "instance"),
                   default="project")
    p = _verb(subparsers, "ledger-list", commands.ledger_list,
              "list allocation ledger rows (bind, unbind, attach, detach)",
              formats=(*FORMATS, "csv"))
    for option in ("--project", "--device", "--arq", "--since", "--until"):
        p.add_argument(option)
    p.add_argument("--limit", type=_page_size)
    p.add_argument("--marker", help="the id of the row after which the page starts")


def _add_health_verbs(subparsers: Any) -> None:
    _verb(subparsers, "device-health", commands.device_health,
          "show a device's health life cycle, maintenance and who holds it", uuid="UUID")
    for action, text in (
            ("quarantine", "take a device out of scheduling (reserved in Placement; bound "
                           "guests keep running and are listed)"),
            ("release", "re-admit a suspect or quarantined device"),
            ("reset", "reset a quarantined or failed device with its driver (fails when "
                      "the reset fails; the device is then failed)")):
        p = _verb(subparsers, f"device-{action}", commands.device_health_action, text,
                  uuid="UUID")
        p.set_defaults(action=action)
        p.add_argument("--reason", help="a note kept with the change")
        if action == "reset":
            p.add_argument("--wait", type=_seconds, default=120.0, metavar="SECONDS",
                           help="follow the reset up to this long, with progress on "
                                "stderr; 0: do not wait (default %(default)s)")
    p = _verb(subparsers, "device-drain", commands.device_maintenance,
              "put a device in maintenance: no new binds, existing ones kept (listed on "
              "stderr); drained once they are gone", uuid="UUID")
    p.set_defaults(drain=True)
    p.add_argument("--reason", help="a note kept with the change")
    p = _verb(subparsers, "device-undrain", commands.device_maintenance,
              "return a device from maintenance to service", uuid="UUID")
    p.set_defaults(drain=False)


def _add_explain_verbs(subparsers: Any) -> None:
    policy = dict(choices=("none", "isolate"),
                  help="whether the profile's groups may share a provider (Nova's "
                       "group_policy; default none)")
    p = _verb(subparsers, "profile-availability", commands.profile_availability,
              "how many instances of a device profile fit now, where, and why not elsewhere")
    p.add_argument("profile", metavar="PROFILE", help="device profile name or uuid")
    p.add_argument("--group-policy", default="none", **policy)
    p = _verb(subparsers, "arq-dry-run", commands.arq_dry_run,
              "would a device profile's accelerator requests bind now, and to what",
              "would a device profile's accelerator requests bind now, and to which "
              "devices; nothing is created (fails when they would not bind, with the "
              "first reason)")
    p.add_argument("profile", metavar="PROFILE", help="device profile name")
    p.add_argument("--host", help="the host Nova chose (default: the host with the most "
                                  "room)")
    p.add_argument("--group-policy", **policy)


def _add_placement_verbs(subparsers: Any) -> None:
    placement = subparsers.add_parser("placement", help="Placement: sync, status",
                                      description="Placement sync", epilog=VERB_EPILOG)
    sub = placement.add_subparsers(dest="placement_verb", metavar="VERB", required=True)
    p = _verb(sub, "sync", commands.placement_sync,
              "show the plan that makes Placement equal reality, and apply it")
    p.add_argument("--host")
    p.add_argument("--dry-run", action="store_true", help="only show the plan")
    _verb(sub, "status", commands.placement_status, "last sync and sync state per host")


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors escaped: they quote what was typed."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {safe(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the argparse tree of global options and verbs."""
    parser = _Parser(
        prog="acceld",
        description="acceld: its servers (serve, api, conductor, agent, db) and the operator\n"
                    "client of its REST API (every other command; --url, or ACCELD_URL).\n"
                    "`acceld COMMAND --help` or `acceld help COMMAND` describes one command.",
        epilog=EXIT_STATUS,
        # every command on one line: room for the longest name
        formatter_class=functools.partial(argparse.RawDescriptionHelpFormatter,
                                          max_help_position=32, width=100),
    )
    _add_global_options(parser)
    subparsers = parser.add_subparsers(dest="verb", metavar="COMMAND", title="commands",
                                       required=True)
    for name, help_text in SERVER_COMMANDS.items():   # listed; acceld.cmd.main runs them
        subparsers.add_parser(name, help=help_text, add_help=False).set_defaults(server=name)
    _add_accelerator_verbs(subparsers)
    _add_placement_verbs(subparsers)
    _add_seed_verbs(subparsers)
    _add_hot_plug_verbs(subparsers)
    _add_ledger_verbs(subparsers)
    _add_health_verbs(subparsers)
    _add_explain_verbs(subparsers)
    p = subparsers.add_parser("help", help="show the help of acceld or of one command",
                              description="show the help of acceld or of one command",
                              epilog=VERB_EPILOG)
    p.add_argument("topic", nargs="*", metavar="COMMAND")
    p.set_defaults(help_topic=True)
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
        return keystone_token(args.os_auth_url, args.os_username, args.os_password,
                              args.os_project_name, args.os_user_domain_name,
                              args.os_project_domain_name, args.timeout)
    return None


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit status of --help (0) or a usage error (2)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def main(argv: list[str]) -> int:
    """Run the CLI on ``argv``; return the exit status."""
    parser = build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if getattr(args, "server", None):
        parser.print_usage(sys.stderr)
        print_error(f"'{args.server}' takes no operator options before it: "
                    f"run `acceld {args.server} --help`")
        return EXIT_USAGE
    if getattr(args, "help_topic", False):
        if not args.topic:
            parser.print_help()
            return EXIT_OK
        result = _parse(parser, [*args.topic, "--help"])
        return result if isinstance(result, int) else EXIT_USAGE
    _setup_logging(args.debug)
    try:
        with contextlib.closing(Client(args.url, _resolve_token(args), args.timeout)) as client:
            handler: Handler = args.handler
            return handler(client, args)
    except KeyboardInterrupt:
        print_error("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the CLI must not dump tracebacks
        if args.debug:
            traceback.print_exc()
        if isinstance(exc, CliError):
            print_error(str(exc))
            return exc.exit_code
        print_error(f"unexpected {type(exc).__name__}: {exc}")
        return EXIT_FAILED
