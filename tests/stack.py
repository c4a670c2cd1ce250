"""An in-process acceld: conductor + agent(s) + WSGI app over the local bus.

Used by functional tests and the gabbi fixture. Every piece is the real one; only the
transport is the in-process one that ``acceld serve`` uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import webob
from sqlalchemy import select

from acceld import rpc, states, wiring
from acceld.agent.manager import AgentManager
from acceld.api import deploy
from acceld.conductor.manager import ConductorManager
from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from tests import helpers

if TYPE_CHECKING:
    from tests.placement_server import PlacementEndpoint


class Stack:
    """``agent_collaborators`` go to every agent: the drivers' ``sysfs``, ``runner``,
    ``nvml``, ``clock``, ``sleep`` and the ``fetch_image`` of FPGA programming (a
    callable: host -> that host's dict, or one dict for all hosts)."""

    def __init__(self, db: Database, hosts: tuple[str, ...] = ("host1",),
                 device_count: int = 4, agent_collaborators: Any = None,
                 **conf_groups: dict[str, Any]) -> None:
        self._collaborators = agent_collaborators or {}
        groups: dict[str, dict[str, Any]] = {
            "agent": {"report_interval": 3600.0, "retry_interval": 0.05},
            "conductor": {"save_interval": 3600.0, "periodic_interval": 3600.0,
                          "operation_wait": 5.0},
            "fake_driver": {"device_count": device_count},
        }
        for group, values in conf_groups.items():
            groups.setdefault(group, {}).update(values)
        self.conf = helpers.make_conf(**groups)
        self.control_file = os.path.join(self.conf.state_path, "fake-control.json")
        self.conf.set_override("control_file", self.control_file, group="fake_driver")
        self.db = db
        self.transport = rpc.LocalTransport()
        self.conductor: ConductorManager
        self.conductor, self._cond_server = wiring.start_conductor(self.conf, db,
                                                                   self.transport)
        self.agents: dict[str, AgentManager] = {}
        self._agent_servers: dict[str, Any] = {}
        for host in hosts:
            self.add_agent(host)
        self.app = deploy.make_app(self.conf, db, rpc.ConductorClient(self.transport))

    def add_agent(self, host: str) -> AgentManager:
        collaborators = (self._collaborators(host) if callable(self._collaborators)
                         else self._collaborators)
        mgr = AgentManager(self.conf, rpc.ConductorClient(self.transport), host=host,
                           journal_dir=os.path.join(self.conf.state_path, f"agent-{host}"),
                           **collaborators)
        server = self.transport.serve(rpc.AGENT_TOPIC, host, mgr)
        server.start()
        self.agents[host], self._agent_servers[host] = mgr, server
        return mgr

    @classmethod
    @contextlib.contextmanager
    def reported(cls, db: Database, **kwargs: Any) -> Iterator[Stack]:
        """A stack (``kwargs`` as for the constructor) whose agents have reported once;
        stopped afterwards."""
        stack = cls(db, **kwargs)
        try:
            stack.report_all()
            yield stack
        finally:
            stack.stop()

    @classmethod
    def syncing_to(cls, placement: PlacementEndpoint, db_path: str | os.PathLike[str],
                   hosts: tuple[str, ...], **sync: Any) -> Stack:
        """A stack over a new SQLite database at ``db_path`` whose agents, ``hosts`` with
        four fake devices each, sync to ``placement``, where their compute nodes are made
        here. The periodic full pass is an hour away: only a change or a retry syncs;
        ``sync``: more options of the [placement] group."""
        for host in hosts:
            placement.create_compute_node(host)
        db = Database(f"sqlite:///{db_path}")
        migration.upgrade(db)
        return cls(db, hosts=hosts, device_count=4,
                   placement=dict(placement.acceld_config(), sync_interval=3600.0, **sync))

    def set_control(self, **values: Any) -> None:
        """What the fake driver finds next (its control file, replaced whole)."""
        tmp = self.control_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(values, f)
        os.replace(tmp, self.control_file)

    def report_all(self) -> None:
        """One synchronous report from every agent (tests do not wait for loops)."""
        for agent in self.agents.values():
            assert agent.report_once()

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> webob.Response:
        """One request to the stack's API (a JSON body when ``body`` is given)."""
        req = webob.Request.blank(path, method=method, headers=headers or {})
        if body is not None:
            req.content_type = "application/json"
            req.body = json.dumps(body).encode()
        return req.get_response(self.app)

    def ready_all(self) -> None:
        """An operator readies every reported device (its driver's install step runs on
        its agent): a bind takes only ready devices."""
        with self.db.reader() as s:
            uuids = list(s.execute(select(m.Device.uuid).where(
                m.Device.hostname.is_not(None), m.Device.state != states.READY)).scalars())
        for uuid in uuids:
            assert self.conductor.set_state(uuid, states.READY)["state"] == states.READY, uuid

    def start_agent_loops(self) -> None:
        for agent in self.agents.values():
            agent.start()

    def restart_agent(self, host: str) -> AgentManager:
        """A new agent over the same journal (an in-process restart: the old manager is
        abandoned, not stopped, as after a crash); its loops are not started."""
        self._agent_servers.pop(host).stop()
        self.agents.pop(host)
        return self.add_agent(host)

    def stop_conductor(self) -> None:
        self._cond_server.stop()

    def start_conductor(self) -> None:
        self._cond_server.start()

    def stop(self) -> None:
        for host, agent in self.agents.items():
            agent.stop()
            self._agent_servers[host].stop()
        self._cond_server.stop()
        self.conductor.stop()
        self.transport.close()


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until truthy (bounded); returns its value or raises."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
