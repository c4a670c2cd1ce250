"""Scale: N simulated hosts x 8 devices against 1 or 2 ``acceld conductor`` processes
(issue 23).

Each run has a RabbitMQ vhost, a PostgreSQL database, a Redis namespace (the conductors'
tooz group) of its own, two Placements (``tests.placement_server``, each in a process
and, with ``--placement-db postgresql``, a database of its own: one for each side of the
boot storm, so that neither side's requests go into a Placement the other side has
filled), all removed afterwards, and ``--conductors N`` conductor processes; the
simulated agents (acceld-sim's fleet, ``bench/scale_sim.py``) run in a process of their
own, so that the simulator's CPU is in neither the conductors' nor Placement's, at
niceness 19 (``--sim-nice``: in a cloud the agents run on hosts of their own, and the
floor's side has no fleet at all). ``--heartbeat S`` gives a smaller fleet the heartbeat
load of a bigger one (1,000 hosts every 3 s: 10,000 every 30 s). The simulated agents
report their compute nodes' uuids, as agents that find Nova's ``compute_id`` file do,
and the compute nodes are made under them (``--compute-by-name``: no uuids, found by
name). It measures:

* the boot storm: from the fleet's start until every host is in sync in Placement
  (acceld's ``placement_sync`` rows, read from the database), against the Placement
  floor measured in the same run: the same provider trees (built from the simulated
  hosts' own reports) created directly in the floor's Placement with the fewest
  requests and the conductors' concurrency (``[placement] sync_workers`` x conductors);
  which side goes first alternates run by run (``--placement-db postgresql``: each
  Placement on a PostgreSQL database instead of a SQLite file). Per side: Placement's
  CPU by request kind (each request's thread, timed by the harness) and how long those
  threads waited, runnable, for a core (their run delay: what the rest of the machine
  costs Placement), how busy Placement (and, on acceld's side, the conductors and the
  whole machine) was in each tenth of the storm, and the CPU of the machine's RabbitMQ
  (its ``beam.smp``) in each side's storm;
* a storm of unchanged reports once the fleet is in sync (``--rounds`` rounds in which
  every host reports once): the conductors' writes to the database (PostgreSQL's
  ``pg_stat_user_tables``, the ``services`` table, where heartbeats go, apart), the
  requests to Placement, the reports per second, the conductors' CPU per report
  (``/proc/<pid>/stat``) and each conductor's share of the reports (as the answers name
  the owner);
* each conductor's resident memory once the fleet is in sync (``VmRSS``);
* a full Placement sync of every host (what the periodic safety pass runs, asked through
  ``placement_sync`` over RPC) once the fleet is in sync and Placement unchanged: its
  requests to Placement and the CPU it costs Placement and the conductors.

With ``--conductors 1,2`` both deployments run in each run, and the CPU per unchanged
report of two conductors is divided by one conductor's of the same run. One conductor
runs as a lone conductor does (no coordination backend); two share the hosts through a
tooz group on Redis.

Usage: python bench/scale.py --hosts 200 --runs 3 --conductors 1,2
Prints one JSON line per run and deployment, then a summary with medians.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from concurrent import futures
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import psycopg2  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from acceld import clients, reports, rpc  # noqa: E402
from acceld import conf as acceld_conf  # noqa: E402
from acceld.clients import placement as pc  # noqa: E402
from acceld.conductor import placement_plan as pp  # noqa: E402
from acceld.db import models as m  # noqa: E402
from acceld.db.api import Database  # noqa: E402
from acceld.sim import devices as devmod  # noqa: E402
from acceld.sim.fleet import compute_node_uuid, host_names  # noqa: E402
from acceld.sim.host import SimHost  # noqa: E402
from bench import boot_storm  # noqa: E402
from bench.scale_sim import PREFIX as SIM_PREFIX  # noqa: E402
from tests import databases  # noqa: E402

ACCELD = [sys.executable, "-m", "acceld.cmd.main"]
RABBIT = "rabbit://guest:guest@127.0.0.1:5672/"
REDIS = "redis://127.0.0.1:6379"
HEARTBEAT = 30.0        # the agents' default heartbeat (their report interval): --heartbeat
# The fleet's report interval and the conductors' periodic full-sync interval: longer than
# any run, so that only the storm's rounds report again and no safety-net pass of every
# host runs inside a measurement (3600 s did, in the 5,000-host run of bench/README).
QUIET = 86400.0
# PostgreSQL 15 writes a backend's table counters out at most once a second while busy
# and within 10 s once idle: every count of writes is read after this long without them.
PG_SETTLE = 11.0
SAVE_INTERVAL = 10.0    # [conductor] save_interval, acceld's default: heartbeats flushed
START_TIMEOUT = 60.0    # a process up (Placement, a conductor, the simulator)
STOP_GRACE = 15.0       # SIGTERM -> SIGKILL
POLL = 0.25             # seconds between two reads of the hosts in sync


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when this benchmark dies, even by SIGKILL."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def spawn(argv: list[str], log_path: str, nice: int = 0, **kwargs: Any) -> subprocess.Popen:
    """``argv`` in the repository, its output in ``log_path``, ``nice`` added to its
    niceness (the simulated fleet's: hosts of their own in a real cloud)."""
    def child() -> None:
        _die_with_parent()
        os.nice(nice)

    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, cwd=ROOT, stdout=kwargs.pop("stdout", log),
                                stderr=log, preexec_fn=child,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"), **kwargs)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after ``STOP_GRACE`` seconds; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_GRACE)


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(interval)


def log_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


# -- /proc ---------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (its threads included)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_cpu_seconds() -> float:
    """CPU time of the machine's RabbitMQ (its ``beam.smp`` processes), which carries
    acceld's side of the boot storm: the fleet's reports and heartbeats."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/comm", encoding="ascii") as f:
                    if f.read().strip() == "beam.smp":
                        total += cpu_seconds(int(entry))
    return total


def machine_cpu_seconds() -> float:
    """CPU time every core of the machine spent busy (``/proc/stat``: all but idle and
    iowait), whoever spent it."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


# -- the services of a run -----------------------------------------------------------------

def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


def make_vhost(stack: contextlib.ExitStack) -> str:
    vhost = f"acceld-scale-{uuid.uuid4().hex[:10]}"
    stack.callback(rabbitmqctl, "delete_vhost", vhost)
    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    return RABBIT + urllib.parse.quote(vhost, safe="")


def make_database(stack: contextlib.ExitStack) -> tuple[str, str]:
    """A new PostgreSQL database (dropped at the end): its URL and name."""
    url, drop = databases.create_postgresql()
    stack.callback(drop)
    return url, url.rsplit("/", 1)[1]


def redis_namespace(stack: contextlib.ExitStack) -> str:
    """The conductors' tooz group in a namespace of its own; its keys deleted at the end."""
    import redis
    namespace = f"acceld-scale-{uuid.uuid4().hex[:10]}"

    def clean() -> None:
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(f"{namespace}*"))
        if keys:
            client.delete(*keys)
        client.close()
    stack.callback(clean)
    return f"{REDIS}?namespace={namespace}"


class Placement:
    """``tests.placement_server --stats`` in its own process: the URL, and the count of
    requests it has served."""

    def __init__(self, workdir: str, stack: contextlib.ExitStack, side: str,
                 db_url: str | None = None) -> None:
        """``side``: whose Placement (its log is ``placement-<side>.log``); ``db_url``:
        Placement's database (None: a SQLite file of its own)."""
        log = os.path.join(workdir, f"placement-{side}.log")
        self.proc = spawn([sys.executable, "-m", "tests.placement_server", "--stats"]
                          + (["--db-url", db_url] if db_url else []), log)
        stack.callback(stop, self.proc)

        def urls() -> dict[str, str] | None:
            if self.proc.poll() is not None:
                raise RuntimeError("Placement exited:\n" + "\n".join(log_lines(log)[-20:]))
            found = dict(line.split("=", 1) for line in log_lines(log)
                         if line.startswith("PLACEMENT_"))
            return found if "PLACEMENT_STATS_URL" in found else None
        found = wait_for(urls, START_TIMEOUT, "Placement")
        self.url, self._stats = found["PLACEMENT_URL"], found["PLACEMENT_STATS_URL"]

    def _get(self) -> dict[str, Any]:
        with urllib.request.urlopen(self._stats, timeout=30) as resp:
            return json.load(resp)

    def requests(self) -> int:
        return self._get()["requests"]

    def cpu_by_kind(self) -> dict[str, list[float]]:
        """Request kind -> [requests, CPU seconds of the request's thread]."""
        return self._get()["cpu_by_kind"]


class BusySampler:
    """How busy processes are over a storm: their CPU read once a second in a thread;
    :meth:`tenths` gives the cores they used in each tenth of the storm (where Placement
    waits for its clients: at the start, the end, or throughout)."""

    def __init__(self, *pids: int) -> None:
        """The CPU of ``pids``; with none, of the whole machine (all its cores)."""
        self._pids, self._stop = pids, threading.Event()
        self._samples = [(time.monotonic(), self._cpu())]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu(self) -> float:
        return sum(map(cpu_seconds, self._pids)) if self._pids else machine_cpu_seconds()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._samples.append((time.monotonic(), self._cpu()))

    def tenths(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        self._samples.append((time.monotonic(), self._cpu()))
        t0, t1 = self._samples[0][0], self._samples[-1][0]
        out = []
        for i in range(10):
            lo, hi = t0 + (t1 - t0) * i / 10, t0 + (t1 - t0) * (i + 1) / 10
            inside = [(t, c) for t, c in self._samples if lo <= t <= hi]
            if len(inside) < 2:
                return []
            out.append(round((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]), 2))
        return out


def cpu_by_kind_since(placement: Placement, before: dict[str, list[float]],
                      ) -> dict[str, dict[str, float]]:
    """Per request kind since ``before``: requests, Placement CPU per request (ms) and how
    long a request's thread waited for a core (ms; what the rest of the machine costs
    Placement)."""
    out = {}
    for kind, (n, cpu, waited) in sorted(placement.cpu_by_kind().items()):
        n0, cpu0, waited0 = before.get(kind, (0, 0.0, 0.0))
        if n > n0:
            out[kind] = {"requests": n - n0, "cpu_ms": round(1000 * (cpu - cpu0) / (n - n0), 3),
                         "core_wait_ms": round(1000 * (waited - waited0) / (n - n0), 3)}
    return out


class Sim:
    """``bench/scale_sim.py``: the fleet in its own process, asked over its stdin."""

    def __init__(self, workdir: str, stack: contextlib.ExitStack, transport_url: str,
                 hosts: int, prefix: str, workers: int, compute_ids: bool,
                 heartbeat: float, nice: int) -> None:
        self.proc = spawn([sys.executable, os.path.join(ROOT, "bench", "scale_sim.py"),
                           "--transport-url", transport_url, "--hosts", str(hosts),
                           "--host-prefix", prefix, "--workers", str(workers),
                           "--report-interval", str(QUIET),
                           "--heartbeat-interval", str(heartbeat)]
                          + (["--compute-ids"] if compute_ids else []),
                          os.path.join(workdir, "sim.log"), nice=nice, stdout=subprocess.PIPE,
                          stdin=subprocess.PIPE, text=True)
        stack.callback(self.close)
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._next(START_TIMEOUT + hosts / 100)        # "ready": the fleet is built

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(SIM_PREFIX):
                self._answers.put(json.loads(line[len(SIM_PREFIX):]))

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            return self._answers.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"the simulator did not answer within {timeout:.0f} s "
                               f"(exit status {self.proc.poll()})") from None

    def ask(self, command: str, timeout: float = 60.0) -> dict[str, Any]:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._next(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=STOP_GRACE + 30)
            except subprocess.TimeoutExpired:
                stop(self.proc)


def conductor_config(path: str, name: str, workdir: str, db_url: str, transport_url: str,
                     coordination: str | None, placement_url: str, sync_workers: int) -> str:
    state = os.path.join(workdir, f"state-{name}")
    os.makedirs(state)
    groups = {
        "DEFAULT": {"host": name, "state_path": state, "transport_url": transport_url},
        "conductor": {"save_interval": SAVE_INTERVAL},
        # no full pass during a run: the reports' own syncs are what is measured
        "placement": {"auth_type": "admin_token", "endpoint": placement_url,
                      "token": "admin", "sync_workers": sync_workers, "sync_interval": QUIET},
        "database": {"connection": db_url},
    }
    if coordination:
        groups["coordination"] = {"backend_url": coordination}
    with open(path, "w", encoding="utf-8") as f:
        for group, values in groups.items():
            f.write(f"[{group}]\n")
            f.writelines(f"{key} = {value}\n" for key, value in values.items())
            f.write("\n")
    return path


def start_conductors(count: int, workdir: str, stack: contextlib.ExitStack, db_url: str,
                     transport_url: str, coordination: str | None, placement_url: str,
                     sync_workers: int) -> dict[str, subprocess.Popen]:
    """The schema, then ``count`` conductors; returns once each runs and (two or more)
    sees all of them in its ring."""
    names = [f"cond-{i}" for i in range(count)]
    configs = {name: conductor_config(os.path.join(workdir, f"{name}.conf"), name, workdir,
                                      db_url, transport_url, coordination, placement_url,
                                      sync_workers) for name in names}
    subprocess.run([*ACCELD, "db", "upgrade", "--config-file", configs[names[0]]], cwd=ROOT,
                   check=True, capture_output=True, timeout=120)
    procs = {}
    for name in names:
        procs[name] = spawn([*ACCELD, "conductor", "--config-file", configs[name]],
                            os.path.join(workdir, f"{name}.log"))
        stack.callback(stop, procs[name])
    ready = "acceld conductor {} running"
    everyone = f"conductors now {', '.join(sorted(names))} "
    for name, proc in procs.items():
        log = os.path.join(workdir, f"{name}.log")

        def up(name: str = name, proc: subprocess.Popen = proc, log: str = log) -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n" + "\n".join(log_lines(log)[-20:]))
            text = "\n".join(log_lines(log))
            return ready.format(name) in text and (count == 1 or everyone in text)
        wait_for(up, START_TIMEOUT, f"{name} running with its peers")
    return procs


# -- what is measured ----------------------------------------------------------------------

def in_sync(db: Database, prefix: str) -> int:
    with db.reader() as s:
        return s.execute(select(func.count()).select_from(m.PlacementSync).where(
            m.PlacementSync.in_sync.is_(True),
            m.PlacementSync.host.like(f"{prefix}-%"))).scalar_one()


def table_writes(db_name: str) -> dict[str, int]:
    """Rows inserted, updated and deleted so far, by table (PostgreSQL's counters)."""
    conn = psycopg2.connect(host=databases.PG_HOST, user=databases.PG_USER, dbname=db_name)
    try:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("SELECT relname, n_tup_ins + n_tup_upd + n_tup_del "
                    "FROM pg_stat_user_tables")
        return dict(cur.fetchall())
    finally:
        conn.close()


def sim_trees(names: list[str]) -> dict[str, list[Any]]:
    """Host -> the providers acceld makes of its first report: the simulator's own
    hosts and reports (same mix), under other names."""
    trees = {}
    for name in names:
        host = SimHost(name, devmod.host_devices(name, devmod.DEFAULT_MIX))
        host.start_agent()
        report = reports.InventoryReport.from_dict(host.build_report()[0])
        trees[name] = boot_storm.floor_tree(report)
    return trees


def check_floor_trees(client: pc.PlacementClient, names: list[str],
                      computes: dict[str, str]) -> None:
    """The floor makes acceld's trees: for these hosts of the fleet, what acceld put in
    Placement is what :func:`sim_trees` makes of the same hosts (uuids, names,
    inventories, traits)."""
    for name in names:
        want = {p.uuid: (p.name, {rc: dict(inv) for rc, inv in p.inventories.items()},
                         set(p.traits)) for p in sim_trees([name])[name]}
        have = {}
        for rp in client.tree(computes[name], required=pp.OWNER_TRAIT):
            inventories = client.get_inventories(rp.uuid)[1]
            have[rp.uuid] = (rp.name, inventories, client.get_traits(rp.uuid)[1])
        if have != want:
            raise RuntimeError(f"the floor's tree of {name} is not acceld's:\n"
                               f"acceld: {have}\nfloor: {want}")


def boot_floor(placement: Placement, trees: dict[str, list[Any]], computes: dict[str, str],
               conductors: int, workers: int) -> dict[str, float]:
    """The trees made directly, as the conductors' syncs run: ``conductors`` clients
    (each with its own connections), each ``workers`` hosts at a time."""
    conf = boot_storm.make_conf(placement.url, workers)
    own = [pc.PlacementClient(clients.make_adapter(conf, "placement"))
           for _ in range(conductors)]
    names = sorted(trees)
    shares = [{name: trees[name] for name in names[i::conductors]} for i in range(conductors)]
    before, by_kind = placement.requests(), placement.cpu_by_kind()
    cpu = (cpu_seconds(placement.proc.pid), time.process_time(), machine_cpu_seconds(),
           broker_cpu_seconds())
    busy = BusySampler(placement.proc.pid)
    started = time.perf_counter()
    boot_storm.ensure_names(own[0], trees)
    with futures.ThreadPoolExecutor(conductors) as pool:
        list(pool.map(lambda i: boot_storm.create_hosts(own[i], shares[i], computes, workers),
                      range(conductors)))
    return {"seconds": time.perf_counter() - started,
            "requests": placement.requests() - before,
            "placement_cpu_s": cpu_seconds(placement.proc.pid) - cpu[0],
            "client_cpu_s": time.process_time() - cpu[1],
            "machine_cpu_s": machine_cpu_seconds() - cpu[2],
            "broker_cpu_s": broker_cpu_seconds() - cpu[3],
            "by_kind": cpu_by_kind_since(placement, by_kind), "busy": busy.tenths()}


def boot_acceld(placement: Placement, sim: Sim, db: Database, prefix: str, hosts: int,
                conductors: dict[str, subprocess.Popen], timeout: float) -> dict[str, Any]:
    before, by_kind = placement.requests(), placement.cpu_by_kind()
    pids = [proc.pid for proc in conductors.values()]
    cpu = (cpu_seconds(placement.proc.pid), sum(map(cpu_seconds, pids)),
           cpu_seconds(sim.proc.pid), machine_cpu_seconds(), broker_cpu_seconds())
    busy, conductors_busy, machine_busy = (BusySampler(placement.proc.pid),
                                           BusySampler(*pids), BusySampler())
    started = time.perf_counter()
    sim.ask("start")
    deadline = time.monotonic() + timeout
    while in_sync(db, prefix) < hosts:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{in_sync(db, prefix)} of {hosts} hosts in sync after "
                               f"{timeout:.0f} s")
        time.sleep(POLL)
    seconds = time.perf_counter() - started
    tenths = busy.tenths(), conductors_busy.tenths(), machine_busy.tenths()
    placement_cpu = cpu_seconds(placement.proc.pid) - cpu[0]
    conductor_cpu = sum(map(cpu_seconds, pids)) - cpu[1]
    sim_cpu, machine_cpu = cpu_seconds(sim.proc.pid) - cpu[2], machine_cpu_seconds() - cpu[3]
    broker_cpu = broker_cpu_seconds() - cpu[4]
    requests = placement.requests() - before
    stats = sim.ask("stats")
    return {"seconds": seconds, "requests": requests, "placement_cpu_s": placement_cpu,
            "conductor_cpu_s": conductor_cpu, "sim_cpu_s": sim_cpu,
            "machine_cpu_s": machine_cpu, "broker_cpu_s": broker_cpu,
            "by_kind": cpu_by_kind_since(placement, by_kind),
            "busy": tenths[0], "conductors_busy": tenths[1], "machine_busy": tenths[2],
            "first_reports_accepted_s": stats["first_reports_accepted_s"],
            "reports_failed": stats["reports"]["failed"]}


def unchanged_storm(placement: Placement, sim: Sim, db_name: str,
                    conductors: dict[str, subprocess.Popen], rounds: int,
                    timeout: float) -> dict[str, Any]:
    """``rounds`` rounds of one unchanged report per host, once the writes of the boot
    have settled. The CPU is counted over the rounds; the writes and Placement requests
    until one heartbeat flush (a report is also a beat of its host) and PostgreSQL's
    counters have settled after them."""
    time.sleep(PG_SETTLE)
    writes, requests = table_writes(db_name), placement.requests()
    pids = {name: proc.pid for name, proc in conductors.items()}
    pids["placement"], pids["sim"] = placement.proc.pid, sim.proc.pid
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    storm = sim.ask(f"rounds {rounds} {timeout}", timeout + 60)
    cpu = {name: cpu_seconds(pid) - cpu[name] for name, pid in pids.items()}
    if not storm["done"]:
        raise TimeoutError(f"the storm's rounds did not finish in {timeout:.0f} s: {storm}")
    time.sleep(SAVE_INTERVAL + PG_SETTLE)     # the flush of the reports' beats, counted
    after = table_writes(db_name)
    delta = {t: n - writes.get(t, 0) for t, n in after.items() if n != writes.get(t, 0)}
    return {"storm": storm, "cpu": cpu, "writes": delta,
            "placement_requests": placement.requests() - requests}


def full_pass(placement: Placement, transport_url: str,
              conductors: dict[str, subprocess.Popen], timeout: float) -> dict[str, Any]:
    """One full sync of every host, asked as an operator's ``acceld placement sync`` asks
    it (each conductor syncs the hosts it owns, one after the other)."""
    conf = acceld_conf.load(config_files=[], overrides={"DEFAULT": {"rpc_timeout": timeout}})
    transport = rpc.MessagingTransport(conf, transport_url)
    pids = [proc.pid for proc in conductors.values()]
    try:
        requests = placement.requests()
        cpu = cpu_seconds(placement.proc.pid), sum(map(cpu_seconds, pids))
        started = time.perf_counter()
        results = rpc.ConductorClient(transport).placement_sync(None, False)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "hosts": len(results),
                "in_sync": sum(1 for r in results if r["in_sync"]),
                "requests": placement.requests() - requests,
                "placement_cpu_s": cpu_seconds(placement.proc.pid) - cpu[0],
                "conductor_cpu_s": sum(map(cpu_seconds, pids)) - cpu[1]}
    finally:
        transport.close()


def one_run(hosts: int, conductors: int, acceld_first: bool, args: argparse.Namespace,
            ) -> dict[str, Any]:
    """One run in a work folder of its own (its logs; removed when the run succeeds)."""
    workdir = tempfile.mkdtemp(prefix="acceld-scale-")
    try:
        result = measure(hosts, conductors, acceld_first, args, workdir)
    except BaseException:
        print(f"run failed: its logs are in {workdir}", file=sys.stderr, flush=True)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    return result | {"compute_ids": not args.compute_by_name, "placement_db": args.placement_db,
                     "heartbeat_s": args.heartbeat, "sim_nice": args.sim_nice}


def measure(hosts: int, conductors: int, acceld_first: bool, args: argparse.Namespace,
            workdir: str) -> dict[str, Any]:
    """One run; everything it started is stopped and removed when it returns or fails."""
    workers = args.sync_workers * conductors           # hosts synced at once
    with contextlib.ExitStack() as stack:
        transport_url = make_vhost(stack)
        db_url, db_name = make_database(stack)
        coordination = redis_namespace(stack) if conductors > 1 else None
        placement, floor_placement = (
            Placement(workdir, stack, side, make_database(stack)[0]
                      if args.placement_db == "postgresql" else None)
            for side in ("acceld", "floor"))
        tag = uuid.uuid4().hex[:6]
        prefix, floor_prefix = f"sc{tag}", f"fl{tag}"
        names, floor_names = host_names(prefix, hosts), host_names(floor_prefix, hosts)
        admin, floor_admin = (
            pc.PlacementClient(clients.make_adapter(boot_storm.make_conf(p.url, workers),
                                                    "placement"))
            for p in (placement, floor_placement))
        computes = (boot_storm.create_compute_nodes(admin, names, args.sync_workers,
                                                    compute_node_uuid)
                    | boot_storm.create_compute_nodes(floor_admin, floor_names,
                                                      args.sync_workers, compute_node_uuid))
        trees = sim_trees(floor_names)
        procs = start_conductors(conductors, workdir, stack, db_url, transport_url,
                                 coordination, placement.url, args.sync_workers)
        idle = {name: round(rss_mib(proc.pid), 1) for name, proc in procs.items()}
        sim = Sim(workdir, stack, transport_url, hosts, prefix, args.sim_workers,
                  not args.compute_by_name, args.heartbeat, args.sim_nice)
        db = Database(db_url)
        stack.callback(db.dispose)
        if not acceld_first:
            floor = boot_floor(floor_placement, trees, computes, conductors,
                               args.sync_workers)
        acceld = boot_acceld(placement, sim, db, prefix, hosts, procs, args.boot_timeout)
        if acceld_first:                 # the floor's side has no fleet: its beats held
            sim.ask("hold")
            floor = boot_floor(floor_placement, trees, computes, conductors,
                               args.sync_workers)
            sim.ask("beat")
        rss = {name: round(rss_mib(proc.pid), 1) for name, proc in procs.items()}
        rounds = args.rounds or math.ceil(1000 / hosts)
        storm = unchanged_storm(placement, sim, db_name, procs, rounds, args.storm_timeout)
        check_floor_trees(admin, names[:3], computes)
        passed = full_pass(placement, transport_url, procs, args.storm_timeout)
        return summarize(hosts, conductors, acceld_first, floor, acceld, idle, rss, storm,
                         passed)


def summarize(hosts: int, conductors: int, acceld_first: bool, floor: dict[str, float],
              acceld: dict[str, Any], idle: dict[str, float], rss: dict[str, float],
              storm: dict[str, Any], passed: dict[str, Any]) -> dict[str, Any]:
    s = storm["storm"]
    reports_done = s["reports"]["accepted"]
    conductor_cpu = sum(v for k, v in storm["cpu"].items() if k.startswith("cond-"))
    window = sum(s["seconds"])
    share = {c: round(n / reports_done, 4) for c, n in sorted(s["reports_by_conductor"].items())}
    writes = storm["writes"]
    return {
        "hosts": hosts, "devices_per_host": sum(n for _k, n in devmod.DEFAULT_MIX),
        "conductors": conductors, "acceld_first": acceld_first,
        "boot_acceld_s": round(acceld["seconds"], 2), "boot_floor_s": round(floor["seconds"], 2),
        "boot_ratio": round(acceld["seconds"] / floor["seconds"], 3),
        "boot_acceld_requests_per_host": round(acceld["requests"] / hosts, 2),
        "boot_floor_requests_per_host": round(floor["requests"] / hosts, 2),
        "boot_acceld_placement_cpu_s": round(acceld["placement_cpu_s"], 2),
        "boot_floor_placement_cpu_s": round(floor["placement_cpu_s"], 2),
        "boot_conductor_cpu_s": round(acceld["conductor_cpu_s"], 2),
        "boot_floor_client_cpu_s": round(floor["client_cpu_s"], 2),
        "boot_sim_cpu_s": round(acceld["sim_cpu_s"], 2),
        "boot_acceld_broker_cpu_s": round(acceld["broker_cpu_s"], 2),
        "boot_floor_broker_cpu_s": round(floor["broker_cpu_s"], 2),
        "boot_acceld_placement_by_kind": acceld["by_kind"],
        "boot_floor_placement_by_kind": floor["by_kind"],
        "boot_acceld_placement_busy_by_tenth": acceld["busy"],
        "boot_floor_placement_busy_by_tenth": floor["busy"],
        "boot_conductors_busy_by_tenth": acceld["conductors_busy"],
        "boot_acceld_machine_busy_by_tenth": acceld["machine_busy"],
        "boot_acceld_machine_busy": round(
            acceld["machine_cpu_s"] / (acceld["seconds"] * os.cpu_count()), 3),
        "boot_floor_machine_busy": round(
            floor["machine_cpu_s"] / (floor["seconds"] * os.cpu_count()), 3),
        "boot_first_reports_accepted_s": acceld["first_reports_accepted_s"],
        "boot_reports_failed": acceld["reports_failed"],
        "storm_rounds": s["rounds"], "storm_reports": reports_done,
        "storm_unchanged": s["reports"]["unchanged"], "storm_changed": s["reports"]["changed"],
        "storm_failed": s["reports"]["failed"], "storm_heartbeats": s["heartbeats_sent"],
        "storm_s": round(window, 3), "storm_reports_per_s": round(reports_done / window, 1),
        "storm_db_writes": sum(n for t, n in writes.items() if t != "services"),
        "storm_db_writes_services": writes.get("services", 0),
        "storm_db_writes_by_table": writes,
        "storm_placement_requests": storm["placement_requests"],
        "storm_share": share,
        "storm_share_min": min(share.values()) if share else None,
        "storm_share_max": max(share.values()) if share else None,
        "storm_conductor_cpu_s": round(conductor_cpu, 2),
        "cpu_ms_per_report": round(1000 * conductor_cpu / reports_done, 3),
        "storm_placement_cpu_s": round(storm["cpu"]["placement"], 2),
        "storm_sim_cpu_s": round(storm["cpu"]["sim"], 2),
        "rss_mib": rss,
        "rss_mib_per_1000_hosts": {c: round(v / (hosts / 1000), 1) for c, v in rss.items()},
        "rss_mib_total_per_1000_hosts": round(sum(rss.values()) / (hosts / 1000), 1),
        "rss_idle_mib": idle,
        "rss_growth_mib_per_1000_hosts": round(
            sum(rss[c] - idle[c] for c in rss) / (hosts / 1000), 1),
        "full_pass_s": round(passed["seconds"], 2),
        "full_pass_in_sync": passed["in_sync"],
        "full_pass_requests_per_host": round(passed["requests"] / hosts, 2),
        "full_pass_placement_cpu_ms_per_host": round(
            1000 * passed["placement_cpu_s"] / hosts, 2),
        "full_pass_conductor_cpu_ms_per_host": round(
            1000 * passed["conductor_cpu_s"] / hosts, 2),
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool) and key != "run":
            out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conductors", default="1",
                        help="Comma-separated conductor counts, each run in every run "
                             "(e.g. 1,2).")
    parser.add_argument("--sync-workers", type=int, default=8,
                        help="[placement] sync_workers of each conductor (default 8, "
                             "acceld's); the floor runs conductors x this many hosts at once.")
    parser.add_argument("--sim-workers", type=int, default=16,
                        help="The simulator's report senders (default 16, its own).")
    parser.add_argument("--sim-nice", type=int, default=19,
                        help="Niceness added to the simulator's process (default 19: the "
                             "fleet, whose agents run on hosts of their own in a cloud, gets "
                             "a core when the control plane leaves one; 0: as the rest).")
    parser.add_argument("--rounds", type=int, default=0,
                        help="Rounds of the unchanged storm (default: enough for 1000 "
                             "reports).")
    parser.add_argument("--compute-by-name", action="store_true",
                        help="The simulated agents report no compute node uuid (no Nova "
                             "compute_id file, as before Nova 2023.1): the conductor looks "
                             "each compute node up by name.")
    parser.add_argument("--heartbeat", type=float, default=HEARTBEAT,
                        help="Seconds between two heartbeats of a simulated host (default "
                             "30, the agents' default): a shorter one gives a small fleet "
                             "the heartbeat load of a bigger one.")
    parser.add_argument("--boot-timeout", type=float, default=1800.0)
    parser.add_argument("--storm-timeout", type=float, default=600.0)
    parser.add_argument("--placement-db", choices=("sqlite", "postgresql"), default="sqlite",
                        help="Placement's database: a SQLite file (default) or a PostgreSQL "
                             "database of its own, as a production Placement has.")
    parser.add_argument("--first", choices=("floor", "acceld"), default="floor",
                        help="The side of the boot storm that goes first in the first run "
                             "(then they alternate; default floor).")
    parser.add_argument("--json-out", help="Also append every line printed to this file.")
    args = parser.parse_args()
    counts = [int(c) for c in args.conductors.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # clean up as on Ctrl-C

    def emit(line: str) -> None:
        print(line, flush=True)
        if args.json_out:
            with open(args.json_out, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in counts}
    for i in range(args.runs):
        for count in counts:
            acceld_first = bool(i % 2) != (args.first == "acceld")
            run = one_run(args.hosts, count, acceld_first=acceld_first, args=args)
            run["run"] = i
            emit(json.dumps(run))
            runs[count].append(run)
    summary: dict[str, Any] = {"commit": commit(), "hosts": args.hosts}
    for count, done in runs.items():
        summary[f"conductors_{count}"] = medians(done)
    if 1 in runs and len(runs) > 1:
        for count in counts:
            if count == 1:
                continue
            for name, key in (("cpu_per_report", "cpu_ms_per_report"),
                              ("reports_per_s", "storm_reports_per_s")):
                ratios = [b[key] / a[key] for a, b in zip(runs[1], runs[count], strict=True)]
                summary[f"{name}_ratio_{count}_to_1"] = {
                    "median": round(statistics.median(ratios), 3),
                    "runs": [round(r, 3) for r in ratios]}
    emit("summary " + json.dumps(summary))
    return 0


def commit() -> str:
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    return res.stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
