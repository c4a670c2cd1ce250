"""Nova 34's 56 accelerator functional tests, run against the real acceld.

The eight test classes are subclassed unchanged; only their test-facing layer changes:

* ``nova_fixtures.CyborgFixture`` is, for the test's duration, an
  :class:`~tests.nova_functional.acceld_fixture.AcceldCyborgFixture` bound to the test's
  Placement, so ``AcceleratorServerBase.setUp`` starts the real acceld and the tests'
  static calls ``nova_fixtures.CyborgFixture.fake_get_arqs_for_instance(...)`` read it;
* ``_setup_compute_nodes_and_device_rps`` starts the same compute hosts (``accel_host<i>``)
  and, where the base class wrote device providers into Placement itself
  (``_create_device_rp``: 3 on host 0 and 1 on host 1, two FPGA each), lets acceld's agents
  on those hosts report their devices and acceld's Placement sync publish them (one
  ``<host>_FakeDevice`` per host, 16 FPGA, CUSTOM_FAKE_DEVICE), readied by the fixture as an
  operator readies them; ``device_rp_uuids`` / ``device_rp_map`` hold those providers;
* ``PortAndFlavorAccelsServerCreateTest.test_accels_from_both_port_and_flavor`` has a bug
  the stock fixture never reaches (``arqs[...]`` for ``arq[...]``); it is corrected at
  import time by the exact-match source patch below, which fails loudly when Nova's source
  is not the one it was written for.

Not named ``test_*.py``: pytest must not collect it (it needs Nova's own environment, see
``run.sh``). stestr finds it through ``load_tests`` in this package's ``__init__``.
"""

# Nova's functional package first: it applies eventlet's monkey patching, which must
# precede every other import of Nova, oslo or acceld.
# isort: off
import nova.tests.functional  # noqa: F401
# isort: on

import ast
import hashlib
import inspect
import textwrap

import fixtures
from nova.tests.functional import test_servers
from nova.tests.functional.regressions import test_bug_2140631

from tests.nova_functional import acceld_fixture


class AcceldCyborgMixin:
    """Put the real acceld where ``AcceleratorServerBase`` uses ``CyborgFixture``."""

    def setUp(self):
        test = self

        class CyborgFixture(acceld_fixture.AcceldCyborgFixture):
            """Bound to this test's Placement (the base class calls it without
            arguments, after its PlacementFixture has started)."""

            def __init__(self):
                super().__init__(test.placement.fixture.endpoint)

        self.useFixture(fixtures.MonkeyPatch(
            "nova.tests.fixtures.CyborgFixture", CyborgFixture))
        super().setUp()

    def _setup_compute_nodes_and_device_rps(self):
        """The base class's compute hosts, whose device providers acceld publishes."""
        self.compute_services = []
        # all device rp uuids
        self.device_rp_uuids = []
        # device_rp_map[host_rp_uuid]: device rp uuids that belong to the host
        self.device_rp_map = {}
        hosts = ["accel_host" + str(i) for i in range(self.NUM_HOSTS)]
        for host in hosts:
            self.compute_services.append(self._start_compute(host=host))
        # host index map to compute rp uuid
        self.compute_rp_uuids = [
            rp["uuid"] for rp in self._get_all_providers()
            if rp["uuid"] == rp["root_provider_uuid"]]
        devices = self.cyborg.add_hosts(hosts)
        for host in hosts:
            host_rp_uuid = self._get_provider_uuid_by_host(host)
            for rp_uuid in devices[host]:
                self._check_device_rp(rp_uuid, host, host_rp_uuid)
            self.device_rp_map[host_rp_uuid] = list(devices[host])
            self.device_rp_uuids.extend(devices[host])

    def _check_device_rp(self, rp_uuid, host, host_rp_uuid):
        """acceld's provider is what the tests' device profiles ask for: a child of the
        host's compute node with schedulable FPGA inventory and the profiles' trait."""
        rp = self.placement.get(f"/resource_providers/{rp_uuid}", version="1.14").body
        self.assertEqual(host_rp_uuid, rp["parent_provider_uuid"], rp)
        self.assertEqual(f"{host}_FakeDevice", rp["name"])
        inventory = self._get_provider_inventory(rp_uuid)
        self.assertEqual(16, inventory["FPGA"]["total"], inventory)
        self.assertEqual(0, inventory["FPGA"]["reserved"], inventory)
        self.assertIn(self.cyborg.trait, self._get_provider_traits(rp_uuid))


# -- the one correction of a test body ------------------------------------------------------
# test_accels_from_both_port_and_flavor indexes the list ``arqs`` where it means the loop's
# ``arq`` (TypeError: list indices must be integers). The stock fixture never reaches those
# lines: all its ARQs carry the flavor's profile name. acceld's port ARQ carries its own
# profile's name, 'fakedev-dp-port', so the lines run.
_CORRECTED = test_servers.PortAndFlavorAccelsServerCreateTest.test_accels_from_both_port_and_flavor
_SOURCE_SHA256 = "5d4cdd4c4793ac5c1d4511dd1b218a4b52592f263a8a44755dc2de31f03518e5"
_ARQ_FIXES = (
    ("pci = arqs['attach_handle_info']", "pci = arq['attach_handle_info']"),
    ("'arq_uuid': arqs['uuid'],", "'arq_uuid': arq['uuid'],"),
)


def _corrected_test():
    lines, first_line = inspect.getsourcelines(_CORRECTED)
    source = "".join(lines)
    digest = hashlib.sha256(source.encode()).hexdigest()
    if digest != _SOURCE_SHA256:
        raise RuntimeError(
            "nova_accelerator_tests: Nova's test_accels_from_both_port_and_flavor is not "
            f"the source the arqs->arq correction was written for (sha256 {digest}); "
            "review the correction")
    for old, new in _ARQ_FIXES:
        if source.count(old) != 1:
            raise RuntimeError(f"nova_accelerator_tests: {old!r} occurs "
                               f"{source.count(old)} times, not once")
        source = source.replace(old, new)
    tree = ast.parse(textwrap.dedent(source))
    ast.increment_lineno(tree, first_line - 1)   # tracebacks point at Nova's lines
    code = compile(tree, inspect.getsourcefile(_CORRECTED) + " (arqs->arq corrected)", "exec")
    namespace = {}
    exec(code, test_servers.__dict__, namespace)   # Nova's module globals, nothing added
    corrected = namespace[_CORRECTED.__name__]
    corrected.__qualname__ = _CORRECTED.__qualname__
    return corrected


# -- the 56 tests ---------------------------------------------------------------------------
class AcceleratorServerTest(AcceldCyborgMixin, test_servers.AcceleratorServerTest):
    pass


class AcceleratorServerReschedTest(AcceldCyborgMixin,
                                   test_servers.AcceleratorServerReschedTest):
    pass


class AcceleratorServerOpsTest(AcceldCyborgMixin, test_servers.AcceleratorServerOpsTest):
    pass


class TwoPortsAcceleratorServerOpsTest(AcceldCyborgMixin,
                                       test_servers.TwoPortsAcceleratorServerOpsTest):
    pass


class PortAcceleratorServerOpsTest(AcceldCyborgMixin,
                                   test_servers.PortAcceleratorServerOpsTest):
    pass


class PortAcceleratorServerCreateRejectTest(AcceldCyborgMixin,
                                            test_servers.PortAcceleratorServerCreateRejectTest):
    pass


class PortAndFlavorAccelsServerCreateTest(AcceldCyborgMixin,
                                          test_servers.PortAndFlavorAccelsServerCreateTest):
    test_accels_from_both_port_and_flavor = _corrected_test()


class TestBug2140631Cyborg(AcceldCyborgMixin, test_bug_2140631.TestBug2140631Cyborg):
    pass
