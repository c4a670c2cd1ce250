"""The libvirt ``<hostdev>`` of an attach handle, the device Nova would put in the guest
at boot (docs/nova.md): ``PCI`` as a managed PCI hostdev (a NIC VF too: with no Neutron
port there is no network to set up), ``MDEV`` as a vfio-pci mdev of the handle's mdev
UUID; other types are refused. Each device carries :func:`alias` of its ARQ, kept in the
live and the persistent definition, so that it can be found again (:func:`arq_of`).
Only validated values go in: the address as hex numbers, the mdev as a UUID."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from acceld import states, uuids
from acceld.hw import pci

ALIAS_PREFIX = "ua-acceld-"


def alias(arq_uuid: str) -> str:
    """The libvirt alias of the device an ARQ attaches."""
    arq = uuids.canonical(arq_uuid)
    if arq is None:
        raise ValueError(f"not an ARQ UUID: {arq_uuid[:40]!r}")
    return ALIAS_PREFIX + arq


def arq_of(device_alias: str) -> str | None:
    """The ARQ a device alias names; None for a device acceld did not attach."""
    arq = device_alias.removeprefix(ALIAS_PREFIX)
    # only the form alias() writes: another spelling of a UUID is not acceld's
    return arq if arq != device_alias and uuids.canonical(arq) == arq else None


def device_xml(arq_uuid: str, attach_type: str, attach_info: Mapping[str, Any],
               attach_handle_uuid: str | None = None) -> str:
    """The ``<hostdev>`` that attaches an ARQ's handle; ValueError naming what is wrong
    for a type no guest takes or a malformed address or mdev UUID."""
    if attach_type == "PCI":
        a = pci.to_attach_info(pci.from_attach_info(dict(attach_info)))   # validated
        dev = ET.Element("hostdev", mode="subsystem", type="pci", managed="yes")
        ET.SubElement(ET.SubElement(dev, "source"), "address", domain="0x" + a["domain"],
                      bus="0x" + a["bus"], slot="0x" + a["device"],
                      function="0x" + a["function"])
    elif attach_type == "MDEV":
        mdev = uuids.canonical(str(attach_handle_uuid))
        if mdev is None:
            raise ValueError(f"an MDEV handle needs its mdev's UUID, not "
                             f"{str(attach_handle_uuid)[:40]!r}")
        dev = ET.Element("hostdev", mode="subsystem", type="mdev", model="vfio-pci",
                         managed="no")
        ET.SubElement(ET.SubElement(dev, "source"), "address", uuid=mdev)
    else:
        raise ValueError(f"attach type {str(attach_type)[:20]!r} cannot be attached to a "
                         f"guest (only {', '.join(sorted(states.GUEST_ATTACH_TYPES))})")
    ET.SubElement(dev, "alias", name=alias(arq_uuid))
    return ET.tostring(dev, encoding="unicode")
