"""The generic driver: any PCI device an operator describes with ``[generic_driver]
device_spec``; the reference implementation of the driver protocol.

Hardware agnostic by design: it knows only the PCI kernel ABI (sysfs), so it works for
a GPU given whole to guests, an FPGA card, a QAT or NIC PF with VFs, or anything else
vfio-pci can pass through. Each matched PF is one device with one deployable; its attach
handles are its VFs when it has (or is configured to get) VFs, else the PF itself.
Devices are grouped by the spec's ``backend`` name, which is reported as a deployable
attribute together with ``services``, so a host may run one backend or several.

``install`` binds the handles to vfio-pci (and creates ``num_vfs`` VFs first), keeping
the original drivers in the state file so that ``uninstall`` restores them; ``prepare``
and ``release`` move single handles. See ``docs/drivers/generic.md``.
"""

from __future__ import annotations

from acceld.agent.drivers.pcidev import PciDriverBase


class GenericDriver(PciDriverBase):
    name = "generic"
    version = "1.0.0"
    conf_group = "generic_driver"
    spec_option = "device_spec"
    default_vfio = True
    requires_sriov = False
    pf_handle = True

    def backends(self) -> dict[str, dict[str, list[str]]]:
        """What the last discovery found, per backend: ``{backend: {"devices": [...],
        "services": [...]}}`` (devices without a backend are under ``"default"``). The
        same facts are in each deployable's ``backend``/``services`` attributes; this is
        the per-backend view of them."""
        out: dict[str, dict[str, list[str]]] = {}
        for identity, match in sorted(self._known.items()):
            entry = out.setdefault(match.spec.backend or "default",
                                   {"devices": [], "services": []})
            entry["devices"].append(identity)
            for service in (self.services(match) or "").split(";"):
                if service.strip() and service.strip() not in entry["services"]:
                    entry["services"].append(service.strip())
        return out
