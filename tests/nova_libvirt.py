"""Run Nova 34's own libvirt code on acceld ARQ dicts, and report what Nova built.

Nothing of Nova's logic is re-implemented here: the harness only builds the inputs Nova's
code takes (an ``Instance``, a ``Flavor``, ``ImageMeta``, the ARQ list, optional VIFs),
calls Nova's functions, and reads back what they produced.

* :func:`guest_devices` runs what ``LibvirtDriver.spawn`` (nova/virt/libvirt/driver.py)
  does with ``accel_info``: ``_allocate_cyborg_mdevs(accel_info)`` and then
  ``_get_guest_xml(..., mdevs=..., accel_info=...)``, which calls ``_get_guest_config``
  (its ARQ loop, ``_guest_add_accel_pci_devices``, ``_guest_add_mdevs``, and the VIF
  driver for ``network_info``). Nova runs against ``nova.tests.fixtures.libvirt``
  (Nova's fake libvirt), with a fake host whose node devices behave like real libvirt's
  for the two calls this path makes (see :class:`FakeHost`).
* :func:`port_binding_profile` runs ``neutron.API._populate_neutron_binding_profile``,
  which calls ``nova.accelerator.cyborg.get_arq_pci_device_profile``: the only place
  Nova reads ``physical_network`` (and a port's PCI address) from an ARQ.
  :func:`port_vif` wraps that profile in a Nova ``VIF`` so :func:`guest_devices` can
  show the ``<interface>`` or ``<hostdev>`` Nova's VIF driver makes of it.
* Each device element is checked against libvirt's RelaxNG schema (``domain.rng``) with
  ``tests.libvirt_schema``.

Isolation, and why Nova's usual test fixtures are not all used:

* Importing ``nova.tests.fixtures`` (the package) imports ``nova.tests.functional``,
  whose ``__init__`` calls ``nova.monkey_patch.patch()``: that eventlet-monkey-patches
  the whole process and then, when acceld's threading backend is already selected,
  raises ``BackendAlreadySelected``. :func:`nova_fakes` therefore loads only the two
  modules needed (``nova.tests.fixtures.libvirt`` and ``libvirt_data``) without running
  the package ``__init__``.
* ``nova.tests.fixtures.ConfFixture`` calls ``nova.config.parse_args``, which calls
  ``nova.rpc.set_defaults(control_exchange='nova')``: that rewrites oslo.messaging's
  process-wide option default, so every acceld ``ConfigOpts`` built later in the same
  worker would get ``control_exchange = nova``. :class:`NovaLibvirt` instead uses
  oslo.config's ``Config`` fixture on Nova's ``CONF`` (reset on cleanup), parses it with
  no arguments or files, and registers only Nova's dynamic option groups that
  ``ConfFixture`` registers and this path reads.

Import this module after ``pytest.importorskip("nova.virt.libvirt.driver")``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fixtures
import nova.conf
from lxml import etree
from nova import objects
from nova.network import model as network_model
from nova.network import neutron as neutron_api
from nova.pci import utils as pci_utils
from nova.virt import fake as fake_virt
from nova.virt.libvirt import driver as libvirt_driver
from oslo_config import fixture as config_fixture

from tests.libvirt_schema import device_schema_errors, find_domain_schema

CONF = nova.conf.CONF

ARQ = Mapping[str, Any]

_DRIVER_LOGGER = "nova.virt.libvirt.driver"
_IGNORED_ARQS_MESSAGE = "Ignoring accelerator requests with unsupported attach handle types"


def nova_fakes() -> types.ModuleType:
    """Return ``nova.tests.fixtures.libvirt`` (Nova's fake libvirt) without side effects.

    The module is imported by its real name, but the ``nova.tests.fixtures`` package
    ``__init__`` (which eventlet-monkey-patches the process, see the module docstring) is
    not run: a bare stand-in package object is used for the import and removed again, so
    a later ``import nova.tests.fixtures`` elsewhere still gets the real package.
    """
    name = "nova.tests.fixtures.libvirt"
    if name in sys.modules:
        return sys.modules[name]
    package = "nova.tests.fixtures"
    if package in sys.modules:
        return importlib.import_module(name)
    tests_pkg = importlib.import_module("nova.tests")
    stand_in = types.ModuleType(package)
    stand_in.__path__ = [str(Path(tests_pkg.__file__).parent / "fixtures")]
    sys.modules[package] = stand_in
    try:
        return importlib.import_module(name)
    finally:
        if sys.modules.get(package) is stand_in:
            del sys.modules[package]
        if getattr(tests_pkg, "fixtures", None) is stand_in:
            del tests_pkg.fixtures


fakelibvirt = nova_fakes()


@dataclass(frozen=True)
class MdevCreate:
    """One mediated device Nova asked libvirt to create (``virNodeDeviceCreateXML``)."""

    parent: str
    """The parent node device name Nova gave, e.g. ``pci_0000_3b_00_0``."""
    type: str
    """The mdev type, e.g. ``nvidia-35``."""
    uuid: str
    """The mdev UUID Nova asked for."""
    xml: str
    """The node device XML Nova sent."""


class _DefinedMdev:
    """What real libvirt's ``nodeDeviceDefineXML`` returns, for ``device_set_autostart``."""

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def setAutostart(self, autostart: bool) -> int:  # noqa: N802 - libvirt's name
        return 0


class FakeHost(fakelibvirt.Connection):
    """Nova's ``fakelibvirt.Connection`` with node devices that act like real libvirt's.

    The stock fake raises ``KeyError`` when an ``mdev_*`` node device is missing and
    returns ``None`` from ``nodeDeviceCreateXML`` / ``nodeDeviceDefineXML``. Real libvirt
    raises ``libvirtError(VIR_ERR_NO_NODE_DEVICE)`` for the former (which
    ``_allocate_cyborg_mdevs`` relies on) and returns a device for the latter (which
    ``_create_mdev`` calls ``setAutostart`` and ``name`` on), so both are modelled here.

    :param gpus: PCI addresses (``0000:3b:00.0``) of mdev-capable devices on the host, or
        ``None`` for "any parent": with a list, creating an mdev on any other parent
        fails as it does in libvirt; they are also listed as node devices.
    :param mdevs: node device names of mdevs that already exist, as
        ``virsh nodedev-list --cap mdev`` prints them (``mdev_<uuid>_0000_3b_00_0``).
    """

    def __init__(self, gpus: Iterable[str] | None = None, mdevs: Iterable[str] = ()) -> None:
        pci = fakelibvirt.HostPCIDevicesInfo(num_pci=0, num_pfs=0, num_vfs=0)
        self._any_parent = gpus is None
        for group, address in enumerate(gpus or (), start=40):
            _domain, bus, slot, function = pci_utils.parse_address(address)
            pci.add_device(dev_type="MDEV_TYPES", bus=int(bus, 16), slot=int(slot, 16),
                           function=int(function, 16), iommu_group=group, numa_node=0)
        existing = {name: fakelibvirt.FakeMdevDevice(dev_name=name, type_id="", parent="")
                    for name in mdevs}
        super().__init__("qemu:///system", pci_info=pci,
                         mdev_info=fakelibvirt.HostMdevDevicesInfo(devices=existing))
        self.created: list[MdevCreate] = []
        self.defined: list[str] = []
        self.lookups: list[str] = []

    def nodeDeviceLookupByName(self, name: str) -> Any:  # noqa: N802 - libvirt's name
        self.lookups.append(name)
        if name.startswith("mdev") and name not in self.mdev_info.devices:
            raise fakelibvirt.make_libvirtError(
                fakelibvirt.libvirtError, f"Node device not found: no node device with "
                f"matching name '{name}'", error_code=fakelibvirt.VIR_ERR_NO_NODE_DEVICE,
                error_domain=fakelibvirt.VIR_FROM_NODEDEV)
        return super().nodeDeviceLookupByName(name)

    def _mdev(self, xml: str) -> MdevCreate:
        root = etree.fromstring(xml)
        mdev_type = root.find("capability[@type='mdev']/type")
        return MdevCreate(parent=root.findtext("parent") or "",
                          type=mdev_type.get("id", "") if mdev_type is not None else "",
                          uuid=root.findtext("capability[@type='mdev']/uuid") or "",
                          xml=xml)

    def _name(self, mdev: MdevCreate) -> str:
        # libvirt (>= 7.8) names an mdev node device mdev_<uuid>_<parent's address>.
        return f"mdev_{mdev.uuid.replace('-', '_')}_{mdev.parent.removeprefix('pci_')}"

    def nodeDeviceCreateXML(self, xml: str, flags: int = 0) -> Any:  # noqa: N802
        mdev = self._mdev(xml)
        self.created.append(mdev)
        if not self._any_parent and mdev.parent not in self.pci_info.devices:
            raise fakelibvirt.make_libvirtError(
                fakelibvirt.libvirtError, f"could not find parent device '{mdev.parent}'",
                error_code=fakelibvirt.VIR_ERR_NO_NODE_DEVICE,
                error_domain=fakelibvirt.VIR_FROM_NODEDEV)
        name = self._name(mdev)
        self.mdev_info.devices[name] = fakelibvirt.FakeMdevDevice(
            dev_name=name, type_id=mdev.type, parent=mdev.parent)
        return _DefinedMdev(name)

    def nodeDeviceDefineXML(self, xml: str, flags: int = 0) -> Any:  # noqa: N802
        name = self._name(self._mdev(xml))
        self.defined.append(name)
        return _DefinedMdev(name)


class _Records(logging.Handler):
    """Keeps the log records Nova's libvirt driver emits."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class NovaLibvirt(fixtures.Fixture):
    """Nova's libvirt driver on Nova's fake libvirt, with Nova's CONF isolated.

    Set up: oslo.config's ``Config`` fixture on Nova's ``CONF`` (overrides and parse state
    are reset on cleanup), ``CONF`` parsed with no arguments and no config files,
    ``instances_path`` in a temporary directory, Nova's dynamic ``[neutron_*]`` and
    ``[mdev_*]`` option groups, ``objects.register_all()``, Nova's ``LibvirtFixture``
    (which patches ``nova.virt.libvirt.{driver,host,guest,migration}.libvirt`` with the
    fake and stubs sysfs/privsep calls), and a capture of the driver's log records.

    :param host: the fake host the driver talks to (:class:`FakeHost` by default).
    :param conf: Nova options to override, as ``{group: {option: value}}`` (``DEFAULT``
        for the default group), e.g. ``{"libvirt": {"virt_type": "qemu"}}``.
    """

    def __init__(self, host: FakeHost | None = None,
                 conf: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        self.host = host if host is not None else FakeHost()
        self._conf = conf or {}

    def _setUp(self) -> None:
        from nova.conf import devices, neutron

        config = self.useFixture(config_fixture.Config(CONF))
        CONF([], project="nova", default_config_files=[], default_config_dirs=[])
        neutron.register_dynamic_opts(CONF)
        devices.register_dynamic_opts(CONF)
        config.config(instances_path=self.useFixture(fixtures.TempDir()).path)
        for group, values in self._conf.items():
            config.config(group=None if group == "DEFAULT" else group, **values)
        objects.register_all()
        self.useFixture(fakelibvirt.LibvirtFixture())
        self.log = _Records()
        self.useFixture(fixtures.LogHandler(self.log, name=_DRIVER_LOGGER,
                                            level=logging.INFO, nuke_handlers=False))
        self.driver = libvirt_driver.LibvirtDriver(fake_virt.FakeVirtAPI(), False)
        self.driver._host.get_connection = lambda: self.host

    def instance(self, instance_uuid: str | None = None) -> objects.Instance:
        """A minimal ``Instance`` (2 vCPUs, 2 GiB, no disks) for Nova's guest config."""
        flavor = objects.Flavor(id=1, flavorid="1", name="accel", memory_mb=2048, vcpus=2,
                                root_gb=0, ephemeral_gb=0, swap=0, rxtx_factor=1.0,
                                vcpu_weight=None, extra_specs={})
        return objects.Instance(
            id=1, uuid=instance_uuid or str(uuidlib.uuid4()), display_name="acceld-harness",
            project_id="project", user_id="user", image_ref="", host="compute", node="compute",
            flavor=flavor, root_gb=0, ephemeral_gb=0, system_metadata={}, numa_topology=None,
            pci_devices=objects.PciDeviceList(), vcpu_model=None, os_type="linux", vm_mode=None,
            kernel_id=None, ramdisk_id=None, config_drive=None, ephemeral_key_uuid=None,
            trusted_certs=None, resources=None, migration_context=None, info_cache=None)

    def spawn_xml(self, arqs: Sequence[ARQ], network_info: Sequence[network_model.VIF] = (),
                  instance: objects.Instance | None = None) -> tuple[str, list[str]]:
        """What ``LibvirtDriver.spawn`` does with ``accel_info``, up to the domain XML.

        Calls ``_allocate_cyborg_mdevs(arqs)`` (when ``arqs`` is not empty, as ``spawn``
        does) and then ``_get_guest_xml(..., mdevs=..., accel_info=arqs)``.

        :returns: the domain XML and the mdev UUIDs ``_allocate_cyborg_mdevs`` returned.
        """
        accel_info = [dict(arq) for arq in arqs]
        mdevs = self.driver._allocate_cyborg_mdevs(accel_info) if accel_info else []
        xml = self.driver._get_guest_xml(
            None, instance or self.instance(), network_model.NetworkInfo(network_info),
            {"mapping": {}}, objects.ImageMeta.from_dict({"disk_format": "raw"}),
            mdevs=list(mdevs), accel_info=accel_info)
        return xml, list(mdevs)

    def messages(self) -> list[str]:
        """The driver's log messages so far (INFO and above), formatted."""
        return [record.getMessage() for record in self.log.records]

    def ignored_types(self) -> set[str]:
        """Attach handle types ``_get_guest_config`` logged as ignored."""
        ignored: set[str] = set()
        for record in self.log.records:
            if str(record.msg).startswith(_IGNORED_ARQS_MESSAGE) and record.args:
                ignored |= set(record.args[-1])
        return ignored


@dataclass
class Device:
    """One device element Nova put in the guest's ``<devices>``."""

    kind: str
    """``pci`` (``<hostdev type="pci">``), ``mdev`` (``<hostdev type="mdev">``) or
    ``interface`` (``<interface type="hostdev">``)."""
    element: etree._Element
    schema_errors: list[str]
    """libvirt's RelaxNG errors for this element alone (in a minimal domain)."""

    @property
    def attrib(self) -> dict[str, str]:
        """The element's own attributes (``mode``, ``type``, ``managed``, ``model``)."""
        return dict(self.element.attrib)

    @property
    def address(self) -> dict[str, str]:
        """The attributes of ``<source><address>`` (PCI address or mdev ``uuid``)."""
        found = self.element.find("source/address")
        return dict(found.attrib) if found is not None else {}


@dataclass
class GuestDevices:
    """What Nova built for a guest from a list of ARQs (see :func:`guest_devices`)."""

    xml: str
    """The whole domain XML ``_get_guest_xml`` returned."""
    devices: list[Device]
    """Host devices in document order: ``<hostdev>`` and ``<interface type="hostdev">``."""
    mdev_uuids: list[str]
    """What ``_allocate_cyborg_mdevs`` returned (the ``mdevs`` ``spawn`` passes on)."""
    mdevs_created: list[MdevCreate]
    mdevs_defined: list[str]
    """Node device names Nova defined persistently (``nodeDeviceDefineXML``)."""
    lookups: list[str]
    """Node device names Nova looked up (``nodeDeviceLookupByName``)."""
    ignored_types: set[str]
    messages: list[str] = field(default_factory=list)


def guest_devices(arqs: Sequence[ARQ], *, gpus: Iterable[str] | None = None,
                  existing_mdevs: Iterable[str] = (),
                  network_info: Sequence[network_model.VIF] = (),
                  conf: Mapping[str, Mapping[str, Any]] | None = None) -> GuestDevices:
    """Give ``arqs`` to Nova's libvirt driver as ``accel_info`` and report what it built.

    Runs ``_allocate_cyborg_mdevs`` and ``_get_guest_xml`` (see :meth:`NovaLibvirt.spawn_xml`)
    on a fresh :class:`NovaLibvirt` / :class:`FakeHost`. Whatever Nova raises (``KeyError``
    for a missing ``attach_handle_info`` key, ``libvirtError`` from the fake host) is
    raised unchanged.

    :param arqs: ARQ dicts as acceld returns them (``GET /v2/accelerator_requests``).
    :param gpus: mdev-capable PCI addresses on the host (see :class:`FakeHost`).
    :param existing_mdevs: node device names of mdevs that already exist.
    :param network_info: VIFs for the guest, e.g. from :func:`port_vif`.
    :param conf: Nova option overrides (see :class:`NovaLibvirt`).
    """
    host = FakeHost(gpus=gpus, mdevs=existing_mdevs)
    with NovaLibvirt(host=host, conf=conf) as nova:
        xml, mdev_uuids = nova.spawn_xml(arqs, network_info)
        messages, ignored = nova.messages(), nova.ignored_types()
    domain = etree.fromstring(xml.encode())
    rng = find_domain_schema()
    if rng is None:
        raise FileNotFoundError("libvirt's domain.rng (see find_domain_schema)")
    devices = []
    for element in domain.iterfind("devices/*"):
        kind = element.get("type") if element.tag == "hostdev" else None
        if element.tag == "interface" and element.get("type") == "hostdev":
            kind = "interface"
        if kind:
            devices.append(Device(kind, element, device_schema_errors(element, rng)))
    return GuestDevices(
        xml=xml, devices=devices, mdev_uuids=mdev_uuids,
        mdevs_created=list(host.created), mdevs_defined=list(host.defined),
        lookups=list(host.lookups), ignored_types=ignored, messages=messages)


def port_binding_profile(arq: ARQ, *, profile: Mapping[str, Any] | None = None
                         ) -> dict[str, Any]:
    """The ``binding:profile`` Nova sends Neutron for a port whose device is ``arq``.

    Runs ``nova.network.neutron.API._populate_neutron_binding_profile`` with
    ``port_arq=arq`` (and no PCI request, as for a port with a device profile), which
    updates the port's existing profile (``profile``) with
    ``nova.accelerator.cyborg.get_arq_pci_device_profile(arq)``: ``physical_network``,
    ``pci_slot`` (``domain:bus:device.function``) and ``arq_uuid``. Raises what Nova
    raises (``KeyError`` for a missing key).
    """
    body: dict[str, Any] = {"port": {}}
    if profile is not None:
        body["port"][neutron_api.constants.BINDING_PROFILE] = dict(profile)
    with NovaLibvirt():
        neutron_api.API()._populate_neutron_binding_profile(None, None, body, dict(arq))
    return body["port"][neutron_api.constants.BINDING_PROFILE]


def port_vif(arq: ARQ, *, vnic_type: str = network_model.VNIC_TYPE_ACCELERATOR_DIRECT,
             vif_type: str | None = None, vlan: str | None = None,
             address: str = "fa:16:3e:00:00:01", port_id: str | None = None
             ) -> network_model.VIF:
    """A Nova ``VIF`` for a bound accelerator port, to pass to :func:`guest_devices`.

    The profile is :func:`port_binding_profile` (Nova's). What Neutron adds is the
    caller's: ``vif_type`` defaults to the SR-IOV mechanism driver's choice for the vnic
    type (``hw_veb`` for ``accelerator-direct``, ``hostdev_physical`` for
    ``accelerator-direct-physical``) and ``vlan`` goes into ``binding:vif_details``.
    """
    profile = port_binding_profile(arq)
    if vif_type is None:
        vif_type = (network_model.VIF_TYPE_HOSTDEV
                    if vnic_type == network_model.VNIC_TYPE_ACCELERATOR_DIRECT_PHYSICAL
                    else network_model.VIF_TYPE_HW_VEB)
    network = network_model.Network(
        id=str(uuidlib.uuid4()), label="accel-net", subnets=[],
        meta={"physical_network": profile.get("physical_network")})
    return network_model.VIF(
        id=port_id or str(uuidlib.uuid4()), address=address, network=network, type=vif_type,
        vnic_type=vnic_type, profile=profile,
        details={network_model.VIF_DETAILS_VLAN: vlan})


