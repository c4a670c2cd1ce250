"""The device life cycle table, walked exhaustively."""

from __future__ import annotations

import itertools

import pytest

from acceld import states


def test_every_transition_target_and_source_is_a_state():
    for target, sources in states.DEVICE_TRANSITIONS.items():
        assert target in states.DEVICE_STATES
        assert sources <= set(states.DEVICE_STATES)


def test_every_state_is_reachable_and_can_be_left():
    targets = set(states.DEVICE_TRANSITIONS)
    sources = set().union(*states.DEVICE_TRANSITIONS.values())
    assert set(states.DEVICE_STATES) - {states.INACTIVE} <= targets
    assert set(states.DEVICE_STATES) <= sources | {states.INSTALLING, states.UNINSTALLING}


def test_transient_states_have_outcomes_and_operations():
    for transient, (ok, failed) in states.TRANSIENT_OUTCOME.items():
        assert states.can_transition(states.DEVICE_TRANSITIONS, transient, ok)
        assert states.can_transition(states.DEVICE_TRANSITIONS, transient, failed)
        assert transient in states.TRANSIENT_OPERATION


@pytest.mark.parametrize("current,requested,expected", [
    ("inactive", "ready", "installing"),
    ("error", "ready", "installing"),
    ("ready", "inactive", "uninstalling"),
    ("error", "inactive", "uninstalling"),
    ("ready", "ready", None),
    ("installing", "ready", None),
    ("inactive", "inactive", None),
    ("uninstalling", "inactive", None),
])
def test_request_target(current, requested, expected):
    assert states.request_target(current, requested) == expected


@pytest.mark.parametrize("current,requested", [
    ("installing", "inactive"), ("uninstalling", "ready"),
])
def test_request_refused_mid_transition(current, requested):
    with pytest.raises(ValueError):
        states.request_target(current, requested)


def test_only_ready_and_inactive_are_requestable():
    for state in set(states.DEVICE_STATES) - set(states.REQUESTABLE):
        with pytest.raises(ValueError):
            states.request_target(states.INACTIVE, state)


def test_request_target_agrees_with_transition_table():
    for current, requested in itertools.product(states.DEVICE_STATES, states.REQUESTABLE):
        try:
            target = states.request_target(current, requested)
        except ValueError:
            continue
        if target is not None:
            assert states.can_transition(states.DEVICE_TRANSITIONS, current, target)


# -- health life cycle ---------------------------------------------------------------------

def test_every_lifecycle_transition_names_states_and_every_state_is_left_and_entered():
    table = states.LIFECYCLE_TRANSITIONS
    assert set(table) <= set(states.LIFECYCLE_STATES)
    assert all(src <= set(states.LIFECYCLE_STATES) for src in table.values())
    for state in states.LIFECYCLE_STATES:
        assert any(state in src for src in table.values()), f"{state} is never left"
        assert state in table or state == states.LIFECYCLE_HEALTHY, f"{state} unreachable"


@pytest.mark.parametrize("action", sorted(states.HEALTH_ACTIONS))
def test_operator_actions_are_a_subset_of_the_table(action):
    target, sources = states.HEALTH_ACTIONS[action]
    assert sources <= states.LIFECYCLE_TRANSITIONS[target]
    # only a reset's own outcome ends a reset
    assert states.LIFECYCLE_RESETTING not in sources


def test_a_reset_ends_healthy_or_failed_and_only_from_resetting():
    assert all(states.can_transition(states.LIFECYCLE_TRANSITIONS, states.LIFECYCLE_RESETTING,
                                     outcome) for outcome in states.RESET_OUTCOME)
    assert states.LIFECYCLE_TRANSITIONS[states.LIFECYCLE_FAILED] == {
        states.LIFECYCLE_RESETTING}
    assert not states.can_transition(states.LIFECYCLE_TRANSITIONS, states.LIFECYCLE_FAILED,
                                     states.LIFECYCLE_HEALTHY)


@pytest.mark.parametrize(("lifecycle", "maintenance", "why"), [
    ("healthy", False, []), ("suspect", False, []),
    ("quarantined", False, ["is quarantined"]), ("resetting", False, ["is resetting"]),
    ("failed", False, ["is failed"]),
    ("healthy", True, ["is in maintenance (drained)"]),
])
def test_unusable_reasons_follow_the_life_cycle_and_maintenance(lifecycle, maintenance, why):
    assert states.unusable_reasons(states.READY, states.DEVICE_STATUS_ENABLED,
                                   states.HEALTH_OK, lifecycle, maintenance) == why
