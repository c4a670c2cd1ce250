"""libvirt's own RelaxNG schema (``domain.rng``) for checking device XML in tests.

Found in ``$ACCELD_LIBVIRT_SCHEMAS``, the system's copy, or Debian's ``libvirt0`` package
unpacked into a cache directory (``apt-get download`` and ``dpkg -x``: no root, nothing
installed). Used for the devices Nova builds from acceld's attach handles
(tests/nova_libvirt.py) and for the ones acceld builds itself (``acceld.virt.devicexml``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import pytest
from lxml import etree

from tests.conftest import IN_CI

#: Where distributions install libvirt's schemas (Debian/Ubuntu: package ``libvirt0``,
#: pulled in by ``libvirt-daemon`` and ``libvirt-clients``; Fedora/RHEL: ``libvirt-libs``).
SYSTEM_SCHEMA_DIR = Path("/usr/share/libvirt/schemas")
#: Environment variable naming another directory holding ``domain.rng`` and its includes.
SCHEMA_DIR_ENV = "ACCELD_LIBVIRT_SCHEMAS"
#: Where Debian's ``libvirt0`` package is unpacked when the host has no schemas.
PACKAGE_DIR = (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "acceld"
               / "libvirt0")
_DEVICE_SKELETON = (
    '<domain type="kvm"><name>device-check</name><memory>1048576</memory>'
    "<os><type>hvm</type></os><devices/></domain>"
)


def find_domain_schema() -> Path | None:
    """libvirt's ``domain.rng``: from ``$ACCELD_LIBVIRT_SCHEMAS``, the system's copy, or
    Debian's ``libvirt0`` package unpacked into :data:`PACKAGE_DIR` (fetched once, where
    ``apt-get`` and ``dpkg`` are); None when there is none of them."""
    unpacked = PACKAGE_DIR / "usr" / "share" / "libvirt" / "schemas"
    for directory in (os.environ.get(SCHEMA_DIR_ENV), SYSTEM_SCHEMA_DIR, unpacked):
        if directory and (Path(directory) / "domain.rng").is_file():
            return Path(directory) / "domain.rng"
    if _unpack_libvirt0() and (unpacked / "domain.rng").is_file():
        return unpacked / "domain.rng"
    return None


def require_domain_schema() -> Path:
    """:func:`find_domain_schema`, or skip saying how to get one (under CI=true: fail)."""
    schema = find_domain_schema()
    if schema is None:
        message = ("no libvirt domain.rng: install libvirt0, set $ACCELD_LIBVIRT_SCHEMAS, "
                   "or let apt-get download libvirt0")
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return schema


@cache
def _unpack_libvirt0() -> bool:
    """Unpack Debian's ``libvirt0`` into :data:`PACKAGE_DIR`; whether it worked."""
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        return False
    PACKAGE_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PACKAGE_DIR.parent) as tmp:
        try:
            got = subprocess.run(["apt-get", "download", "libvirt0"], cwd=tmp, timeout=300,
                                 capture_output=True, check=False)
            debs = sorted(Path(tmp).glob("libvirt0_*.deb"))
            if got.returncode != 0 or not debs:
                return False
            subprocess.run(["dpkg", "-x", str(debs[0]), f"{tmp}/root"], check=True,
                           timeout=120, capture_output=True)
        except (subprocess.SubprocessError, OSError):  # no schema: the callers say so
            return False
        with contextlib.suppress(OSError):     # another worker may have unpacked it first
            os.rename(f"{tmp}/root", PACKAGE_DIR)
    return True


@cache
def _relaxng(path: str) -> etree.RelaxNG:
    return etree.RelaxNG(etree.parse(path))


def device_schema_errors(device: etree._Element, schema: Path) -> list[str]:
    """libvirt's RelaxNG errors of one device element, inside a minimal valid domain
    (libxml2 reports an invalid device at its ancestors: alone, it is the one at fault)."""
    skeleton = etree.fromstring(_DEVICE_SKELETON)
    skeleton.find("devices").append(etree.fromstring(etree.tostring(device)))
    validator = _relaxng(str(schema))
    if validator.validate(skeleton):
        return []
    return [f"line {error.line}: {error.message}" for error in validator.error_log]
