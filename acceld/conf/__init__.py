"""Configuration: one module per option group, assembled into a private ConfigOpts that
:func:`load` parses once in ``cmd/`` (or the WSGI factory) and passes down (no global
CONF). Each installed driver (``acceld.drivers`` entry points, found through stevedore)
brings its own group (its class's ``conf_group`` and ``conf_opts``)."""

from __future__ import annotations

import os

from keystonemiddleware import auth_token
from oslo_config import cfg, types
from oslo_db import options as db_options
from oslo_log import log
from stevedore import extension

import acceld.threading_backend  # noqa: F401 - must precede oslo.messaging
from acceld.conf import (
    agent,
    api,
    conductor,
    coordination,
    default,
    glance,
    health,
    hypervisor,
    ledger,
    metrics,
    notifications,
    nova,
    placement,
    service_client,
)

# Groups of plain options (GROUP, OPTS), then those of keystoneauth clients (registered
# by acceld.conf.service_client), in the sample config's order.
PLAIN_MODULES = (default, api, agent, conductor, coordination, hypervisor, health, ledger,
                 metrics, notifications)
CLIENT_MODULES = (glance, placement, nova)
DRIVER_NAMESPACE = "acceld.drivers"
# oslo.log's library levels, with oslo.messaging at WARNING (it logs every connection
# and reconnection at INFO) and waitress's task queue at ERROR (it logs a WARNING for every
# request that waits for a free thread: under load, a line per request).
LOG_LEVELS = [level for level in log.get_default_log_levels()
              if not level.startswith(("oslo.messaging=", "oslo_messaging="))] + [
    "oslo.messaging=WARNING", "oslo_messaging=WARNING", "waitress.queue=ERROR"]

DEFAULT_CONFIG_FILE = "/etc/acceld/acceld.conf"


def register_all(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """Register every option group on ``conf``: acceld's, the drivers' and the libraries'."""
    for module in PLAIN_MODULES:
        conf.register_opts(module.OPTS, group=module.GROUP)
    for module in CLIENT_MODULES:
        service_client.register(conf, module)
    for group, opts in driver_opts():
        conf.register_opts(opts, group=group)
    set_lib_defaults()
    log.register_options(conf)
    db_options.set_defaults(conf)
    from oslo_messaging import opts as messaging_opts  # after the threading backend

    for group, opts in messaging_opts.list_opts():
        if group in (None, "DEFAULT"):
            conf.register_opts(opts)
        elif group == "oslo_messaging_notifications":   # read by acceld.notify
            conf.register_opts(opts, group=group)
    for group, name in MESSAGING_SWITCHES:
        conf.register_opt(cfg.Opt(name, type=_off, default=False,
                                  help="Not supported by acceld: must be false."),
                          group=group)
    # oslo.messaging defaults transport_url to "rabbit://"; acceld's default is the
    # in-process bus, and the split services refuse to start without an explicit URL.
    conf.set_default("transport_url", None)
    for group, opts in auth_token.list_opts():
        conf.register_opts(opts, group=group)
    return conf


def set_lib_defaults() -> None:
    """acceld's defaults of library options (the ``oslo.config.opts.defaults`` entry point)."""
    log.set_defaults(default_log_levels=LOG_LEVELS)


def driver_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The option groups of every installed driver that can be imported."""
    drivers = extension.ExtensionManager(DRIVER_NAMESPACE)
    return [item for ext in drivers for item in ext.plugin.list_opts()]


# oslo.messaging's RPC client and server read whether its metrics and tracing are on from
# the ConfigOpts they are given, but declare those two groups only on the global CONF, in
# private modules. acceld runs neither: its ConfigOpts has the two switches, off, and a
# value that turns one on is refused when it is read.
MESSAGING_SWITCHES = (("oslo_messaging_metrics", "metrics_enabled"),
                      ("oslo_messaging_tracing", "tracing_enabled"))


def _off(value: object) -> bool:
    if value is True or types.Boolean()(value):
        raise ValueError("acceld does not run oslo.messaging's metrics or tracing")
    return False


def load(args: list[str] | None = None, *, config_files: list[str] | None = None,
         overrides: dict[str, dict[str, object]] | None = None,
         command: str | None = None, description: str | None = None,
         cli_opts: list[cfg.Opt] | None = None) -> cfg.ConfigOpts:
    """A fresh, parsed ConfigOpts: ``overrides`` maps a group (``DEFAULT`` too) to option
    values; ``command``, ``description`` and ``cli_opts`` make one sub-command's line."""
    conf = register_all(cfg.ConfigOpts())
    if cli_opts:
        conf.register_cli_opts(cli_opts)
    if config_files is None:
        config_files = [DEFAULT_CONFIG_FILE] if os.path.exists(DEFAULT_CONFIG_FILE) else []
    prog = f"acceld {command}" if command else None
    conf(args or [], project="acceld", prog=prog, description=description,
         usage="%(prog)s [options]" if command else None,
         default_config_files=config_files, validate_default_values=True)
    overrides = overrides or {}
    for module in CLIENT_MODULES:
        group = getattr(conf, module.GROUP)
        auth_type = overrides.get(module.GROUP, {}).get("auth_type") or group.auth_type
        if auth_type:  # the plugin's own options (endpoint, token, ...) exist only now
            service_client.register_plugin_opts(conf, module.GROUP, auth_type)
    for group, values in overrides.items():
        for name, value in values.items():
            conf.set_override(name, value, group=None if group == "DEFAULT" else group)
    return conf
