"""The link between an API worker process and `acceld serve` (rpc.LinkTransport at the
worker's end, rpc.LinkServer at the serve process's), over a real socket pair."""

from __future__ import annotations

import socket
import threading
from concurrent import futures

import pytest

from acceld import exception, rpc


class Conductor:
    def __init__(self) -> None:
        self.casts: list[str] = []
        self.release = threading.Event()

    def echo(self, value: object) -> object:
        return {"echo": value}

    def slow(self, n: int) -> int:
        assert self.release.wait(10)
        return n

    def missing(self) -> None:
        raise exception.ARQNotFound("no such ARQ")

    def broken(self) -> None:
        raise KeyError("secret internals")

    def noted(self, what: str) -> None:
        self.casts.append(what)


@pytest.fixture
def link():
    local = rpc.LocalTransport()
    conductor = Conductor()
    local.serve(rpc.CONDUCTOR_TOPIC, None, conductor).start()
    ours, theirs = socket.socketpair()
    server = rpc.LinkServer(local, ours, threads=8)
    server.start()
    transport = rpc.LinkTransport(theirs)
    yield transport, server, conductor
    transport.close()
    server.stop()
    local.close()


def test_a_call_returns_what_the_endpoint_returned(link):
    transport, _server, _conductor = link
    assert transport.call(rpc.CONDUCTOR_TOPIC, None, "echo", {"value": [1, "ü"]}) == {
        "echo": [1, "ü"]}


def test_a_domain_error_comes_back_as_its_class_and_anything_else_as_remote_failure(link):
    transport, _server, _conductor = link
    with pytest.raises(exception.ARQNotFound, match="no such ARQ"):
        transport.call(rpc.CONDUCTOR_TOPIC, None, "missing", {})
    with pytest.raises(exception.RemoteFailure) as failed:
        transport.call(rpc.CONDUCTOR_TOPIC, None, "broken", {})
    assert "secret" not in str(failed.value) and "broken" in str(failed.value)
    with pytest.raises(exception.HostUnreachable):      # nothing serves that topic
        transport.call(rpc.AGENT_TOPIC, "nowhere", "echo", {"value": 1})


def test_concurrent_calls_each_get_their_own_answer(link):
    transport, _server, conductor = link
    with futures.ThreadPoolExecutor(6) as pool:
        slow = [pool.submit(transport.call, rpc.CONDUCTOR_TOPIC, None, "slow", {"n": n})
                for n in range(3)]
        # answers to later calls overtake the slow ones on the same socket
        fast = [transport.call(rpc.CONDUCTOR_TOPIC, None, "echo", {"value": n})
                for n in range(5)]
        assert fast == [{"echo": n} for n in range(5)]
        assert not any(f.done() for f in slow)
        conductor.release.set()
        assert [f.result(10) for f in slow] == [0, 1, 2]


def test_a_cast_runs_on_the_serving_side(link):
    transport, _server, conductor = link
    transport.cast(rpc.CONDUCTOR_TOPIC, None, "noted", {"what": "it"})
    for _ in range(200):
        if conductor.casts:
            break
        threading.Event().wait(0.01)
    assert conductor.casts == ["it"]


def test_when_the_serving_side_goes_waiting_and_later_calls_are_unreachable(link):
    transport, server, conductor = link
    with futures.ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(transport.call, rpc.CONDUCTOR_TOPIC, None, "slow", {"n": 1})
        threading.Event().wait(0.2)
        stopping = pool.submit(server.stop)     # it waits for the call it runs
        with pytest.raises(exception.HostUnreachable):
            waiting.result(10)
        conductor.release.set()
        stopping.result(10)
    with pytest.raises(exception.HostUnreachable):
        transport.call(rpc.CONDUCTOR_TOPIC, None, "echo", {"value": 1})
