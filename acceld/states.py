"""Life cycle states (devices, ARQs, program operations) and their transitions, as data.

A device goes ``inactive`` -> ``installing`` (the driver's install step) -> ``ready`` (or
``error``), and back through ``uninstalling``. Health is orthogonal: drivers report
``ok``, ``degraded`` or ``failed``; the conductor adds ``unknown`` (driver failing) and
``missing`` (vanished but held). Only :data:`USABLE_HEALTH` devices go to guests.

Over the driver's health, the conductor keeps each device's health *life cycle*
(docs/health.md): ``healthy`` -> ``suspect`` (rising error counters, or a driver
reporting it degraded) -> ``quarantined`` (out of scheduling) -> ``resetting`` (the
driver's reset hook) -> ``healthy`` again or ``failed``; and, apart from it, whether an
operator put the device in maintenance (drain). Only a healthy or suspect device out of
maintenance goes to a new guest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

INACTIVE = "inactive"
INSTALLING = "installing"
READY = "ready"
UNINSTALLING = "uninstalling"
ERROR = "error"

DEVICE_STATES = (INACTIVE, INSTALLING, READY, UNINSTALLING, ERROR)

# target state -> states it may be entered from (every transition is a compare-and-swap
# on this set).
DEVICE_TRANSITIONS: dict[str, frozenset[str]] = {
    INSTALLING: frozenset({INACTIVE, ERROR}),
    READY: frozenset({INSTALLING}),
    UNINSTALLING: frozenset({READY, ERROR}),
    INACTIVE: frozenset({UNINSTALLING}),
    ERROR: frozenset({INSTALLING, UNINSTALLING}),
}

# What an operator may ask for, and the transient state that request enters.
REQUESTABLE = {READY: INSTALLING, INACTIVE: UNINSTALLING}
# Transient state -> (state on success, state on failure)
TRANSIENT_OUTCOME = {INSTALLING: (READY, ERROR), UNINSTALLING: (INACTIVE, ERROR)}
# Transient state -> the driver operation the agent runs for it.
TRANSIENT_OPERATION = {INSTALLING: "install", UNINSTALLING: "uninstall"}

HEALTH_OK = "ok"
HEALTH_UNKNOWN = "unknown"
HEALTH_MISSING = "missing"
HEALTH_DEGRADED = "degraded"
HEALTH_FAILED = "failed"
HEALTH_STATES = (HEALTH_OK, HEALTH_UNKNOWN, HEALTH_MISSING, HEALTH_DEGRADED, HEALTH_FAILED)
USABLE_HEALTH = (HEALTH_OK, HEALTH_DEGRADED)

# What a bind may hand over: a ready, enabled device whose health is usable.
DEVICE_STATUS_ENABLED = "enabled"


# -- device health life cycle (docs/health.md) ---------------------------------------------
LIFECYCLE_HEALTHY = "healthy"
LIFECYCLE_SUSPECT = "suspect"
LIFECYCLE_QUARANTINED = "quarantined"
LIFECYCLE_RESETTING = "resetting"
LIFECYCLE_FAILED = "failed"
LIFECYCLE_STATES = (LIFECYCLE_HEALTHY, LIFECYCLE_SUSPECT, LIFECYCLE_QUARANTINED,
                    LIFECYCLE_RESETTING, LIFECYCLE_FAILED)
# A device in one of these may be given to a new guest (Placement: not reserved).
SCHEDULABLE_LIFECYCLE = (LIFECYCLE_HEALTHY, LIFECYCLE_SUSPECT)

# target -> states it may be entered from (every change is a compare-and-swap on this set).
# Healthy from resetting is a reset that worked; failed, one that did not.
LIFECYCLE_TRANSITIONS: dict[str, frozenset[str]] = {
    LIFECYCLE_SUSPECT: frozenset({LIFECYCLE_HEALTHY}),
    LIFECYCLE_QUARANTINED: frozenset({LIFECYCLE_HEALTHY, LIFECYCLE_SUSPECT}),
    LIFECYCLE_RESETTING: frozenset({LIFECYCLE_QUARANTINED, LIFECYCLE_FAILED}),
    LIFECYCLE_HEALTHY: frozenset({LIFECYCLE_SUSPECT, LIFECYCLE_QUARANTINED,
                                  LIFECYCLE_RESETTING}),
    LIFECYCLE_FAILED: frozenset({LIFECYCLE_RESETTING}),
}

# What an operator may ask for -> (the state it enters, the states it may start from: a
# subset of the table's; only a reset's own outcome ends ``resetting``).
HEALTH_ACTIONS: dict[str, tuple[str, frozenset[str]]] = {
    "quarantine": (LIFECYCLE_QUARANTINED, LIFECYCLE_TRANSITIONS[LIFECYCLE_QUARANTINED]),
    "release": (LIFECYCLE_HEALTHY, frozenset({LIFECYCLE_SUSPECT, LIFECYCLE_QUARANTINED})),
    "reset": (LIFECYCLE_RESETTING, LIFECYCLE_TRANSITIONS[LIFECYCLE_RESETTING]),
}
# A reset's outcome: (on success, on failure), both entered from resetting only.
RESET_OUTCOME = (LIFECYCLE_HEALTHY, LIFECYCLE_FAILED)

# Maintenance (drain of one device): the two changes an operator asks for, stored as a
# flag; the view says ``draining`` while something still holds the device, then ``drained``.
MAINTENANCE_DRAIN, MAINTENANCE_UNDRAIN = "drain", "undrain"
MAINTENANCE_DRAINING, MAINTENANCE_DRAINED = "draining", "drained"
# change -> (the flag it sets, the flag it may start from)
MAINTENANCE_TRANSITIONS = {MAINTENANCE_DRAIN: (True, False), MAINTENANCE_UNDRAIN: (False, True)}


class Condition(NamedTuple):
    """What decides whether a device may go to a guest (a device row has these names)."""

    state: str
    status: str
    health: str
    lifecycle: str = LIFECYCLE_HEALTHY
    maintenance: bool = False


# The one rule of a usable device, in order: (explain's reason code, the device fails it,
# what it then "is"). Placement's reservation, the binder's refusal and explain read it.
UNUSABLE: tuple[tuple[str, Callable[[Any], bool], Callable[[Any], str]], ...] = (
    ("device_not_ready", lambda c: c.state != READY, lambda c: f"is {c.state}, not {READY}"),
    ("device_disabled", lambda c: c.status != DEVICE_STATUS_ENABLED,
     lambda c: f"is disabled ({c.status})"),
    ("device_unhealthy", lambda c: c.health not in USABLE_HEALTH,
     lambda c: f"has health {c.health}"),
    ("device_quarantined", lambda c: c.lifecycle not in SCHEDULABLE_LIFECYCLE,
     lambda c: f"is {c.lifecycle}"),
    ("device_drained", lambda c: c.maintenance, lambda c: "is in maintenance (drained)"),
)


def unusable_reasons(state: str, status: str, health: str,
                     lifecycle: str = LIFECYCLE_HEALTHY,
                     maintenance: bool = False) -> list[str]:
    """Why the device may not go to a guest ("is inactive, not ready", ...); empty if it may."""
    condition = Condition(state, status, health, lifecycle, maintenance)
    return [what(condition) for _code, fails, what in UNUSABLE if fails(condition)]


# Attach handle types (contract 1.4): ``PCI`` (a function passed through), ``MDEV`` (a
# mediated device: a vGPU), ``TEST_PCI`` (upstream's fake) and ``MIG`` (an NVIDIA MIG
# instance, which is neither). Nova 34's libvirt driver attaches PCI and MDEV handles to
# a guest and skips the others with an INFO log, so a bind (always Nova's) refuses them:
# a guest would boot without its device.
ATTACH_TYPES = ("PCI", "MDEV", "TEST_PCI", "MIG")
GUEST_ATTACH_TYPES = frozenset({"PCI", "MDEV"})

DRIVER_INSTALLED = "installed"
DRIVER_UNINSTALLED = "uninstalled"
DRIVER_FAILED = "failed"
DRIVER_STATES = (DRIVER_INSTALLED, DRIVER_UNINSTALLED, DRIVER_FAILED)

DEVICE_TYPES = ("GPU", "FPGA", "AICHIP", "QAT", "NIC", "SSD", "CRYPTO", "OTHER")

# -- FPGA program operations (PATCH /v2/deployables/{uuid}/program) --------------------------
PROGRAM_QUEUED = "queued"
PROGRAM_RUNNING = "running"
PROGRAM_DONE = "done"
PROGRAM_FAILED = "failed"
PROGRAM_STATES = (PROGRAM_QUEUED, PROGRAM_RUNNING, PROGRAM_DONE, PROGRAM_FAILED)
PROGRAM_ACTIVE = (PROGRAM_QUEUED, PROGRAM_RUNNING)
# target state -> states it may be entered from (a finished operation never changes again)
PROGRAM_TRANSITIONS: dict[str, frozenset[str]] = dict.fromkeys(
    (PROGRAM_RUNNING, PROGRAM_DONE, PROGRAM_FAILED), frozenset(PROGRAM_ACTIVE))


def can_transition(table: Mapping[str, frozenset[str]], current: str, target: str) -> bool:
    """True when ``table`` (target -> the states it may be entered from: one of the
    ``*_TRANSITIONS``) allows ``current -> target``."""
    return current in table.get(target, frozenset())


def request_target(current: str, requested: str) -> str | None:
    """The transient state an operator request for ``requested`` enters from ``current``;
    None when the device is there already, ValueError when it may not go there."""
    if requested not in REQUESTABLE:
        raise ValueError(f"state must be one of {sorted(REQUESTABLE)}")
    if current == requested:
        return None
    transient = REQUESTABLE[requested]
    if current == transient:
        return None
    if not can_transition(DEVICE_TRANSITIONS, current, transient):
        raise ValueError(f"cannot go from {current!r} to {requested!r}")
    return transient


# -- accelerator requests (Cyborg v2 ARQs) ---------------------------------------------------
# Contract 3.1. Every ARQ state change is a compare-and-swap on the allowed-from set below
# (``UPDATE ... WHERE state IN (...)``, row count checked). Unlike upstream, UnbindFailed
# has a row (upstream's matrix lacks it, a KeyError when reached) and may be left by a
# retried unbind or a delete.

ARQ_INITIAL = "Initial"
ARQ_BIND_STARTED = "BindStarted"
ARQ_BOUND = "Bound"
ARQ_UNBOUND = "Unbound"
ARQ_BIND_FAILED = "BindFailed"
ARQ_UNBIND_FAILED = "UnbindFailed"
ARQ_DELETING = "Deleting"

ARQ_STATES = (ARQ_INITIAL, ARQ_BIND_STARTED, ARQ_BOUND, ARQ_UNBOUND, ARQ_BIND_FAILED,
              ARQ_UNBIND_FAILED, ARQ_DELETING)

# target state -> states it may be entered from.
ARQ_TRANSITIONS: dict[str, frozenset[str]] = {
    ARQ_BIND_STARTED: frozenset({ARQ_INITIAL, ARQ_UNBOUND}),
    ARQ_BOUND: frozenset({ARQ_BIND_STARTED}),
    # Initial: a bind whose deadline passed before its claim committed (Nova heard failed)
    ARQ_BIND_FAILED: frozenset({ARQ_INITIAL, ARQ_BIND_STARTED, ARQ_BOUND}),
    ARQ_UNBOUND: frozenset({ARQ_INITIAL, ARQ_BIND_STARTED, ARQ_BOUND, ARQ_BIND_FAILED,
                            ARQ_UNBIND_FAILED}),
    ARQ_UNBIND_FAILED: frozenset({ARQ_BIND_STARTED, ARQ_BOUND, ARQ_BIND_FAILED}),
    ARQ_DELETING: frozenset({ARQ_INITIAL, ARQ_BIND_STARTED, ARQ_BOUND, ARQ_UNBOUND,
                             ARQ_BIND_FAILED, ARQ_UNBIND_FAILED}),
}

# An ARQ's ``substate`` follows a hot plug (an acceld extension, docs/hot-plug.md): the
# device being attached to its running instance, attached, or asked back from the guest.
# Initial: not hot-plugged (Nova's binds leave it there).
HOT_ATTACHING, HOT_ATTACHED, HOT_DETACHING = "Attaching", "Attached", "Detaching"
HOT_PLUGGED = frozenset({HOT_ATTACHING, HOT_ATTACHED, HOT_DETACHING})

# What Nova treats as the end of a bind: Bound -> event "completed", the others "failed".
ARQ_RESOLVED = frozenset({ARQ_BOUND, ARQ_BIND_FAILED, ARQ_DELETING})

