"""Run the real OpenStack Placement service (``openstack-placement``) on loopback for tests.

No fake: the WSGI application is Placement's own, built by ``placement.deploy.loadapp``
on a private ``oslo_config.cfg.ConfigOpts``, with the ``noauth2`` auth strategy, the
default policy rules and a real database (a file SQLite database in a temporary
directory by default, or any SQLAlchemy URL passed in, e.g. PostgreSQL). It is served
by a threaded ``wsgiref`` server on ``127.0.0.1`` and a free port, in a daemon thread.

Usage::

    from tests.placement_server import PlacementServer

    with PlacementServer() as placement:
        cn_uuid = placement.create_compute_node("compute-1")
        ...  # point acceld at placement.url (see below)
        assert placement.writes() == [...]

To make acceld talk to it, give acceld this ``[placement]`` config (keystoneauth1's
``admin_token`` plugin is ``keystoneauth1.token_endpoint.Token``; its options are
``endpoint`` (deprecated alias ``url``) and ``token``)::

    [placement]
    auth_type = admin_token
    endpoint = http://127.0.0.1:<port>     # PlacementServer.url
    token = admin

In code, with acceld's options registered on ``conf``::

    server.configure_client(conf)            # group="placement"
    adapter = acceld.clients.make_adapter(conf, "placement")

(acceld's ``service_client.register`` registers only ``auth_type``/``auth_section`` of the auth
options; ``endpoint``/``token`` are registered by
``keystoneauth1.loading.load_auth_from_conf_options`` once it has read ``auth_type``,
so ``set_override("endpoint", ...)`` before that raises ``NoSuchOptError``. Either
write the snippet to a config file, or call :meth:`PlacementServer.configure_client`,
which registers the ``admin_token`` plugin's options first and then sets them.)

With ``noauth2`` the token is ``<user>[:<project>]``; the user ``admin`` gets the
``admin`` role, so ``token = admin`` may do everything.

Placement's global state -- one server per process at a time
-------------------------------------------------------------

Placement keeps process-global state that a second application in the same process
would share: the enginefacade ``placement.db_api.placement_context_manager`` (and the
run-once ``placement.db_api.configure``), the policy enforcer
``placement.policy._ENFORCER``, and the ``_TRAITS_SYNCED`` /
``_RESOURCE_CLASSES_SYNCED`` flags in ``placement.objects.trait`` /
``placement.objects.resource_class`` that tell it the standard traits and resource
classes are already in the database. So only **one PlacementServer per process at a
time** is supported; starting a second one while one runs raises
:class:`PlacementServerError`. ``stop()`` resets all of it (as Placement's own test
fixtures do: a fresh transaction factory patched in and the old one restored, the
``configure`` run-once flag restored, the enforcer reset, the sync flags cleared), so
another PlacementServer may be started afterwards in the same process, on a new,
empty database. With pytest-xdist each worker is its own process, so parallel
workers each get their own server.

The request recorder
--------------------

Every request that reaches the server is recorded as ``(method, path, status)``,
``path`` being ``SCRIPT_NAME + PATH_INFO`` (as the WSGI server decoded it) plus
``?QUERY_STRING`` when there is one. The record is made when the application has
returned, i.e. before the client has received the response, so a test may assert on
:meth:`requests` right after its call returned. :meth:`set_down` makes every request
answer 503 (still recorded) to simulate an outage.
"""

from __future__ import annotations

import copy
import json
import shutil
import socketserver
import tempfile
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref import simple_server

from acceld import uuids

__all__ = ["PlacementEndpoint", "PlacementServer", "PlacementServerError", "RecordingApp",
           "UwsgiPlacement", "uwsgi_binary"]

ADMIN_TOKEN = "admin"
DEFAULT_MICROVERSION = "1.39"

_ACTIVE_LOCK = threading.Lock()
_ACTIVE: PlacementServer | None = None


class PlacementServerError(RuntimeError):
    """The harness cannot do what was asked (second server, start failure, ...)."""


Record = tuple[str, str, int]


class RecordingApp:
    """WSGI middleware recording ``(method, path, status)`` and simulating outages."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._callers: list[tuple[str, str, str]] = []   # (User-Agent, method, path)
        # kind -> [requests, CPU s, s waited for a core]
        self._cpu: dict[str, list[float]] = {}
        self._down = False

    # -- recorder ---------------------------------------------------------------------
    def requests(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def callers(self) -> list[tuple[str, str, str]]:
        """``(User-Agent, method, path)`` of each request, in the order of ``requests``."""
        with self._lock:
            return list(self._callers)

    def cpu_by_kind(self) -> dict[str, list[float]]:
        """``kind -> [requests, CPU seconds, seconds waited]``: the CPU each request's
        thread spent in the application and the time it waited, runnable, for a core (the
        kernel's run delay; 0 where the kernel keeps no schedstat), by
        :func:`request_kind` (a benchmark's view of what Placement spends its time on and
        what else on the machine holds it back)."""
        with self._lock:
            return {kind: list(v) for kind, v in self._cpu.items()}

    def reset_counts(self) -> None:
        with self._lock:
            self._records.clear()
            self._callers.clear()
            self._cpu.clear()

    def _record(self, method: str, path: str, status: int, agent: str = "") -> None:
        with self._lock:
            self._records.append((method, path, status))
            self._callers.append((agent, method, path))

    # -- outage switch ----------------------------------------------------------------
    @property
    def down(self) -> bool:
        return self._down

    def set_down(self, down: bool) -> None:
        self._down = bool(down)

    # -- WSGI -------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]):
        method = environ.get("REQUEST_METHOD", "GET")
        agent = environ.get("HTTP_USER_AGENT", "")
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        query = environ.get("QUERY_STRING", "")
        if query:
            path = f"{path}?{query}"

        if self._down:
            self._record(method, path, 503, agent)
            body = json.dumps({"errors": [{
                "status": 503,
                "title": "Service Unavailable",
                "detail": "PlacementServer.set_down(True): simulated outage",
            }]}).encode()
            start_response("503 Service Unavailable", [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
            ])
            return [body]

        status_holder: list[int] = []

        def recording_start_response(status: str, headers, exc_info=None):
            status_holder[:] = [int(status.split(" ", 1)[0])]
            return start_response(status, headers, exc_info)

        cpu, waited = time.thread_time(), _run_delay()
        try:
            result = self.app(environ, recording_start_response)
        except BaseException:
            self._record(method, path, 500, agent)
            raise
        cpu, waited = time.thread_time() - cpu, _run_delay() - waited
        # WebOb-based apps (Placement) call start_response before returning.
        self._record(method, path, status_holder[0] if status_holder else 500, agent)
        kind = request_kind(method, environ.get("PATH_INFO", ""), query)
        with self._lock:
            total = self._cpu.setdefault(kind, [0, 0.0, 0.0])
            total[0] += 1
            total[1] += cpu
            total[2] += waited
        return result


SCHEDSTAT = "/proc/thread-self/schedstat"


def _run_delay() -> float:
    """Seconds this thread has waited, runnable, for a core (:data:`SCHEDSTAT`, its second
    field, in nanoseconds); 0.0 where the kernel does not keep it."""
    try:
        with open(SCHEDSTAT, encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def request_kind(method: str, path: str, query: str) -> str:
    """``GET /resource_providers/{id}/inventories?member_of``: the request with every
    uuid (and a trait's or resource class's name) in its path replaced and only the names
    of its query's parameters."""
    parts = path.split("/")
    if len(parts) == 3 and parts[1] in ("traits", "resource_classes"):
        parts[2] = "{name}"
    parts = ["{id}" if uuids.canonical(p) else p for p in parts]
    names = sorted({q.split("=", 1)[0] for q in query.split("&") if q})
    return f"{method} {'/'.join(parts)}" + (f"?{'&'.join(names)}" if names else "")


class QuietHandler(simple_server.WSGIRequestHandler):
    # A connection that never sends its request must not hang stop().
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class LoopbackWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    """A threaded wsgiref server for loopback test services (Placement here, Keystone
    in ``tests.keystone_server``)."""

    # Request threads are joined by server_close() (block_on_close), so stop() waits
    # for in-flight requests before the database is torn down.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 128

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can
        # take seconds in a sandbox; loopback needs none of it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = host
        self.server_port = port
        self.setup_environ()

    def handle_error(self, request, client_address) -> None:
        # A client that hung up mid-response is no error of the server's.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class PlacementEndpoint:
    """What a test does with a Placement at :attr:`url` (served in this process by
    :class:`PlacementServer`, or by uWSGI in a child process by :class:`UwsgiPlacement`):
    point acceld at it, and act on it as an admin."""

    @property
    def url(self) -> str:
        raise NotImplementedError

    def acceld_config(self) -> dict[str, str]:
        """The ``[placement]`` options that point acceld at this server."""
        return {"auth_type": "admin_token", "endpoint": self.url, "token": ADMIN_TOKEN}

    def configure_client(self, conf: Any, group: str = "placement") -> None:
        """Point a keystoneauth-configured client (acceld's ``[placement]``) here.

        Registers the ``admin_token`` plugin's options in ``group`` (where they are not
        yet) and overrides ``auth_type``, ``endpoint`` and ``token``.
        """
        from keystoneauth1 import loading as ks_loading
        from oslo_config import cfg

        for opt in ks_loading.get_auth_plugin_conf_options("admin_token"):
            try:
                conf.register_opt(opt, group=group)
            except cfg.DuplicateOptError:
                pass
        for name, value in self.acceld_config().items():
            conf.set_override(name, value, group=group)

    # ---------------------------------------------------------------- clients
    def admin_session(self, microversion: str | None = DEFAULT_MICROVERSION,
                      raise_exc: bool = False):
        """A keystoneauth1 ``Adapter`` on this server, authenticated as ``admin``.

        Requests carry ``X-Auth-Token: admin`` and, by default,
        ``OpenStack-API-Version: placement 1.39`` (pass ``microversion=`` per call to
        change it). ``raise_exc=False``: 4xx/5xx are returned, not raised. Paths are
        relative to :attr:`url`, e.g. ``adapter.get("/resource_providers")``. A request
        whose connection fails is retried (uWSGI's ``--http-socket`` resets some reused
        connections).
        """
        from keystoneauth1 import adapter, session, token_endpoint

        auth = token_endpoint.Token(self.url, ADMIN_TOKEN)
        sess = session.Session(auth=auth)
        return adapter.Adapter(
            sess, service_type="placement", interface="public",
            default_microversion=microversion, raise_exc=raise_exc,
            additional_headers={"Accept": "application/json"}, connect_retries=3,
            connect_retry_delay=0.05)

    def create_compute_node(self, name: str, *, uuid: str | None = None, vcpus: int = 16,
                            memory_mb: int = 65536, disk_gb: int = 1024) -> str:
        """Create a root provider with VCPU/MEMORY_MB/DISK_GB inventory as Nova does.

        Returns its uuid.
        """
        rp_uuid = uuid or str(uuidlib.uuid4())
        api = self.admin_session()
        resp = api.post("/resource_providers", json={"name": name, "uuid": rp_uuid})
        _expect(resp, 200, f"POST /resource_providers {name!r}")
        generation = resp.json()["generation"]
        inventories = {
            "VCPU": {"total": vcpus, "allocation_ratio": 16.0, "reserved": 0},
            "MEMORY_MB": {"total": memory_mb, "allocation_ratio": 1.5, "reserved": 512},
            "DISK_GB": {"total": disk_gb, "allocation_ratio": 1.0, "reserved": 0},
        }
        resp = api.put(f"/resource_providers/{rp_uuid}/inventories", json={
            "resource_provider_generation": generation, "inventories": inventories})
        _expect(resp, 200, f"PUT inventories of {name!r}")
        return rp_uuid


class PlacementServer(PlacementEndpoint):
    """The real Placement API, served on ``127.0.0.1:<free port>`` in this process.

    :param db_url: SQLAlchemy URL of Placement's database. ``None`` (the default)
        makes a file SQLite database in a temporary directory removed by
        :meth:`stop` (in-memory SQLite does not work across the server's threads).
        A database passed in is used as is and not dropped; its schema is created if
        missing.
    :param schema: ``"models"`` (default, fast: ``create_all`` from Placement's models,
        as Placement's own ``Database`` test fixture does) or ``"alembic"``
        (Placement's migrations, run by ``loadapp`` with ``sync_on_startup``, as a
        production deployment does).
    :param config_overrides: ``{group: {option: value}}`` applied to Placement's
        config (``"DEFAULT"`` for the default group), e.g.
        ``{"oslo_policy": {"enforce_new_defaults": False}}``.
    :param host: address to bind, ``127.0.0.1`` by default.
    :param port: port to bind; ``0`` (default) picks a free one.
    :param sqlite_begin_immediate: on SQLite, start every transaction with
        ``BEGIN IMMEDIATE`` and wait up to 30 s for the lock (default ``True``).
        oslo.db starts SQLite transactions with a deferred ``BEGIN``; two concurrent
        Placement writes then fail at once with ``database is locked`` (500), since
        SQLite does not wait when a reader upgrades to a writer while another writer
        holds the lock. ``False`` keeps oslo.db's behaviour as is. No effect on other
        databases.

    Only one PlacementServer may run per process at a time (see the module doc).
    """

    def __init__(
        self,
        db_url: str | None = None,
        *,
        schema: str = "models",
        config_overrides: dict[str, dict[str, Any]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        sqlite_begin_immediate: bool = True,
    ) -> None:
        if schema not in ("models", "alembic"):
            raise ValueError(f"schema must be 'models' or 'alembic', not {schema!r}")
        self._db_url_arg = db_url
        self.schema = schema
        self.config_overrides = config_overrides or {}
        self.host = host
        self._port_arg = port
        self.sqlite_begin_immediate = sqlite_begin_immediate

        self.db_url: str | None = None
        self.conf = None
        self.start_seconds: float | None = None
        self._tmpdir: str | None = None
        self._recorder: RecordingApp | None = None
        self._server: LoopbackWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._restore_factory: Callable[[], None] | None = None
        self._configure_was_called = False
        self._running = False

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> PlacementServer:
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                other = _ACTIVE.url if _ACTIVE._server else "(starting)"
                raise PlacementServerError(
                    f"a PlacementServer is already running in this process at {other}; "
                    "Placement keeps process-global state (enginefacade, policy "
                    "enforcer, trait/resource-class sync flags), so only one may run "
                    "at a time: stop() it first")
            _ACTIVE = self
        started = time.perf_counter()
        try:
            self._start()
        except BaseException:
            try:
                self._teardown()
            finally:
                with _ACTIVE_LOCK:
                    _ACTIVE = None
            raise
        self._running = True
        self.start_seconds = time.perf_counter() - started
        return self

    def _start(self) -> None:
        from oslo_config import cfg
        from oslo_db.sqlalchemy import enginefacade
        from placement import conf as placement_conf
        from placement import db_api, deploy, policies
        from placement import policy as placement_policy
        from placement.conf import paths
        from placement.db.sqlalchemy import migration

        if self._db_url_arg is None:
            self._tmpdir = tempfile.mkdtemp(prefix="placement-server-")
            self.db_url = f"sqlite:///{self._tmpdir}/placement.sqlite"
        else:
            self.db_url = self._db_url_arg

        conf = cfg.ConfigOpts()
        placement_conf.register_opts(conf)
        conf.set_override("auth_strategy", "noauth2", group="api")
        conf.set_override("connection", self.db_url, group="placement_database")
        conf.set_override("sync_on_startup", self.schema == "alembic",
                          group="placement_database")
        # As placement.tests.unit.policy_fixture.PolicyFixture: a policy file that
        # does not exist, so the in-code defaults are the whole policy.
        conf.set_override("policy_file", paths.state_path_def("etc/placement/policy.yaml"),
                          group="oslo_policy")
        for group, options in self.config_overrides.items():
            for name, value in options.items():
                conf.set_override(name, value, group=None if group == "DEFAULT" else group)
        # No command line, no config files or directories: nothing from the host
        # (e.g. /etc/placement/placement.conf) leaks in.
        conf([], default_config_files=[], default_config_dirs=[])
        self.conf = conf

        # Database: a fresh transaction factory in Placement's global context manager
        # (restored by stop()), configured by Placement's own configure().
        self._restore_factory = db_api.placement_context_manager.patch_factory(
            enginefacade._TransactionFactory())
        if self.sqlite_begin_immediate:
            db_api.placement_context_manager.append_on_engine_create(_sqlite_begin_immediate)
        self._configure_was_called = db_api.configure.called
        db_api.configure.reset()
        db_api.configure(conf)
        if self.schema == "models":
            migration.create_schema(db_api.get_placement_engine())
        # else: loadapp() -> update_database() runs the alembic upgrade to head.

        # The standard traits and resource classes are synced into the database once
        # per process unless these flags are cleared: a new database needs them.
        _reset_sync_flags()

        # Policy, as PolicyFixture does (a copy: oslo.policy mutates the defaults).
        placement_policy.reset()
        placement_policy.init(conf, suppress_deprecation_warnings=True,
                              rules=copy.deepcopy(policies.list_rules()))

        app = deploy.loadapp(conf)
        self._recorder = RecordingApp(app)

        port = self._port_arg or 0
        self._server = LoopbackWSGIServer((self.host, port), QuietHandler)
        self._server.set_app(self._recorder)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"placement-server-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and reset Placement's global state; idempotent."""
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not self:
                return
        try:
            self._teardown()
        finally:
            self._running = False
            with _ACTIVE_LOCK:
                _ACTIVE = None

    def _teardown(self) -> None:
        from placement import db_api
        from placement import policy as placement_policy

        errors: list[BaseException] = []

        def attempt(fn: Callable[[], Any]) -> None:
            try:
                fn()
            except Exception as exc:  # keep tearing down; report the first at the end
                errors.append(exc)

        if self._server is not None:
            server = self._server
            if self._thread is not None and self._thread.is_alive():
                attempt(server.shutdown)  # blocks unless serve_forever() runs
            attempt(server.server_close)  # joins in-flight request threads
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None

        if self._restore_factory is not None:
            attempt(db_api.placement_context_manager.dispose_pool)
            attempt(self._restore_factory)
            self._restore_factory = None
            db_api.configure.called = self._configure_was_called
        attempt(placement_policy.reset)
        _reset_sync_flags()

        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        if errors:
            raise errors[0]

    def __enter__(self) -> PlacementServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._running

    # ---------------------------------------------------------------- addresses
    @property
    def port(self) -> int:
        if self._server is None:
            raise PlacementServerError("PlacementServer is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no path prefix: Placement is served at /)."""
        return f"http://{self.host}:{self.port}"

    # ---------------------------------------------------------------- recorder
    def _rec(self) -> RecordingApp:
        if self._recorder is None:
            raise PlacementServerError("PlacementServer is not started")
        return self._recorder

    def requests(self) -> list[Record]:
        """A copy of every ``(method, path_with_query, status)`` served so far."""
        return self._rec().requests()

    def writes(self) -> list[Record]:
        """The recorded requests whose method is not GET (nor HEAD)."""
        return [r for r in self.requests() if r[0] not in ("GET", "HEAD")]

    def callers(self) -> list[tuple[str, str, str]]:
        """``(User-Agent, method, path_with_query)`` of every request served so far."""
        return self._rec().callers()

    def cpu_by_kind(self) -> dict[str, list[float]]:
        """See :meth:`RecordingApp.cpu_by_kind`."""
        return self._rec().cpu_by_kind()

    def reset_counts(self) -> None:
        self._rec().reset_counts()

    def set_down(self, down: bool) -> None:
        """``True``: answer 503 to every request (an outage); ``False``: recover."""
        self._rec().set_down(down)


class UwsgiPlacement(PlacementEndpoint):
    """The real Placement as a deployment serves it: its WSGI entry point
    ``placement.wsgi.api:application`` under uWSGI with ``--http-socket``, in a child
    process (its own process group) on ``127.0.0.1``, configured by a ``placement.conf``
    in a temporary directory (``OS_PLACEMENT_CONFIG_DIR``): ``noauth2``, and a database
    migrated by Placement itself at start (``sync_on_startup``).

    Placement's database is a SQLite file in the temporary directory, kept across
    :meth:`kill` and :meth:`start` (a restart finds its providers again) and removed by
    :meth:`stop`; the first start picks a free port, and later starts reuse it.

    :param socket_timeout: uWSGI's ``--socket-timeout`` (seconds): how long it waits on
        a silent connection before closing it.

    uWSGI's ``--http-socket`` closes each connection after its answer without saying so
    (no ``Connection: close``), so a client that reuses it right away is answered
    "Connection reset by peer": what acceld meets in production.

    ``uwsgi`` must be installed in the running interpreter's environment
    (:func:`uwsgi_binary`; it is in the ``test`` extra).
    """

    STARTUP_TIMEOUT = 60.0

    def __init__(self, *, socket_timeout: int = 4) -> None:
        self.port = 0
        self.socket_timeout = socket_timeout
        self._tmpdir: str | None = None
        self._proc: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> UwsgiPlacement:
        """Start serving (again: same port, same database) and wait until Placement
        answers."""
        import os
        import socket
        import subprocess
        import sys
        import urllib.request

        binary = uwsgi_binary()
        if binary is None:
            raise PlacementServerError("uwsgi is not installed in this environment "
                                       "(pip install uwsgi; it is in the test extra)")
        if self.running:
            raise PlacementServerError("UwsgiPlacement is already running")
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="placement-uwsgi-")
            with open(os.path.join(self._tmpdir, "placement.conf"), "w") as f:
                f.write("[api]\nauth_strategy = noauth2\n[placement_database]\n"
                        f"connection = sqlite:///{self._tmpdir}/placement.sqlite\n"
                        "sync_on_startup = true\n")
        if not self.port:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = sock.getsockname()[1]
        log_path = os.path.join(self._tmpdir, "uwsgi.log")
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=self._tmpdir)
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [binary, "--http-socket", f"127.0.0.1:{self.port}",
                 "--module", "placement.wsgi.api:application", "--virtualenv", sys.prefix,
                 "--master", "--processes", "1", "--threads", "1", "--single-interpreter",
                 "--need-app", "--die-on-term", "--disable-logging",
                 "--socket-timeout", str(self.socket_timeout)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)
        deadline = time.monotonic() + self.STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.kill()
        with open(log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        raise PlacementServerError(f"uWSGI Placement did not come up on {self.url}:\n{tail}")

    def kill(self) -> None:
        """SIGKILL uWSGI's master and workers (a crash: nothing is closed cleanly)."""
        import os
        import signal

        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=30)
        self._proc = None

    def stop(self) -> None:
        """Kill the server and remove its directory (and SQLite database); idempotent."""
        self.kill()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> UwsgiPlacement:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def uwsgi_binary() -> str | None:
    """The ``uwsgi`` of the running interpreter's environment, or None."""
    import os
    import sys

    path = os.path.join(os.path.dirname(sys.executable), "uwsgi")
    return path if os.access(path, os.X_OK) else shutil.which("uwsgi")


def _expect(resp: Any, status: int, what: str) -> None:
    if resp.status_code != status:
        raise PlacementServerError(
            f"{what}: expected {status}, got {resp.status_code}: {resp.text[:500]}")


SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_begin_immediate(engine: Any) -> None:
    """``on_engine_create`` hook: serialize SQLite transactions instead of failing them."""
    import sqlalchemy

    if engine.dialect.name != "sqlite":
        return

    @sqlalchemy.event.listens_for(engine, "connect")
    def _busy_timeout(dbapi_con, con_record) -> None:
        dbapi_con.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")

    def _begin(conn) -> None:
        # Runs before oslo.db's own "begin" listener, which then sees the marker and
        # emits no BEGIN of its own (oslo.db removes the marker at commit/rollback).
        if "in_transaction" not in conn.info:
            conn.execute(sqlalchemy.text("BEGIN IMMEDIATE"))
            conn.info["in_transaction"] = True

    # event.listen(..., insert=True) does not put a listener first here (SQLAlchemy
    # 2.1), so take oslo.db's listeners off, add ours, and put theirs back after it.
    existing = list(engine.dispatch.begin)
    for fn in existing:
        sqlalchemy.event.remove(engine, "begin", fn)
    sqlalchemy.event.listen(engine, "begin", _begin)
    for fn in existing:
        sqlalchemy.event.listen(engine, "begin", fn)


def _reset_sync_flags() -> None:
    from placement.objects import resource_class, trait

    trait._TRAITS_SYNCED = False
    resource_class._RESOURCE_CLASSES_SYNCED = False


def main(argv: list[str] | None = None) -> int:
    """Run a PlacementServer as its own process: ``python -m tests.placement_server``.

    Prints ``PLACEMENT_URL=<url>`` once it serves, then runs until SIGTERM/SIGINT. Used by
    end-to-end tests and by ``bench/`` (so Placement's CPU is not in the measured process).
    With ``--stats``, also ``PLACEMENT_STATS_URL=<url>``: a second loopback server whose
    GET answers the recorder's counts (:func:`request_counts`), for a benchmark that
    counts the requests a run sent from outside this process.
    """
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m tests.placement_server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--db-url")
    parser.add_argument("--stats", action="store_true")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with PlacementServer(args.db_url, port=args.port) as server:
        stats = _serve_counts(server) if args.stats else None
        print(f"PLACEMENT_URL={server.url}", flush=True)
        if stats is not None:
            host, port = stats.server_address[:2]
            print(f"PLACEMENT_STATS_URL=http://{host}:{port}/", flush=True)
        while not stop.wait(0.5):
            pass
        if stats is not None:
            stats.shutdown()
            stats.server_close()
    return 0


def request_counts(records: list[Record]) -> dict[str, Any]:
    """``requests`` (all), ``writes`` (not GET or HEAD) and ``by_method``."""
    by_method: dict[str, int] = {}
    for method, _path, _status in records:
        by_method[method] = by_method.get(method, 0) + 1
    return {"requests": len(records),
            "writes": sum(n for m, n in by_method.items() if m not in ("GET", "HEAD")),
            "by_method": by_method}


def _serve_counts(placement: PlacementServer) -> LoopbackWSGIServer:
    """A loopback server (free port, a thread of its own) answering every GET with
    :func:`request_counts` of what ``placement`` has served so far."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        body = json.dumps(request_counts(placement.requests())
                          | {"cpu_by_kind": placement.cpu_by_kind()}).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]

    server = simple_server.make_server("127.0.0.1", 0, app, server_class=LoopbackWSGIServer,
                                       handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="placement-stats", daemon=True).start()
    return server


if __name__ == "__main__":
    raise SystemExit(main())
