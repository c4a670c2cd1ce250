#!/usr/bin/env python3
"""acceld against upstream Cyborg, the same workload in the same run (issue 4's benchmark).

Prerequisites: the peers of ``../shared/peers`` set up and started (``./setup.sh``,
``./start.sh --fresh``; ``PEERS_DB=mariadb`` for the MariaDB comparison) in a writable
copy given with ``--peers`` (the shared directory is read-only; ``cp -r`` it). For the
bare-WSGI ceiling also ``./bare.sh start``.

What it does:

1. Starts acceld the way Cyborg runs there: ``acceld.wsgi.api:application`` under the
   peers' own uWSGI binary with the *same ini* as cyborg-api (``etc/uwsgi/cyborg-api.ini``
   read and only its module, config and port replaced: 2 processes, ``Connection: close``),
   plus ``acceld conductor`` and ``acceld agent`` over the peers' RabbitMQ (own vhost), on
   the same database engine as Cyborg (``--db``), with a compute node of its own in the
   peers' Placement. The fake driver mirrors Cyborg's: one FPGA with 16 attach handles.
2. Imports the peers' ``load.py`` and runs *its* scenarios (the same request bodies and
   checks) against Cyborg (A), acceld (B) and, for the stateless ones, the bare app (C),
   interleaved run by run (A B C, C B A, ...), each ``--repeat`` times.
3. Records per run: throughput, latency percentiles, errors and server CPU per operation
   (Cyborg: every process group of the peers; acceld: its API, conductor and agent; the
   bare app: its uWSGI). With ``--client-procs N`` the read scenarios also run from N
   client processes at once (one load.py process saturates near 2.5k req/s).
4. Prints medians and the ratios the issue names, and writes everything to ``--json``.

    .venv/bin/python bench/vs_cyborg.py --peers /work/peers --db sqlite --json out.json

Only loopback is used. Every loop is bounded by ``--requests`` and ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ACCELD_PORT = int(os.environ.get("ACCELD_BENCH_PORT", "6670"))
FLOOR_PORT = ACCELD_PORT + 1
HOST = "acceld-bench-0"
ACCELD_GROUPS = ("acceld-api", "acceld-conductor", "acceld-agent")


def load_peers_module(peers: str):
    spec = importlib.util.spec_from_file_location("peers_load", os.path.join(peers, "load.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_state(peers: str) -> dict[str, str]:
    out = {}
    with open(os.path.join(peers, "run", "state.env"), encoding="utf-8") as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, _, v = line.strip().partition("=")
                out[k] = v.strip("'")
    return out


def http(method: str, url: str, body=None, headers=None):
    req = urllib.request.Request(url, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"X-Auth-Token": "admin",
                                          "Content-Type": "application/json",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:         # not listening yet
        return 0, str(e).encode()


# -- acceld under the peers' uWSGI ---------------------------------------------------------

def uwsgi_ini(peers: str, workdir: str, name: str, module: str, pythonpath: str, env: str,
              port: int) -> str:
    """cyborg-api's own ini with only the app, its environment and the port replaced."""
    with open(os.path.join(peers, "etc", "uwsgi", "cyborg-api.ini"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        if key == "module":
            line = f"module = {module}"
        elif key == "pyargv":
            line = f"env = {env}"
        elif key == "virtualenv":
            line = f"virtualenv = {sys.prefix}"
        elif key == "pythonpath":
            line = f"pythonpath = {pythonpath}"
        elif key == "http-socket":
            line = f"http-socket = 127.0.0.1:{port}"
        out.append(line.replace("@PEERS@", peers))
    ini = os.path.join(workdir, f"{name}.ini")
    with open(ini, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return ini


class Acceld:
    DB_NAME = "acceld_bench"      # on a database server: made anew for each run

    def __init__(self, peers: str, db: str, rabbit_url: str, workdir: str) -> None:
        self.peers, self.db, self.workdir = peers, db, workdir
        self.rabbit_url = rabbit_url
        self.procs: dict[str, subprocess.Popen] = {}
        self.url = f"http://127.0.0.1:{ACCELD_PORT}"

    def db_url(self) -> str:
        if self.db == "sqlite":
            return "sqlite:///" + os.path.join(self.workdir, "acceld.sqlite")
        name = self.DB_NAME
        if self.db == "postgresql":
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc",
                            f"DROP DATABASE IF EXISTS {name}"], check=True)
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc",
                            f"CREATE DATABASE {name}"], check=True)
            return f"postgresql+psycopg2://postgres@127.0.0.1/{name}"
        subprocess.run(["mariadb", "-h", "127.0.0.1", "-uroot", "-e",
                        f"DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"], check=True)
        return f"mysql+pymysql://root@127.0.0.1/{name}?charset=utf8mb4"

    def write_config(self) -> str:
        self.database_url = self.db_url()       # a fresh database
        conf = os.path.join(self.workdir, "acceld.conf")
        with open(conf, "w", encoding="utf-8") as f:
            f.write(f"""[DEFAULT]
host = {HOST}
transport_url = {self.rabbit_url}
state_path = {self.workdir}/state
[database]
connection = {self.database_url}
[api]
auth_strategy = noauth
[placement]
auth_type = admin_token
endpoint = http://127.0.0.1:{os.environ.get('PEERS_PLACEMENT_PORT', '8778')}
token = admin
[agent]
enabled_drivers = fake
[fake_driver]
profile = cyborg
""")
        return conf

    def uwsgi_ini(self, conf: str) -> str:
        return uwsgi_ini(self.peers, self.workdir, "acceld-api", "acceld.wsgi.api:application",
                         REPO, f"ACCELD_CONFIG_FILE={conf}", ACCELD_PORT)

    def start(self, api_only: bool = False) -> None:
        """The API, conductor and agent, ready once the fake FPGA is in Placement; with
        ``api_only`` the API alone (device profiles need nothing else), ready once it
        answers."""
        if http("GET", self.url + "/")[0] != 0:
            raise SystemExit(f"something already listens on {self.url}; stop it first "
                             f"(or set ACCELD_BENCH_PORT)")
        conf = self.write_config()
        acceld = os.path.join(os.path.dirname(sys.executable), "acceld")
        env = dict(os.environ, PYTHONPATH=REPO)
        subprocess.run([acceld, "db", "upgrade", "--config-file", conf], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        uwsgi = os.path.join(self.peers, ".venv-cyborg", "bin", "uwsgi")
        cmds = {"acceld-api": [uwsgi, "--ini", self.uwsgi_ini(conf)]}
        if not api_only:
            # a compute node of acceld's own in the peers' Placement
            http("POST", f"http://127.0.0.1:{os.environ.get('PEERS_PLACEMENT_PORT', '8778')}"
                 "/resource_providers", {"name": HOST},
                 {"OpenStack-API-Version": "placement 1.20"})
            cmds["acceld-conductor"] = [acceld, "conductor", "--config-file", conf]
            cmds["acceld-agent"] = [acceld, "agent", "--config-file", conf]
        for name, cmd in cmds.items():
            log = open(os.path.join(self.workdir, name + ".log"), "w")  # noqa: SIM115
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                env=env, start_new_session=True)
        deadline = time.monotonic() + 150
        if api_only:
            while http("GET", self.url + "/v2")[0] != 200:
                if time.monotonic() > deadline:
                    raise SystemExit(f"acceld's API did not start; see {self.workdir}")
                time.sleep(0.2)
            return
        while time.monotonic() < deadline:
            st, data = http("GET", self.url + "/v2/deployables")
            if st == 200 and any(d.get("rp_uuid") for d in json.loads(data)["deployables"]):
                self._ready_all()
                time.sleep(3)   # let start-up work (imports, first sync) finish
                return
            time.sleep(0.3)
        raise SystemExit(f"acceld did not report its fake FPGA in time; see {self.workdir}")

    def _ready_all(self) -> None:
        """An operator readies the fake FPGA (binds take only ready devices; Cyborg
        binds any discovered device)."""
        st, data = http("GET", self.url + "/v1/accelerators")
        if st != 200:
            raise SystemExit(f"acceld could not list its accelerators: {st} {data!r}")
        for acc in json.loads(data)["accelerator"]:
            st, body = http("PUT", f"{self.url}/v1/accelerators/{acc['uuid']}/state",
                            {"state": "ready"})
            if st != 200 or json.loads(body)["state"] != "ready":
                raise SystemExit(f"acceld could not ready {acc['uuid']}: {st} {body!r}")

    def pgids(self) -> dict[int, str]:
        return {p.pid: name for name, p in self.procs.items()}

    def stop(self) -> None:
        stop_groups(self.procs.values())


def stop_groups(procs) -> None:
    """SIGTERM to each process group (started with start_new_session), then SIGKILL to
    those still there after 15 s."""
    procs = list(procs)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


class Floor:
    """``bench/floor_app.py`` under the same uWSGI ini, on acceld's database (``--floor``):
    the write scenarios with nothing but the statements they need."""

    def __init__(self, peers: str, workdir: str, database_url: str) -> None:
        self.peers, self.workdir, self.database_url = peers, workdir, database_url
        self.url = f"http://127.0.0.1:{FLOOR_PORT}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        ini = uwsgi_ini(self.peers, self.workdir, "floor-api", "floor_app:application", HERE,
                        f"FLOOR_DB_URL={self.database_url}", FLOOR_PORT)
        log = open(os.path.join(self.workdir, "floor-api.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [os.path.join(self.peers, ".venv-cyborg", "bin", "uwsgi"), "--ini", ini],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if http("GET", self.url + "/")[0] == 404:
                return
            time.sleep(0.2)
        raise SystemExit(f"the floor app did not start; see {self.workdir}/floor-api.log")

    def pgids(self) -> dict[int, str]:
        return {self.proc.pid: "floor-api"} if self.proc else {}

    def stop(self) -> None:
        stop_groups([self.proc] if self.proc else [])


# -- CPU accounting over both sides ----------------------------------------------------------

def cpu_by_pgid(load, pgids: dict[int, str]) -> dict[str, dict[int, tuple[float, float]]]:
    out: dict[str, dict[int, tuple[float, float]]] = {n: {} for n in pgids.values()}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            name = pgids.get(os.getpgid(int(d)))
        except OSError:
            continue
        if name:
            v = load._proc_cpu(int(d))
            if v:
                out[name][int(d)] = v
    return out


def patch_cpu(load, *ours) -> None:
    """load.py's CPU sampler, extended with the process groups of acceld (and the floor
    app)."""
    original = load.cpu_groups

    def both(names=load.GROUPS):
        out = original(names)
        for side in ours:
            out.update(cpu_by_pgid(load, side.pgids()))
        return out
    load.cpu_groups = both


SIDE_GROUPS = {
    "cyborg": ("cyborg-api", "cyborg-conductor", "cyborg-agent", "placement-api",
               "nova-stub"),
    "acceld": ACCELD_GROUPS + ("placement-api",),
    "bare": ("bare-wsgi",),
    "floor": ("floor-api",),
}
API_GROUP = {"cyborg": "cyborg-api", "acceld": "acceld-api", "bare": "bare-wsgi",
             "floor": "floor-api"}


def side_cpu(run: dict, side: str) -> tuple[float, float]:
    """(server CPU ms per op over the side's groups, API CPU ms per op)."""
    srv = run["cpu"]["server_s"]
    ops = max(run["ops"], 1)
    total = sum(srv.get(g, 0.0) for g in SIDE_GROUPS[side])
    return total / ops * 1000, srv.get(API_GROUP[side], 0.0) / ops * 1000


# -- multi-process read load ---------------------------------------------------------------

# Set before the pool forks: the client processes start their loops together, once
# every one has loaded the peers' client (a fork and an import take tens of ms, as long as
# a whole run of the fast sides; they must not count as its time).
_START: Any = None


def _client_proc(args) -> dict:
    peers, url, path, n, conc, max_s = args
    load = load_peers_module(peers)
    target = load.Target(url)

    def op():
        return {"GET": load.timed(target, "GET", path)[0]}
    _START.wait()
    res = load.run_scenario(op, conc, n, max_s)
    # the loop's own window on the system-wide monotonic clock (run_scenario's wall_s
    # starts after its CPU snapshot of the servers)
    res["window"] = (time.monotonic() - res["wall_s"], time.monotonic())
    return res


def multi_read(load, peers: str, url: str, path: str, procs: int, n: int, conc: int,
               max_s: float, pgids_for_cpu) -> dict:
    """``procs`` client processes of ``n`` requests each; throughput over the window from
    the first loop's start to the last one's end."""
    global _START
    ctx = multiprocessing.get_context("fork")
    _START = ctx.Barrier(procs)
    before = pgids_for_cpu()
    with ctx.Pool(procs) as pool:
        parts = pool.map(_client_proc, [(peers, url, path, n, conc, max_s)] * procs)
    after = pgids_for_cpu()
    wall = max(p["window"][1] for p in parts) - min(p["window"][0] for p in parts)
    ops = sum(p["ops"] for p in parts)
    return {"ops": ops, "errors": sum(p["errors"] for p in parts), "wall_s": wall,
            "throughput": ops / wall, "cpu": {"server_s": load.cpu_delta(before, after),
                                              "client_s": 0.0}}


# -- the run ---------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", required=True, help="a started, writable copy of the peers")
    ap.add_argument("--db", choices=("sqlite", "postgresql", "mysql"), default=None,
                    help="acceld's engine (default: the peers' engine)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--max-seconds", type=float, default=20)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--client-procs", type=int, default=4,
                    help="client processes for the multi-process read rows (0: skip)")
    ap.add_argument("--read-requests", type=int, default=1500,
                    help="requests per client process in the multi-process read rows "
                         "(the fast sides serve --requests of them in a fifth of a second)")
    ap.add_argument("--only", nargs="*", help="scenario title substrings")
    ap.add_argument("--no-cyborg", action="store_true", help="acceld (and bare) only")
    ap.add_argument("--floor", action="store_true",
                    help="also run the write scenarios against bench/floor_app.py (the "
                         "statements they need and nothing else) on acceld's database")
    ap.add_argument("--json", help="write all runs here")
    a = ap.parse_args()

    peers = os.path.abspath(a.peers)
    load = load_peers_module(peers)
    state = read_state(peers)
    peers_db = {"sqlite": "sqlite", "mariadb": "mysql"}.get(state.get("STATE_DB", "sqlite"))
    db = a.db or peers_db
    if db != peers_db and not a.no_cyborg:
        print(f"note: acceld on {db}, Cyborg on {peers_db}: ratios are not same-engine")
    base = state["TRANSPORT_URL"].rsplit("/", 1)[0]
    vhost = "acceld-bench"
    # a fresh vhost: no stray consumer of an earlier run can answer this run's calls
    subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*",
                    ".*"], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workdir = tempfile.mkdtemp(prefix="acceld-bench-")
    acceld = Acceld(peers, db, f"{base}/{vhost}", workdir)
    try:
        acceld.start()
    except BaseException:
        acceld.stop()
        raise
    floor = Floor(peers, workdir, acceld.database_url) if a.floor else None
    if floor is not None:
        try:
            floor.start()
        except BaseException:
            floor.stop()
            acceld.stop()
            raise
    patch_cpu(load, *[side for side in (acceld, floor) if side is not None])
    bare_up = http("GET", f"http://127.0.0.1:{load.BARE_PORT}/v2/devices")[0] == 200

    sides = {}
    if not a.no_cyborg:
        sides["cyborg"] = load.Target(f"http://127.0.0.1:{load.CYBORG_PORT}", "cyborg")
    sides["acceld"] = load.Target(acceld.url, "acceld")
    if bare_up:
        sides["bare"] = load.Target(f"http://127.0.0.1:{load.BARE_PORT}", "bare")
    if floor is not None:
        sides["floor"] = load.Target(floor.url, "floor")
    stateless = ("bare", "floor")     # no profile of their own (the floor uses acceld's)

    # per side: a device profile for the ARQs and the (host, rp) of its fake FPGA
    setup = {}
    for name, t in sides.items():
        if name in stateless:
            continue
        dp = f"bench-arq-{uuid.uuid4().hex[:8]}"
        st, data = load.call(t, "POST", "/v2/device_profiles",
                             [{"name": dp, "groups": [{"resources:FPGA": "1"}]}])
        assert st == 201, (name, st, data)
        deps = json.loads(load.call(t, "GET", "/v2/deployables")[1])["deployables"]
        dep = [d for d in deps if d.get("rp_uuid")][0]
        host = HOST if name == "acceld" else dep["name"].rsplit("_", 1)[0]
        setup[name] = (dp, json.loads(data)["uuid"], (host, dep["rp_uuid"]))

    def ops_for(name):
        t = sides[name]
        dp, _uuid, host_rp = setup.get("acceld" if name == "floor" else name,
                                       setup.get("cyborg", setup["acceld"]))
        tracker = load.ARQTracker() if name != "bare" else None   # bare keeps no ARQs
        return {title: (op, ab) for title, op, ab in
                load.make_ops(dp, tracker, host_rp, t)}, tracker

    ops = {n: ops_for(n) for n in sides}
    titles = [t for t, _o, _ab in load.make_ops("x", None, ("h", "r"))
              if not t.startswith("placement")]
    if a.only:
        titles = [t for t in titles if any(w in t for w in a.only)]
    results: dict[str, dict] = {}
    try:
        for title in titles:
            names = [n for n in sides if (n != "bare" or ops[n][0][title][1])
                     and (n != "floor" or not title.startswith("GET"))]
            for n in names:          # warm-up
                ops[n][0][title][0]()
            for c in a.concurrency:
                for r in range(a.repeat):
                    order = names if r % 2 == 0 else names[::-1]
                    for n in order:
                        load.CYBORG = sides[n] if n != "bare" else sides["acceld"]
                        res = load.run_scenario(ops[n][0][title][0], c, a.requests,
                                                a.max_seconds)
                        tracker = ops[n][1]
                        if tracker is not None:
                            tracker.cleanup()
                        results.setdefault(f"{n}|{title}|c={c}", []).append(res)
                print(f"  done {title} c={c}", flush=True)
        if a.client_procs:
            for path in ("/v2/devices", "/v2/deployables"):
                for r in range(a.repeat):
                    readers = [n for n in sides if n != "floor"]
                    order = readers if r % 2 == 0 else readers[::-1]
                    for n in order:
                        res = multi_read(load, peers, sides[n].url, path, a.client_procs,
                                         a.read_requests, 4, a.max_seconds,
                                         load.cpu_groups)
                        results.setdefault(
                            f"{n}|GET {path} x{a.client_procs} procs|c=4", []).append(res)
                print(f"  done multi-process GET {path}", flush=True)
    finally:
        for n, (_dp, dp_uuid, _h) in setup.items():
            load.CYBORG = sides[n]
            load.call(sides[n], "DELETE", f"/v2/device_profiles/{dp_uuid}")
        if floor is not None:
            floor.stop()
        acceld.stop()

    report = summarise(results)
    print(report)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(a), "db": db, "peers_db": peers_db,
                       "raw": results, "report": report}, f, indent=1, default=str)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def summarise(results: dict[str, list[dict]]) -> str:
    rows = {}
    for key, runs in results.items():
        side, title, conc = key.split("|")
        srv = [side_cpu(r, side) for r in runs]
        series = {}
        for r in runs:
            for s, v in r.get("series", {}).items():
                series.setdefault(s, []).append(v["p50"])
        rows[(title, conc, side)] = {
            "ops_s": _med([r["throughput"] for r in runs]),
            "errors": sum(r["errors"] for r in runs),
            "srv_ms": _med([x[0] for x in srv]), "api_ms": _med([x[1] for x in srv]),
            "p50": {s: _med(v) for s, v in series.items()},
            "first_errors": [e for r in runs for e in r.get("first_errors", [])][:2]}
    lines = ["scenario                                        c    side     ops/s   err"
             "  srv ms/op  api ms/op"]
    for (title, conc, side), v in sorted(rows.items()):
        lines.append(f"{title[:46]:46} {conc[2:]:>3} {side:>7} {v['ops_s']:9.1f} "
                     f"{v['errors']:5d} {v['srv_ms']:10.3f} {v['api_ms']:10.3f}")
        for err in v["first_errors"]:
            lines.append(f"    error: {err[:160]}")
    lines.append("")
    lines.append("ratios (acceld vs cyborg: ops/s acceld/cyborg; CPU = cyborg srv ms/op / "
                 "acceld srv ms/op; vs bare: acceld ops/s / bare ops/s; vs floor: acceld "
                 "ops/s / floor_app ops/s)")
    for (title, conc, side), v in sorted(rows.items()):
        if side != "acceld":
            continue
        cy, bare = rows.get((title, conc, "cyborg")), rows.get((title, conc, "bare"))
        floor = rows.get((title, conc, "floor"))
        parts = [f"{title[:46]:46} {conc[2:]:>3}"]
        if cy:
            parts.append(f"x{v['ops_s'] / cy['ops_s']:6.1f} ops  "
                         f"x{cy['srv_ms'] / v['srv_ms']:6.1f} cpu")
        if bare:
            parts.append(f"{v['ops_s'] / bare['ops_s']:5.2f} of bare ops  "
                         f"{bare['api_ms'] / v['api_ms']:5.2f} of bare api-cpu")
        if floor:
            parts.append(f"{v['ops_s'] / floor['ops_s']:5.2f} of floor ops  "
                         + (f"(the floor: x{floor['ops_s'] / cy['ops_s']:5.1f} cyborg)"
                            if cy else ""))
        lines.append("  ".join(parts))
        for s, p in v["p50"].items():
            if "bind" in s and "unbind" not in s:
                ref = ", ".join(f"{n} {r['p50'][s]:.2f} ms" for n, r in
                                (("cyborg", cy), ("floor", floor)) if r and s in r["p50"])
                lines.append(f"    bind p50 {p:.2f} ms" + (f" ({ref})" if ref else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
