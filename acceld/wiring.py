"""Builds the services from a parsed ConfigOpts: shared by the `acceld` server commands
(acceld.cmd) and the WSGI entry point (acceld.wsgi)."""

from __future__ import annotations

import logging
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import waitress
from oslo_config import cfg

import acceld
from acceld import clients, notify, rpc, signals
from acceld.agent.manager import AgentManager
from acceld.api import deploy
from acceld.clients import nova as nova_client
from acceld.clients import placement as placement_client
from acceld.collector import usage
from acceld.conductor.manager import ConductorManager
from acceld.conductor.placement_syncer import PlacementSyncer
from acceld.conductor.ring import HostRing
from acceld.conf import nova as nova_conf
from acceld.conf import placement as placement_conf
from acceld.db.api import Database, default_sqlite_url

LOG = logging.getLogger(__name__)


def setup_logging(conf: cfg.ConfigOpts) -> None:
    """oslo.log's set-up, as in every OpenStack service (log_file, debug, syslog, ...)."""
    from oslo_log import log

    log.setup(conf, "acceld")


# Pooled connections kept for the conductor's and the agent's own work (RPC calls,
# heartbeats, reports, periodic syncs) beside one per API worker thread: API load can
# then never take them all.
SERVICE_CONNECTIONS = 8


def database(conf: cfg.ConfigOpts, *, api: bool = False, services: bool = False) -> Database:
    """The database of ``[database] connection`` (else the embedded SQLite one), its pool
    sized for what runs here: one connection per API worker thread (so load queues on
    the threads, never on the pool) plus :data:`SERVICE_CONNECTIONS` for the services."""
    url = conf.database.connection or default_sqlite_url(conf.state_path)
    size = (conf.api.workers if api else 0) + (SERVICE_CONNECTIONS if services else 0)
    if not size:
        return Database(url)
    return Database(url, max_pool_size=size, max_overflow=max(size, 50), pool_timeout=60)


def start_conductor(conf: cfg.ConfigOpts, db: Database,
                    transport: rpc.Transport) -> tuple[ConductorManager, rpc.Server]:
    """The conductor with its RPC server, its Placement sync when [placement] is
    configured and its Nova notifier when [nova] is."""
    placement = nova = None
    ring = HostRing(conf, conf.host)
    if placement_conf.enabled(conf):
        placement = PlacementSyncer(conf, db, placement_client.PlacementClient(
            clients.make_adapter(conf, "placement")), owns=ring.owns)
    if nova_conf.enabled(conf):
        nova = nova_client.NovaClient(clients.make_adapter(conf, "nova"))
    manager = ConductorManager(conf, db, rpc.AgentClient(transport, timeout=conf.rpc_timeout),
                               placement=placement, nova=nova, ring=ring,
                               peers=rpc.ConductorClient(transport),
                               notifier=notify.make_notifier(conf, acceld.CONDUCTOR_BINARY))
    server = transport.serve(rpc.CONDUCTOR_TOPIC, conf.host, manager)
    manager.start()
    server.start()
    return manager, server


def start_agent(conf: cfg.ConfigOpts, transport: rpc.Transport, host: str | None = None,
                **collaborators: Any) -> tuple[AgentManager, rpc.Server]:
    """The agent with its RPC server; ``collaborators`` replace its real sysfs, NVML, ..."""
    if collaborators.get("notifier") is None:
        collaborators["notifier"] = notify.make_notifier(conf, acceld.AGENT_BINARY, host)
    manager = AgentManager(conf, rpc.ConductorClient(transport), host=host, **collaborators)
    server = transport.serve(rpc.AGENT_TOPIC, manager.host, manager)
    server.start()
    manager.start()
    return manager, server


class UsageCollector:
    """`acceld metrics-collector`: an oslo.messaging notification listener (pool ``[metrics]
    usage_pool`` on ``[oslo_messaging_notifications] topics``, the notification transport)
    feeding a :class:`usage.UsageStore`, and prometheus-client's HTTP server serving its
    registry on ``[metrics] collector_host``/``collector_port`` (port 0: the kernel's)."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        import oslo_messaging

        opts = conf.metrics
        self.store = usage.UsageStore(opts.max_devices, opts.stale_periods)
        self._transport = oslo_messaging.get_notification_transport(conf)
        endpoint = usage.UsageEndpoint(self.store, oslo_messaging.NotificationFilter(
            event_type=usage.EVENT_TYPE_PATTERN))
        self._listener = oslo_messaging.get_notification_listener(
            self._transport,
            [oslo_messaging.Target(topic=t) for t in conf.oslo_messaging_notifications.topics],
            [endpoint], executor="threading", pool=opts.usage_pool)
        self._registry = usage.registry(self.store)
        self._host, self._port = opts.collector_host, opts.collector_port
        self._http: Any = None
        self.port = 0

    def start(self) -> None:
        from prometheus_client import start_http_server

        self._listener.start()
        self._http, _thread = start_http_server(self._port, self._host, self._registry)
        self.port = int(self._http.server_port)

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._listener.stop()
        self._listener.wait()
        self._transport.cleanup()


class HttpServer:
    """Waitress (see docs/deployment.md) serving ``app`` on the listening socket ``sock``
    with ``[api] workers`` threads; its limits sit above the app's (and its JSON errors)."""

    def __init__(self, conf: cfg.ConfigOpts, app: Any, sock: socket.socket) -> None:
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
        return int(self._server.effective_port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """SIGTERM's graceful stop: stop accepting, let requests already begun finish for
        up to ``[api] shutdown_timeout`` seconds, closing connections once idle (waitress
        has no drain: this does what its ``close`` and idle sweep do)."""
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


def listen(conf: cfg.ConfigOpts, port: int | None = None,
           shared: bool = False) -> socket.socket:
    """The API's listening socket, on ``[api] host_ip`` and ``port`` (default ``[api]
    port``; 0: the kernel's). ``shared``: with SO_REUSEPORT, so that each API process
    listens on a socket of its own on the one port and the kernel spreads the new
    connections over them (processes polling one socket would leave them to whichever
    wakes first: in practice the parent took nearly all)."""
    family = socket.AF_INET6 if ":" in conf.api.host_ip else socket.AF_INET
    return socket.create_server((conf.api.host_ip, conf.api.port if port is None else port),
                                family=family, backlog=conf.api.backlog, reuse_port=shared)


# what an API worker process finds in its environment: the port to listen on beside its
# parent, the pid of the process that started it and, under `acceld serve`, the
# descriptor of its link to that process; READY_FD: a pipe it closes once it listens
LISTEN_PORT, PARENT, LINK_FD, READY_FD = ("ACCELD_API_LISTEN_PORT", "ACCELD_API_PARENT",
                                          "ACCELD_API_LINK_FD", "ACCELD_API_READY_FD")


class ApiProcesses:
    """The API of `acceld serve` and `acceld api`: an :class:`HttpServer` here and
    ``[api] processes`` (default: one per CPU) less one ``acceld.cmd.api_worker``
    processes (restarted when they exit), each listening on the one port (see
    :func:`listen`); with ``link``, workers reach this process's bus through
    :class:`rpc.LinkServer`."""

    def __init__(self, conf: cfg.ConfigOpts, argv: list[str], app: Any,
                 link: rpc.LocalTransport | None = None) -> None:
        self._argv, self._link, self._threads = argv, link, conf.api.workers
        self._count = (conf.api.processes or len(os.sched_getaffinity(0))) - 1
        self._sock = listen(conf, shared=self._count > 0)
        self._http = HttpServer(conf, app, self._sock)
        self.port = self._http.port
        self._workers: list[tuple[subprocess.Popen[bytes], rpc.LinkServer | None, float]] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="api-processes", daemon=True)

    def _spawn(self, ready: int | None = None) -> tuple[subprocess.Popen[bytes],
                                                        rpc.LinkServer | None, float]:
        """A worker process; ``ready``: a pipe's write end it closes once it listens."""
        env = dict(os.environ, **{LISTEN_PORT: str(self.port), PARENT: str(os.getpid())})
        fds = []
        if ready is not None:
            env[READY_FD] = str(ready)
            fds.append(ready)
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
        if self._link is not None:
            server = rpc.LinkServer(self._link, ours, self._threads)
            server.start()
        LOG.info("API worker process %d started", proc.pid)
        return proc, server, time.monotonic()

    def start(self, timeout: float = 60.0) -> None:
        """Start the workers, then serve here once each listens (or exited, or
        ``timeout`` passed: then it is logged and the watcher goes on with it)."""
        if not self._count:
            self._http.start()
            return
        pipes = [os.pipe() for _ in range(self._count)]
        for _, write_end in pipes:
            try:
                self._workers.append(self._spawn(write_end))
            finally:
                os.close(write_end)
        deadline = time.monotonic() + timeout
        for (read_end, _), (proc, _server, _started) in zip(pipes, self._workers,
                                                               strict=True):
            with os.fdopen(read_end, "rb") as pipe:
                if not select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    LOG.warning("API worker process %d not listening after %.0f s",
                                proc.pid, timeout)
        self._http.start()
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
        """SIGTERM to each worker as this server stops; one left 10 s past the grace dies."""
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
    """Raise the soft limit on open files (systemd's: 1024) towards ``wanted``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def api_app(conf: cfg.ConfigOpts, db: Database,
            transport: rpc.Transport | rpc.LinkTransport) -> Any:
    return deploy.make_app(conf, db, rpc.ConductorClient(transport),
                           notify.make_notifier(conf, acceld.API_BINARY))


def until_signal(stops: list[Callable[[], object]], parent: int | None = None) -> int:
    """Run until SIGTERM/SIGINT (or until process ``parent`` is gone), then call ``stops``
    in order (the HTTP server's first: requests in flight may still need the rest)."""
    stop = signals.stop_event()
    try:
        while not stop.wait(1):
            if parent is not None and os.getppid() != parent:
                LOG.warning("parent process %d is gone: stopping", parent)
                break
    finally:
        for fn in stops:
            fn()
    return 0
