"""Several ``acceld conductor`` processes sharing simulated hosts (``acceld.sim``): their
configs over one PostgreSQL database, one RabbitMQ vhost, one Redis namespace (their
tooz group), one Placement and Nova's events API on loopback; and what the tests read
back (owners, sync state, who wrote each host's providers)."""

from __future__ import annotations

import collections
import re
import uuid
from typing import Any

from sqlalchemy import select

from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import identity
from acceld.sim.fleet import host_names
from tests.integration import procs as p
from tests.placement_server import PlacementServer

UA_HOST = re.compile(r"^acceld/\S+ \(([^)]+)\)")   # the User-Agent names the conductor


class Cluster:
    def __init__(self, procs: p.Processes, *, conductors: tuple[str, ...], hosts: int,
                 db_url: str, transport_url: str, redis_url: str,
                 placement: PlacementServer, nova: Any, membership_timeout: int,
                 save_interval: float = 0.5, bind_timeout: float = 60.0) -> None:
        self.prefix = f"cl{uuid.uuid4().hex[:6]}"
        self.hosts = host_names(self.prefix, hosts)
        self.placement = placement
        self.computes = {h: placement.create_compute_node(h) for h in self.hosts}
        self.configs = {}
        for name in conductors:
            state = procs.workdir / f"state-{name}"
            state.mkdir()
            self.configs[name] = p.write_config(procs.workdir / f"{name}.conf", {
                "DEFAULT": {"host": name, "state_path": state, "transport_url": transport_url,
                            "rpc_timeout": 10},
                "conductor": {"save_interval": save_interval, "periodic_interval": 1.0,
                              "operation_wait": 5.0},
                "coordination": {"backend_url": redis_url,
                                 "membership_timeout": membership_timeout,
                                 "refresh_interval": 0.2},
                "placement": {**placement.acceld_config(), "sync_interval": 3600.0},
                "nova": {**nova.acceld_config(), "bind_timeout": bind_timeout},
                "database": {"connection": db_url}})
        p.db_upgrade(self.configs[conductors[0]], procs.workdir)
        self.procs = {name: procs.start(name, "conductor", self.configs[name])
                      for name in conductors}
        for proc in self.procs.values():
            assert proc.wait_for_log("running", 30), proc.log_tail()
        self.db = Database(db_url)

    @property
    def config(self) -> str:
        """A config file with the bus (what the simulator reads)."""
        return str(next(iter(self.configs.values())))

    def owners(self) -> dict[str, str | None]:
        """Each simulated host's owning conductor, as the services rows name it."""
        with self.db.reader() as s:
            return {r.host: r.conductor for r in s.execute(
                select(m.Service.host, m.Service.conductor).where(
                    m.Service.binary == "acceld-agent", m.Service.host.in_(self.hosts)))}

    def unsynced(self) -> list[str]:
        with self.db.reader() as s:
            synced = {r.host for r in s.execute(select(m.PlacementSync.host).where(
                m.PlacementSync.in_sync.is_(True), m.PlacementSync.host.in_(self.hosts)))}
        return sorted(set(self.hosts) - synced)

    def usages(self) -> dict[str, dict[str, int]]:
        """Placement's non-zero usages of every provider under the hosts' compute nodes."""
        admin = self.placement.admin_session()
        out = {}
        for compute in self.computes.values():
            tree = admin.get(f"/resource_providers?in_tree={compute}").json()
            for rp in tree["resource_providers"]:
                used = admin.get(f"/resource_providers/{rp['uuid']}/usages").json()["usages"]
                if any(used.values()):
                    out[rp["uuid"]] = used
        return out


def provider_hosts(expected: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Placement provider uuid -> the simulated host it belongs to."""
    out = {}
    for host, devices in expected.items():
        for dev in devices:
            dev_uuid = identity.device_uuid(host, dev["driver"], dev["identity"])
            for name in dev["deployables"]:
                out[identity.rp_uuid(identity.deployable_uuid(dev_uuid, name))] = host
    return out


def writers(placement: PlacementServer, providers: dict[str, str],
            since: int = 0) -> dict[str, set[str]]:
    """Host -> the conductors that wrote its providers (PUT/POST/DELETE on a provider
    path) in the requests recorded from index ``since`` on."""
    out: dict[str, set[str]] = collections.defaultdict(set)
    for agent, method, path in placement.callers()[since:]:
        if method in ("GET", "HEAD"):
            continue
        found = re.match(r"^/resource_providers/([0-9a-f-]{36})", path)
        caller = UA_HOST.match(agent)
        if found and found.group(1) in providers and caller:
            out[providers[found.group(1)]].add(caller.group(1))
    return out
