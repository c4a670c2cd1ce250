"""[api] options: the REST API listener and its authentication."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "api"

OPTS = [
    cfg.HostAddressOpt("host_ip", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=6666, help="Port the API listens on."),
    cfg.StrOpt("auth_strategy", default="noauth", choices=["noauth", "keystone"],
               help="noauth: trust the X-Auth-Token conventions of the embedded default "
                    "(never expose it); keystone: keystonemiddleware auth_token."),
    cfg.StrOpt("public_endpoint",
               help="Base URL used in links and Location headers (default: the request's "
                    "host URL)."),
    cfg.IntOpt("max_limit", default=1000, min=1,
               help="Largest page a list request may ask for with `limit`."),
    cfg.IntOpt("max_request_body_size", default=114688, min=1024,
               help="Largest request body accepted, in bytes; a larger one is a 413 before "
                    "it is read (the default is oslo.middleware's sizelimit default)."),
    cfg.IntOpt("workers", default=4, min=1,
               help="Threads serving requests in `acceld api` / `acceld serve`."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
