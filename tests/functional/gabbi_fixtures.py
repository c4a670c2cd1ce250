"""Gabbi fixtures: a fresh in-process acceld (``tests.stack.Stack``) per YAML file.

gabbi builds its HTTP clients (and so asks ``intercept`` for the WSGI app) while it
collects the tests, long before any fixture runs. :func:`setup_app` therefore returns a
small dispatcher that forwards every request to whatever app the running
:class:`StackFixture` put into :data:`HOLDER`; each YAML file gets its own database,
conductor, agents and app.

Fixtures (name them under ``fixtures:`` in a YAML file, StackFixture first):

* :class:`StackFixture`: migrated SQLite database in a temp dir, conductor + agents on
  ``host1`` and ``host2`` with four fake devices each, one synchronous report from each
  agent. Exports the uuid of every fake device as ``ACCELD_<HOST>_<TYPE>`` (for example
  ``ACCELD_HOST1_GPU``) so YAML can say ``$ENVIRON['ACCELD_HOST1_GPU']``.
* :class:`AgentDownStackFixture`: StackFixture (instead of it) whose host2 agent stops
  answering RPC after the first report; the conductor waits 0.2 s for an operation.
* :class:`AllocationFixture`: one device profile and one ``Bound`` accelerator request on
  the deployable of ``host2-fake-gpu-0``; exports ``ACCELD_ALLOCATED_UUID`` (that
  accelerator) and ``ACCELD_ALLOCATED_INSTANCE`` (the request's instance, a demo guest
  of the fake hypervisor that every agent runs).
* :class:`ReadyFixture`: an operator readied every device (a bind takes only ready ones).
* :class:`DeployableRPFixture`: exports the Placement resource provider uuid of every
  reported deployable as ``ACCELD_<HOST>_<TYPE>_RP`` (``ACCELD_HOST1_QAT_RP``: the fake QAT
  deployable on host1, four PCI attach handles; ``ACCELD_HOST1_GPU_RP``: one handle).
* :class:`PendingBindFixture`: an ARQ of project ``proj1`` stuck in ``BindStarted`` for
  instance ``ACCELD_PENDING_INSTANCE`` (a bind in progress: ``bind_state=resolved`` is 423).
* :class:`FailInstallFixture`: the fake driver's control file makes every install fail.
* :class:`AgentLoopsFixture`: runs the agents' report loops, so a driver action or
  ``POST /v1/discover`` leads to a report without a test calling ``report_all``.
* :class:`ProgramStackFixture`: StackFixture (instead of it) whose agents may program
  images from a local directory; exports ``ACCELD_IMAGE_PATH`` and
  ``ACCELD_IMAGE_SHA256`` (an image loading function ``AES256``), ``ACCELD_BAD_SHA256``
  (a digest the image does not have), ``ACCELD_<HOST>_<TYPE>_DEP`` (deployable uuids)
  and makes every programming take ``PROGRAM_SECONDS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid as uuidlib
from collections.abc import Callable, Iterable
from typing import Any

from gabbi import fixture
from sqlalchemy import select

from acceld.conf.hypervisor import DEMO_INSTANCES
from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from tests.stack import Stack

HOSTS = ("host1", "host2")
DEVICE_COUNT = 4
CONDUCTOR_HOST = "conductor1"
ENV_PREFIX = "ACCELD_"
# a guest the fake hypervisor of every agent runs ([hypervisor] fake_instances)
DEMO_INSTANCE = DEMO_INSTANCES[0].partition(":")[0]


class _Holder:
    """What the running StackFixture built; read by the intercept app."""

    def __init__(self) -> None:
        self.stack: Stack | None = None
        self.app: Any = None


HOLDER = _Holder()


def _dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if HOLDER.app is None:
        raise RuntimeError("no StackFixture is running: list it under 'fixtures:' in the "
                           "YAML file")
    return HOLDER.app(environ, start_response)


def setup_app() -> Callable[..., Iterable[bytes]]:
    """gabbi's ``intercept``: called at collection time, so it returns the dispatcher."""
    return _dispatch


class RunningStack:
    """A migrated SQLite database plus a started Stack; ``stop`` removes everything."""

    def __init__(self, **conf_groups: dict[str, Any]) -> None:
        self.tmp = tempfile.mkdtemp(prefix="acceld-gabbi-")
        self.db = Database(f"sqlite:///{os.path.join(self.tmp, 'acceld.sqlite')}")
        migration.upgrade(self.db)
        groups: dict[str, dict[str, Any]] = {"DEFAULT": {"host": CONDUCTOR_HOST}}
        for group, values in conf_groups.items():
            groups.setdefault(group, {}).update(values)
        self.stack = Stack(self.db, hosts=HOSTS, device_count=DEVICE_COUNT, **groups)
        try:
            self.stack.report_all()
        except BaseException:
            self.stop()
            raise

    def device_env(self) -> dict[str, str]:
        """``ACCELD_HOST1_GPU`` -> uuid, for every fake device (named host-fake-type-i)."""
        with self.db.reader() as s:
            rows = s.execute(select(m.Device.name, m.Device.uuid, m.Device.hostname,
                                    m.Device.type)
                             .where(m.Device.hostname.is_not(None))).all()
        return {f"{ENV_PREFIX}{row.hostname.upper()}_{row.type}": row.uuid for row in rows}

    def stop(self) -> None:
        try:
            self.stack.stop()
        finally:
            self.db.dispose()
            shutil.rmtree(self.stack.conf.state_path, ignore_errors=True)
            shutil.rmtree(self.tmp, ignore_errors=True)


class _EnvFixture(fixture.GabbiFixture):
    """Sets environment variables for the YAML and restores them when it stops."""

    def __init__(self) -> None:
        super().__init__()
        self._saved: dict[str, str | None] = {}

    def set_env(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self._saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def restore_env(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()


class StackFixture(_EnvFixture):
    """A fresh acceld (database, conductor, agents on host1 and host2, API) per YAML file."""

    conf_groups: dict[str, dict[str, Any]] = {}

    def start_fixture(self) -> None:
        self.running = RunningStack(**self.conf_groups)
        HOLDER.stack, HOLDER.app = self.running.stack, self.running.stack.app
        self.set_env(self.running.device_env())

    def stop_fixture(self) -> None:
        HOLDER.stack, HOLDER.app = None, None
        self.restore_env()
        self.running.stop()


class ProgramStackFixture(StackFixture):
    """Programming through the fake driver, from a local image directory."""

    PROGRAM_SECONDS = 1.0

    def start_fixture(self) -> None:
        self.images = tempfile.mkdtemp(prefix="acceld-gabbi-images-")
        data = b"function: AES256\n" + bytes(range(256)) * 8
        path = os.path.join(self.images, "aes.gbs")
        with open(path, "wb") as f:
            f.write(data)
        self.conf_groups = {"fpga_driver": {"local_image_dirs": [self.images],
                                            "program_timeout": 30.0}}
        super().start_fixture()
        with open(self.running.stack.control_file, "w", encoding="utf-8") as f:
            json.dump({"program_seconds": self.PROGRAM_SECONDS}, f)
        with self.running.db.reader() as s:
            rows = s.execute(select(m.Device.hostname, m.Device.type, m.Deployable.uuid)
                             .join(m.Deployable, m.Deployable.device_id == m.Device.id)).all()
        self.set_env({f"{ENV_PREFIX}{row.hostname.upper()}_{row.type}_DEP": row.uuid
                      for row in rows})
        self.set_env({f"{ENV_PREFIX}IMAGE_PATH": path,
                      f"{ENV_PREFIX}IMAGE_SHA256": hashlib.sha256(data).hexdigest(),
                      f"{ENV_PREFIX}BAD_SHA256": "deadbeef" * 8})

    def stop_fixture(self) -> None:
        super().stop_fixture()
        shutil.rmtree(self.images, ignore_errors=True)


class AgentDownStackFixture(StackFixture):
    """Like StackFixture, but host2's agent stops answering after its first report.

    The conductor waits only 0.2 s for an operation's outcome here, so a state change on
    host2 answers at once and leaves the accelerator in its transient state.
    """

    conf_groups = {"conductor": {"operation_wait": 0.2}}

    def start_fixture(self) -> None:
        super().start_fixture()
        # Stack has no public "stop one agent"; its RPC server is what makes host2 answer.
        self.running.stack._agent_servers["host2"].stop()


def _stack() -> Stack:
    if HOLDER.stack is None:
        raise RuntimeError("list StackFixture before this fixture")
    return HOLDER.stack


class AllocationFixture(_EnvFixture):
    """A Bound accelerator request on host2-fake-gpu-0: an allocation record exists."""

    DEVICE_NAME = "host2-fake-gpu-0"

    def start_fixture(self) -> None:
        instance = DEMO_INSTANCE        # the request's instance runs on the device's host
        with _stack().db.writer() as s:
            dev = s.execute(select(m.Device).where(m.Device.name == self.DEVICE_NAME)
                            ).scalar_one()
            dep = s.execute(select(m.Deployable).where(m.Deployable.device_id == dev.id)
                            ).scalars().first()
            profile = m.DeviceProfile(
                uuid=str(uuidlib.uuid4()), name="gabbi-fake-gpu",
                profile_json=json.dumps({"groups": [{"resources:PGPU": "1"}]}),
                description="allocation fixture")
            s.add(profile)
            s.flush()
            s.add(m.ExtendedAcceleratorRequest(
                uuid=str(uuidlib.uuid4()), project_id="proj1", state="Bound",
                device_profile_id=profile.id, device_profile_group_id=0,
                hostname=dev.hostname, device_rp_uuid=dep.rp_uuid, instance_uuid=instance,
                deployable_id=dep.id, substate="Bound"))
            device_uuid = dev.uuid
        self.set_env({f"{ENV_PREFIX}ALLOCATED_UUID": device_uuid,
                      f"{ENV_PREFIX}ALLOCATED_INSTANCE": instance})

    def stop_fixture(self) -> None:
        self.restore_env()


class ReadyFixture(fixture.GabbiFixture):
    """An operator readied every reported device (binds take only ready devices)."""

    def start_fixture(self) -> None:
        _stack().ready_all()


class DeployableRPFixture(_EnvFixture):
    """``ACCELD_<HOST>_<TYPE>_RP`` -> rp_uuid of that device's deployable (ARQ binds)."""

    def start_fixture(self) -> None:
        with _stack().db.reader() as s:
            rows = s.execute(select(m.Device.hostname, m.Device.type, m.Deployable.rp_uuid)
                             .join(m.Deployable, m.Deployable.device_id == m.Device.id)
                             .where(m.Deployable.rp_uuid.is_not(None))).all()
        self.set_env({f"{ENV_PREFIX}{row.hostname.upper()}_{row.type}_RP": row.rp_uuid
                      for row in rows})

    def stop_fixture(self) -> None:
        self.restore_env()


class PendingBindFixture(_EnvFixture):
    """A BindStarted ARQ of proj1 for a fresh instance (what a bind in progress looks like)."""

    def start_fixture(self) -> None:
        instance = str(uuidlib.uuid4())
        with _stack().db.writer() as s:
            profile = m.DeviceProfile(
                uuid=str(uuidlib.uuid4()), name="gabbi-pending",
                profile_json=json.dumps({"groups": [{"resources:CUSTOM_QAT": "1"}]}))
            s.add(profile)
            s.flush()
            s.add(m.ExtendedAcceleratorRequest(
                uuid=str(uuidlib.uuid4()), project_id="proj1", state="BindStarted",
                device_profile_id=profile.id, device_profile_group_id=0, hostname="host1",
                instance_uuid=instance, substate="Initial"))
        self.set_env({f"{ENV_PREFIX}PENDING_INSTANCE": instance})

    def stop_fixture(self) -> None:
        self.restore_env()


class FailInstallFixture(fixture.GabbiFixture):
    """The fake driver fails every install step (its control file says so)."""

    def start_fixture(self) -> None:
        self.path = _stack().control_file
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump({"fail_install": True}, f)

    def stop_fixture(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)


class AgentLoopsFixture(fixture.GabbiFixture):
    """Runs the agents' loops: a wake-up (discover, driver action) leads to a report."""

    def start_fixture(self) -> None:
        _stack().start_agent_loops()

    def stop_fixture(self) -> None:
        """StackFixture's stop joins the loops."""
