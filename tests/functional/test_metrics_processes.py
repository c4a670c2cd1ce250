"""The request metrics of several API processes (``[api] processes``, or a WSGI server's
workers): with ``PROMETHEUS_MULTIPROC_DIR`` set, as `acceld serve` and `acceld api` set
it, a scrape answered by any process counts the requests every process answered.

Each process here is a real Python process building the real app over one database;
which process a connection reaches is the kernel's choice under a shared listening
socket, so the processes are driven directly instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
# one API process: builds the app, answers argv[2] GET /v2/devices, prints a scrape
PROCESS = """
import sys, webob
from acceld import rpc
from acceld.api import deploy
from acceld.db.api import Database
from tests.helpers import make_conf
app = deploy.make_app(make_conf(), Database(sys.argv[1]),
                      rpc.ConductorClient(rpc.LocalTransport()))
for _ in range(int(sys.argv[2])):
    assert webob.Request.blank("/v2/devices").get_response(app).status_int == 200
print(webob.Request.blank("/metrics").get_response(app).text)
"""


def _process(db_url: str, requests: int, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PROCESS, db_url, str(requests)], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {s.labels["route"]: s.value
            for f in text_string_to_metric_families(out.stdout) for s in f.samples
            if s.name == "acceld_api_requests_total" and s.labels["status"] == "200"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    return dict(env, PYTHONPATH=str(ROOT), **extra)


def test_a_scrape_counts_every_processs_requests(sqlite_db, tmp_path):
    env = _env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    assert _process(sqlite_db.url, 7, env)["/v2/devices"] == 7
    assert _process(sqlite_db.url, 5, env)["/v2/devices"] == 12
    # a third process that answered none of them, and the two scrapes before it
    counts = _process(sqlite_db.url, 0, env)
    assert (counts["/v2/devices"], counts["/metrics"]) == (12, 2)
    assert len(list(tmp_path.glob("counter_*.db"))) == 3      # a file per process


def test_without_the_directory_each_process_counts_its_own(sqlite_db):
    assert _process(sqlite_db.url, 7, _env())["/v2/devices"] == 7
    assert "/v2/devices" not in _process(sqlite_db.url, 0, _env())
