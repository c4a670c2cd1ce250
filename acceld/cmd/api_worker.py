"""An API worker process (started by :class:`acceld.wiring.ApiProcesses`, never by hand):
it serves the API on a socket of its own on its parent's port, with the configuration of its
command line, until SIGTERM/SIGINT."""

from __future__ import annotations

import os
import socket
import sys

from acceld import conf as config
from acceld import rpc, wiring
from acceld.cmd import servers


def main(argv: list[str]) -> int:
    conf = config.load(argv, command="api worker", description=__doc__,
                       cli_opts=servers.LISTEN_OPTS)
    wiring.setup_logging(conf)
    sock = wiring.listen(conf, port=int(os.environ[wiring.LISTEN_PORT]), shared=True)
    link = os.environ.get(wiring.LINK_FD)
    transport: rpc.Transport | rpc.LinkTransport = (
        rpc.LinkTransport(socket.socket(fileno=int(link))) if link is not None
        else rpc.make_transport(conf))
    httpd = wiring.HttpServer(conf, wiring.api_app(conf, wiring.database(conf, api=True),
                                                   transport), sock)
    httpd.start()
    ready = os.environ.get(wiring.READY_FD)
    if ready is not None:
        os.close(int(ready))          # the parent's wait for this worker ends
    return wiring.until_signal([httpd.stop, transport.close],
                               parent=int(os.environ[wiring.PARENT]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
