"""RPC: one client class per server (conductor, agent) over :class:`LocalTransport` (in
one process, still with a JSON round trip), :class:`LinkTransport` (an API worker to its
``acceld serve`` parent's :class:`LinkServer`) or :class:`MessagingTransport`
(oslo.messaging). Domain exceptions cross unchanged; a server that does not answer is
HostUnreachable, any other remote error a RemoteFailure naming only service and method.

RPC API versions (one line of history each; a test guards the list):

* 1.0: initial: conductor report_inventory, heartbeat, operation_done, create_accelerator,
  set_state, attach, detach, discover, driver_action, placement_sync, host_changed,
  arq_bind, arq_unbind; agent discover_now, run_operation, driver_action, host_attachment.
* 1.1: host work and FPGA programming: agent prepare_handle, release_handle, run_program,
  device_stats; conductor program_deployable, program_progress, program_done, device_stats.
* 1.2: conductor release_handles (host clean-up of the handles an ARQ delete freed).
* 1.3: hot plug: agent guests, attach_to_guest, detach_from_guest; conductor hot_attach,
  hot_detach, guests, agent_restarted.
* 1.4: conductors share the hosts: conductor forwarded; report_inventory answers the
  host's owner ("conductor"), to which the agent then sends its calls."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any, Protocol

from oslo_config import cfg

import acceld.threading_backend  # noqa: F401 - must precede oslo.messaging
from acceld import exception

LOG = logging.getLogger(__name__)

RPC_API_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
RPC_API_VERSION = RPC_API_VERSIONS[-1]
CONDUCTOR_TOPIC = "acceld-conductor"
AGENT_TOPIC = "acceld-agent"
EXCHANGE = "acceld"


class Transport(Protocol):
    def call(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any],
             timeout: float | None = None) -> Any: ...

    def cast(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any]) -> None: ...

    def serve(self, topic: str, server: str | None, endpoint: object) -> Server: ...


class Server(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


def _remote_failure(topic: str, server: str | None, method: str) -> exception.RemoteFailure:
    return exception.RemoteFailure(f"{topic}.{server or '*'} failed to complete {method}; "
                                   "the cause is in its log.")


def _served(topic: str, server: str | None, method: str, run: Callable[[], Any]) -> Any:
    """``run()``, serving one call: a domain error goes back as it is; any other failure is
    logged here with its traceback and answered with :func:`_remote_failure`."""
    try:
        return run()
    except exception.AccelDError:
        raise
    except Exception:
        LOG.exception("%s.%s failed in %s", topic, server or "*", method)
        raise _remote_failure(topic, server, method) from None


def _wire(value: Any) -> Any:
    return json.loads(json.dumps(value))


class _LocalServer:
    def __init__(self, transport: LocalTransport, key: tuple[str, str | None],
                 endpoint: object) -> None:
        self._transport, self._key, self._endpoint = transport, key, endpoint

    def start(self) -> None:
        with self._transport._lock:
            self._transport._endpoints[self._key] = self._endpoint

    def stop(self) -> None:
        with self._transport._lock:
            if self._transport._endpoints.get(self._key) is self._endpoint:
                del self._transport._endpoints[self._key]


class LocalTransport:
    """In-process bus: direct method calls, casts on a small thread pool."""

    def __init__(self, workers: int = 4) -> None:
        self._endpoints: dict[tuple[str, str | None], object] = {}
        self._lock = threading.Lock()
        self._pool = futures.ThreadPoolExecutor(max_workers=workers,
                                                thread_name_prefix="acceld-cast")

    def _endpoint(self, topic: str, server: str | None) -> object:
        with self._lock:
            ep = self._endpoints.get((topic, server))
            if ep is None and server is None:
                ep = next((e for (t, _s), e in self._endpoints.items() if t == topic), None)
        if ep is None:
            raise exception.HostUnreachable(f"nothing serves {topic}.{server or '*'}")
        return ep

    def call(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any],
             timeout: float | None = None) -> Any:
        ep = self._endpoint(topic, server)
        return _served(topic, server, method, lambda: _wire(getattr(ep, method)(**_wire(kwargs))))

    def cast(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any]) -> None:
        ep = self._endpoint(topic, server)
        args = _wire(kwargs)

        def run() -> None:
            try:
                getattr(ep, method)(**args)
            except Exception:  # a cast has nobody to answer to: log it
                LOG.exception("cast %s.%s failed", topic, method)

        self._pool.submit(run)

    def serve(self, topic: str, server: str | None, endpoint: object) -> Server:
        return _LocalServer(self, (topic, server), endpoint)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class LinkServer:
    """The parent's end of an API worker's link: each JSON line on ``sock`` is a call or
    cast, run on ``transport`` by one of ``threads`` (as many as the worker's request
    threads); each answer is a JSON line naming its call."""

    def __init__(self, transport: LocalTransport, sock: socket.socket, threads: int) -> None:
        self._transport, self._sock = transport, sock
        self._send = threading.Lock()
        self._pool = futures.ThreadPoolExecutor(max_workers=threads,
                                                thread_name_prefix="acceld-link")
        self._reader = threading.Thread(target=self._read, name="acceld-link", daemon=True)

    def start(self) -> None:
        self._reader.start()

    def _read(self) -> None:
        with self._sock.makefile("rb") as lines:
            for line in lines:        # until the worker closes its end (or exits)
                self._pool.submit(self._answer, json.loads(line))

    def _answer(self, ask: dict[str, Any]) -> None:
        topic, server, method, kwargs = ask["topic"], ask["server"], ask["method"], ask["kwargs"]
        answer: dict[str, Any] = {"id": ask["id"]}
        bus = self._transport
        try:     # the worker's caller gets an answer whatever happens
            answer["result"] = _served(topic, server, method, lambda: (
                bus.cast(topic, server, method, kwargs) if ask["cast"]
                else bus.call(topic, server, method, kwargs, ask["timeout"])))
        except exception.AccelDError as exc:
            answer["error"], answer["message"] = type(exc).__name__, exc.message
        data = json.dumps(answer).encode() + b"\n"
        try:
            with self._send:
                self._sock.sendall(data)
        except OSError:       # the worker is gone; its caller went with it
            LOG.debug("API worker link closed before %s was answered", method)

    def stop(self) -> None:
        _close(self._sock)
        self._reader.join(5)
        self._pool.shutdown(wait=True, cancel_futures=True)


class LinkTransport:
    """An API worker's transport: numbered calls and casts over ``sock`` to the parent's
    :class:`LinkServer`, behaving as on its bus; HostUnreachable once the parent is gone."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send = threading.Lock()
        self._numbers = itertools.count()
        self._waiting: dict[int, futures.Future[dict[str, Any]]] = {}
        self._gone = False
        threading.Thread(target=self._read, name="acceld-link", daemon=True).start()

    def _read(self) -> None:
        with self._sock.makefile("rb") as lines:
            for line in lines:
                answer = json.loads(line)
                waiting = self._waiting.pop(answer["id"], None)
                if waiting is not None:
                    waiting.set_result(answer)
        self._gone = True
        for number in list(self._waiting):
            waiting = self._waiting.pop(number, None)
            if waiting is not None:
                waiting.set_result({"error": "HostUnreachable",
                                    "message": "the acceld serve process is gone"})

    def _ask(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any],
             timeout: float | None, cast: bool) -> Any:
        number = next(self._numbers)
        waiting: futures.Future[dict[str, Any]] = futures.Future()
        self._waiting[number] = waiting
        data = json.dumps({"id": number, "cast": cast, "topic": topic, "server": server,
                           "method": method, "kwargs": kwargs, "timeout": timeout})
        try:
            if self._gone:
                raise OSError("closed")
            with self._send:
                self._sock.sendall(data.encode() + b"\n")
        except OSError:
            self._waiting.pop(number, None)
            raise exception.HostUnreachable(
                f"{topic}.{server or '*'} is unreachable ({method}): the acceld serve "
                "process is gone") from None
        answer = waiting.result()
        if "error" in answer:
            kind = getattr(exception, answer["error"], None)
            if not (isinstance(kind, type) and issubclass(kind, exception.AccelDError)):
                kind = exception.RemoteFailure
            raise kind(answer["message"])
        return answer.get("result")

    def call(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any],
             timeout: float | None = None) -> Any:
        return self._ask(topic, server, method, kwargs, timeout, cast=False)

    def cast(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any]) -> None:
        self._ask(topic, server, method, kwargs, None, cast=True)

    def close(self) -> None:
        _close(self._sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class _EndpointAdapter:
    """``endpoint``'s public methods with oslo.messaging's (ctxt, **kw) signature, through
    :func:`_served` (not sending an error's text and traceback to the caller)."""

    def __init__(self, endpoint: object, topic: str = "acceld", server: str | None = None) -> None:
        self._endpoint = endpoint
        self._where = (topic, server)
        from oslo_messaging import Target
        self.target = Target(version=RPC_API_VERSION)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._endpoint, name)
        from oslo_messaging import expected_exceptions

        # Domain errors are answers (a 404, a 409), not server faults: no ERROR traceback.
        topic, server = self._where

        @expected_exceptions(exception.AccelDError)
        def invoke(ctxt: dict[str, Any], **kwargs: Any) -> Any:
            return _served(topic, server, name, lambda: method(**kwargs))
        self.__dict__[name] = invoke   # found without __getattr__ from now on
        return invoke


class MessagingTransport:
    """oslo.messaging over ``transport_url`` (RabbitMQ)."""

    def __init__(self, conf: cfg.ConfigOpts, url: str | None = None) -> None:
        import oslo_messaging
        self._om = oslo_messaging
        # oslo.messaging registers options on the ConfigOpts it is handed, and its tracing
        # options on the global CONF at import; both must exist before a client is used.
        self._transport = oslo_messaging.get_rpc_transport(
            conf, url=url, allowed_remote_exmods=["acceld.exception"])
        self._default_timeout = conf.rpc_timeout
        self._clients: dict[tuple[str, str | None, float | None, bool], Any] = {}
        self._lock = threading.Lock()
        # A call is published "mandatory": when no queue is bound for its topic (nothing
        # has served it since the broker started: a conductor not started yet, an agent
        # host that never ran) the broker returns it at once, and the call fails then
        # instead of after its whole timeout. Casts stay fire-and-forget.
        self._mandatory = oslo_messaging.TransportOptions(at_least_once=True)

    def _client(self, topic: str, server: str | None, timeout: float | None,
                mandatory: bool) -> Any:
        key = (topic, server, timeout, mandatory)
        with self._lock:
            if key not in self._clients:
                target = self._om.Target(exchange=EXCHANGE, topic=topic, server=server,
                                         version=RPC_API_VERSION)
                self._clients[key] = self._om.get_rpc_client(
                    self._transport, target, timeout=timeout or self._default_timeout,
                    transport_options=self._mandatory if mandatory else None)
            return self._clients[key]

    def call(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any],
             timeout: float | None = None) -> Any:
        try:
            return self._client(topic, server, timeout, True).call({}, method, **kwargs)
        except exception.AccelDError as exc:
            # oslo.messaging rebuilds a remote error as a "<Class>_Remote" subclass whose
            # str() carries the server's traceback; callers (and API clients) get the plain
            # domain exception instead.
            if type(exc).__name__.endswith("_Remote"):
                raise type(exc).__mro__[1](exc.message) from None
            raise
        except self._om.RemoteError as exc:
            # not a domain error (a server of this version sends a RemoteFailure for
            # those, _EndpointAdapter): its text (a traceback, SQL) stays with the
            # services and their logs; the caller gets a clean message
            LOG.warning("%s.%s failed in %s: %s: %s", topic, server or "*", method,
                        exc.exc_type, exc.value)
            raise _remote_failure(topic, server, method) from None
        except self._om.MessagingTimeout as exc:
            raise exception.HostUnreachable(
                f"{topic}.{server or '*'} did not answer {method} in time") from exc
        except self._om.MessageUndeliverable as exc:
            raise exception.HostUnreachable(
                f"nothing serves {topic}.{server or '*'}: {method} was not delivered") from exc
        except self._om.MessagingException as exc:
            LOG.warning("%s.%s: %s failed: %s", topic, server or "*", method, exc)
            raise exception.HostUnreachable(
                f"{topic}.{server or '*'} is unreachable ({method}).") from exc

    def cast(self, topic: str, server: str | None, method: str, kwargs: dict[str, Any]) -> None:
        try:
            self._client(topic, server, None, False).cast({}, method, **kwargs)
        except self._om.MessagingException as exc:
            LOG.warning("%s.%s: cast %s failed: %s", topic, server or "*", method, exc)
            raise exception.HostUnreachable(
                f"{topic}.{server or '*'} is unreachable ({method}).") from exc

    def serve(self, topic: str, server: str | None, endpoint: object) -> Server:
        target = self._om.Target(exchange=EXCHANGE, topic=topic, server=server,
                                 version=RPC_API_VERSION)
        return self._om.get_rpc_server(self._transport, target,
                                       [_EndpointAdapter(endpoint, topic, server)],
                                       executor="threading")

    def close(self) -> None:
        self._transport.cleanup()


def make_transport(conf: cfg.ConfigOpts) -> Transport:
    """oslo.messaging when ``transport_url`` is set, otherwise the in-process bus."""
    if conf.transport_url:
        return MessagingTransport(conf)
    return LocalTransport()


class ConductorClient:
    """What the API and the agents may ask of the conductors. Calls go to the shared
    topic, where any conductor takes them (and forwards one about a host it does not own
    to the owner), or, once a report's answer named the owner of the agent's host, to that
    conductor's own topic; one it does not answer goes to the shared topic again (every
    agent call is idempotent: the journal re-delivers them anyway). Casts always go to the
    shared topic: a cast to a dead owner would wait in its queue."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport
        self._owner: str | None = None   # the owner of the host this agent reports for

    def _call(self, method: str, timeout: float | None = None, **kwargs: Any) -> Any:
        owner = self._owner
        if owner is not None:
            try:
                return self._t.call(CONDUCTOR_TOPIC, owner, method, kwargs, timeout)
            except exception.HostUnreachable as exc:
                LOG.info("conductor %s did not take %s (%s); asking any conductor", owner,
                         method, exc)
                self._owner = None
        return self._t.call(CONDUCTOR_TOPIC, None, method, kwargs, timeout)

    def report_inventory(self, report: dict[str, Any]) -> dict[str, Any]:
        answer = self._call("report_inventory", report=report)
        if answer.get("conductor"):
            self._owner = answer["conductor"]
        return answer

    def forward(self, conductor: str, method: str, kwargs: dict[str, Any],
                cast: bool = False) -> Any:
        """A conductor hands ``method`` about a host it does not own to the owner, which
        runs it whatever its own view of the ring (one hop, never a loop)."""
        ask = {"operation": method, "arguments": kwargs}   # "method" is oslo.messaging's
        if cast:
            return self._t.cast(CONDUCTOR_TOPIC, conductor, "forwarded", ask)
        return self._t.call(CONDUCTOR_TOPIC, conductor, "forwarded", ask)

    def _cast_or_log(self, method: str, kwargs: dict[str, Any], level: int,
                     lost: str, *args: Any) -> None:
        """A cast whose loss is survivable: logged with ``lost``, not raised."""
        try:
            self._t.cast(CONDUCTOR_TOPIC, None, method, kwargs)
        except exception.HostUnreachable:
            LOG.log(level, "conductor unreachable: " + lost, *args)

    def host_changed(self, host: str) -> None:
        """Something the API wrote changes what Placement should show for ``host``."""
        self._cast_or_log("host_changed", {"host": host}, logging.WARNING,
                          "%s is synced on the next periodic pass", host)

    def agent_restarted(self, host: str) -> None:
        """``host``'s agent started: what it was doing is over (hot plug settles it)."""
        self._cast_or_log("agent_restarted", {"host": host}, logging.WARNING,
                          "%s's hot-plugged devices are checked on the next periodic pass",
                          host)

    def heartbeat(self, host: str, binary: str, version: str) -> None:
        """Stamped: a late delivery must not make a dead agent look alive."""
        self._t.cast(CONDUCTOR_TOPIC, None, "heartbeat",
                     {"host": host, "binary": binary, "version": version,
                      "sent_at": time.time()})

    def operation_done(self, op_id: str, device_uuid: str, ok: bool,
                       error: str | None) -> dict[str, Any]:
        return self._call("operation_done", op_id=op_id, device_uuid=device_uuid, ok=ok,
                          error=error)

    def create_accelerator(self, name: str, uuid: str | None) -> dict[str, Any]:
        return self._call("create_accelerator", name=name, uuid=uuid)

    def set_state(self, uuid: str, state: str) -> dict[str, Any]:
        return self._call("set_state", uuid=uuid, state=state)

    def attach(self, uuid: str, attach_type: str, target: str,
               project_id: str | None = None) -> dict[str, Any]:
        return self._call("attach", uuid=uuid, attach_type=attach_type, target=target,
                          project_id=project_id)

    def detach(self, uuid: str, project_id: str | None = None) -> None:
        self._call("detach", uuid=uuid, project_id=project_id)

    def hot_attach(self, uuid: str, instance_uuid: str,
                   project_id: str | None = None) -> dict[str, Any]:
        return self._call("hot_attach", uuid=uuid, instance_uuid=instance_uuid,
                          project_id=project_id)

    def hot_detach(self, uuid: str, project_id: str | None = None) -> dict[str, Any]:
        return self._call("hot_detach", uuid=uuid, project_id=project_id)

    def guests(self, host: str | None) -> dict[str, Any]:
        return self._call("guests", host=host)

    def discover(self, host: str | None) -> list[str]:
        return self._call("discover", host=host)

    def driver_action(self, name: str, action: str, host: str | None) -> list[dict[str, Any]]:
        return self._call("driver_action", name=name, action=action, host=host)

    def placement_sync(self, host: str | None, dry_run: bool) -> list[dict[str, Any]]:
        return self._call("placement_sync", host=host, dry_run=dry_run)

    def arq_bind(self, patch: dict[str, dict[str, str]], project_id: str | None) -> None:
        """Bind ARQs: uuid -> {hostname, device_rp_uuid, instance_uuid, project_id}."""
        self._call("arq_bind", patch=patch, project_id=project_id)

    def arq_unbind(self, uuids: list[str], project_id: str | None) -> None:
        self._call("arq_unbind", uuids=uuids, project_id=project_id)

    def release_handles(self, handles: list[dict[str, Any]]) -> None:
        """A cast: host clean-up of attach handles a delete freed."""
        self._cast_or_log("release_handles", {"handles": handles}, logging.WARNING,
                          "the host set-up of %d freed attach handle(s) stays until a "
                          "bind prepares them again (prepare is idempotent)", len(handles))

    def program_deployable(self, deployable_uuid: str, image_ref: str,
                           image_sha256: str) -> dict[str, Any]:
        """Queue an FPGA program operation; returns the operation (state ``queued``)."""
        return self._call("program_deployable", deployable_uuid=deployable_uuid,
                          image_ref=image_ref, image_sha256=image_sha256)

    def program_progress(self, op_id: str, progress: int, message: str) -> None:
        """A cast: progress is advisory (a lost one is overtaken by the next)."""
        self._cast_or_log("program_progress",
                          {"op_id": op_id, "progress": progress, "message": message},
                          logging.DEBUG, "progress of program %s not delivered", op_id)

    def program_done(self, op_id: str, ok: bool, error: str | None) -> dict[str, Any]:
        return self._call("program_done", op_id=op_id, ok=ok, error=error)

    def device_stats(self, uuid: str) -> dict[str, Any]:
        return self._call("device_stats", uuid=uuid)

    def device_health(self, uuid: str, action: str, reason: str) -> dict[str, Any]:
        """quarantine | release | reset one device (acceld.states.HEALTH_ACTIONS)."""
        return self._call("device_health", uuid=uuid, action=action, reason=reason)

    def device_maintenance(self, uuid: str, change: str, reason: str) -> dict[str, Any]:
        """drain | undrain one device (acceld.states.MAINTENANCE_TRANSITIONS)."""
        return self._call("device_maintenance", uuid=uuid, change=change, reason=reason)


class AgentClient:
    """What the conductor may ask of the agent on one host."""

    def __init__(self, transport: Transport, timeout: float | None = None) -> None:
        self._t = transport
        self._timeout = timeout

    def _call(self, host: str, method: str, **kwargs: Any) -> Any:
        return self._t.call(AGENT_TOPIC, host, method, kwargs, self._timeout)

    def discover_now(self, host: str) -> None:
        self._t.cast(AGENT_TOPIC, host, "discover_now", {})

    def run_operation(self, host: str, op: dict[str, Any]) -> None:
        self._t.cast(AGENT_TOPIC, host, "run_operation", {"op": op})

    def run_program(self, host: str, op: dict[str, Any]) -> None:
        self._t.cast(AGENT_TOPIC, host, "run_program", {"op": op})

    def driver_action(self, host: str, name: str, action: str) -> dict[str, Any]:
        return self._call(host, "driver_action", name=name, action=action)

    def host_attachment(self, host: str, driver: str, identity: str,
                        attach: bool) -> dict[str, Any]:
        return self._call(host, "host_attachment", driver=driver, identity=identity, attach=attach)

    def prepare_handle(self, host: str, driver: str, identity: str,
                       attach_info: dict[str, str], handle_uuid: str) -> dict[str, Any]:
        """Host-side binding of one attach handle: {"ok", "error", "attach_info"}."""
        return self._call(host, "prepare_handle", driver=driver, identity=identity,
                          attach_info=attach_info, handle_uuid=handle_uuid)

    def release_handle(self, host: str, driver: str, identity: str,
                       attach_info: dict[str, str], handle_uuid: str) -> dict[str, Any]:
        return self._call(host, "release_handle", driver=driver, identity=identity,
                          attach_info=attach_info, handle_uuid=handle_uuid)

    def device_stats(self, host: str, driver: str, identity: str) -> dict[str, float]:
        return self._call(host, "device_stats", driver=driver, identity=identity)

    def reset_device(self, host: str, driver: str, identity: str) -> dict[str, Any]:
        """The driver's reset of one device, blocking until done: {"ok", "error"}."""
        return self._call(host, "reset_device", driver=driver, identity=identity)

    def guests(self, host: str) -> list[dict[str, Any]]:
        """The guests of ``host``: [{"uuid", "name", "running", "aliases"}]."""
        return self._call(host, "guests")

    def attach_to_guest(self, host: str, instance_uuid: str, arq_uuid: str,
                        attach_type: str, attach_info: dict[str, str],
                        handle_uuid: str) -> dict[str, Any]:
        """Live attach of an ARQ's device; the guest after (as :meth:`guests`)."""
        return self._call(host, "attach_to_guest", instance_uuid=instance_uuid,
                          arq_uuid=arq_uuid, attach_type=attach_type,
                          attach_info=attach_info, handle_uuid=handle_uuid)

    def detach_from_guest(self, host: str, instance_uuid: str, arq_uuid: str) -> str:
        """Live detach: "removed", "pending" (the guest kept the device so far) or
        "absent" (no such device on the guest)."""
        return self._call(host, "detach_from_guest", instance_uuid=instance_uuid,
                          arq_uuid=arq_uuid)
