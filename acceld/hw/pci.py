"""PCI addresses: the one place where they are parsed, normalised and matched.

Tools spell addresses differently (NVML ``00000000:3B:00.0``, sysfs ``0000:3b:00.0``,
lspci ``3b:00.0``, attach handles ``{"domain": "0000", "bus": "3b", ...}``), so
everything compares :class:`PciAddress` values or their canonical sysfs string.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import re

_ADDR_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$")

# Widths of each field in the canonical sysfs form.
_WIDTHS = {"domain": 4, "bus": 2, "device": 2, "function": 1}


@dataclasses.dataclass(frozen=True, order=True)
class PciAddress:
    """A PCI function address; fields are integers so that any spelling compares equal."""

    domain: int
    bus: int
    device: int
    function: int

    def __post_init__(self) -> None:
        if not (0 <= self.domain <= 0xFFFFFFFF and 0 <= self.bus <= 0xFF
                and 0 <= self.device <= 0x1F and 0 <= self.function <= 7):
            raise ValueError(f"PCI address out of range: {self!r}")

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"


def parse(text: str) -> PciAddress:
    """Parse any common spelling (``0000:3b:00.0``, ``3b:00.0``, ...); ValueError otherwise."""
    m = _ADDR_RE.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not a PCI address: {text!r}")
    return PciAddress(int(m.group("domain") or "0", 16), int(m.group("bus"), 16),
                      int(m.group("device"), 16), int(m.group("function"), 16))


def normalize(text: str) -> str:
    return str(parse(text))


def is_address(text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def hex_id(raw: str | None, width: int) -> str | None:
    """A vendor/device/class id as ``width`` lower-case hex digits (``"0x8086"`` ->
    ``"8086"``); None for None or what is not hex."""
    with contextlib.suppress(TypeError, ValueError):
        return f"{int(raw, 16):0{width}x}"
    return None


def to_attach_info(address: str | PciAddress) -> dict[str, str]:
    """The attach_info of a PCI handle: hex strings (``"0000"``, ``"3b"``, ``"00"``, ``"1"``)."""
    a = address if isinstance(address, PciAddress) else parse(address)
    return {"domain": f"{a.domain:04x}", "bus": f"{a.bus:02x}",
            "device": f"{a.device:02x}", "function": f"{a.function:x}"}


def from_attach_info(info: dict[str, str]) -> PciAddress:
    """The address in a PCI attach_info (extra keys ignored); ValueError if malformed."""
    try:
        return PciAddress(int(info["domain"], 16), int(info["bus"], 16),
                          int(info["device"], 16), int(info["function"], 16))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a PCI attach_info: {info!r}") from exc


def _spec_fields(spec: str) -> dict[str, str]:
    """An address glob's four fields, missing leading ones ``*`` (``3b:00.*``: any domain),
    literal ones zero-padded; ValueError when it is malformed."""
    spec = spec.strip().lower()
    if spec in ("", "*"):
        return dict.fromkeys(_WIDTHS, "*")
    head, dot, function = spec.rpartition(".")
    if not dot:
        head, function = spec, "*"
    parts = head.split(":")
    if len(parts) > 3:
        raise ValueError(f"bad PCI address spec: {spec!r}")
    fields = ["*"] * (3 - len(parts)) + parts + [function]
    return {name: _norm_field(value, name) for name, value in zip(_WIDTHS, fields, strict=True)}


def _norm_field(value: str, name: str) -> str:
    """Zero-pad a literal hex field to its canonical width (globs stay as they are)."""
    if any(ch in value for ch in "*?["):
        return value
    try:
        number = int(value, 16)
    except ValueError as exc:
        raise ValueError(f"bad PCI address field {name}: {value!r}") from exc
    return f"{number:0{_WIDTHS[name]}x}"


def validate_spec(spec: str) -> None:
    _spec_fields(spec)


def matches(spec: str, address: str | PciAddress) -> bool:
    """True when ``address`` matches the glob ``spec``; ValueError for a malformed spec."""
    canon = to_attach_info(address)
    return all(fnmatch.fnmatchcase(canon[name], pattern)
               for name, pattern in _spec_fields(spec).items())
