"""Load drivers by name from the ``acceld.drivers`` entry-point namespace."""

from __future__ import annotations

from importlib import metadata

from acceld import exception
from acceld.agent.drivers.base import Driver, DriverContext

NAMESPACE = "acceld.drivers"


def available() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=NAMESPACE)}


def load(name: str, ctx: DriverContext) -> Driver:
    eps = available()
    if name not in eps:
        raise exception.DriverNotFound(
            f"Driver {name!r} is not installed (known: {', '.join(sorted(eps)) or 'none'}).")
    return eps[name].load()(ctx)
