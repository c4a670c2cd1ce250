"""``binding.HostWork`` through the agents: the driver's ``prepare`` of a handle a bind
claims (create the mdev, bind the VF to vfio-pci, ...) and ``release`` of one an unbind
frees, on the handle's host. Only handles that need it (``objects.hostwork``) cost an RPC.
A failure is an ``AccelDError``: the Binder fails the ARQ and frees the handle.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from acceld import exception
from acceld.db.api import Database
from acceld.objects import hostwork
from acceld.rpc import AgentClient

if TYPE_CHECKING:
    from sqlalchemy import Connection

LOG = logging.getLogger(__name__)

class AgentHostWork:
    def __init__(self, db: Database, agents: AgentClient) -> None:
        self._db = db
        self._agents = agents

    def _target(self, handle: dict[str, Any]) -> hostwork.HandleTarget | None:
        """Where ``handle``'s host work runs; None when it needs none."""
        target = hostwork.target_for(handle, self._db)
        if target is None or not hostwork.requires_host_work(handle, target):
            return None
        return target

    def needs(self, handle: dict[str, Any], conn: Connection | None = None) -> bool:
        """Whether ``handle``'s prepare/release goes to the agent (``binding.HostWork``)."""
        return hostwork.needs_host_work(self._db if conn is None else conn, handle)

    def _run(self, verb: str, handle: dict[str, Any]) -> dict[str, Any] | None:
        """``verb`` of ``handle`` on its host's agent (None: no host work needed); a
        failure is OperationFailed."""
        target = self._target(handle)
        if target is None:
            return None
        call = self._agents.prepare_handle if verb == "prepare" else \
            self._agents.release_handle
        result = call(target.host, target.driver, target.identity, handle["attach_info"],
                      handle["uuid"])
        if not result.get("ok"):
            raise exception.OperationFailed(
                f"{verb} of attach handle {handle['uuid']} on {target.host} failed: "
                f"{result.get('error')}")
        return {**result, "driver": target.driver}

    def prepare(self, handle: dict[str, Any]) -> None:
        result = self._run("prepare", handle)
        if result is not None and result.get("attach_info") != handle["attach_info"]:
            # The handle's identity is its attach_info: drivers fix it at discovery
            # (e.g. a deterministic mdev uuid), so prepare must not change it.
            LOG.warning("driver %s changed the attach_info of handle %s at prepare; "
                        "keeping the reported one", result["driver"], handle["uuid"])

    def release(self, handle: dict[str, Any]) -> None:
        self._run("release", handle)
