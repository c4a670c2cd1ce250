"""The generic driver: any PCI device an operator describes with ``[generic_driver]
device_spec``, knowing only the PCI kernel ABI (sysfs); the reference implementation of
the driver protocol. See ``docs/drivers/generic.md``.
"""

from __future__ import annotations

from oslo_config import cfg

from acceld.agent.drivers.pcidev import PciDriverBase

OPTS: list[cfg.Opt] = [
    cfg.MultiStrOpt(
        "device_spec", default=[],
        help="Which PCI devices the generic driver reports, one JSON object per value "
             "(repeat the option for more). Selectors (at least one): vendor_id and "
             "product_id (4 hex digits, e.g. \"8086\"), class (a hex prefix of the PCI "
             "class, e.g. \"0x0300\" or \"0x12\"), address (a glob such as "
             "\"0000:3b:*.*\" or \"3b:00.*\"). What to report: device_type (GPU, FPGA, "
             "AICHIP, QAT, NIC, SSD, CRYPTO, OTHER; guessed from the class when absent), "
             "resource_class, traits (list), backend (a name grouping devices, for "
             "multi-backend setups), services (free text, e.g. \"sym;asym\"), "
             "physical_network, num_vfs (install creates this many VFs and reports them "
             "as attach handles), vfio (default true: install binds the handles to "
             "vfio-pci) and count (how many devices the spec should find, shown by "
             "explain). Each value is validated when the driver loads."),
    cfg.ListOpt(
        "protected_drivers", default=["pcieport"],
        help="Devices bound to one of these kernel drivers are never reported or rebound "
             "by the generic driver, even when a device_spec matches them."),
]


class GenericDriver(PciDriverBase):
    name = "generic"
    version = "1.0.0"
    conf_group = "generic_driver"
    conf_opts = OPTS
    spec_option = "device_spec"

    def backends(self) -> dict[str, dict[str, list[str]]]:
        """The last discovery per backend (``"default"`` for none): its devices and services."""
        out: dict[str, dict[str, list[str]]] = {}
        for identity, match in sorted(self._known.items()):
            entry = out.setdefault(match.spec.backend or "default",
                                   {"devices": [], "services": []})
            entry["devices"].append(identity)
            for service in map(str.strip, (self.services(match) or "").split(";")):
                if service and service not in entry["services"]:
                    entry["services"].append(service)
        return out
