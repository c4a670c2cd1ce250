"""The ARQ state machine (contract 3.1), walked exhaustively."""

from __future__ import annotations

import itertools

from acceld import states


def test_every_state_has_a_row_and_every_source_is_a_state():
    assert set(states.ARQ_TRANSITIONS) == set(states.ARQ_STATES) - {states.ARQ_INITIAL}
    for sources in states.ARQ_TRANSITIONS.values():
        assert sources <= set(states.ARQ_STATES)


def test_every_state_is_reachable_from_initial():
    seen, todo = {states.ARQ_INITIAL}, [states.ARQ_INITIAL]
    while todo:
        current = todo.pop()
        for target in states.ARQ_STATES:
            if target not in seen and states.can_transition(states.ARQ_TRANSITIONS, current,
                                                            target):
                seen.add(target)
                todo.append(target)
    assert seen == set(states.ARQ_STATES)


def test_unbind_failed_has_a_row_and_can_be_left():
    assert states.ARQ_TRANSITIONS[states.ARQ_UNBIND_FAILED]
    assert states.can_transition(states.ARQ_TRANSITIONS, states.ARQ_UNBIND_FAILED,
                                 states.ARQ_UNBOUND)


def test_the_bind_path():
    path = [states.ARQ_INITIAL, states.ARQ_BIND_STARTED, states.ARQ_BOUND,
            states.ARQ_UNBOUND, states.ARQ_BIND_STARTED, states.ARQ_BIND_FAILED]
    for current, target in itertools.pairwise(path):
        assert states.can_transition(states.ARQ_TRANSITIONS, current, target), (current, target)


def test_the_whole_table_matches_the_contract():
    expected = {
        ("Initial", "BindStarted"), ("Unbound", "BindStarted"),
        ("BindStarted", "Bound"),
        ("BindStarted", "BindFailed"), ("Bound", "BindFailed"),
        # upstream passes through BindStarted within the same request; acceld's claim
        # that finds no handle, and a bind deadline passed before the claim, go direct
        ("Initial", "BindFailed"),
        ("Initial", "Unbound"), ("BindStarted", "Unbound"), ("Bound", "Unbound"),
        ("BindFailed", "Unbound"), ("UnbindFailed", "Unbound"),
        ("BindStarted", "UnbindFailed"), ("Bound", "UnbindFailed"),
        ("BindFailed", "UnbindFailed"),
    } | {(s, "Deleting") for s in states.ARQ_STATES if s != "Deleting"}
    actual = {(current, target) for current, target in
              itertools.product(states.ARQ_STATES, repeat=2)
              if states.can_transition(states.ARQ_TRANSITIONS, current, target)}
    assert actual == expected


def test_nothing_leaves_deleting_and_nothing_re_enters_initial():
    for target in states.ARQ_STATES:
        assert not states.can_transition(states.ARQ_TRANSITIONS, states.ARQ_DELETING, target)
        assert not states.can_transition(states.ARQ_TRANSITIONS, target, states.ARQ_INITIAL)


def test_resolved_states_are_states():
    assert states.ARQ_RESOLVED <= set(states.ARQ_STATES)
    assert states.ARQ_BOUND in states.ARQ_RESOLVED
