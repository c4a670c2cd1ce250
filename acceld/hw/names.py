"""Display names for PCI vendor and device ids, from the pci.ids database (parsed once
per path). Names are for people, never for logic; an unknown id is its own name.
"""

from __future__ import annotations

import functools
import os

from acceld.hw import pci

DEFAULT_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")


@functools.lru_cache(maxsize=8)
def _load(path: str) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """Vendors and devices of one pci.ids file (subsystem and class lines skipped)."""
    vendors: dict[str, str] = {}
    devices: dict[tuple[str, str], str] = {}
    vendor: str | None = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                if line.startswith("C "):  # class section: no more vendors
                    break
                if not line.startswith("\t"):
                    code, _, name = line.rstrip("\n").partition("  ")
                    vendor = code.strip().lower()
                    vendors[vendor] = name.strip()
                elif not line.startswith("\t\t") and vendor is not None:
                    code, _, name = line.strip().partition("  ")
                    devices[(vendor, code.strip().lower())] = name.strip()
    except OSError:
        return {}, {}
    return vendors, devices


class PciNames:
    """Looks names up in the first existing file of ``paths``."""

    def __init__(self, paths: tuple[str, ...] | list[str] | str = DEFAULT_PATHS) -> None:
        candidates = (paths,) if isinstance(paths, str) else tuple(paths)
        self.path = next((p for p in candidates if os.path.exists(p)), None)

    def _tables(self) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
        return _load(self.path) if self.path else ({}, {})

    def vendor(self, vendor_id: str) -> str:
        vid = _norm(vendor_id)
        return self._tables()[0].get(vid, vid)

    def device(self, vendor_id: str, device_id: str) -> str:
        did = _norm(device_id)
        return self._tables()[1].get((_norm(vendor_id), did), did)


def _norm(hex_id: str) -> str:
    """``"0x8086"``/``"8086 "`` -> ``"8086"`` (unparseable ids stay as given)."""
    return pci.hex_id(hex_id, 4) or str(hex_id).strip().lower()
