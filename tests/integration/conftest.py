"""Integration fixtures: an isolated RabbitMQ vhost per test, process logs on failure.

Isolation on the bus: the agent calls the conductor by topic only (``acceld-conductor``,
no server name), so two conductors on the same vhost (another engineer's test run, or
two of ours under xdist) would each take some of the other's reports and write them to
the wrong database. Each test therefore gets a throwaway vhost when ``rabbitmqctl`` can
manage the broker of ``rabbit_url`` (a local one); otherwise it falls back to the URL as
given and relies on unique host names and topics.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
import uuid
import warnings
from collections.abc import Iterator

import pytest

_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _rabbitmqctl(*args: str) -> bool:
    exe = shutil.which("rabbitmqctl")
    if exe is None:
        return False
    try:
        res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


@pytest.fixture
def isolated_rabbit_url(rabbit_url: str) -> Iterator[str]:
    """``rabbit_url`` on a fresh vhost of its own (deleted afterwards), when possible."""
    parts = urllib.parse.urlsplit(rabbit_url)
    user = urllib.parse.unquote(parts.username or "guest")
    if parts.hostname not in _LOCAL_HOSTS:
        yield rabbit_url
        return
    vhost = f"acceld-itest-{uuid.uuid4().hex[:10]}"
    if not (_rabbitmqctl("add_vhost", vhost)
            and _rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")):
        _rabbitmqctl("delete_vhost", vhost)
        warnings.warn("rabbitmqctl cannot create a vhost: integration tests share the "
                      "broker's vhost and rely on unique host names", stacklevel=1)
        yield rabbit_url
        return
    try:
        yield urllib.parse.urlunsplit(parts._replace(path="/" + vhost))
    finally:
        _rabbitmqctl("delete_vhost", vhost)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Attach the logs of every acceld process a failed test started to its report."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    for proc in getattr(item, "acceld_processes", []):
        rep.sections.append((f"acceld {proc.name} log ({rep.when})", proc.log_tail()))


@pytest.fixture
def acceld_procs(request: pytest.FixtureRequest, tmp_path, make_db_url,
                 isolated_rabbit_url):
    """Start acceld processes with ``acceld_procs.start``; all are terminated afterwards.

    Depends on the database and vhost fixtures so that it is torn down before them (the
    processes stop before their database is dropped and their vhost deleted).
    """
    from tests.integration.procs import Processes
    procs = Processes(request.node, tmp_path)
    try:
        yield procs
    finally:
        procs.close()
