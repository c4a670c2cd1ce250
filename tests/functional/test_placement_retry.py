"""The retry of failed Placement syncs, against the real Placement on loopback.

``PlacementServer.set_down`` makes Placement answer 503 (after keystoneauth's own three
retries of each request, a sync fails); retries here start at 20 ms and stay under
100 ms, so no test sleeps long. The periodic full pass is an hour away: only the retry
can heal a host.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from acceld import rpc, wiring
from acceld.objects import placement as po
from tests.placement_server import PlacementServer
from tests.stack import Stack, wait_for

INITIAL, CAP = 0.02, 0.1


@pytest.fixture(scope="module")
def placement():
    with PlacementServer() as server:
        yield server


@pytest.fixture
def stack(placement, tmp_path):
    hosts = tuple(f"cn-{uuid.uuid4().hex[:6]}-{i}" for i in range(3))
    stack = Stack.syncing_to(placement, tmp_path / "acceld.sqlite", hosts,
                             retry_initial_delay=INITIAL, retry_max_delay=CAP,
                             status_code_retry_delay=0.001)
    yield stack
    placement.set_down(False)
    stack.stop()


def _children(placement: PlacementServer, host: str) -> int:
    admin = placement.admin_session()
    compute = admin.get(f"/resource_providers?name={host}").json()["resource_providers"][0]
    body = admin.get(f"/resource_providers?in_tree={compute['uuid']}").json()
    return len(body["resource_providers"]) - 1


def _retry_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "placement-retry"}


def _failing(stack: Stack, failures: int):
    retries = stack.conductor.placement.retries()
    return set(retries) == set(stack.agents) and \
        min(r.failures for r in retries.values()) >= failures


def test_failed_hosts_back_off_on_one_thread_and_heal_with_every_change(stack, placement):
    before = _retry_threads()
    placement.set_down(True)
    stack.report_all()
    wait_for(lambda: _failing(stack, 3))
    assert len(_retry_threads() - before) == 1        # one thread whatever the hosts
    for host, state in ((h, po.host_inputs(stack.db, h).state) for h in stack.agents):
        delay = (state.next_retry_at - state.last_attempt_at).total_seconds()
        assert INITIAL / 2 <= delay <= CAP, (host, delay)
        assert "503" in state.last_error

    # While the hosts wait for their retry, more changes arrive: none is lost.
    stack.set_control(device_count=5)
    stack.report_all()
    stack.set_control(device_count=6)
    stack.report_all()
    placement.set_down(False)
    # the syncer forgets a host's retry just before it records the sync that healed it
    wait_for(lambda: stack.conductor.placement.retries() == {} and set(stack.agents) <= {
        row["host"] for row in po.list_states(stack.db) if row["in_sync"]})
    for host in stack.agents:
        state = po.host_inputs(stack.db, host).state
        assert state.in_sync and state.next_retry_at is None and state.last_error is None
        assert _children(placement, host) == 6


def test_tries_are_spaced_by_the_backoff(stack, placement):
    """However long Placement is down, a host is tried at most once per half the
    initial delay (the smallest backoff), never in a loop."""
    placement.set_down(True)
    placement.reset_counts()
    started = time.monotonic()
    stack.report_all()
    wait_for(lambda: _failing(stack, 4))
    elapsed = time.monotonic() - started
    failures = sum(r.failures for r in stack.conductor.placement.retries().values())
    tries = len(placement.requests()) / 4             # each try: a request + 3 retries
    assert tries <= failures + len(stack.agents)      # every try was a counted failure
    assert failures <= len(stack.agents) * (elapsed / (INITIAL / 2) + 1)


def test_stop_ends_the_retries(stack, placement):
    before = _retry_threads()
    placement.set_down(True)
    stack.report_all()
    wait_for(lambda: _failing(stack, 2))
    syncer = stack.conductor.placement
    mine = _retry_threads() - before
    assert len(mine) == 1
    syncer.close()
    assert not any(t.is_alive() for t in mine)
    placement.reset_counts()
    syncer.schedule(next(iter(stack.agents)))         # after close: a no-op
    assert syncer.wait_idle(60)                       # (a sync queued would be awaited)
    assert _retry_threads() - before == set()
    assert placement.requests() == []


def test_a_restarted_conductor_retries_the_hosts_left_failing(stack, placement):
    placement.set_down(True)
    stack.report_all()
    wait_for(lambda: _failing(stack, 1))
    stack.conductor.placement.close()                 # the conductor dies, its retries too
    placement.set_down(False)
    manager, server = wiring.start_conductor(stack.conf, stack.db, rpc.LocalTransport())
    try:
        wait_for(lambda: all(po.host_inputs(stack.db, h).state.in_sync for h in stack.agents))
    finally:
        server.stop()
        manager.stop()
    assert all(_children(placement, h) == 4 for h in stack.agents)
