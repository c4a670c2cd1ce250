"""Binding and unbinding accelerator requests: thin orchestration over ``objects.arqs``.

No SQL here. A bind is ``begin_bind`` (BindStarted) -> ``claim_handle`` -> host work ->
``finish_bind`` (Bound); a failure of the host work makes the ARQ BindFailed and frees its
handle. Each ARQ of a request is bound on its own, so one bad ARQ does not stop the others;
the first error is raised once every ARQ was tried (the API turns it into the response).

Hook points (no driver needs them yet): :class:`HostWork` is where FPGA programming and
mdev creation/removal on the ARQ's host belong, and :meth:`Binder.bind` is where Nova's
``accelerator-request-bound`` external event (contract 3.2 step 3) would be sent.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from acceld import exception
from acceld.db.api import Database
from acceld.objects import arqs

LOG = logging.getLogger(__name__)


class HostWork(Protocol):
    """Host-side work of a bind (``prepare``) or an unbind (``release``); plain dicts
    from ``objects.arqs`` describe the attach handle and its host."""

    def prepare(self, handle: dict[str, Any]) -> None: ...

    def release(self, handle: dict[str, Any]) -> None: ...


class NoHostWork:
    """PCI handles (all that the drivers report today) need nothing on the host."""

    def prepare(self, handle: dict[str, Any]) -> None:
        return None

    def release(self, handle: dict[str, Any]) -> None:
        return None


class Binder:
    def __init__(self, db: Database, host_work: HostWork | None = None) -> None:
        self._db = db
        self._host = host_work or NoHostWork()

    def bind(self, patch: dict[str, dict[str, str]], project_id: str | None) -> None:
        """``patch``: ARQ uuid -> {hostname, device_rp_uuid, instance_uuid, project_id}."""
        arqs.check_instances_unbound(self._db, {f["instance_uuid"] for f in patch.values()},
                                     project_id=project_id)
        errors: list[exception.AccelDError] = []
        for uuid, fields in patch.items():
            try:
                self._bind_one(uuid, fields, project_id)
            except exception.AccelDError as exc:
                LOG.warning("bind of ARQ %s failed: %s", uuid, exc)
                errors.append(exc)
        if errors:
            raise errors[0]

    def _bind_one(self, uuid: str, fields: dict[str, str], project_id: str | None) -> None:
        arqs.begin_bind(self._db, uuid, hostname=fields["hostname"],
                        device_rp_uuid=fields["device_rp_uuid"],
                        instance_uuid=fields["instance_uuid"], owner=fields["project_id"],
                        project_id=project_id)
        handle = arqs.claim_handle(self._db, uuid)
        try:
            self._host.prepare(handle)
        except Exception:
            for freed in arqs.fail_bind(self._db, uuid):
                self._release(freed)
            raise
        try:
            arqs.finish_bind(self._db, uuid)
        except exception.AccelDError:
            self._release(handle)  # an unbind or a delete won; it freed the handle row
            raise
        LOG.info("ARQ %s bound to %s on %s", uuid, handle["uuid"], fields["hostname"])

    def unbind(self, uuids: list[str], project_id: str | None) -> None:
        errors: list[exception.AccelDError] = []
        for uuid in uuids:
            try:
                for freed in arqs.unbind(self._db, uuid, project_id=project_id):
                    self._release(freed)
            except exception.AccelDError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _release(self, handle: dict[str, Any]) -> None:
        try:
            self._host.release(handle)
        except Exception:  # the handle row is free already; host clean-up is best effort
            LOG.exception("host clean-up of attach handle %s failed", handle["uuid"])
