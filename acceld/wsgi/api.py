"""``acceld.wsgi.api:application``: the API for a WSGI server, configured from
``ACCELD_CONFIG_FILE`` (default ``/etc/acceld/acceld.conf``)."""

from __future__ import annotations

import os

from acceld import conf as config
from acceld import rpc, wiring


def init_application() -> object:
    path = os.environ.get("ACCELD_CONFIG_FILE", config.DEFAULT_CONFIG_FILE)
    conf = config.load([], config_files=[path] if os.path.exists(path) else [])
    wiring.setup_logging(conf)
    return wiring.api_app(conf, wiring.database(conf, api=True), rpc.make_transport(conf))


application = init_application() if os.environ.get("ACCELD_WSGI_AUTOLOAD", "1") == "1" else None
