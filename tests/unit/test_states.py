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
        assert states.can_transition(transient, ok)
        assert states.can_transition(transient, failed)
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
            assert states.can_transition(current, target)
