"""schemathesis against a real ``acceld serve`` on SQLite, PostgreSQL and MariaDB.

The API's own OpenAPI document (``GET /openapi.json``) drives schemathesis's command line:
every operation gets generated valid and invalid requests (its coverage, fuzzing and
stateful phases) with a bounded number of examples each, in deterministic mode (the same
requests every run), and every answer must be no 5xx and conform to the document: a
documented status, its content type, its body's schema. A failure shows schemathesis's
report: each failing request as a curl command. Findings so far and their fixes:
/work/coord/schemathesis-findings.md (in the issue's history).
"""

from __future__ import annotations

import re
import subprocess
import sys

import requests

from tests.integration import procs as p

CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_schema_conformance")
# test cases per operation and phase: about 30 s a database here, within CI's budget
MAX_EXAMPLES = 15
RUN_TIMEOUT = 300


def _seed(api: p.Api) -> None:
    """A device profile and its accelerator requests, so the lists that are empty on a
    fresh database have items whose shape is checked too."""
    session, base = api.session, api.base
    resp = session.post(f"{base}/v2/device_profiles", timeout=p.HTTP_TIMEOUT,
                        json=[{"name": "schemathesis", "groups": [{"resources:GPU": "1"}]}])
    assert resp.status_code == 201, resp.text
    resp = session.post(f"{base}/v2/accelerator_requests", timeout=p.HTTP_TIMEOUT,
                        json={"device_profile_name": "schemathesis"})
    assert resp.status_code == 201, resp.text


def test_schemathesis_finds_no_5xx_and_no_answer_off_the_document(backend, make_db_url,
                                                                  request, tmp_path):
    db_url = make_db_url(backend)
    procs = p.Processes(request.node, tmp_path)
    request.addfinalizer(procs.close)      # before the database fixture drops it
    dep = p.start_serve(procs, host=p.unique_host(), db_url=db_url)
    p.wait_inventory(dep, 4)
    _seed(dep.api)
    schema = requests.get(f"{dep.api.base}/openapi.json", timeout=p.HTTP_TIMEOUT)
    assert schema.status_code == 200

    cli = [sys.executable, "-m", "schemathesis.cli"]
    args = [
        "run", f"{dep.api.base}/openapi.json",
        "--checks", ",".join(CHECKS),
        "--max-examples", str(MAX_EXAMPLES),
        "--generation-deterministic",
        "--generation-with-security-parameters", "false",
        # noauth: no X-Auth-Token is the admin; any service token adds the service role,
        # so binds and deletes get past the service-token gate to their own checks
        "--header", "X-Service-Token: schemathesis",
        "--workers", "1",
        "--request-timeout", str(p.HTTP_TIMEOUT),
        "--output-sanitize", "false",       # a failure shows the exact request
        "--no-color",
    ]
    run = subprocess.run([*cli, *args], capture_output=True, text=True, cwd=tmp_path,
                         timeout=RUN_TIMEOUT)
    report = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis on {backend}:\n{report[-20000:]}"
    # the run tested every operation of the document but GET /openapi.json, which the
    # command line leaves out as the document's own URL
    operations = sum(len(methods) for methods in schema.json()["paths"].values())
    tested = re.search(r"^ *Tested: (\d+)$", report, re.MULTILINE)
    assert tested is not None and int(tested.group(1)) == operations - 1, report[-5000:]
    assert dep.running["serve"].alive, "acceld serve exited during the run"
