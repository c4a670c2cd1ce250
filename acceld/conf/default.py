"""[DEFAULT] options: identity of this host and where local state lives (the logging
options, ``debug`` and ``log_file`` among them, are oslo.log's)."""

from __future__ import annotations

import os
import socket

from oslo_config import cfg

GROUP = None


def _default_state_path() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                             "state")
    return os.path.join(base, "acceld")


OPTS = [
    cfg.StrOpt("host", default=socket.gethostname(), sample_default="<hostname>",
               help="Name of this host: the agent's RPC server name and the hostname its "
                    "devices are reported under."),
    cfg.StrOpt("state_path", default=_default_state_path(),
               sample_default="~/.local/state/acceld",
               help="Directory for local state: the embedded SQLite database of "
                    "`acceld serve` and the agent journal."),
    cfg.IntOpt("rpc_timeout", default=60, min=1,
               help="Seconds an RPC call waits for its answer."),
]
