"""The same RPC behaviour over both transports: the in-process bus of ``acceld serve`` and
oslo.messaging on a real RabbitMQ (``acceld api|conductor|agent``).

Each test builds its transport from a parsed configuration and uses topics and server
names of its own; the RabbitMQ tests also get a vhost of their own when the broker is
local (see conftest.py). How :func:`acceld.rpc.make_transport` picks a transport is
tested separately, in a fresh process where it matters.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from acceld import exception, rpc, wiring
from acceld.agent.manager import AgentManager
from acceld.objects import accelerators, identity
from tests import helpers
from tests.stack import wait_for

RPC_TIMEOUT = 2


class Endpoint:
    """A test endpoint: plain methods, as the managers have."""

    def __init__(self) -> None:
        self.casts: queue.Queue = queue.Queue()

    def add(self, a: int, b: int) -> int:
        return a + b

    def echo(self, value: Any) -> Any:
        return value

    def nothing(self) -> None:
        return None

    def missing(self, uuid: str) -> None:
        raise exception.AcceleratorNotFound(f"Accelerator {uuid} not found.")

    def conflict(self) -> None:
        raise exception.InvalidStateTransition("Accelerator x is installing: cannot go.")

    def note(self, value: Any) -> None:
        self.casts.put(value)


class Bus:
    """Builds configurations and transports of one kind; closes what it built."""

    def __init__(self, kind: str, url: str | None) -> None:
        self.kind, self.url = kind, url
        self._closers: list = []

    def conf(self, **groups: dict[str, Any]):
        default = {"rpc_timeout": RPC_TIMEOUT}
        if self.url:
            default["transport_url"] = self.url
        default.update(groups.pop("DEFAULT", {}))
        return helpers.make_conf(DEFAULT=default, **groups)

    def transport(self, conf=None) -> rpc.Transport:
        """The transport class itself (how ``acceld serve`` builds the local one);
        :func:`rpc.make_transport`'s choice is tested on its own below."""
        conf = conf if conf is not None else self.conf()
        t = rpc.MessagingTransport(conf) if self.url else rpc.LocalTransport()
        self._closers.append(t.close)
        return t

    def serve(self, transport: rpc.Transport, topic: str, server: str,
              endpoint: object) -> rpc.Server:
        srv = transport.serve(topic, server, endpoint)
        srv.start()
        self._closers.append(srv.stop)
        return srv

    def close(self) -> None:
        for fn in reversed(self._closers):
            try:
                fn()
            except Exception:  # noqa: BLE001 - best effort, the test result stands
                pass


@pytest.fixture(params=[pytest.param("local", id="local"),
                        pytest.param("rabbit", id="rabbit", marks=pytest.mark.rabbitmq)])
def bus(request: pytest.FixtureRequest) -> Iterator[Bus]:
    url = request.getfixturevalue("isolated_rabbit_url") if request.param == "rabbit" \
        else None
    b = Bus(request.param, url)
    try:
        yield b
    finally:
        b.close()


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"itest-topic-{tag}", f"itest-host-{tag}"


def test_call_returns_values(bus: Bus) -> None:
    t = bus.transport()
    topic, server = _names()
    bus.serve(t, topic, server, Endpoint())

    assert t.call(topic, server, "add", {"a": 2, "b": 40}) == 42
    assert t.call(topic, server, "nothing", {}) is None
    value = {"s": "ünïcödé", "n": [1, 2.5, None, True], "t": (1, 2), "d": {"k": {"x": ""}}}
    # Both sides see what survives JSON: tuples arrive as lists.
    assert t.call(topic, server, "echo", {"value": value}) == {
        "s": "ünïcödé", "n": [1, 2.5, None, True], "t": [1, 2], "d": {"k": {"x": ""}}}
    # Without a server name, any server of the topic answers (how agents reach a
    # conductor).
    assert t.call(topic, None, "add", {"a": 1, "b": 1}) == 2
    # An explicit per-call timeout is accepted.
    assert t.call(topic, server, "add", {"a": 1, "b": 2}, timeout=5) == 3


def test_domain_exception_arrives_unchanged(bus: Bus) -> None:
    t = bus.transport()
    topic, server = _names()
    bus.serve(t, topic, server, Endpoint())
    missing = str(uuid.uuid4())

    with pytest.raises(exception.AcceleratorNotFound) as info:
        t.call(topic, server, "missing", {"uuid": missing})
    exc = info.value
    assert exc.message == f"Accelerator {missing} not found."
    # What the API renders as the error detail: the message, nothing else.
    assert str(exc) == f"Accelerator {missing} not found."
    assert exc.code == "acceld.accelerator.not_found"

    with pytest.raises(exception.InvalidStateTransition) as info:
        t.call(topic, server, "conflict", {})
    assert isinstance(info.value, exception.Conflict)
    assert str(info.value) == "Accelerator x is installing: cannot go."


def test_call_to_nobody_is_host_unreachable(bus: Bus) -> None:
    t = bus.transport()
    topic, server = _names()
    started = time.monotonic()
    with pytest.raises(exception.HostUnreachable):
        t.call(topic, server, "add", {"a": 1, "b": 1})
    assert time.monotonic() - started < RPC_TIMEOUT + 3

    # Through the client classes: the agent of a host nobody runs.
    agents = rpc.AgentClient(t, timeout=RPC_TIMEOUT)
    started = time.monotonic()
    with pytest.raises(exception.HostUnreachable):
        agents.driver_action(f"{server}-gone", "fake", "update")
    assert time.monotonic() - started < RPC_TIMEOUT + 3


@pytest.mark.rabbitmq
def test_a_call_nothing_ever_served_fails_at_once_not_after_its_timeout(
        isolated_rabbit_url: str) -> None:
    """Published mandatory, a call whose topic has no queue (a conductor not started
    yet, an agent host that never ran) comes back from the broker and fails then; a
    server that has stopped leaves its queue behind, so a call to it still waits its
    timeout (the message is kept for a server that comes back)."""
    bus = Bus("rabbit", isolated_rabbit_url)
    try:
        t = bus.transport(bus.conf(DEFAULT={"rpc_timeout": 60}))
        topic, server = _names()
        with pytest.raises(exception.HostUnreachable, match="nothing serves"):
            t.call(topic, server, "add", {"a": 1, "b": 1})
        with pytest.raises(exception.HostUnreachable, match="nothing serves"):
            t.call(topic, None, "add", {"a": 1, "b": 1})
        srv = bus.serve(t, topic, server, Endpoint())
        assert t.call(topic, server, "add", {"a": 1, "b": 1}) == 2
        srv.stop()
        with pytest.raises(exception.HostUnreachable, match="did not answer"):
            t.call(topic, server, "add", {"a": 1, "b": 1}, timeout=RPC_TIMEOUT)
    finally:
        bus.close()


def test_stopped_server_is_host_unreachable(bus: Bus) -> None:
    t = bus.transport()
    topic, server = _names()
    srv = bus.serve(t, topic, server, Endpoint())
    assert t.call(topic, server, "add", {"a": 1, "b": 1}) == 2
    srv.stop()
    started = time.monotonic()
    with pytest.raises(exception.HostUnreachable):
        t.call(topic, server, "add", {"a": 1, "b": 1})
    assert time.monotonic() - started < RPC_TIMEOUT + 3


def test_cast_is_delivered(bus: Bus) -> None:
    t = bus.transport()
    topic, server = _names()
    ep = Endpoint()
    bus.serve(t, topic, server, ep)

    assert t.cast(topic, server, "note", {"value": {"n": 1, "t": (1, 2)}}) is None
    assert ep.casts.get(timeout=10) == {"n": 1, "t": [1, 2]}
    t.cast(topic, None, "note", {"value": "any server"})
    assert ep.casts.get(timeout=10) == "any server"
    # An endpoint failing on a cast has nobody to tell; the server keeps serving.
    t.cast(topic, server, "missing", {"uuid": "x"})
    t.cast(topic, server, "note", {"value": "after"})
    assert ep.casts.get(timeout=10) == "after"
    assert t.call(topic, server, "add", {"a": 1, "b": 1}) == 2


def test_inventory_cycle(bus: Bus, sqlite_db, tmp_path) -> None:
    """Conductor and agent managers over this transport: report, state change, discover."""
    host = f"itest-{uuid.uuid4().hex[:10]}"
    conf = bus.conf(DEFAULT={"rpc_timeout": 10},
                    agent={"report_interval": 3600.0, "retry_interval": 0.05},
                    conductor={"save_interval": 3600.0, "periodic_interval": 3600.0,
                               "operation_wait": 8.0},
                    fake_driver={"device_count": 4})
    t = bus.transport(conf)
    conductor, cond_server = wiring.start_conductor(conf, sqlite_db, t)
    bus._closers += [conductor.stop, cond_server.stop]
    agent = AgentManager(conf, rpc.ConductorClient(t), host=host,
                         journal_dir=str(tmp_path / "journal"))
    bus.serve(t, rpc.AGENT_TOPIC, host, agent)

    assert agent.report_once() is True
    assert agent.journal.acked_seq == agent.journal.seq == 1
    records = list(accelerators.list_accelerators(sqlite_db, host=host))
    assert len(records) == 4
    kinds = ["gpu", "fpga", "qat", "nic"]
    assert sorted(r["name"] for r in records) == sorted(
        f"{host}-fake-{k}-{i}" for i, k in enumerate(kinds))
    for rec in records:
        assert rec["uuid"] == identity.device_uuid(
            host, "fake", accelerators.identity_of(sqlite_db, rec["uuid"]))
        assert (rec["host"], rec["driver"], rec["state"], rec["health"]) == (
            host, "fake", "inactive", "ok")

    # The same report again (a new seq, the same content) changes nothing.
    assert agent.report_once() is True
    assert len(list(accelerators.list_accelerators(sqlite_db, host=host))) == 4

    client = rpc.ConductorClient(t)
    gpu = next(r for r in records if r["device_type"] == "GPU")
    # API -> conductor (call), conductor -> agent (cast), agent -> conductor (call).
    answer = client.set_state(gpu["uuid"], "ready")
    assert answer["state"] == "ready"
    assert accelerators.get_accelerator(sqlite_db, gpu["uuid"])["state"] == "ready"
    # The conductor answers as soon as the agent's result reaches it; the agent drops
    # the result from its journal once that delivery call returns, a moment later.
    wait_for(lambda: agent.journal.results() == [], timeout=10)
    assert agent.journal.inflight() == []
    gpu_identity = accelerators.identity_of(sqlite_db, gpu["uuid"])
    assert gpu_identity in agent._driver("fake").installed()

    # Conductor -> agent call and cast.
    assert client.driver_action("fake", "update", host) == [
        {"host": host, "driver": "fake", "ok": True, "error": None}]
    assert client.discover(host) == [host]

    # A domain error from the conductor crosses back to the API side unchanged.
    missing = str(uuid.uuid4())
    with pytest.raises(exception.AcceleratorNotFound) as info:
        client.set_state(missing, "ready")
    assert str(info.value) == f"Accelerator {missing} not found."


def test_make_transport_without_url_is_local() -> None:
    """No ``[DEFAULT] transport_url`` configured: the in-process bus (rpc.py docstring),
    and ``acceld api|conductor|agent`` refuse to start (``_require_bus``)."""
    conf = helpers.make_conf()
    assert not conf.transport_url, f"transport_url defaults to {conf.transport_url!r}"
    t = rpc.make_transport(conf)
    try:
        assert isinstance(t, rpc.LocalTransport)
    finally:
        t.close()


@pytest.mark.rabbitmq
def test_make_transport_with_url_is_messaging(isolated_rabbit_url) -> None:
    conf = helpers.make_conf(DEFAULT={"transport_url": isolated_rabbit_url})
    t = rpc.make_transport(conf)
    try:
        assert isinstance(t, rpc.MessagingTransport)
    finally:
        t.close()


@pytest.mark.rabbitmq
def test_make_transport_in_fresh_process(isolated_rabbit_url) -> None:
    """``acceld api|conductor|agent`` build their transport once, in a fresh process:
    that first transport must work (nothing earlier in the process may have prepared
    oslo.messaging's options for it)."""
    script = textwrap.dedent(f"""
        import uuid
        from acceld import conf as config, rpc
        conf = config.load([], config_files=[], overrides={{"DEFAULT": {{
            "transport_url": {isolated_rabbit_url!r}, "rpc_timeout": 5}}}})
        t = rpc.make_transport(conf)
        assert isinstance(t, rpc.MessagingTransport), t

        class Ep:
            def add(self, a, b):
                return a + b

        topic = "itest-fresh-" + uuid.uuid4().hex[:8]
        srv = t.serve(topic, "h", Ep())
        srv.start()
        try:
            assert t.call(topic, "h", "add", {{"a": 20, "b": 22}}) == 42
        finally:
            srv.stop()
            t.close()
        print("OK")
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), (
        f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr[-4000:]}")

