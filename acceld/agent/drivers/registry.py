"""Load drivers by name through stevedore (entry-point namespace ``acceld.drivers``)."""

from __future__ import annotations

from stevedore import driver, extension
from stevedore import exception as stevedore_exception

from acceld import exception
from acceld.agent.drivers.base import Driver, DriverContext
from acceld.conf import DRIVER_NAMESPACE


def available() -> list[str]:
    """The names of the installed drivers that can be imported, sorted."""
    return sorted(extension.ExtensionManager(DRIVER_NAMESPACE).names())


def load(name: str, ctx: DriverContext) -> Driver:
    """The driver ``name`` built for ``ctx``; DriverNotFound when it is not installed."""
    try:
        manager = driver.DriverManager(DRIVER_NAMESPACE, name, invoke_on_load=True,
                                       invoke_args=(ctx,),
                                       on_missing_entrypoints_callback=None)
    except stevedore_exception.NoMatches:
        raise exception.DriverNotFound(
            f"Driver {name!r} is not installed (known: {', '.join(available()) or 'none'})."
        ) from None
    return manager.driver
