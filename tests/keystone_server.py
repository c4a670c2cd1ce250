"""Run the real OpenStack Keystone (PyPI ``keystone``) for tests: real Fernet tokens.

No fake: Keystone's own Flask application (``keystone.server.flask``) on a SQLite file
database migrated by Keystone's own ``db_sync``, with Fernet keys made by Keystone's
``fernet_setup`` code, bootstrapped by the code of ``keystone-manage bootstrap`` (the
``admin`` user and project, the ``reader``/``member``/``manager``/``admin``/``service``
roles with ``admin -> manager -> member -> reader`` implied, the ``RegionOne`` identity
endpoints), served by a threaded ``wsgiref`` server on ``127.0.0.1`` and a free port.
Then the personas below are created through Keystone's REST API, as an operator would.

Why a subprocess, not ``wsgi-intercept`` in the test process
-----------------------------------------------------------

Keystone keeps its whole configuration on the process-global ``oslo_config.cfg.CONF``
(``keystone.conf.CONF``, captured by every Keystone module at import) and parses it
(``keystone.server.configure``). Nova, whose modules some of acceld's tests import
(``tests/functional/test_nova_notify.py``, ``test_clients_blackbox.py``), registers its
options on that same object at import time, and the two define ``[api]
response_validation`` differently: ``keystone.conf.configure()`` after ``import nova.conf``
raises ``DuplicateOptError: duplicate option: response_validation`` (and the reverse order
breaks Nova's import). Keystone also locks a process-wide provider registry
(``ProviderAPIs``: its backends can be loaded once per process, never again), configures
the root logger (``oslo_log``), and has global SQL, cache and policy state. So it runs in
a child process of its own, started once per test process (:func:`shared`), and exits by
itself when its parent goes away (its stdin reaches EOF).

Usage (tests take the ``ks`` fixture of ``tests/conftest.py``, which is this)::

    from tests import keystone_server

    ks = keystone_server.session_keystone()          # skip/fail if keystone is missing
    tok = ks.token("member")                         # project-a, project-scoped
    tok = ks.token("admin", system=True)             # system-scoped
    tok = ks.token("domain_admin")                   # domain-scoped (acceld-domain)
    conf = helpers.make_conf(api={"auth_strategy": "keystone"})
    ks.configure_authtoken(conf)                     # [keystone_authtoken] -> this Keystone

The personas (all users in the ``Default`` domain, password ``<name>-secret``; the
default scope is what :meth:`KeystoneServer.token` uses without ``project``/``domain``/
``system``):

==================  =====================================  ======================
persona             role assignments                       default scope
==================  =====================================  ======================
``admin``           admin on project ``admin`` and on the  project ``admin``
                    system (``keystone-manage bootstrap``)
``project_admin``   admin on ``project-a``                 ``project-a``
``manager``         manager on ``project-a``               ``project-a``
``member``          member on ``project-a``                ``project-a``
``reader``          reader on ``project-a``                ``project-a``
``member_b``        member on ``project-b``                ``project-b``
``reader_b``        reader on ``project-b``                ``project-b``
``service``         service on ``service`` (user ``nova``)  ``service``
``acceld``          service on ``service`` (the            ``service``
                    keystonemiddleware user of acceld)
``system_admin``    admin on the system                    system
``system_reader``   reader on the system                   system
``domain_admin``    admin on domain ``acceld-domain``      ``acceld-domain``
``domain_member``   member on domain ``acceld-domain``     ``acceld-domain``
``domain_reader``   reader on domain ``acceld-domain``     ``acceld-domain``
==================  =====================================  ======================

``project-a`` is in the ``Default`` domain, ``project-b`` in ``acceld-domain``; Keystone
puts the implied roles in the tokens (a ``member`` token carries ``member,reader``).
More users and grants: :meth:`KeystoneServer.create_user`, :meth:`KeystoneServer.grant`.

Importing this module costs only the standard library (and pytest); ``keystone`` is
imported in the child process alone.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import pytest

__all__ = ["KeystoneServer", "KeystoneServerError", "Persona", "Token", "keystone_installed",
           "require_keystone", "session_keystone", "shared"]

IN_CI = os.environ.get("CI", "").lower() == "true"
START_TIMEOUT_S = float(os.environ.get("ACCELD_TEST_KEYSTONE_START_TIMEOUT", "120"))
REQUEST_TIMEOUT_S = 30.0

REGION = "RegionOne"
DEFAULT_DOMAIN_ID = "default"
DOMAIN = "acceld-domain"
PROJECT_A, PROJECT_B, SERVICE_PROJECT, ADMIN_PROJECT = (
    "project-a", "project-b", "service", "admin")
SERVICE_ROLE = "service"
ROLES = ("reader", "member", "manager", "admin", SERVICE_ROLE)

# persona -> (username, [(role, "project:<name>" | "domain:<name>" | "system")])
_PERSONAS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "project_admin": ("project-admin", [("admin", f"project:{PROJECT_A}")]),
    "manager": ("manager", [("manager", f"project:{PROJECT_A}")]),
    "member": ("member", [("member", f"project:{PROJECT_A}")]),
    "reader": ("reader", [("reader", f"project:{PROJECT_A}")]),
    "member_b": ("member-b", [("member", f"project:{PROJECT_B}")]),
    "reader_b": ("reader-b", [("reader", f"project:{PROJECT_B}")]),
    "service": ("nova", [(SERVICE_ROLE, f"project:{SERVICE_PROJECT}")]),
    "acceld": ("acceld", [(SERVICE_ROLE, f"project:{SERVICE_PROJECT}")]),
    "system_admin": ("system-admin", [("admin", "system")]),
    "system_reader": ("system-reader", [("reader", "system")]),
    "domain_admin": ("domain-admin", [("admin", f"domain:{DOMAIN}")]),
    "domain_member": ("domain-member", [("member", f"domain:{DOMAIN}")]),
    "domain_reader": ("domain-reader", [("reader", f"domain:{DOMAIN}")]),
}


class KeystoneServerError(RuntimeError):
    """Keystone did not start, or answered a request with an unexpected status."""


def keystone_installed() -> bool:
    """Whether OpenStack's ``keystone`` distribution is installed (checked by its
    distribution name: ``keystone-engine``, an assembler, also installs a ``keystone``
    module). Imports nothing of it."""
    from importlib import metadata
    try:
        metadata.version("keystone")
    except metadata.PackageNotFoundError:
        return False
    return True


def require_keystone() -> None:
    """Skip the test when the keystone package is not installed (under ``CI=true``,
    fail: CI installs it with the ``test`` extra)."""
    if keystone_installed():
        return
    message = ("the OpenStack 'keystone' package is not installed (pip install "
               "'keystone==30.0.0', or the project's '.[test]' extra)")
    if IN_CI:
        pytest.fail(f"{message}, and CI=true requires it")
    pytest.skip(message)


@dataclasses.dataclass(frozen=True)
class Persona:
    name: str
    username: str
    password: str
    user_id: str
    domain_id: str
    grants: tuple[tuple[str, str], ...]   # (role, "project:x" | "domain:x" | "system")
    scope: dict[str, Any]                  # the default scope: project=/domain=/system=


@dataclasses.dataclass(frozen=True)
class Token:
    """An issued token: ``id`` is what goes in ``X-Auth-Token``; ``body`` is Keystone's
    ``token`` document (catalog included)."""
    id: str
    body: dict[str, Any]

    @property
    def user_id(self) -> str:
        return self.body["user"]["id"]

    @property
    def project_id(self) -> str | None:
        return (self.body.get("project") or {}).get("id")

    @property
    def domain_id(self) -> str | None:
        return (self.body.get("domain") or {}).get("id")

    @property
    def system(self) -> bool:
        return bool((self.body.get("system") or {}).get("all"))


class KeystoneServer:
    """One Keystone child process (see the module's doc). ``start()`` returns once it
    answers and the personas exist; ``stop()`` ends it and removes its files."""

    def __init__(self, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.start_timeout_s = start_timeout_s
        self.url: str = ""                   # http://127.0.0.1:<port> (unversioned)
        self.workdir: str = ""
        self.admin_password = "admin-secret"
        self.personas: dict[str, Persona] = {}
        self.projects: dict[str, str] = {}  # name -> id
        self.domains: dict[str, str] = {}   # name -> id
        self.roles: dict[str, str] = {}     # name -> id
        self._proc: subprocess.Popen[bytes] | None = None
        self._http: Any = None
        self._lock = threading.Lock()
        self._tokens: dict[tuple[Any, ...], tuple[Token, float]] = {}

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> KeystoneServer:
        if self._proc is not None:
            raise KeystoneServerError("already started")
        began = time.monotonic()
        self.workdir = tempfile.mkdtemp(prefix="acceld-keystone-")
        ready = os.path.join(self.workdir, "ready.json")
        with open(os.path.join(self.workdir, "child.out"), "wb") as out:
            # -P: the tests/ folder is not put on the child's sys.path (its module names
            # must not shadow anything Keystone imports).
            self._proc = subprocess.Popen(
                [sys.executable, "-P", os.path.abspath(__file__), "serve", self.workdir,
                 self.admin_password],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.workdir, env=_child_env())
        try:
            self.url = self._wait_ready(ready, began)["url"]
            import requests
            self._http = requests.Session()
            self._create_personas()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, ready: str, began: float) -> dict[str, Any]:
        deadline = began + self.start_timeout_s
        while time.monotonic() < deadline:
            if os.path.exists(ready):
                with open(ready) as f:
                    return json.load(f)
            if self._proc.poll() is not None:
                raise KeystoneServerError(f"Keystone exited with {self._proc.returncode} "
                                          f"before it was ready:\n{self.log_tail()}")
            time.sleep(0.05)
        raise KeystoneServerError(f"Keystone was not ready within {self.start_timeout_s:.0f}"
                                  f" s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the child's output and of Keystone's log file."""
        parts = []
        for name in ("child.out", "keystone.log"):
            path = os.path.join(self.workdir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    parts.append(f"--- {name}\n{f.read()[-chars:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()   # the child exits at EOF
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._http is not None:
            self._http.close()
            self._http = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- REST ---------------------------------------------------------------------------
    def request(self, method: str, path: str, token: str | None = None,
                expect: tuple[int, ...] = (200, 201, 204), **kwargs: Any) -> Any:
        """``method`` ``path`` (below the unversioned URL, e.g. ``/v3/users``) with
        ``X-Auth-Token: token`` (default: the bootstrap admin's system token); raises
        :class:`KeystoneServerError` unless the status is in ``expect``."""
        headers = kwargs.pop("headers", {})
        headers["X-Auth-Token"] = token or self.token("admin", system=True)
        resp = self._http.request(method, self.url + path, headers=headers,
                                  timeout=REQUEST_TIMEOUT_S, **kwargs)
        if resp.status_code not in expect:
            raise KeystoneServerError(f"{method} {path}: {resp.status_code} {resp.text}")
        return resp.json() if resp.content else None

    def create_user(self, username: str, password: str,
                    domain_id: str = DEFAULT_DOMAIN_ID) -> str:
        body = {"user": {"name": username, "password": password, "domain_id": domain_id}}
        return self.request("POST", "/v3/users", json=body)["user"]["id"]

    def create_project(self, name: str, domain_id: str = DEFAULT_DOMAIN_ID) -> str:
        body = {"project": {"name": name, "domain_id": domain_id}}
        self.projects[name] = self.request("POST", "/v3/projects", json=body)["project"]["id"]
        return self.projects[name]

    def grant(self, user_id: str, role: str, target: str) -> None:
        """Assign ``role`` (a name) to the user on ``target``: ``"system"``,
        ``"project:<name or id>"`` or ``"domain:<name or id>"``."""
        role_id = self.roles[role]
        if target == "system":
            path = f"/v3/system/users/{user_id}/roles/{role_id}"
        else:
            kind, name = target.split(":", 1)
            ids = self.projects if kind == "project" else self.domains
            path = f"/v3/{kind}s/{ids.get(name, name)}/users/{user_id}/roles/{role_id}"
        self.request("PUT", path)

    def _create_personas(self) -> None:
        self.personas["admin"] = Persona(
            "admin", "admin", self.admin_password, "", DEFAULT_DOMAIN_ID,
            (("admin", f"project:{ADMIN_PROJECT}"), ("admin", "system")),
            {"project": ADMIN_PROJECT})
        admin = self._issue("admin", {"system": {"all": True}}, user_name="admin")
        self._tokens[("admin", None, None, True)] = (admin, time.monotonic())
        self.personas["admin"] = dataclasses.replace(self.personas["admin"],
                                                     user_id=admin.user_id)
        self.roles = {r["name"]: r["id"] for r in self.request("GET", "/v3/roles")["roles"]}
        missing = set(ROLES) - set(self.roles)
        if missing:
            raise KeystoneServerError(f"bootstrap made no {sorted(missing)} role")
        self.domains = {"Default": DEFAULT_DOMAIN_ID, DEFAULT_DOMAIN_ID: DEFAULT_DOMAIN_ID}
        self.domains[DOMAIN] = self.request("POST", "/v3/domains", json={
            "domain": {"name": DOMAIN}})["domain"]["id"]
        self.projects = {p["name"]: p["id"]
                         for p in self.request("GET", "/v3/projects")["projects"]}
        self.create_project(PROJECT_A)
        self.create_project(PROJECT_B, self.domains[DOMAIN])
        self.create_project(SERVICE_PROJECT)
        for name, (username, grants) in _PERSONAS.items():
            password = f"{name}-secret"
            user_id = self.create_user(username, password)
            for role, target in grants:
                self.grant(user_id, role, target)
            kind, _, where = grants[0][1].partition(":")
            scope = {"system": True} if kind == "system" else {kind: where}
            self.personas[name] = Persona(name, username, password, user_id,
                                          DEFAULT_DOMAIN_ID, tuple(grants), scope)

    # -- tokens -------------------------------------------------------------------------
    def token(self, persona: str, *, project: str | None = None, domain: str | None = None,
              system: bool = False) -> str:
        """A real token of ``persona`` (see the module's doc), scoped to ``project`` or
        ``domain`` (a name or id) or the system; without any, the persona's default
        scope. Tokens are reused for 30 minutes."""
        return self.issue(persona, project=project, domain=domain, system=system).id

    def issue(self, persona: str, *, project: str | None = None, domain: str | None = None,
              system: bool = False) -> Token:
        """:meth:`token`, with the token's body (roles, scope, catalog, expiry)."""
        who = self.personas[persona]
        if project is None and domain is None and not system:
            project, domain = who.scope.get("project"), who.scope.get("domain")
            system = bool(who.scope.get("system"))
        key = (persona, project, domain, system)
        with self._lock:
            cached = self._tokens.get(key)
        if cached is not None and time.monotonic() - cached[1] < 1800:
            return cached[0]
        if system:
            scope: dict[str, Any] = {"system": {"all": True}}
        elif domain is not None:
            scope = {"domain": {"id": self.domains.get(domain, domain)}}
        elif project is not None:
            scope = {"project": {"id": self.projects.get(project, project)}}
        else:
            scope = {}
        token = self._issue(persona, scope)
        with self._lock:
            self._tokens[key] = (token, time.monotonic())
        return token

    def _issue(self, persona: str, scope: dict[str, Any],
               user_name: str | None = None) -> Token:
        who = self.personas[persona]
        user = ({"name": user_name, "domain": {"id": who.domain_id}} if user_name
                else {"id": who.user_id})
        body: dict[str, Any] = {"auth": {"identity": {"methods": ["password"], "password": {
            "user": {**user, "password": who.password}}}}}
        if scope:
            body["auth"]["scope"] = scope
        resp = self._http.post(self.url + "/v3/auth/tokens", json=body,
                               timeout=REQUEST_TIMEOUT_S)
        if resp.status_code != 201:
            raise KeystoneServerError(f"token for {persona} scoped {scope}: "
                                      f"{resp.status_code} {resp.text}")
        return Token(resp.headers["X-Subject-Token"], resp.json()["token"])

    # -- keystonemiddleware -------------------------------------------------------------
    def authtoken_options(self, persona: str = "acceld", **extra: Any) -> dict[str, Any]:
        """``[keystone_authtoken]`` for a service protected by this Keystone, the
        middleware authenticating as ``persona`` (the ``service`` role suffices to validate
        tokens under Keystone's default policy). ``X-Service-Token`` must carry the
        ``service`` role (``service_token_roles_required``)."""
        who = self.personas[persona]
        project = who.scope["project"]
        options = {
            "www_authenticate_uri": self.url,
            "auth_url": self.url,
            "auth_type": "password",
            "username": who.username,
            "password": who.password,
            "project_name": project,
            "user_domain_id": who.domain_id,
            "project_domain_id": DEFAULT_DOMAIN_ID,
            "region_name": REGION,
            "interface": "internal",
            "service_type": "accelerator",
            "service_token_roles": [SERVICE_ROLE],
            "service_token_roles_required": True,
            "http_request_max_retries": 1,
        }
        options.update(extra)
        return options

    def configure_authtoken(self, conf: Any, persona: str = "acceld",
                            group: str = "keystone_authtoken", **extra: Any) -> Any:
        """Set :meth:`authtoken_options` on a parsed ``ConfigOpts`` (acceld's, before
        ``deploy.make_app``). The password plugin's options (``auth_url``, ``username``,
        ...) exist only once keystoneauth registers them, so they are registered first
        (as keystonemiddleware itself would)."""
        from keystoneauth1 import loading
        from keystonemiddleware import auth_token
        options = self.authtoken_options(persona, **extra)
        for grp, opts in auth_token.list_opts():
            if grp == group:
                conf.register_opts(opts, group=group)
        loading.register_auth_conf_options(conf, group)
        conf.register_opts(loading.get_auth_plugin_conf_options(options["auth_type"]),
                           group=group)
        for name, value in options.items():
            conf.set_override(name, value, group=group)
        return conf


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OS_", "PYTHONPATH", "PYTEST_"))}
    env["PYTHONWARNINGS"] = "ignore"
    return env


# -- one per test process ---------------------------------------------------------------
_SHARED: KeystoneServer | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> KeystoneServer:
    """The test process's Keystone, started on first use and stopped at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or not _SHARED.running:
            server = KeystoneServer().start()
            atexit.register(server.stop)
            _SHARED = server
        return _SHARED


def session_keystone() -> KeystoneServer:
    """:func:`shared`, after :func:`require_keystone`."""
    require_keystone()
    return shared()


# -- the child: Keystone itself ---------------------------------------------------------
_CONF_TEMPLATE = """\
[DEFAULT]
log_file = {d}/keystone.log
insecure_debug = true
[database]
connection = sqlite:///{d}/keystone.db
[fernet_tokens]
key_repository = {d}/fernet-keys
max_active_keys = 3
[fernet_receipts]
key_repository = {d}/fernet-keys
max_active_keys = 3
[credential]
key_repository = {d}/credential-keys
[token]
expiration = 14400
[cache]
enabled = true
backend = dogpile.cache.memory
[identity]
# bcrypt's minimum: the test passwords need no strength, token issue stays fast
password_hash_rounds = 4
"""


def _serve(workdir: str, admin_password: str) -> None:  # pragma: no cover - child
    from tests.placement_server import LoopbackWSGIServer, QuietHandler

    class Server(LoopbackWSGIServer):
        daemon_threads, block_on_close = True, False     # the process exits at EOF

    server = Server(("127.0.0.1", 0), QuietHandler)
    url = f"http://127.0.0.1:{server.server_port}"
    conf_file = os.path.join(workdir, "keystone.conf")
    with open(conf_file, "w") as f:
        f.write(_CONF_TEMPLATE.format(d=workdir))

    import keystone.conf
    import keystone.server
    from keystone.cmd import bootstrap
    from keystone.common import fernet_utils, profiler
    from keystone.common.sql import upgrades
    from keystone.server.flask import application
    from keystone.server.flask import core as flask_core

    conf = keystone.conf.CONF
    keystone.server.configure(config_files=[conf_file])       # keystone's own CONF parse
    upgrades.offline_sync_database_to_version()               # keystone-manage db_sync
    for group in ("fernet_tokens", "credential"):             # fernet_setup, credential_setup
        options = getattr(conf, group)
        keys = fernet_utils.FernetUtils(options.key_repository,
                                        getattr(options, "max_active_keys", 3), group)
        keys.create_key_directory(None, None)
        if keys.validate_key_repository(requires_write=True):
            keys.initialize_key_repository(None, None)

    boot = bootstrap.Bootstrapper()      # keystone-manage bootstrap; loads the backends
    boot.admin_username, boot.admin_password = "admin", admin_password
    boot.project_name, boot.admin_role_name = ADMIN_PROJECT, "admin"
    boot.service_name, boot.region_id = "keystone", REGION
    boot.public_url = boot.internal_url = boot.admin_url = url
    boot.immutable_roles = True
    boot.bootstrap()

    # keystone.server.flask.core.initialize_application, less configure() and the
    # backends (loaded once per process, by the Bootstrapper above).
    app = flask_core.setup_app_middleware(application.application_factory("public"))
    profiler.setup("public")
    server.set_app(app)

    def exit_at_eof() -> None:   # the parent stopped us, or died
        try:
            sys.stdin.buffer.read()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            os._exit(0)

    threading.Thread(target=exit_at_eof, daemon=True).start()
    ready = os.path.join(workdir, "ready.json")
    with open(ready + ".tmp", "w") as f:
        json.dump({"url": url, "pid": os.getpid()}, f)
    os.replace(ready + ".tmp", ready)
    server.serve_forever()


if __name__ == "__main__":  # pragma: no cover - the child
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit("usage: keystone_server.py serve WORKDIR ADMIN_PASSWORD")
    _workdir, _password = sys.argv[2], sys.argv[3]
    # the repository root (not tests/, see start()): tests.placement_server's server
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    del sys.argv[1:]     # keystone.server.configure parses sys.argv[1:]
    _serve(_workdir, _password)
