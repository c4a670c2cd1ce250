"""The fake hypervisor behaves as the Hypervisor seam says (in memory), and
``[hypervisor] driver`` picks it only where it should."""

from __future__ import annotations

import threading

import pytest

from acceld import exception, virt
from acceld.conf import hypervisor as hv_conf
from acceld.hw import pci
from acceld.virt import devicexml
from acceld.virt.fake import FakeHypervisor, parse_instances
from acceld.virt.hypervisor import ABSENT, PENDING, REMOVED
from tests import helpers

VM1 = "6f1c1a52-3f0e-4a53-9a0f-2d7f0c1b1e01"
VM2 = "6f1c1a52-3f0e-4a53-9a0f-2d7f0c1b1e02"
ARQ1 = "0f8c6a2e-6a43-4d0e-9a53-1f6b1c2d3e41"
ARQ2 = "0f8c6a2e-6a43-4d0e-9a53-1f6b1c2d3e42"


def _pci(arq: str, address: str = "0000:3b:00.0") -> str:
    return devicexml.device_xml(arq, "PCI", pci.to_attach_info(address))


@pytest.fixture
def hv() -> FakeHypervisor:
    return FakeHypervisor([(VM1, "vm-1"), (VM2, "vm-2")])


def test_guests_are_listed_running_without_devices(hv):
    assert [(g.uuid, g.name, g.running, g.aliases) for g in hv.guests()] == [
        (VM1, "vm-1", True, ()), (VM2, "vm-2", True, ())]
    assert hv.guest(VM2.upper()).name == "vm-2"        # any spelling of the UUID


def test_attach_records_the_alias_once_and_detach_removes_it(hv):
    hv.attach(VM1, _pci(ARQ1))
    hv.attach(VM1, _pci(ARQ1))                           # a re-send: no change
    assert hv.guest(VM1).aliases == (devicexml.alias(ARQ1),)
    assert hv.guest(VM2).aliases == ()
    assert hv.detach(VM1, devicexml.alias(ARQ1), timeout=0) == REMOVED
    assert hv.guest(VM1).aliases == ()
    assert hv.detach(VM1, devicexml.alias(ARQ1), timeout=0) == ABSENT


def test_a_guest_ignoring_unplug_keeps_the_device_until_it_answers(hv):
    hv.attach(VM2, _pci(ARQ1))
    hv.set_ignores_unplug(VM2)
    assert hv.detach(VM2, devicexml.alias(ARQ1), timeout=0.1) == PENDING
    assert hv.guest(VM2).aliases == (devicexml.alias(ARQ1),)
    hv.set_ignores_unplug(VM2, False)
    assert hv.detach(VM2, devicexml.alias(ARQ1), timeout=0.1) == REMOVED


def test_ignore_unplug_from_the_constructor():
    hv = FakeHypervisor([(VM1, "vm-1")], ignore_unplug=[VM1])
    hv.attach(VM1, _pci(ARQ1))
    assert hv.detach(VM1, devicexml.alias(ARQ1), timeout=0) == PENDING


@pytest.mark.parametrize("uuid", ["6f1c1a52-3f0e-4a53-9a0f-2d7f0c1b1eff", "not-a-uuid"])
def test_unknown_guest_is_guest_not_found(hv, uuid):
    for call in (lambda: hv.guest(uuid), lambda: hv.attach(uuid, _pci(ARQ1)),
                 lambda: hv.detach(uuid, devicexml.alias(ARQ1), 0),
                 lambda: hv.set_ignores_unplug(uuid)):
        with pytest.raises(exception.GuestNotFound):
            call()


@pytest.mark.parametrize("xml", [
    "<hostdev",                                                  # does not parse
    '<disk type="file"><alias name="ua-acceld-0f8c6a2e-6a43-4d0e-9a53-1f6b1c2d3e41"/>'
    '<source file="/x"/></disk>',                                # not a hostdev
    _pci(ARQ1).replace("ua-acceld-", "ua-other-"),               # not acceld's alias
    '<hostdev mode="subsystem" type="pci"><alias '
    'name="ua-acceld-0f8c6a2e-6a43-4d0e-9a53-1f6b1c2d3e41"/></hostdev>',   # no source
])
def test_what_is_not_an_acceld_hostdev_is_refused(hv, xml):
    with pytest.raises(exception.HypervisorError):
        hv.attach(VM1, xml)
    assert hv.guest(VM1).aliases == ()


def test_one_host_device_goes_to_one_guest_and_one_alias(hv):
    hv.attach(VM1, _pci(ARQ1))
    with pytest.raises(exception.HypervisorError, match="conflicts"):
        hv.attach(VM2, _pci(ARQ2))                        # the same device elsewhere
    with pytest.raises(exception.HypervisorError, match="conflicts"):
        hv.attach(VM1, _pci(ARQ1, "0000:3c:00.0"))        # the alias with another device
    hv.attach(VM2, _pci(ARQ2, "0000:3c:00.0"))
    assert hv.guest(VM2).aliases == (devicexml.alias(ARQ2),)


def test_concurrent_attaches_each_land_once(hv):
    arqs = [f"0f8c6a2e-6a43-4d0e-9a53-1f6b1c2d{n:04x}" for n in range(32)]
    threads = [threading.Thread(target=hv.attach, args=(VM1, _pci(arq, f"0000:{n:02x}:00.0")))
               for n, arq in enumerate(arqs) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(hv.guest(VM1).aliases) == sorted(devicexml.alias(a) for a in arqs)


def test_fake_instances_parse_and_refuse_malformed_entries():
    assert parse_instances([f"{VM1.upper()}:a", f" {VM2} : b "]) == [(VM1, "a"), (VM2, "b")]
    for bad in (["nope:x"], [f"{VM1}:"], [VM1]):
        with pytest.raises(ValueError):
            parse_instances(bad)


def test_driver_defaults_to_fake_only_all_in_one_with_fake_devices():
    assert virt.driver_name(helpers.make_conf()) == hv_conf.FAKE
    assert virt.driver_name(helpers.make_conf(
        DEFAULT={"transport_url": "rabbit://guest:guest@127.0.0.1:5672/"})) == hv_conf.NONE
    assert virt.driver_name(helpers.make_conf(
        agent={"enabled_drivers": ["fake", "generic"]})) == hv_conf.NONE
    assert virt.driver_name(helpers.make_conf(
        DEFAULT={"transport_url": "rabbit://guest:guest@127.0.0.1:5672/"},
        hypervisor={"driver": "fake"})) == hv_conf.FAKE
    assert virt.driver_name(helpers.make_conf(hypervisor={"driver": "none"})) == hv_conf.NONE


def test_load_builds_the_demo_guests_or_nothing():
    hv = virt.load(helpers.make_conf())
    assert [g.name for g in hv.guests()] == ["demo-1", "demo-2", "demo-3"]
    assert len({g.uuid for g in hv.guests()}) == 3
    assert virt.load(helpers.make_conf(hypervisor={"driver": "none"})) is None
    one = virt.load(helpers.make_conf(hypervisor={"fake_instances": [f"{VM1}:solo"]}))
    assert [(g.uuid, g.name) for g in one.guests()] == [(VM1, "solo")]


def test_a_driver_outside_the_choices_is_refused():
    with pytest.raises(ValueError):
        helpers.make_conf(hypervisor={"driver": "xen"})
