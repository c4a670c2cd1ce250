"""The real acceld in place of Nova 34's ``CyborgFixture`` (nova/tests/fixtures/cyborg.py).

Nova's stock fixture mocks every method of ``nova.accelerator.cyborg._CyborgClient``.
:class:`AcceldCyborgFixture` mocks none of them: Nova's real client (an openstacksdk
adapter built from Nova's ``[cyborg]`` options, with the ``[service_user]`` token wrapper)
talks HTTP, routed by wsgi-intercept (as Nova's ``PlacementFixture`` routes Placement), to
acceld's WSGI application. Behind it run a real acceld conductor and one real acceld agent
per Nova compute host, on the fake driver in its ``profile = cyborg`` shape (upstream
Cyborg's fake device: one FPGA ``<host>_FakeDevice`` with 16 PCI attach handles, resource
class FPGA, trait CUSTOM_FAKE_DEVICE), over acceld's in-process bus and a SQLite database
in a temporary directory. The conductor's Placement sync writes the devices into the
test's own Placement (the one Nova's scheduler and computes use) as children of Nova's
compute node providers; the fixture readies the devices as an operator would.

Nova's CONF: ``[cyborg] endpoint_override`` points at the intercepted acceld;
``[service_user] send_service_user_token = True`` with the ``admin_token`` plugin
(token ``nova-service``), so every request Nova makes carries ``X-Service-Token`` exactly as
a deployment's ``[service_user]`` section makes it do (the functional tests' contexts carry
no user token, so that is the only token). acceld runs with ``auth_strategy = noauth``
(its embedded default): no user token -> admin, ``X-Service-Token`` -> the service role that
binds and deletes by instance need.

Test-facing API (what Nova's accelerator test classes read from the stock fixture):

* ``dp_name`` (``fakedev-dp``), ``trait`` (``CUSTOM_FAKE_DEVICE``);
* ``fake_get_arqs_for_instance(instance_uuid)``: a *static* method (the tests call it on
  the class ``nova_fixtures.CyborgFixture``) that reads the ARQs the running acceld holds
  for the instance (``GET /v2/accelerator_requests?instance=``); ``[]`` when none;
* ``mock_del_arqs``: a ``mock.Mock`` recording every call of
  ``_CyborgClient.delete_arqs_for_instance(instance_uuid)`` as ``call(instance_uuid)``;
  the real method then runs (a recording wrapper, not a replacement);
* ``arq_list``: every ARQ acceld holds right now (the stock fixture's canned list was only
  read to decide how many device providers the base class created itself);
* :meth:`add_hosts`: agents for Nova's compute hosts, their devices readied and synced into
  Placement; returns ``{host: [device resource provider uuid, ...]}``.

This module imports Nova and acceld; ``nova.tests.functional`` must have been imported
first (it applies eventlet's monkey patching), which ``nova_accelerator_tests`` does.
"""

from __future__ import annotations

import os
from unittest import mock

import fixtures
from keystoneauth1 import loading as ks_loading
from nova.accelerator import cyborg as nova_cyborg
from nova.tests import fixtures as nova_fixtures
from oslo_config import cfg
from oslo_utils import uuidutils
from requests import adapters
from sqlalchemy import select
from wsgi_intercept import interceptor

from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from tests.stack import Stack

CONF = cfg.CONF

# The device profiles Nova's accelerator tests name (the stock fixture's
# _get_device_profile), created through acceld's API. 'fakedev-dp-multi' asks for
# 'resources:CUSTOM_FPGA2' where the stock data has 'resources:FPGA2': a resource class
# that is neither standard nor CUSTOM_ is not valid in Placement, Cyborg or acceld. Only
# the amount matters to the one test that uses it (Nova rejects a port whose profile asks
# for more than one device before anything is scheduled).
PROFILES = {
    "fakedev-dp": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
    "fakedev-dp-port": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
    "fakedev-dp-multi": [{"resources:FPGA": "2", "resources:CUSTOM_FPGA2": "1",
                          "trait:CUSTOM_FAKE_DEVICE": "required"}],
}
# The physical network on the handles of the FPGA devices (Nova puts it into the binding
# profile of an accelerator port); the stock fixture's handles carry the same name.
PHYSICAL_NETWORK = "PHYNET1"
SERVICE_TOKEN = "nova-service"


def _register_service_user_token_opts() -> None:
    """The admin_token plugin's options in Nova's [service_user] group (a deployment's
    nova.conf has them once auth_type names the plugin; set_override needs them first)."""
    for opt in ks_loading.get_auth_plugin_conf_options("admin_token"):
        try:
            CONF.register_opt(opt, group="service_user")
        except cfg.DuplicateOptError:
            pass


class AcceldCyborgFixture(fixtures.Fixture):
    """The real acceld for one Nova functional test; see the module docstring.

    ``placement_endpoint``: the URL of the test's Placement (``PlacementFixture.endpoint``).
    """

    dp_name = "fakedev-dp"
    trait = "CUSTOM_FAKE_DEVICE"

    # the fixture of the test now running (stestr runs one test at a time per process)
    _running: AcceldCyborgFixture | None = None

    def __init__(self, placement_endpoint: str) -> None:
        super().__init__()
        self.placement_endpoint = placement_endpoint
        self.endpoint = f"http://{uuidutils.generate_uuid()}:80"

    # -- set-up -------------------------------------------------------------------------
    def setUp(self) -> None:
        super().setUp()
        tmp = self.useFixture(fixtures.TempDir()).path
        self.db = Database(f"sqlite:///{os.path.join(tmp, 'acceld.sqlite')}")
        self.addCleanup(self.db.dispose)
        migration.upgrade(self.db)
        self.stack = Stack(
            self.db, hosts=(),
            DEFAULT={"state_path": tmp, "host": "acceld-conductor"},
            fake_driver={"profile": "cyborg",
                         "physical_networks": {"FPGA": PHYSICAL_NETWORK}},
            placement={"auth_type": "admin_token", "endpoint": self.placement_endpoint,
                       "token": "admin", "sync_interval": 3600.0})
        self.addCleanup(self.stack.stop)

        # wsgi-intercept keeps no socket options (as Nova's PlacementFixture does)
        self.useFixture(fixtures.MonkeyPatch(
            "keystoneauth1.session.TCPKeepAliveAdapter.init_poolmanager",
            adapters.HTTPAdapter.init_poolmanager))
        intercept = interceptor.RequestsInterceptor(lambda: self.stack.app,
                                                    url=self.endpoint + "/")
        intercept.install_intercept()
        self.addCleanup(intercept.uninstall_intercept)

        # Nova's real Cyborg client, as a deployment's nova.conf configures it
        _register_service_user_token_opts()
        self.useFixture(nova_fixtures.ConfPatcher(
            group="cyborg", endpoint_override=self.endpoint + "/v2"))
        self.useFixture(nova_fixtures.ConfPatcher(
            group="service_user", send_service_user_token=True, auth_type="admin_token",
            token=SERVICE_TOKEN, endpoint=self.endpoint + "/v2"))

        for name, groups in PROFILES.items():
            self._operator("POST", "/v2/device_profiles",
                           [{"name": name, "groups": groups}], expect=201)

        # mock_del_arqs records the calls; the real delete then runs
        self.mock_del_arqs = mock.Mock(name="delete_arqs_for_instance")
        real_delete = nova_cyborg._CyborgClient.delete_arqs_for_instance
        recorder = self.mock_del_arqs

        def delete_arqs_for_instance(client, instance_uuid):
            recorder(instance_uuid)
            return real_delete(client, instance_uuid)

        self.useFixture(fixtures.MonkeyPatch(
            "nova.accelerator.cyborg._CyborgClient.delete_arqs_for_instance",
            delete_arqs_for_instance))

        AcceldCyborgFixture._running = self
        self.addCleanup(setattr, AcceldCyborgFixture, "_running", None)

    # -- hosts --------------------------------------------------------------------------
    def add_hosts(self, hosts: list[str]) -> dict[str, list[str]]:
        """Start an acceld agent on each of ``hosts`` (Nova's compute hosts, already
        started, so their compute node providers exist), let it report, ready every
        device as an operator would, and sync Placement. Returns each host's device
        provider uuids (children of the host's compute node provider)."""
        for host in hosts:
            agent = self.stack.add_agent(host)
            assert agent.report_once(), f"acceld agent on {host} did not report"
        self.stack.ready_all()
        syncer = self.stack.conductor.placement
        assert syncer.wait_idle(60), "acceld's Placement sync did not go idle"
        result = {}
        for host in hosts:
            sync = syncer.sync_host(host)       # what the background pass left undone
            assert sync.in_sync and sync.error is None, (host, sync)
            with self.db.reader() as s:
                result[host] = list(s.execute(
                    select(m.Deployable.rp_uuid)
                    .join(m.Device, m.Deployable.device_id == m.Device.id)
                    .where(m.Device.hostname == host, m.Deployable.rp_uuid.is_not(None))
                    .order_by(m.Deployable.name)).scalars())
            assert result[host], f"no device providers for {host}"
        return result

    # -- test-facing API ----------------------------------------------------------------
    @property
    def arq_list(self) -> list[dict]:
        return self._operator("GET", "/v2/accelerator_requests", expect=200)["arqs"]

    @staticmethod
    def fake_get_arqs_for_instance(instance_uuid, only_resolved=False):
        """The ARQs acceld holds for the instance (all of them, or with ``only_resolved``
        those whose binding finished), as its API shows them; [] when none."""
        running = AcceldCyborgFixture._running
        assert running is not None, "no AcceldCyborgFixture is running"
        arqs = running._operator("GET", f"/v2/accelerator_requests?instance={instance_uuid}",
                                 expect=200)["arqs"]
        if only_resolved:   # as Nova's _CyborgClient.get_arqs_for_instance filters
            arqs = [a for a in arqs if a["state"] in ("Bound", "BindFailed", "Deleting")]
        return arqs

    # -- helpers ------------------------------------------------------------------------
    def _operator(self, method: str, path: str, body=None, expect: int = 200):
        """One request to acceld's API as its operator (admin)."""
        resp = self.stack.call(method, path, body, {"X-Auth-Token": "admin"})
        assert resp.status_int == expect, (method, path, resp.status_int, resp.text)
        return resp.json if resp.body else None
