"""schemathesis against a real ``acceld serve`` on SQLite, PostgreSQL and MariaDB.

The API's own OpenAPI document (``GET /openapi.json``) drives schemathesis's command line:
every operation gets generated valid and invalid requests (its coverage, fuzzing and
stateful phases) with a bounded number of examples, in deterministic mode (the same
requests every run), and every answer must be no 5xx and conform to the document: a
documented status, its content type, its body's schema, its headers (the
microversion headers below /v2, ETag, Location). Most path parameters name a
resource that exists (a device, a deployable, an ARQ, ...), so that the requests reach
the handlers' logic rather than a 404. A failure shows schemathesis's report: each failing
request, exactly, as a curl command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import requests

from tests.integration import procs as p

CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_schema_conformance", "response_headers_conformance")
# test cases per operation in the fuzzing phase (the coverage phase has its own, bounded
# by the schemas): under a minute a database on 2 cores, within CI's budget
MAX_EXAMPLES = 10
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


# the routes below a resource (its path, and longer ones) -> (the list route, its key,
# the field of an item) of the values their path parameter takes
RESOURCES = {
    "/v1/accelerators/{uuid}": ("/v1/accelerators", "accelerator", "uuid"),
    "/v2/devices/{uuid}": ("/v2/devices", "devices", "uuid"),
    "/v2/deployables/{uuid}": ("/v2/deployables", "deployables", "uuid"),
    "/v2/attributes/{uuid}": ("/v2/attributes", "attributes", "uuid"),
    "/v2/accelerator_requests/{uuid}": ("/v2/accelerator_requests", "arqs", "uuid"),
    "/v2/device_profiles/{name_or_uuid}": ("/v2/device_profiles", "device_profiles", "name"),
}
# how often a path parameter names a real resource rather than a generated value
REAL_ID_PROBABILITY = 0.7


def _config(api: p.Api, path: Path) -> Path:
    """A schemathesis.toml whose dictionaries hold the ids of the resources that exist, so
    that most requests below a resource reach its handler's logic instead of a 404."""
    lines = []
    for n, (template, (route, key, field)) in enumerate(RESOURCES.items()):
        ids = [item[field] for item in api.ok_json(route)[key]]
        assert ids, f"nothing listed at {route}"
        param = re.search(r"{(\w+)}", template).group(1)
        lines += [f"[dictionaries.ids{n}]", f"values = {json.dumps(ids)}", "",
                  "[[operations]]",
                  f"include-path-regex = {json.dumps('^' + re.escape(template))}",
                  f'parameters = {{ "path.{param}" = {{ dictionary = "ids{n}", '
                  f"probability = {REAL_ID_PROBABILITY} }} }}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_schemathesis_finds_no_5xx_and_no_answer_off_the_document(backend, make_db_url,
                                                                  request, tmp_path):
    db_url = make_db_url(backend)
    procs = p.Processes(request.node, tmp_path)
    request.addfinalizer(procs.close)      # before the database fixture drops it
    dep = p.start_serve(procs, host=p.unique_host(), db_url=db_url)
    p.wait_inventory(dep, 4)
    _seed(dep.api)
    config = _config(dep.api, tmp_path / "schemathesis.toml")
    schema = requests.get(f"{dep.api.base}/openapi.json", timeout=p.HTTP_TIMEOUT)
    assert schema.status_code == 200

    cli = [sys.executable, "-m", "schemathesis.cli"]
    args = [
        "--config-file", str(config), "run", f"{dep.api.base}/openapi.json",
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
