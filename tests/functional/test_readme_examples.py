"""Every command of the README's "Trying it" section, run as written against the README's
own `acceld serve` (a real process on loopback; HOME is a temporary directory, so its
database is under it, and only the port differs: OS_API__PORT).

A command is run with bash, in the repository root, with three substitutions: the port of
`127.0.0.1:6666` (and ACCELD_URL, for the CLI whose default that address is), `.venv/bin/`
for this interpreter's bin directory, and each `<...>` placeholder for a value read from
the server (an unknown placeholder fails the test).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from acceld.conf.hypervisor import DEMO_INSTANCES
from acceld.db import migration
from acceld.db.api import Database
from tests import helpers
from tests.integration.procs import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.path.dirname(sys.executable)
INSTANCE = DEMO_INSTANCES[0].partition(":")[0]   # a guest of the fake hypervisor
BOUND_INSTANCE = "0c0c0c0c-0000-4000-8000-000000000002"


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    text = _readme()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def _commands(text: str) -> list[str]:
    """The shell commands of the indented code blocks of ``text``: a line ending in a
    backslash or with an open quote goes on into the next."""
    commands: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not line.startswith("    ") and not pending:
            continue
        pending += ("\n" if pending else "") + line.strip()
        if pending.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        commands.append(pending)
        pending = ""
    assert not pending, f"README command never ends: {pending}"
    return commands


def _get(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def _env(home: pathlib.Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OS_", "ACCELD_", "XDG_"))}
    return {**env, "HOME": str(home), "OS_API__PORT": str(port),
            "ACCELD_URL": f"http://127.0.0.1:{port}"}


@pytest.fixture(scope="module")
def readme_serve(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """The README's first command, `.venv/bin/acceld serve`, with a fresh HOME."""
    first = _commands(_readme().split("\n---\n", 1)[0])[0]
    serve = first.rsplit("&&", 1)[-1].strip()
    assert serve == ".venv/bin/acceld serve"
    home = tmp_path_factory.mktemp("readme-home")
    port = free_port()
    env = _env(home, port)
    log = open(home / "serve.log", "w")
    proc = subprocess.Popen(shlex.split(serve.replace(".venv/bin/", BIN + "/")), env=env,
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            body = _get(f"{url}/v1/accelerators")
            if isinstance(body, dict) and len(body["accelerator"]) == 4:
                break
            assert proc.poll() is None, (home / "serve.log").read_text()
            assert time.monotonic() < deadline, "the 4 fake devices were not listed in 30 s"
            time.sleep(0.1)
        yield url, env
    finally:
        helpers.stop_process(proc)
        log.close()


def _placeholders(url: str) -> dict[str, Callable[[], str]]:
    """Each placeholder of the README and how to fill it in, read when it is needed (the
    ARQ exists only once an earlier example made it)."""
    def accelerator(kind: str) -> dict:
        body = _get(f"{url}/v1/accelerators?device_type={kind}")
        assert isinstance(body, dict)
        return body["accelerator"][0]

    def fpga_rp_uuid() -> str:
        body = _get(f"{url}/v2/deployables")
        assert isinstance(body, dict)
        (rp_uuid,) = [d["rp_uuid"] for d in body["deployables"]
                      if {"rc": "FPGA"} in json.loads(d["attributes_list"])]
        return rp_uuid

    def arq_uuid(profile: str) -> str:
        body = _get(f"{url}/v2/accelerator_requests")
        assert isinstance(body, dict)
        (uuid,) = [a["uuid"] for a in body["arqs"] if a["device_profile_name"] == profile]
        return uuid

    return {
        "<uuid>": lambda: accelerator("GPU")["uuid"],
        "<instance uuid>": lambda: INSTANCE,
        "<uuid of the FPGA accelerator>": lambda: accelerator("FPGA")["uuid"],
        "<arq uuid>": lambda: arq_uuid("fpga1"),
        "<arq uuid of gpu1>": lambda: arq_uuid("gpu1"),
        "<uuid of a guest>": lambda: INSTANCE,
        "<host>": lambda: accelerator("FPGA")["host"],
        "<rp_uuid of the FPGA deployable>": fpga_rp_uuid,
        "<any uuid>": lambda: BOUND_INSTANCE,
        "<that uuid>": lambda: BOUND_INSTANCE,
    }


def _as_run(command: str, url: str, fill: dict[str, Callable[[], str]]) -> str:
    command = command.replace("127.0.0.1:6666", url.removeprefix("http://"))
    command = command.replace(".venv/bin/", BIN + "/")
    for name in set(re.findall(r"<[^<>]+>", command)):
        assert name in fill, f"README placeholder {name} is unknown to this test"
        command = command.replace(name, fill[name]())
    return command


def test_trying_it_runs_as_written(readme_serve):
    url, env = readme_serve
    assert shutil.which("openstack", path=BIN), "openstack comes with .[test]"
    fill = _placeholders(url)
    commands = _commands(_section("Trying it"))
    assert len(commands) >= 20
    assignments: list[str] = []
    outputs: dict[str, str] = {}
    for command in commands:
        if re.match(r"^[A-Z_]+=", command):  # a shell variable later commands use
            assignments.append(_as_run(command, url, fill))
            continue
        script = "\n".join([*assignments, _as_run(command, url, fill)])
        out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
        assert "ERROR" not in out.stderr and '"errors"' not in out.stdout, command
        outputs[command] = out.stdout

    def output(prefix: str) -> str:
        (text,) = [v for k, v in outputs.items() if k.startswith(prefix)]
        return text

    gpu = fill["<uuid>"]()
    listed = json.loads(output(".venv/bin/acceld accelerator list -f json"))
    assert [(a["state"], a["attached_to"]) for a in listed if a["uuid"] == gpu] == [
        ("ready", None)]
    assert "fpga1" in output(".venv/bin/openstack $OS accelerator device profile show")
    assert "serve" in output(".venv/bin/acceld --help")
    assert "demo-1" in output(".venv/bin/acceld guest-list")
    assert "Attached" in output(".venv/bin/acceld arq-attach")
    hot = _get(f"{url}/v2/accelerator_requests/{fill['<arq uuid of gpu1>']()}/hot_plug")
    assert isinstance(hot, dict) and (hot["state"], hot["hot_plug"]) == ("Unbound", "Initial")
    bound = json.loads(output("curl '127.0.0.1:6666/v2/accelerator_requests?instance="))
    assert [(a["uuid"], a["state"]) for a in bound["arqs"]] == [(fill["<arq uuid>"](),
                                                                 "Bound")]


def test_schema_commands_of_the_service_table(readme_serve, tmp_path):
    """`acceld db upgrade` / `acceld db version` as the table writes them: on the README's
    serve database (the default state path under HOME), already at the newest version."""
    _url, env = readme_serve
    table = _section("Running it as a cloud service")
    commands = re.findall(r"`(acceld db \w+)`", table)
    assert commands == ["acceld db upgrade", "acceld db version"]
    versions = set()
    for command in commands:
        out = subprocess.run([os.path.join(BIN, "acceld"), *command.split()[1:]], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        versions.add(out.stdout.strip().splitlines()[-1])
    newest = Database(f"sqlite:///{tmp_path / 'newest.sqlite'}")
    migration.upgrade(newest)
    assert versions == {migration.version(newest)}
