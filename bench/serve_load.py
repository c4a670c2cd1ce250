#!/usr/bin/env python3
"""The HTTP front door under load: ``acceld serve`` against the same app under other
WSGI servers, the same workload in the same run (issue 20).

Servers (``--servers``, each started and stopped by this script, one at a time, on
loopback, all reading the same SQLite database that a first ``acceld serve`` seeded):

- ``acceld``: ``acceld serve`` itself (API, conductor and agent in its process, and
  ``[api] processes`` by default one per CPU: one more API worker process per CPU
  beyond the first).
- ``acceld-1``: ``acceld serve`` with ``[api] processes = 1`` (everything in one
  process).
- ``uwsgi``: ``acceld.wsgi.api:application`` under uWSGI with the peers' cyborg-api ini
  (``--peers``; http-socket, 2 processes, master, lazy-apps, ``Connection: close``), as
  ``bench/vs_cyborg.py`` writes it.
- ``uwsgi-tuned``: the same ini with ``--listen 1024 --threads`` ``--threads``.
- ``gunicorn``: gthread workers (``--gunicorn-workers`` x ``--threads``).
- ``granian``: its WSGI interface (``--granian-workers`` x ``--threads`` blocking threads).
- ``cheroot`` / ``waitress``: the candidates for the embedded server, through their own
  command lines with ``--threads`` threads (how the embedded one was chosen).

Load: for each level of concurrent clients (``--levels``, default 1, 64, 256, 1024) and
each mode (``keepalive``: one ``http.client`` connection per client, reused;
``close``: a new connection per request), the clients are spread over ``--procs``
client processes (threads inside each), start together, and run for ``--seconds``.
Each client walks a mix of reads (``GET /v2/devices``, ``GET /v2/accelerator_requests``,
``GET /v1/accelerators``) with noauth's admin token. A request counts as an error when
its answer is not 200 or its connection failed, as a timeout when no answer came within
``--timeout`` seconds. Throughput counts the answers received before the level's end.

The order of servers alternates run by run (A B C, C B A, ...) over ``--runs`` runs; the
report gives per server, mode and level the medians of requests/s and p50/p99 latency,
the sum of errors and timeouts, and each server's throughput as a ratio of uWSGI's at 64
clients in the same mode (medians of per-run ratios; uWSGI's ini answers every request
with ``Connection: close``, so its keep-alive clients reconnect each time).

    .venv/bin/python bench/serve_load.py --runs 3 --seconds 10 --json out.json

Only loopback is used; every loop is bounded by ``--seconds`` and ``--timeout``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.integration import procs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
HOST = "127.0.0.1"
PATHS = ("/v2/devices", "/v2/accelerator_requests", "/v1/accelerators")
HEADERS = {"X-Auth-Token": "admin", "Accept": "application/json"}
SERVERS = ("acceld", "acceld-1", "uwsgi", "uwsgi-tuned", "gunicorn", "granian", "cheroot",
           "waitress")
APP = "acceld.wsgi.api:application"


# -- the servers ---------------------------------------------------------------------------

def write_conf(workdir: str, threads: int) -> str:
    path = os.path.join(workdir, "acceld.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"[DEFAULT]\nhost = bench-host\nstate_path = {workdir}/state\n"
                f"[api]\nworkers = {threads}\n[fake_driver]\ndevice_count = 8\n")
    return path


def command(name: str, args: argparse.Namespace, conf: str, workdir: str,
            port: int) -> list[str]:
    bind = f"{HOST}:{port}"
    if name in ("acceld", "acceld-1"):   # acceld-1: `[api] processes = 1`, after the rest
        extra = args.acceld_conf.replace("\\n", "\n") + "\n"   # for `acceld serve` alone
        if name == "acceld-1":
            extra += "[api]\nprocesses = 1\n"
        path = os.path.join(workdir, f"{name}-extra.conf")
        with open(path, "w", encoding="utf-8") as f:
            f.write(extra)
        return [os.path.join(BIN, "acceld"), "serve", "--config-file", conf,
                "--config-file", path, "--port", str(port)]
    if name == "uwsgi":
        sys.path.insert(0, HERE)
        from vs_cyborg import uwsgi_ini  # the peers' ini, app and port replaced

        ini = uwsgi_ini(args.peers, workdir, "acceld-api", APP, REPO,
                        f"ACCELD_CONFIG_FILE={conf}", port)
        return [os.path.join(BIN, "uwsgi"), "--ini", ini]
    if name == "uwsgi-tuned":    # the same ini with a deeper backlog and threads
        return [*command("uwsgi", args, conf, workdir, port), "--listen", "1024",
                "--threads", str(args.threads)]
    if name == "gunicorn":
        return [os.path.join(BIN, "gunicorn"), "--bind", bind, "--worker-class", "gthread",
                "--workers", str(args.gunicorn_workers), "--threads", str(args.threads),
                "--backlog", "2048", "--keep-alive", "5", "--log-level", "warning", APP]
    if name == "granian":
        return [os.path.join(BIN, "granian"), "--interface", "wsgi", "--host", HOST,
                "--port", str(port), "--workers", str(args.granian_workers),
                "--blocking-threads", str(args.threads), "--backlog", "2048",
                "--log-level", "warning", APP]
    if name == "cheroot":     # its command line cannot set the backlog: see serve_cheroot
        return [sys.executable, os.path.abspath(__file__), "--serve-cheroot",
                f"{port},{args.threads}"]
    if name == "waitress":
        return [os.path.join(BIN, "waitress-serve"), "--listen", bind,
                f"--threads={args.threads}", "--connection-limit=4096", "--backlog=2048",
                "--asyncore-use-poll", APP]
    raise ValueError(name)


class Server:
    def __init__(self, name: str, args: argparse.Namespace, conf: str, workdir: str) -> None:
        self.name, self.port = name, procs.free_port()
        env = dict(os.environ, ACCELD_CONFIG_FILE=conf, PYTHONPATH=REPO)
        self.log = open(os.path.join(workdir, f"{name}.log"), "ab")
        self.log_start = self.log.tell()          # the log is shared by every run
        self.proc = subprocess.Popen(command(name, args, conf, workdir, self.port),
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=workdir, start_new_session=True)
        self.url = f"http://{HOST}:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited {self.proc.returncode}; see {self.log.name}")
            if ready(self.url):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{name} did not answer within 60 s; see {self.log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def log_problems(self) -> list[str]:
        """The server log's ERROR and Traceback lines (for acceld: a pool timeout, a
        failed heartbeat or report of its agent under the API's load)."""
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            f.seek(self.log_start)
            return [line for line in f if " ERROR " in line or "Traceback" in line]


def ready(url: str) -> bool:
    """Whether the agent's devices are listed (the database is seeded and the app up)."""
    req = urllib.request.Request(url + "/v2/devices", headers=HEADERS)
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return bool(json.loads(resp.read()).get("devices"))
    except (OSError, ValueError):
        return False


def serve_cheroot(port: int, threads: int) -> None:
    """The app under cheroot with the settings of the other servers (a backlog of 2048,
    every keep-alive connection kept), which its command line cannot set."""
    from cheroot import wsgi

    from acceld.wsgi.api import application

    server = wsgi.Server((HOST, port), application, numthreads=threads,
                         request_queue_size=2048)
    server.keep_alive_conn_limit = 4096
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    server.safe_start()


# -- the clients ---------------------------------------------------------------------------

def client(port: int, keepalive: bool, start: float, end: float, timeout: float,
           offset: int, out: list[Any]) -> None:
    """One client: requests until ``end``; appends (latencies, errors, timeouts)."""
    latencies: list[float] = []
    errors = timeouts = 0
    conn: http.client.HTTPConnection | None = None
    headers = dict(HEADERS) if keepalive else dict(HEADERS, Connection="close")
    i = offset
    time.sleep(max(0.0, start - time.time()))
    while time.time() < end:
        path = PATHS[i % len(PATHS)]
        i += 1
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
            if not keepalive or resp.will_close:
                conn.close()
                conn = None
        except TimeoutError:
            timeouts += 1
            ok = None
        except (OSError, http.client.HTTPException):
            ok = False
        if ok is None or not ok:
            errors += ok is False
            if conn is not None:
                conn.close()
                conn = None
            continue
        if time.time() <= end:
            latencies.append(time.perf_counter() - t0)
    if conn is not None:
        conn.close()
    out.append((latencies, errors, timeouts))


def client_process(port: int, keepalive: bool, clients: int, start: float, end: float,
                   timeout: float, first: int, queue: Any) -> None:
    out: list[Any] = []
    threads = [threading.Thread(target=client, daemon=True,
                                args=(port, keepalive, start, end, timeout, first + n, out))
               for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies = [lat for one in out for lat in one[0]]
    queue.put((latencies, sum(o[1] for o in out), sum(o[2] for o in out)))


def level(port: int, clients: int, keepalive: bool, args: argparse.Namespace) -> dict:
    procs = max(1, min(args.procs, clients))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    # every thread of every process is started before the common start
    start = time.time() + 1.0 + clients / 500
    end = start + args.seconds
    workers = []
    for p in range(procs):
        share = clients // procs + (1 if p < clients % procs else 0)
        proc = ctx.Process(target=client_process,
                           args=(port, keepalive, share, start, end, args.timeout,
                                 p * 1000, queue))
        proc.start()
        workers.append(proc)
    results = [queue.get() for _ in workers]
    for proc in workers:
        proc.join()
    latencies = sorted(lat for r in results for lat in r[0])
    n = len(latencies)
    return {"clients": clients, "mode": "keepalive" if keepalive else "close",
            "requests": n, "rps": n / args.seconds,
            "p50_ms": 1000 * latencies[n // 2] if n else None,
            "p99_ms": 1000 * latencies[min(n - 1, int(n * 0.99))] if n else None,
            "errors": sum(r[1] for r in results), "timeouts": sum(r[2] for r in results)}


# -- the run -------------------------------------------------------------------------------

def seed(args: argparse.Namespace, conf: str, workdir: str) -> None:
    """A first ``acceld serve`` until its agent's devices are listed (the database all the
    servers then read)."""
    Server("acceld", args, conf, workdir).stop()


def run(args: argparse.Namespace) -> dict:
    workdir = tempfile.mkdtemp(prefix="acceld-serve-load-")
    conf = write_conf(workdir, args.threads)
    seed(args, conf, workdir)
    rows: list[dict] = []
    logged: dict[str, list[int]] = {}
    try:
        for r in range(args.runs):
            order = list(args.servers) if r % 2 == 0 else list(reversed(args.servers))
            for name in order:
                server = Server(name, args, conf, workdir)
                try:
                    for mode in args.modes:
                        for clients in args.levels:
                            row = level(server.port, clients, mode == "keepalive", args)
                            row.update(server=name, run=r)
                            rows.append(row)
                            print(json.dumps(row), flush=True)
                finally:
                    server.stop()
                problems = server.log_problems()
                if problems:
                    print(f"{name}: {len(problems)} ERROR/Traceback lines in its log, "
                          f"first: {problems[0].strip()}", flush=True)
                logged.setdefault(name, []).append(len(problems))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    result = summarise(rows, args)
    result["server_log_problems"] = {name: sum(n) for name, n in logged.items()}
    return result


def summarise(rows: list[dict], args: argparse.Namespace) -> dict:
    table = []
    for name in args.servers:
        for mode in args.modes:
            for clients in args.levels:
                mine = [r for r in rows if (r["server"], r["mode"], r["clients"])
                        == (name, mode, clients)]
                if not mine:
                    continue
                table.append({
                    "server": name, "mode": mode, "clients": clients,
                    "rps": statistics.median(r["rps"] for r in mine),
                    "p50_ms": statistics.median(r["p50_ms"] or 0 for r in mine),
                    "p99_ms": statistics.median(r["p99_ms"] or 0 for r in mine),
                    "errors": sum(r["errors"] for r in mine),
                    "timeouts": sum(r["timeouts"] for r in mine)})
    ratios = {}
    if "uwsgi" in args.servers and 64 in args.levels:
        for name in args.servers:
            for mode in args.modes:
                per_run = []
                for r in range(args.runs):
                    mine, base = ([x["rps"] for x in rows if (
                        x["server"], x["mode"], x["clients"], x["run"]) == (who, mode, 64, r)]
                        for who in (name, "uwsgi"))
                    if mine and base and base[0]:
                        per_run.append(mine[0] / base[0])
                if per_run:
                    ratios[f"{name}/{mode}"] = statistics.median(per_run)
    return {"rows": rows, "medians": table, "ratio_vs_uwsgi_at_64": ratios}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default="acceld,uwsgi,gunicorn,granian",
                   type=lambda s: s.split(","), help=f"some of {', '.join(SERVERS)}")
    p.add_argument("--levels", default="1,64,256,1024",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--modes", default="keepalive,close", type=lambda s: s.split(","))
    p.add_argument("--seconds", type=float, default=10.0, help="length of each level")
    p.add_argument("--timeout", type=float, default=10.0, help="a client's socket timeout")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--procs", type=int, default=max(2, os.cpu_count() or 1),
                   help="client processes")
    p.add_argument("--threads", type=int, default=16,
                   help="server threads (acceld's [api] workers, and per worker elsewhere)")
    p.add_argument("--acceld-conf", default="",
                   help="a config file's text (\\n between lines) for `acceld serve` only")
    p.add_argument("--gunicorn-workers", type=int, default=2)
    p.add_argument("--granian-workers", type=int, default=2)
    p.add_argument("--peers", default=os.path.join(os.path.dirname(REPO), "shared", "peers"),
                   help="the peers' directory (for uWSGI's ini)")
    p.add_argument("--json", help="write every row and the summary here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--serve-cheroot", metavar="PORT,THREADS", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_cheroot:
        port, threads = (int(x) for x in args.serve_cheroot.split(","))
        serve_cheroot(port, threads)
        return 0
    for name in args.servers:
        if name not in SERVERS:
            p.error(f"unknown server {name!r}")
    result = run(args)
    for row in result["medians"]:
        print("{server:9} {mode:9} {clients:5d} clients: {rps:8.1f} req/s  p50 {p50_ms:7.1f} "
              "ms  p99 {p99_ms:7.1f} ms  errors {errors}  timeouts {timeouts}".format(**row))
    for key, ratio in result["ratio_vs_uwsgi_at_64"].items():
        print(f"{key} / uwsgi at 64 clients: {ratio:.2f}x")
    print("ERROR/Traceback lines in the server logs:", result["server_log_problems"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
