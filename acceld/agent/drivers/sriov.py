"""The SR-IOV driver: physical functions whose virtual functions are the accelerators
(NICs tagged with a physical network, QAT, NVMe), from ``[sriov_driver] pf_spec``.

It shares discovery, install and vfio binding with the generic driver
(:mod:`acceld.agent.drivers.pcidev`); what differs is that only SR-IOV capable PFs are
taken, the attach handles are always the VFs (never the PF, which keeps its driver to
manage them), NIC VFs carry the spec's ``physical_network`` in their attach_info, and
VFs stay on their own driver unless the spec asks for ``vfio``. QAT PFs also report
``qat/cfg_services`` as their services and ``qat/state`` in explain() and health().
See ``docs/drivers/sriov.md``.
"""

from __future__ import annotations

from acceld.agent.drivers.pcidev import PciDriverBase


class SriovDriver(PciDriverBase):
    name = "sriov"
    version = "1.0.0"
    conf_group = "sriov_driver"
    spec_option = "pf_spec"
    default_vfio = False
    requires_sriov = True
    pf_handle = False
