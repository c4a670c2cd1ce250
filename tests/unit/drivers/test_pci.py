"""PCI address parsing, normalisation, attach_info conversion and glob matching."""

from __future__ import annotations

import pytest

from acceld.hw import pci
from tests.fakes.kernel import vf_address


@pytest.mark.parametrize("text", ["00000000:3B:00.0", "0000:3b:00.0", "3b:00.0", "3B:0.0",
                                  " 0000:3b:00.0\n"])
def test_every_spelling_normalises_to_sysfs_form(text):
    assert pci.normalize(text) == "0000:3b:00.0"


def test_fields_and_ordering():
    a = pci.parse("0001:af:1f.7")
    assert (a.domain, a.bus, a.device, a.function) == (1, 0xAF, 0x1F, 7)
    assert str(a) == "0001:af:1f.7"
    assert pci.parse("0000:3b:00.1") < pci.parse("0000:3b:00.2") < pci.parse("0000:3c:00.0")
    assert pci.parse("00000000:3B:00.0") == pci.parse("3b:00.0")


@pytest.mark.parametrize("bad", ["", "3b:00", "3b:00.8", "0000:3b:20.0", "zz:00.0",
                                 "0000:3b:00.0:1", "3b:*.0", "0000:100:00.0", None])
def test_bad_addresses_raise(bad):
    with pytest.raises(ValueError):
        pci.parse(bad)
    assert pci.is_address(bad) is False


def test_attach_info_round_trip():
    info = pci.to_attach_info("00000000:3B:00.1")
    assert info == {"domain": "0000", "bus": "3b", "device": "00", "function": "1"}
    assert str(pci.from_attach_info({**info, "physical_network": "physnet1"})) == \
        "0000:3b:00.1"
    # the fake driver's spelling (short function, upper case) reads the same
    assert str(pci.from_attach_info({"domain": "0", "bus": "3B", "device": "0",
                                     "function": "2"})) == "0000:3b:00.2"


@pytest.mark.parametrize("info", [{}, {"domain": "0000", "bus": "3b", "device": "00"},
                                  {"domain": "0000", "bus": "xx", "device": "00",
                                   "function": "0"}])
def test_bad_attach_info_raises(info):
    with pytest.raises(ValueError):
        pci.from_attach_info(info)


def test_the_fake_kernel_places_vfs_by_routing_id():
    assert str(vf_address(pci.parse("0000:00:02.0"), 1)) == "0000:00:02.1"
    # crossing a device boundary: 3b:00.7 + 1 -> 3b:01.0
    assert str(vf_address(pci.parse("0000:3b:00.7"), 1)) == "0000:3b:01.0"


@pytest.mark.parametrize("spec,address,expected", [
    ("*", "0000:3b:00.0", True),
    ("0000:3b:00.0", "00000000:3B:00.0", True),
    ("0000:3b:00.*", "0000:3b:00.5", True),
    ("3b:00.*", "0001:3b:00.1", True),          # no domain: any domain
    ("3B:*.*", "0000:3b:1f.7", True),
    ("*:3b:*.*", "0000:3c:00.0", False),
    ("0000:3b:00.1", "0000:3b:00.0", False),
    ("00.1", "0000:5e:00.1", True),             # slot.function only
    ("0000:3b:0[0-1].*", "0000:3b:01.3", True),
    ("0000:3b:0[0-1].*", "0000:3b:02.0", False),
    ("3b:00", "0000:3b:00.4", True),             # no function: any function
])
def test_glob_matching(spec, address, expected):
    assert pci.matches(spec, address) is expected


@pytest.mark.parametrize("spec", ["0000:3b:00:00:0.0", "zz:00.0", "3b:gg.*"])
def test_bad_specs_raise(spec):
    with pytest.raises(ValueError):
        pci.validate_spec(spec)
    with pytest.raises(ValueError):
        pci.matches(spec, "0000:3b:00.0")
