"""acceld answers every bad request with the status upstream Cyborg answers.

The Cyborg peer is the one ``shared/peers`` runs (see README.md): at
``$ACCELD_DIFF_CYBORG_URL`` (default ``http://127.0.0.1:6680/accelerator``) when it
answers there, else set up and started by this module from a copy of ``../shared/peers``
on the MariaDB and RabbitMQ the suite uses (skipped, with the reason, where there is no
``shared/peers``; under ``CI=true`` that fails).
acceld is ``$ACCELD_DIFF_ACCELD_URL`` when set, else an ``acceld serve`` this module
starts on a free port with a fresh database, the peer's fake host (upstream's fake
device) and the peer's policy defaults (the legacy ones). Run with ``-s`` to see the whole
table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI, MYSQL_HOST, require_service
from tests.differential import cases, runner
from tests.differential.sides import Side
from tests.helpers import stop_process
from tests.integration import procs

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"
MIN_CASES = 200


# shared/peers beside the checkout (every developer and CI run has it); it is read-only,
# so it is run from a copy kept in a cache directory (its venvs are reused).
SHARED_PEERS = Path(__file__).resolve().parents[3] / "shared" / "peers"
PEERS_COPY = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "acceld" / "peers"
PEERS_ENV = {"PEERS_DB": "mariadb", "PEERS_MARIADB_TCP": "1"}


def _peers(script: str, *args: str, timeout: float) -> None:
    done = subprocess.run(["bash", str(PEERS_COPY / script), *args], capture_output=True,
                          text=True, timeout=timeout, check=False,
                          env=dict(os.environ, **PEERS_ENV))
    if done.returncode != 0:
        pytest.fail(f"shared/peers {script} {' '.join(args)} failed:\n"
                    f"{(done.stdout + done.stderr)[-4000:]}")


def _copy_peers() -> None:
    """shared/peers into the cache, writable, keeping the venvs and state made there."""
    for src in SHARED_PEERS.rglob("*"):
        dest = PEERS_COPY / src.relative_to(SHARED_PEERS)
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif not dest.exists() or dest.read_bytes() != src.read_bytes():
            dest.write_bytes(src.read_bytes())
        dest.chmod(0o755 if src.is_dir() or os.access(src, os.X_OK) else 0o644)


@pytest.fixture(scope="module")
def cyborg() -> Iterator[Side]:
    """The upstream Cyborg peer: the one running at ``$ACCELD_DIFF_CYBORG_URL`` (or the
    default), else shared/peers started here on MariaDB (and stopped afterwards)."""
    side = Side("cyborg", os.environ.get(runner.CYBORG_URL_ENV, runner.DEFAULT_CYBORG_URL))
    if side.reachable():
        yield side
        return
    if not SHARED_PEERS.is_dir():
        message = f"upstream Cyborg is not reachable at {side.root} and {SHARED_PEERS} is absent"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    require_service("MariaDB", MYSQL_HOST, 3306)
    require_service("RabbitMQ", "127.0.0.1", 5672)
    PEERS_COPY.mkdir(parents=True, exist_ok=True)
    _copy_peers()
    _peers("setup.sh", timeout=1200)
    _peers("stop.sh", timeout=120)
    _peers("start.sh", "--fresh", timeout=300)
    try:
        if not side.reachable():
            pytest.fail(f"shared/peers started, but Cyborg does not answer at {side.root}")
        yield side
    finally:
        _peers("stop.sh", timeout=120)


@pytest.fixture(scope="module")
def acceld(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """acceld at ``$ACCELD_DIFF_ACCELD_URL``, else a fresh ``acceld serve``."""
    url = os.environ.get(runner.ACCELD_URL_ENV)
    if url:
        yield Side("acceld", url)
        return
    tmp: Path = tmp_path_factory.mktemp("acceld-diff")
    port = procs.free_port()
    # like the peer: upstream's fake device, and the legacy policy defaults upstream
    # Cyborg forces (its project tokens read the inventory)
    conf = procs.write_config(tmp / "acceld.conf", {
        "DEFAULT": {"host": "diff-host-0", "state_path": tmp / "state"},
        "api": {"port": port}, "fake_driver": {"profile": "cyborg"},
        "oslo_policy": {"enforce_new_defaults": False}})
    with open(tmp / "serve.log", "w") as log:
        proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf)], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        side = Side("acceld", f"http://127.0.0.1:{port}/accelerator")

        def up() -> bool:
            if proc.poll() is not None:
                raise procs.ProcessDied(f"acceld serve exited ({proc.returncode}); see "
                                        f"{tmp / 'serve.log'}")
            return side.reachable()

        procs.wait_until(up, 30, f"acceld serve at {side.root}")
        yield side
    finally:
        stop_process(proc)


def test_enough_cases_with_unique_ids() -> None:
    """The generator yields at least 200 cases (all_cases checks the ids)."""
    assert len(cases.all_cases()) >= MIN_CASES


@pytest.mark.timeout(2400)     # a first run sets the peer up (setup.sh: up to 20 min)
def test_statuses_equal_upstream(cyborg: Side, acceld: Side) -> None:
    """Every case: the same status as Cyborg, or, where Cyborg answers a 5xx, not a 5xx;
    acceld never answers a 5xx."""
    results = runner.run_all(cyborg, acceld, cases.all_cases())
    print(runner.table(results))
    print(runner.summary(results))
    acceld_5xx = [r for r in results if r.acceld.status >= 500]
    assert not acceld_5xx, "acceld answered 5xx:\n" + "\n".join(map(runner.describe,
                                                                      acceld_5xx))
    failed = runner.failures(results)
    assert not failed, (f"{len(failed)} of {len(results)} cases differ from upstream:\n"
                        + "\n".join(map(runner.describe, failed)))

