"""What acceld says to a hypervisor: the device XML of an attach handle and the live
attach/detach of it. :func:`load` builds the agent's hypervisor from ``[hypervisor]``."""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import hypervisor as hv_conf
from acceld.virt.hypervisor import Hypervisor


def driver_name(conf: cfg.ConfigOpts) -> str:
    """``[hypervisor] driver``, or when unset ``fake`` for the all-in-one service with
    only fake devices (in-process bus) and ``none`` otherwise."""
    if conf.hypervisor.driver:
        return conf.hypervisor.driver
    drivers = set(conf.agent.enabled_drivers)
    all_in_one_fake = not conf.transport_url and drivers and drivers <= {"fake"}
    return hv_conf.FAKE if all_in_one_fake else hv_conf.NONE


def load(conf: cfg.ConfigOpts) -> Hypervisor | None:
    """The configured hypervisor; None for ``none``."""
    name = driver_name(conf)
    if name == hv_conf.FAKE:
        from acceld.virt import fake

        return fake.FakeHypervisor(fake.parse_instances(conf.hypervisor.fake_instances),
                                   ignore_unplug=conf.hypervisor.fake_ignore_unplug)
    if name == hv_conf.LIBVIRT:
        from acceld.virt import libvirt_driver

        return libvirt_driver.LibvirtHypervisor(conf.hypervisor.connection_uri)
    return None
