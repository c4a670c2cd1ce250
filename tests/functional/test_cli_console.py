"""The real `acceld` console script against a real `acceld serve` on loopback: exit
statuses of success, of each kind of failure, of usage errors and of timeouts, and the
help of acceld and of every command. One server for the module; each test works on a
device of its own, and the fake driver's control file says how installs and programming
behave."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests import helpers
from tests.integration.procs import free_port

ACCELD = shutil.which("acceld", path=os.path.dirname(sys.executable)) or "acceld"
UNKNOWN = "5e5e5e5e-0000-4000-8000-0000000000ff"
DEMO_1 = "de300001-0000-4000-8000-000000000001"
STUBBORN = "5e5e5e5e-0000-4000-8000-0000000000aa"     # a fake guest that keeps its devices
SERVER_VERBS = ["serve", "api", "conductor", "agent", "db", "metrics-collector"]
OPERATOR_VERBS = ["accelerator", "placement", "driver-list", "service-list",
                  "discover-services", "deployable-program", "deployable-program-status",
                  "install-driver", "uninstall-driver", "update-driver", "attach-instance",
                  "detach-instance", "guest-list", "arq-attach", "arq-detach", "usage",
                  "ledger-list", "device-health", "device-quarantine", "device-release",
                  "device-reset", "device-drain", "device-undrain", "profile-availability",
                  "arq-dry-run", "help"]
SUB_VERBS = [["accelerator", a] for a in ("list", "show", "create", "set-ready",
                                          "set-inactive", "set-specs", "attach", "detach",
                                          "stats")] + [["placement", "sync"],
                                                       ["placement", "status"]]


@dataclass
class Served:
    url: str
    control: pathlib.Path
    image: pathlib.Path

    def set_control(self, **values: object) -> None:
        """What the fake driver does next (read at each install and programming)."""
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(values))
        tmp.replace(self.control)

    def run_controlled(self, *args: str, **control: object
                       ) -> subprocess.CompletedProcess[str]:
        """``acceld *args`` against this server while the fake driver's control file says
        ``control`` (emptied again afterwards)."""
        self.set_control(**control)
        try:
            return acceld(*args, url=self.url)
        finally:
            self.set_control()

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def post(self, path: str, body: object) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def accelerator(self, kind: str) -> str:
        (acc,) = self.get(f"/v1/accelerators?device_type={kind}")["accelerator"]
        return acc["uuid"]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("cli-console")
    images = tmp / "images"
    images.mkdir()
    image = images / "demo.gbs"
    image.write_text("function: demo\npayload\n")
    control = tmp / "control.json"
    control.write_text("{}")
    port = free_port()
    conf = tmp / "acceld.conf"
    conf.write_text(f"[DEFAULT]\nhost = console-host\nstate_path = {tmp / 'state'}\n"
                    f"[api]\nport = {port}\n"
                    # set-ready answers at once with the transient state: the CLI waits
                    "[conductor]\noperation_wait = 0.1\n"
                    # a reset answers at once with resetting: device-reset --wait follows
                    "[health]\nreset_wait = 0.1\n"
                    f"[fake_driver]\ncontrol_file = {control}\n"
                    f"[fpga_driver]\nlocal_image_dirs = {images}\n"
                    f"[hypervisor]\nfake_instances = {DEMO_1}:demo-1,{STUBBORN}:stubborn\n"
                    f"fake_ignore_unplug = {STUBBORN}\n")
    log = open(tmp / "serve.log", "w")
    proc = subprocess.Popen([ACCELD, "serve", "--config-file", str(conf)], stdout=log,
                            stderr=subprocess.STDOUT)
    server = Served(f"http://127.0.0.1:{port}", control, image)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if len(server.get("/v1/accelerators")["accelerator"]) == 4:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (tmp / "serve.log").read_text()
            assert time.monotonic() < deadline, "the 4 fake devices were not listed in 30 s"
            time.sleep(0.1)
        yield server
    finally:
        helpers.stop_process(proc)
        log.close()


def acceld(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELD_", "OS_"))}
    if url:
        env["ACCELD_URL"] = url
    return subprocess.run([ACCELD, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def _one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The failure's reason: the last stderr line, ``ERROR: ...``."""
    lines = out.stderr.splitlines()
    assert lines and lines[-1].startswith("ERROR: "), out.stderr
    assert [line for line in lines if line.startswith("ERROR")] == [lines[-1]]
    assert "Traceback" not in out.stderr
    return lines[-1]


# --- help -------------------------------------------------------------------------------


def test_top_level_help_lists_every_command_on_one_line():
    out = acceld("--help")
    assert out.returncode == 0 and out.stderr == ""
    commands = out.stdout.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    lines = {line.split()[0]: line for line in commands.splitlines()
             if line.startswith("    ") and not line.startswith("     ")}
    assert sorted(lines) == sorted(SERVER_VERBS + OPERATOR_VERBS)
    assert all(len(line.split()) > 2 for line in lines.values()), commands
    assert "exit status:" in out.stdout and "3    timed out" in out.stdout
    assert acceld("help").stdout == out.stdout


def test_no_command_prints_the_help_on_stderr_and_exits_2():
    out = acceld()
    assert out.returncode == 2
    assert out.stdout == "" and "\ncommands:\n" in out.stderr


def test_every_command_has_its_own_help():
    argvs = [[v] for v in SERVER_VERBS + OPERATOR_VERBS] + SUB_VERBS
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELD_", "OS_"))}
    procs = [(argv, subprocess.Popen([ACCELD, *argv, "--help"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env))
             for argv in argvs]
    for argv, proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, (argv, stderr)
        assert stdout.startswith(f"usage: acceld {' '.join(argv)}"), (argv, stdout)
        if argv[0] not in SERVER_VERBS:  # the server verbs' help is oslo.config's
            assert "exit status:" in stdout, argv
    for argv in (["serve"], ["accelerator", "detach"]):  # `acceld help COMMAND`
        out = acceld("help", *argv)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"usage: acceld {' '.join(argv)}")


# --- usage errors -----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["no-such-verb"],
    ["accelerator"],
    ["accelerator", "set-ready"],
    ["accelerator", "set-ready", UNKNOWN, "--wait", "-1"],
    ["accelerator", "attach", UNKNOWN],
    ["--timeout", "0", "service-list"],
    ["-f", "yaml", "service-list"],
    ["-f", "json", "serve"],
    ["help", "no-such-verb"],
    ["profile-availability", "p", "--group-policy", "random"],
    ["arq-dry-run"],
    ["service-list", "typed\x1b[2J\u202e"],
])
def test_usage_errors_exit_2(argv):
    out = acceld(*argv)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.startswith("usage: acceld")
    assert "\x1b" not in out.stderr and "\u202e" not in out.stderr


# --- success and failures of the API and of the network ---------------------------------


def test_success_exits_0_with_the_result_on_stdout_only(served):
    out = acceld("accelerator", "list", "-f", "json", url=served.url)
    assert out.returncode == 0 and out.stderr == ""
    listed = json.loads(out.stdout)
    assert sorted(a["device_type"] for a in listed) == ["FPGA", "GPU", "NIC", "QAT"]
    out = acceld("accelerator", "list", "--limit", "3", "-f", "json", url=served.url)
    assert out.returncode == 0
    assert json.loads(out.stdout) == listed[:3]
    assert out.stderr == f"more accelerators follow: --marker {listed[2]['uuid']}\n"


def test_http_error_exits_1_with_the_servers_reason(served):
    out = acceld("accelerator", "show", UNKNOWN, url=served.url)
    assert out.returncode == 1 and out.stdout == ""
    assert _one_error_line(out) == f"ERROR: 404 Accelerator {UNKNOWN} not found."


def test_the_reason_is_printed_with_control_characters_escaped(served):
    out = acceld("accelerator", "show", "x\x1b[2J\u202eevil", url=served.url)
    assert out.returncode == 1
    line = _one_error_line(out)
    assert "x\\x1b[2J\\u202eevil" in line and "\x1b" not in out.stderr
    assert "\u202e" not in out.stderr


def test_connection_refused_exits_1():
    port = free_port()
    out = acceld("service-list", url=f"http://127.0.0.1:{port}")
    assert out.returncode == 1
    assert _one_error_line(out).startswith(
        f"ERROR: cannot reach acceld at http://127.0.0.1:{port}: ")


def test_http_timeout_exits_3():
    with socket.socket() as sock:  # connections complete in the backlog; none is answered
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        out = acceld("--timeout", "0.3", "service-list", url=url)
    assert out.returncode == 3
    assert _one_error_line(out) == f"ERROR: no answer from acceld at {url} within 0.3s " \
                                   "(--timeout)"


# --- operations that fail, wait, or fail in part ------------------------------------------


def test_set_ready_whose_install_failed_exits_1(served):
    gpu = served.accelerator("GPU")
    out = served.run_controlled("accelerator", "set-ready", gpu, "-f", "json",
                                fail_install=True)
    assert out.returncode == 1
    assert json.loads(out.stdout)["state"] == "error"
    assert _one_error_line(out) == (f"ERROR: set-ready of accelerator {gpu} failed: fake "
                                    "install of 0000:3b:00.0 failed (control file)")
    out = acceld("accelerator", "detach", gpu, url=served.url)
    assert out.returncode == 1
    assert _one_error_line(out) == f"ERROR: accelerator {gpu} is not attached"


def test_set_ready_waits_with_progress_then_attach_and_detach_once(served):
    qat = served.accelerator("QAT")
    out = served.run_controlled("accelerator", "set-ready", qat, "-f", "json",
                                install_seconds=1)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"] == "ready"
    progress = out.stderr.splitlines()
    assert progress[0].startswith(f"waiting for accelerator {qat}: state installing (0s "
                                  "elapsed, up to 60s)")
    assert progress[-1].startswith(f"accelerator {qat}: state ready after ")

    out = acceld("accelerator", "attach", qat, "--instance", UNKNOWN, url=served.url)
    assert out.returncode == 1
    assert _one_error_line(out) == (f"ERROR: 404 No host acceld manages runs instance "
                                    f"{UNKNOWN}.")
    assert acceld("accelerator", "attach", qat, "--instance", DEMO_1,
                  url=served.url).returncode == 0
    assert len(_aliases(served, DEMO_1)) == 4          # each attach handle of the QAT
    out = acceld("accelerator", "detach", qat, url=served.url)
    assert (out.returncode, out.stdout, out.stderr) == (
        0, f"Detached accelerator {qat}\n", "")
    assert _aliases(served, DEMO_1) == []
    out = acceld("accelerator", "detach", qat, url=served.url)
    assert out.returncode == 1
    assert _one_error_line(out) == f"ERROR: accelerator {qat} is not attached"
    out = acceld("detach-instance", DEMO_1, url=served.url)
    assert out.returncode == 1
    assert _one_error_line(out) == f"ERROR: no accelerator is attached to instance {DEMO_1}"


def test_device_quarantine_reset_that_fails_then_one_that_works(served):
    nic = served.accelerator("NIC")
    out = acceld("device-reset", nic, url=served.url)     # healthy: nothing to reset
    assert out.returncode == 1
    assert _one_error_line(out) == (f"ERROR: 409 Device {nic} is healthy: it cannot go to "
                                    "resetting (only from failed, quarantined).")
    out = acceld("device-quarantine", nic, "--reason", "flaky link", "-f", "json",
                 url=served.url)
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert (view["lifecycle"], view["lifecycle_reason"], view["schedulable"]) == (
        "quarantined", "flaky link", False)

    out = served.run_controlled("device-reset", nic, "-f", "json",
                                reset_fail=["0000:3e:00.0"], reset_seconds=0.5)
    assert out.returncode == 1
    assert json.loads(out.stdout)["lifecycle"] == "failed"
    assert _one_error_line(out) == (
        f"ERROR: reset of accelerator {nic} failed: reset failed: fake reset of "
        "0000:3e:00.0 failed: the device did not come back (control file)")

    out = served.run_controlled("device-reset", nic, reset_seconds=1)
    assert out.returncode == 0, out.stderr
    progress = out.stderr.splitlines()
    assert progress[0].startswith(f"waiting for reset of {nic}: lifecycle resetting (0s "
                                  "elapsed, up to 120s)")
    assert progress[-1].startswith(f"reset of {nic}: lifecycle healthy after ")
    assert out.stdout.splitlines()[0] == "lifecycle: failed -> resetting"
    assert served.get(f"/v1/accelerators/{nic}")["lifecycle"] == "healthy"


def _aliases(served: Served, instance: str) -> list[str]:
    (guest,) = [g for g in served.get("/v1/guests")["guests"] if g["uuid"] == instance]
    return list(guest["aliases"])


def test_set_ready_whose_wait_runs_out_exits_3(served):
    nic = served.accelerator("NIC")
    out = served.run_controlled("accelerator", "set-ready", nic, "--wait", "0.3",
                                install_seconds=2)
    assert out.returncode == 3
    assert out.stderr.startswith(f"waiting for accelerator {nic}: state installing")
    assert _one_error_line(out) == (f"ERROR: accelerator {nic} is still installing after "
                                    "0.3s (--wait)")
    assert "installing" in out.stdout


def _fpga_deployable(served: Served) -> str:
    (uuid,) = [d["uuid"] for d in served.get("/v2/deployables")["deployables"]
               if {"rc": "FPGA"} in json.loads(d["attributes_list"])]
    return uuid


def test_program_wait_reports_progress_failure_and_running_out(served):
    dep = _fpga_deployable(served)
    sha = hashlib.sha256(served.image.read_bytes()).hexdigest()
    program = ["deployable-program", dep, "--image-path", str(served.image), "--sha256", sha,
               "-f", "json"]
    out = served.run_controlled(*program, "--wait", "60", program_seconds=0.5)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"] == "done"
    assert out.stderr.startswith(f"waiting for programming of {dep}: queued")
    assert out.stderr.splitlines()[-1].startswith(f"programming of {dep}: done 100%")

    out = served.run_controlled(*program, "--wait", "60", program_fail=True)
    assert out.returncode == 1
    assert json.loads(out.stdout)["state"] == "failed"
    assert _one_error_line(out).startswith(f"ERROR: programming {dep} failed: fake "
                                           "programming of ")

    out = served.run_controlled(*program, "--wait", "0.3", program_seconds=3)
    assert out.returncode == 3
    assert json.loads(out.stdout)["state"] in ("queued", "running")
    assert _one_error_line(out).endswith("after 0.3s (--wait)")


def test_failures_of_multi_host_operations_exit_1(served):
    out = acceld("install-driver", "no-such-driver", url=served.url)
    assert out.returncode == 1
    assert "no-such-driver" in out.stdout and "False" in out.stdout
    assert _one_error_line(out) == ("ERROR: install of driver no-such-driver failed on 1 of "
                                    "1 host(s): console-host")
    out = acceld("discover-services", "--host", "no-such-host", url=served.url)
    assert out.returncode == 1
    assert _one_error_line(out) == "ERROR: no agent answered on: no-such-host"
    out = acceld("discover-services", url=served.url)
    assert out.returncode == 0, out.stderr


# --- hot plug (the all-in-one's fake hypervisor and its demo guests) --------------------


def test_explain_verbs_answer_where_a_profile_fits_and_why_not(served):
    """Before the hot plug tests, which bind the GPU: it fits once once it is ready."""
    gpu = served.accelerator("GPU")
    assert acceld("accelerator", "set-ready", gpu, url=served.url).returncode == 0
    for name, traits in (("cli-fit", {}), ("cli-odd", {"trait:CUSTOM_NO_SUCH": "required"})):
        served.post("/v2/device_profiles", [{"name": name, "groups": [
            {"resources:PGPU": "1", **traits}]}])
    out = acceld("profile-availability", "cli-fit", "-f", "json", url=served.url)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    body = json.loads(out.stdout)
    assert (body["count"], [h["hostname"] for h in body["hosts"]]) == (1, ["console-host"])
    out = acceld("profile-availability", "cli-odd", "--group-policy", "isolate",
                 url=served.url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("0 instance(s) of device profile cli-odd fit now on 0 "
                                 "host(s) (group_policy isolate)\nNot fitting:\n")
    assert "console-host" in out.stdout and "missing_trait" in out.stdout
    assert "lacks trait CUSTOM_NO_SUCH" in out.stdout

    out = acceld("arq-dry-run", "cli-fit", "--host", "console-host", "-f", "json",
                 url=served.url)
    assert out.returncode == 0, out.stderr
    (arq,) = json.loads(out.stdout)["arqs"]
    assert (arq["hostname"], arq["device_uuid"]) == ("console-host", gpu)
    assert served.get("/v2/accelerator_requests")["arqs"] == []          # none made
    out = acceld("arq-dry-run", "cli-odd", "--host", "console-host", url=served.url)
    assert (out.returncode, out.stdout) == (1, "")
    assert _one_error_line(out).startswith(
        "ERROR: the ARQs of device profile cli-odd would not bind on console-host: "
        "missing_trait: provider ")
    out = acceld("profile-availability", "no-such-profile", url=served.url)
    assert out.returncode == 1 and "404" in _one_error_line(out)


def test_guest_list_then_arq_attach_and_detach_with_progress(served):
    out = acceld("guest-list", "-f", "json", url=served.url)
    assert out.returncode == 0, out.stderr
    assert [(g["name"], g["running"]) for g in json.loads(out.stdout)] == [
        ("demo-1", True), ("stubborn", True)]
    gpu = served.accelerator("GPU")
    assert acceld("accelerator", "set-ready", gpu, url=served.url).returncode == 0
    served.post("/v2/device_profiles", [{"name": "cli-hot", "groups": [
        {"resources:PGPU": "1"}]}])
    (arq,) = served.post("/v2/accelerator_requests",
                         {"device_profile_name": "cli-hot"})["arqs"]

    out = acceld("arq-attach", arq["uuid"], "--instance", UNKNOWN, url=served.url)
    assert out.returncode == 1 and UNKNOWN in _one_error_line(out)
    out = acceld("arq-attach", arq["uuid"], "--instance", DEMO_1, "-f", "json",
                 url=served.url)
    assert out.returncode == 0, out.stderr
    attached = json.loads(out.stdout)
    assert (attached["state"], attached["hot_plug"]) == ("Bound", "Attached")
    out = acceld("guest-list", "-f", "json", url=served.url)
    assert json.loads(out.stdout)[0]["arqs"] == [arq["uuid"]]

    out = acceld("arq-detach", arq["uuid"], "-f", "json", url=served.url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["hot_plug"] == "Initial"
    out = acceld("arq-detach", arq["uuid"], url=served.url)
    assert out.returncode == 1 and "not attached" in _one_error_line(out)


def test_usage_as_csv_counts_a_hot_plug_from_the_ledger(served):
    gpu = served.accelerator("GPU")
    assert acceld("accelerator", "set-ready", gpu, url=served.url).returncode == 0
    served.post("/v2/device_profiles", [{"name": "cli-ledger", "groups": [
        {"resources:PGPU": "1"}]}])
    (arq,) = served.post("/v2/accelerator_requests",
                         {"device_profile_name": "cli-ledger"})["arqs"]
    assert acceld("arq-attach", arq["uuid"], "--instance", DEMO_1,
                  url=served.url).returncode == 0
    time.sleep(0.05)                              # a holding of measurable length
    assert acceld("arq-detach", arq["uuid"], url=served.url).returncode == 0

    out = acceld("ledger-list", "--arq", arq["uuid"], "-f", "json", url=served.url)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["event"], r["kind"], r["device_uuid"], r["instance_uuid"]) for r in rows] == [
        ("attach", "hot_plug", gpu, DEMO_1), ("detach", "hot_plug", gpu, DEMO_1)]
    out = acceld("ledger-list", "--arq", arq["uuid"], "--limit", "1", "-f", "json",
                 url=served.url)
    assert out.returncode == 0 and json.loads(out.stdout) == rows[:1]
    assert out.stderr == f"more rows follow: --marker {rows[0]['id']}\n"

    out = acceld("usage", "--since", "2000-01-01", "--group-by", "device", "-f", "csv",
                 url=served.url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "device,device_hours,holdings"
    (mine,) = [line.split(",") for line in lines[1:] if line.startswith(gpu)]
    assert 0 < float(mine[1]) < 0.01 and int(mine[2]) >= 1

    out = acceld("usage", "--since", "2000-02-30", url=served.url)
    assert out.returncode == 1 and "'since'" in _one_error_line(out)
    out = acceld("usage", url=served.url)
    assert out.returncode == 2                     # --since is required


def test_arq_detach_from_a_guest_that_keeps_the_device_times_out_with_exit_3(served):
    served.post("/v2/device_profiles", [{"name": "cli-stubborn", "groups": [
        {"resources:PGPU": "1"}]}])
    (arq,) = served.post("/v2/accelerator_requests",
                         {"device_profile_name": "cli-stubborn"})["arqs"]
    gpu = served.accelerator("GPU")
    assert acceld("accelerator", "set-ready", gpu, url=served.url).returncode == 0
    assert acceld("arq-attach", arq["uuid"], "--instance", STUBBORN,
                  url=served.url).returncode == 0
    out = acceld("arq-detach", arq["uuid"], "--wait", "1", "-f", "json", url=served.url)
    assert out.returncode == 3, out.stderr
    assert json.loads(out.stdout)["hot_plug"] == "Detaching"
    assert out.stderr.startswith(f"waiting for ARQ {arq['uuid']} to leave its instance: "
                                 "hot_plug Detaching")
    assert "stays attached, the ARQ Detaching" in _one_error_line(out)


def test_a_v1_detach_the_guest_does_not_release_exits_1_with_the_reason(served):
    """Last in the module: the stubborn guest keeps the QAT's devices for good."""
    qat = served.accelerator("QAT")
    assert acceld("accelerator", "set-ready", qat, url=served.url).returncode == 0
    before = set(_aliases(served, STUBBORN))    # an earlier test's ARQ may be there
    assert acceld("attach-instance", STUBBORN, "--accelerator", qat,
                  url=served.url).returncode == 0
    held = set(_aliases(served, STUBBORN)) - before
    assert len(held) == 4                         # each attach handle of the QAT
    pending = (f"Detach of accelerator {qat} from instance {STUBBORN} is pending: the guest "
               "has not released 4 of its devices yet; it stays attached. Ask again to "
               "wait again.")
    out = acceld("accelerator", "detach", qat, url=served.url)
    assert (out.returncode, out.stdout) == (1, "")
    assert _one_error_line(out) == f"ERROR: accelerator {qat} is still attached: {pending}"
    out = acceld("detach-instance", STUBBORN, "--accelerator", qat, url=served.url)
    assert (out.returncode, out.stdout) == (1, "")
    assert _one_error_line(out) == (f"ERROR: 1 of 1 accelerator(s) of instance {STUBBORN} "
                                    f"not detached: {qat}: 409 {pending}")
    assert served.get(f"/v1/accelerators/{qat}")["attached_to"] == {
        "type": "instance", "id": STUBBORN, "hot_plug": "Detaching"}
    assert held <= set(_aliases(served, STUBBORN))


def test_device_drain_lists_the_binds_it_keeps_then_undrain(served):
    qat = served.accelerator("QAT")
    # binds an earlier test of the module left on it (with them the drain stays "draining")
    bound = served.get(f"/v1/accelerators/{qat}/health")["bound"]
    out = acceld("device-drain", qat, "--reason", "fan swap", url=served.url)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "".join(
        f"still bound: {json.dumps(b, sort_keys=True, separators=(',', ':'))}\n"
        for b in bound)
    lines = out.stdout.splitlines()
    assert lines[0] == "maintenance: in_service -> maintenance"
    assert any([cell.strip() for cell in line.split("|")[1:3]] == ["maintenance_reason",
                                                                   "fan swap"]
               for line in lines), out.stdout
    out = acceld("device-drain", qat, "-f", "json", url=served.url)
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert view["transition"]["changed"] is False
    assert view["maintenance"] == ("draining" if bound else "drained")
    out = acceld("device-undrain", qat, url=served.url)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    assert out.stdout.splitlines()[0] == "maintenance: maintenance -> in_service"
    assert served.get(f"/v1/accelerators/{qat}")["maintenance"] is None
