"""Builds the services from a parsed ConfigOpts: shared by the `acceld` server commands
(acceld.cmd) and the WSGI entry point (acceld.wsgi)."""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import waitress
from oslo_config import cfg

from acceld import clients, rpc
from acceld.agent.manager import AgentManager
from acceld.api import deploy
from acceld.clients import nova as nova_client
from acceld.clients import placement as placement_client
from acceld.conductor.manager import ConductorManager
from acceld.conductor.placement_syncer import PlacementSyncer
from acceld.conf import nova as nova_conf
from acceld.conf import placement as placement_conf
from acceld.db.api import Database, default_sqlite_url

LOG = logging.getLogger(__name__)


def setup_logging(conf: cfg.ConfigOpts) -> None:
    """oslo.log's set-up, as in every OpenStack service: ``log_file`` / ``log_dir`` (else
    standard output; ``use_stderr`` adds standard error), ``debug``, ``default_log_levels``,
    ``log_config_append``, syslog/journald. A line logged while an API request is served
    carries its request id (the request's oslo.context context, :mod:`acceld.api.deploy`)."""
    from oslo_log import log

    log.setup(conf, "acceld")


# Pooled connections kept for the conductor's and the agent's own work (RPC calls,
# heartbeats, reports, periodic syncs) beside one per API worker thread: API load can
# then never take them all.
SERVICE_CONNECTIONS = 8


def database(conf: cfg.ConfigOpts, *, api: bool = False, services: bool = False) -> Database:
    """The database of ``[database] connection`` (the embedded SQLite one by default),
    its connection pool sized for what runs in this process: one connection per API
    worker thread when it serves the API (a request holds at most one at a time, so the
    API's load queues on its threads, never on the pool) plus
    :data:`SERVICE_CONNECTIONS` when the conductor runs here. The overflow allows as
    many again for bursts, and at least oslo.db's default of 50 (the conductor's RPC
    executor and Placement sync threads); a thread waits up to a minute for one."""
    url = conf.database.connection or default_sqlite_url(conf.state_path)
    size = (conf.api.workers if api else 0) + (SERVICE_CONNECTIONS if services else 0)
    if not size:
        return Database(url)
    return Database(url, max_pool_size=size, max_overflow=max(size, 50), pool_timeout=60)


def placement_syncer(conf: cfg.ConfigOpts, db: Database) -> PlacementSyncer | None:
    """The Placement sync of the conductor, or None when [placement] is not configured."""
    if not placement_conf.enabled(conf):
        return None
    client = placement_client.PlacementClient(clients.make_adapter(conf, "placement"))
    return PlacementSyncer(conf, db, client)


def nova_notifier(conf: cfg.ConfigOpts) -> nova_client.NovaClient | None:
    """The client that tells Nova about resolved binds, or None when [nova] is not
    configured (no events: Nova then sees only the binds resolved before its compute
    reads the ARQs)."""
    if not nova_conf.enabled(conf):
        return None
    return nova_client.NovaClient(clients.make_adapter(conf, "nova"))


def start_conductor(conf: cfg.ConfigOpts, db: Database,
                    transport: rpc.Transport) -> tuple[ConductorManager, rpc.Server]:
    manager = ConductorManager(conf, db, rpc.AgentClient(transport, timeout=conf.rpc_timeout),
                               placement=placement_syncer(conf, db),
                               nova=nova_notifier(conf))
    server = transport.serve(rpc.CONDUCTOR_TOPIC, conf.host, manager)
    manager.start()
    server.start()
    return manager, server


def start_agent(conf: cfg.ConfigOpts, transport: rpc.Transport,
                host: str | None = None, **collaborators: Any) -> tuple[AgentManager,
                                                                         rpc.Server]:
    """The agent with its RPC server; ``collaborators`` replace the drivers' real sysfs,
    command runner, NVML, ... (tests and demos on fake hosts)."""
    manager = AgentManager(conf, rpc.ConductorClient(transport), host=host, **collaborators)
    server = transport.serve(rpc.AGENT_TOPIC, manager.host, manager)
    server.start()
    manager.start()
    return manager, server


class HttpServer:
    """The API's HTTP server: waitress (chosen by measurement, see docs/deployment.md).

    One I/O thread reads each request whole (slow clients hold no worker) and keeps the
    idle keep-alive connections; ``[api] workers`` threads run the app. The server's own
    hard limits on headers and body sit above the app's ([api] max_header_size,
    max_request_body_size, max_uri_length, enforced in ``deploy.Front`` with the JSON
    error body), so a client normally meets the app's limits and JSON errors.
    :meth:`stop` is the graceful stop of SIGTERM.
    """

    def __init__(self, conf: cfg.ConfigOpts, app: Any, sock: socket.socket) -> None:
        """Serves ``app`` on ``sock``, a listening socket (:func:`listen`), maybe shared
        with other processes (:class:`ApiProcesses`)."""
        api = conf.api
        self.grace = api.shutdown_timeout
        _fit_open_files(api.connection_limit + 256)   # connections, the database, logs
        self._server = waitress.create_server(
            app, sockets=[sock], threads=api.workers, backlog=api.backlog,
            connection_limit=api.connection_limit,
            channel_timeout=api.client_timeout,
            # the server's own caps, above the app's limits (its errors are plain text):
            # a request line and headers of up to twice the app's limits, a body of up to
            # four times the app's (buffered by the server, then refused by the app)
            max_request_header_size=2 * (api.max_header_size + api.max_uri_length),
            max_request_body_size=4 * api.max_request_body_size,
            asyncore_use_poll=True,      # select() stops at 1024 descriptors
            ident="acceld", clear_untrusted_proxy_headers=False,
            expose_tracebacks=False)
        self._thread = threading.Thread(target=self._server.run, name="http", daemon=True)

    @property
    def port(self) -> int:
        """The port listened on (the one asked for, or the kernel's for port 0)."""
        return int(self._server.effective_port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, let every request already begun (being received, queued or
        running) finish and its answer be sent, for at most ``[api] shutdown_timeout``
        seconds, closing each keep-alive connection once it is idle; then stop the
        workers and close what is left. Waitress has no drain of its own: this closes its
        listener (``del_channel``, as its ``close`` does), reads its server's
        ``active_channels`` and each channel's ``request``/``requests`` and sets
        ``will_close``, as its own idle-connection sweep (``maintenance``) does."""
        server = self._server
        server.accepting = False              # the loop no longer polls the listener,
        server.del_channel()                  # and new connections are refused
        server.socket.close()
        deadline = time.monotonic() + self.grace
        while server.active_channels and time.monotonic() < deadline:
            for channel in list(server.active_channels.values()):
                # idle: no request being received, none received and unanswered
                if not channel.requests and channel.request is None:
                    channel.will_close = True
            server.pull_trigger()             # wake the loop to close them
            time.sleep(0.05)
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
        for channel in list(server.active_channels.values()):
            channel.will_close = True         # past the grace period
        server.close()
        self._thread.join(5)


def api_processes(conf: cfg.ConfigOpts) -> int:
    """``[api] processes``, by default one per CPU this process may run on."""
    return conf.api.processes or len(os.sched_getaffinity(0))


def listen(conf: cfg.ConfigOpts) -> socket.socket:
    """The API's listening socket, on ``[api] host_ip``/``port`` (port 0: the kernel's)."""
    family = socket.AF_INET6 if ":" in conf.api.host_ip else socket.AF_INET
    return socket.create_server((conf.api.host_ip, conf.api.port), family=family,
                                backlog=conf.api.backlog)


# what an API worker process finds in its environment: the descriptor of the listening
# socket, the pid of the process that started it and, under `acceld serve`, the
# descriptor of its link to that process
LISTEN_FD, PARENT, LINK_FD = "ACCELD_API_LISTEN_FD", "ACCELD_API_PARENT", "ACCELD_API_LINK_FD"


class ApiProcesses:
    """The API of `acceld serve` and `acceld api`: ``app`` served by an
    :class:`HttpServer` in this process and, with ``[api] processes`` above one, by that
    many less one worker processes (``acceld.cmd.api_worker``, each an :class:`HttpServer`
    of ``[api] workers`` threads, its own database pool and the configuration of
    ``argv``), all accepting on the one listening socket bound here, so the kernel hands
    each connection to whichever is free. Under ``acceld serve`` (``link`` given) a worker
    reaches the conductor and the agent of this process over a socket pair
    (:class:`rpc.LinkServer`); under ``acceld api`` it has its own connection to the bus.
    A worker that exits while the service runs is logged and started again (after a
    second, longer while they keep dying at start); a worker stops when this process
    is gone. :meth:`stop` is the graceful stop of all of them."""

    def __init__(self, conf: cfg.ConfigOpts, argv: list[str], app: Any,
                 link: rpc.LocalTransport | None = None) -> None:
        self._argv, self._link, self._threads = argv, link, conf.api.workers
        self._sock = listen(conf)
        self._http = HttpServer(conf, app, self._sock)
        self.port = self._http.port
        self._count = api_processes(conf) - 1
        self._workers: list[tuple[subprocess.Popen[bytes], rpc.LinkServer | None, float]] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="api-processes",
                                         daemon=True)

    def _spawn(self) -> tuple[subprocess.Popen[bytes], rpc.LinkServer | None, float]:
        env = dict(os.environ, **{LISTEN_FD: str(self._sock.fileno()),
                                  PARENT: str(os.getpid())})
        fds = [self._sock.fileno()]
        ours = theirs = None
        if self._link is not None:
            ours, theirs = socket.socketpair()
            env[LINK_FD] = str(theirs.fileno())
            fds.append(theirs.fileno())
        try:
            proc = subprocess.Popen([sys.executable, "-m", "acceld.cmd.api_worker",
                                     *self._argv], env=env, pass_fds=fds)
        finally:
            if theirs is not None:
                theirs.close()
        server = None
        if ours is not None and self._link is not None:
            server = rpc.LinkServer(self._link, ours, self._threads)
            server.start()
        LOG.info("API worker process %d started", proc.pid)
        return proc, server, time.monotonic()

    def start(self) -> None:
        self._http.start()
        if self._count:
            self._workers = [self._spawn() for _ in range(self._count)]
            self._watcher.start()

    def _watch(self) -> None:
        backoff = 1.0
        while not self._stopping.wait(backoff):
            died_young = False
            for i, (proc, server, started) in enumerate(self._workers):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                LOG.error("API worker process %d exited with %s; starting another",
                          proc.pid, proc.returncode)
                if server is not None:
                    server.stop()
                died_young |= time.monotonic() - started < 5
                self._workers[i] = self._spawn()
            # workers that die within seconds of their start would die again at once
            backoff = min(backoff * 2, 30.0) if died_young else 1.0

    def stop(self) -> None:
        """Each worker gets SIGTERM (its :meth:`HttpServer.stop`) while this process's
        server stops the same way; the socket stops listening once all have closed it.
        A worker still running ``shutdown_timeout`` + 10 s later is killed."""
        self._stopping.set()
        if self._watcher.is_alive():
            self._watcher.join(5)
        for proc, _server, _started in self._workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        self._http.stop()
        deadline = time.monotonic() + self._http.grace + 10
        for proc, server, _started in self._workers:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                LOG.warning("API worker process %d did not stop; killing it", proc.pid)
                proc.kill()
                proc.wait()
            if server is not None:
                server.stop()


def _fit_open_files(wanted: int) -> None:
    """Raise the soft limit on open files to ``wanted`` when it is lower and the hard
    limit allows (systemd's default soft limit is 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def api_app(conf: cfg.ConfigOpts, db: Database,
            transport: rpc.Transport | rpc.LinkTransport) -> Any:
    return deploy.make_app(conf, db, rpc.ConductorClient(transport))


def wait_for_signal(stop: threading.Event, parent: int | None = None) -> None:
    """Until SIGTERM or SIGINT, or (``parent`` given) until that process is no longer
    this one's parent (it died: an API worker must not outlive its service)."""
    def handler(signum: int, _frame: Any) -> None:
        LOG.info("signal %d: stopping", signum)
        stop.set()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop.wait(1):
        if parent is not None and os.getppid() != parent:
            LOG.warning("parent process %d is gone: stopping", parent)
            return
