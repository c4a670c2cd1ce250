"""What acceld.virt.libvirt_driver does without libvirt-python (its libvirt behaviour is
tested against a real libvirtd in tests/integration/test_libvirt_hotplug.py)."""

from __future__ import annotations

import pytest

from acceld import exception
from acceld.virt import libvirt_driver


def test_without_the_bindings_it_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(libvirt_driver, "libvirt", None)
    with pytest.raises(exception.HypervisorError, match=r"acceld\[libvirt\]"):
        libvirt_driver.LibvirtHypervisor("qemu:///system")
