"""The SR-IOV driver: physical functions whose virtual functions are the accelerators
(``[sriov_driver] pf_spec``): the PCI drivers' machinery with SR-IOV required, the VFs
always the handles and vfio off by default. See ``docs/drivers/sriov.md``.
"""

from __future__ import annotations

from oslo_config import cfg

from acceld.agent.drivers.pcidev import PciDriverBase

OPTS: list[cfg.Opt] = [
    cfg.MultiStrOpt(
        "pf_spec", default=[],
        help="Which SR-IOV physical functions the sriov driver manages, one JSON object "
             "per value (repeat the option for more). Selectors (at least one): address "
             "(a glob such as \"0000:3b:00.0\" or \"*:5e:00.*\"), vendor_id and "
             "product_id of the PF (4 hex digits), class (hex prefix). What to report: "
             "device_type (NIC, QAT, SSD, ...), resource_class, traits (list), "
             "physical_network (NIC VFs carry it in their attach_info), backend, "
             "services, num_vfs (install creates this many VFs; absent: keep the VFs "
             "that exist), vfio (default false: true puts the VFs on vfio-pci at install, "
             "with sriov_drivers_autoprobe off) and count (expected number of PFs)."),
    cfg.ListOpt(
        "protected_drivers", default=["pcieport"],
        help="PFs bound to one of these kernel drivers are never reported or touched."),
]


class SriovDriver(PciDriverBase):
    name = "sriov"
    version = "1.0.0"
    conf_group = "sriov_driver"
    conf_opts = OPTS
    spec_option = "pf_spec"
    default_vfio = False
    requires_sriov = True
    pf_handle = False
