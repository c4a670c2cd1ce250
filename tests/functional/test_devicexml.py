"""acceld's own device XML (``acceld.virt.devicexml``) is what libvirt accepts: every
handle type a guest takes validates against libvirt's domain.rng, carries the ARQ's
alias, and says the same device as the handle; everything else is refused by name."""

from __future__ import annotations

import uuid

import pytest
from lxml import etree

from acceld.agent.drivers.base import pci_handle
from acceld.virt import devicexml
from tests.libvirt_schema import device_schema_errors, find_domain_schema, require_domain_schema

ARQ = "0f8c6a2e-6a43-4d0e-9a53-1f6b1c2d3e4f"
MDEV = "c2b4a3f0-1e5d-4c6b-8a7f-9e0d1c2b3a4f"


@pytest.fixture(scope="module")
def rng():
    """libvirt's schema when there is one; the shape checks run without it too."""
    return find_domain_schema()


def test_libvirt_schema_is_there():
    require_domain_schema()         # skips with how to get it (under CI=true: fails)


def _valid(xml: str, rng) -> etree._Element:
    element = etree.fromstring(xml)
    if rng is not None:
        assert device_schema_errors(element, rng) == [], xml
    return element


@pytest.mark.parametrize("handle", [
    pci_handle("0000:3b:00.0"),                                  # a whole GPU, an FPGA
    pci_handle("0000:af:02.7", physical_network="physnet1"),     # a NIC VF
    pci_handle("ffffffff:ff:1f.7"),                              # the top of each field
])
def test_pci_handles_are_managed_pci_hostdevs(handle, rng):
    dev = _valid(devicexml.device_xml(ARQ, handle["attach_type"], handle["attach_info"]),
                 rng)
    assert (dev.tag, dev.get("mode"), dev.get("type"), dev.get("managed")) == (
        "hostdev", "subsystem", "pci", "yes")
    address = dev.find("source/address")
    info = handle["attach_info"]
    assert [int(address.get(k), 16) for k in ("domain", "bus", "slot", "function")] == [
        int(info[k], 16) for k in ("domain", "bus", "device", "function")]
    assert dev.find("alias").get("name") == f"ua-acceld-{ARQ}"


def test_mdev_handles_are_vfio_mdev_hostdevs(rng):
    info = {"domain": "0000", "bus": "41", "device": "00", "function": "4",
            "asked_type": "nvidia-558", "vgpu_mark": "nvidia-558_0"}
    dev = _valid(devicexml.device_xml(ARQ, "MDEV", info, attach_handle_uuid=MDEV), rng)
    assert (dev.get("type"), dev.get("model"), dev.get("managed")) == (
        "mdev", "vfio-pci", "no")
    assert dev.find("source/address").get("uuid") == MDEV
    assert devicexml.arq_of(dev.find("alias").get("name")) == ARQ


def test_the_alias_names_the_arq_and_only_acceld_aliases_name_one():
    assert devicexml.arq_of(devicexml.alias(ARQ.upper())) == ARQ
    for other in ("hostdev0", "ua-acceld-", "ua-acceld-not-a-uuid", f"ua-other-{ARQ}",
                  ARQ, "ua-acceld-" + ARQ.replace("-", ""), f"ua-acceld-{ARQ.upper()}"):
        assert devicexml.arq_of(other) is None
    with pytest.raises(ValueError):
        devicexml.alias("not-a-uuid")


@pytest.mark.parametrize(("attach_type", "info", "handle_uuid", "says"), [
    ("MIG", {"parent": "0000:3b:00.0", "mig_uuid": str(uuid.uuid4())}, None,
     "cannot be attached to a guest"),
    ("TEST_PCI", {"domain": "0000", "bus": "3b", "device": "00", "function": "0"}, None,
     "cannot be attached to a guest"),
    ("PCI", {"domain": "0000", "bus": "3b", "device": "00"}, None, "not a PCI attach_info"),
    ("PCI", {"domain": "0000", "bus": "3b", "device": "20", "function": "0"}, None,
     "out of range"),
    ("PCI", {"domain": "0000", "bus": "-1", "device": "00", "function": "0"}, None,
     "out of range"),
    ("PCI", {"domain": "0000", "bus": "3b'/><x a='", "device": "00", "function": "0"},
     None, "invalid literal"),
    ("MDEV", {"domain": "0000", "bus": "41", "device": "00", "function": "4"}, None,
     "needs its mdev's UUID"),
    ("MDEV", {}, "'/><evil/>", "needs its mdev's UUID"),
])
def test_what_no_guest_takes_is_refused_by_name(attach_type, info, handle_uuid, says):
    with pytest.raises(ValueError, match=says):
        devicexml.device_xml(ARQ, attach_type, info, attach_handle_uuid=handle_uuid)
