"""[api] options: the REST API listener and its authentication."""

from __future__ import annotations

from oslo_config import cfg

from acceld import limits

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
    cfg.IntOpt("max_arqs_per_profile", default=limits.PROFILE_ARQS, min=1, max=4096,
               help="Most accelerators one device profile may ask for: the sum of its "
                    "`resources:<RC>` amounts over all its groups, which is the number of "
                    "accelerator requests one `POST /v2/accelerator_requests` creates. A "
                    "profile asking for more is refused (400) when it is created, and one "
                    "stored before (or over a lowered limit) is refused when accelerator "
                    "requests are created from it; it can always be deleted."),
    cfg.IntOpt("max_uri_length", default=8192, min=256,
               help="Longest request target (path and query) accepted, in bytes; a longer "
                    "one is a 414."),
    cfg.IntOpt("max_header_size", default=65536, min=1024,
               help="Largest total size of the request's header fields (names and "
                    "values), in bytes; a larger one is a 431."),
    cfg.IntOpt("workers", default=16, min=1,
               help="Threads running requests in `acceld api` / `acceld serve` (more "
                    "connections than this wait, read and parked by the server's I/O "
                    "thread). The database pool is sized from it."),
    cfg.IntOpt("processes", min=1, sample_default="<the number of CPUs>",
               help="Processes serving the API in `acceld api` / `acceld serve`: the "
                    "command's own and `processes - 1` worker processes it starts (and "
                    "restarts when one dies), each with `workers` threads and its own "
                    "database pool, each listening on the port (SO_REUSEPORT: the kernel "
                    "spreads the connections over them). Worker "
                    "processes of `acceld serve` reach its conductor and agent through "
                    "it. Default: one per CPU this process may run on."),
    cfg.IntOpt("backlog", default=1024, min=1,
               help="Listen backlog: connections the kernel queues before they are "
                    "accepted (capped by net.core.somaxconn)."),
    cfg.IntOpt("connection_limit", default=2048, min=1,
               help="Most client connections open at once (keep-alive ones included); "
                    "more wait in the backlog. The open-file limit is raised to fit it "
                    "when the hard limit allows."),
    cfg.IntOpt("client_timeout", default=60, min=1,
               help="Seconds a client connection may stay silent (an idle keep-alive "
                    "connection, or a slow client mid-request) before it is closed."),
    cfg.IntOpt("shutdown_timeout", default=30, min=0,
               help="On SIGTERM, seconds the requests already received get to finish "
                    "before the server closes what is left."),
]
