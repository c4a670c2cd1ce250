"""The :class:`~acceld.virt.hypervisor.Hypervisor` of a host that runs libvirtd: guests
are domains found by Nova's instance UUID. A detach is done only when libvirt's
device-removed event names the device's alias, hence libvirt's event loop
(:func:`start_event_loop`)."""

from __future__ import annotations

import contextlib
import threading
import xml.etree.ElementTree as ET

from acceld import exception, uuids
from acceld.virt import devicexml
from acceld.virt.hypervisor import ABSENT, PENDING, REMOVED, Guest

try:
    import libvirt
except ImportError:  # the agent of a host without libvirt never builds this class
    libvirt = None

_loop_lock = threading.Lock()
_loop_started = False


def start_event_loop() -> None:
    """Runs libvirt's default event loop in a daemon thread, once per process and before
    the first connection opens (one opened before gets no events)."""
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        # libvirt's errors come back as exceptions: no printing to stderr too
        libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
        libvirt.virEventRegisterDefaultImpl()
        threading.Thread(target=_run_event_loop, args=(libvirt.virEventRunDefaultImpl,),
                         name="libvirt-events", daemon=True).start()
        _loop_started = True


def _run_event_loop(run_once) -> None:
    while True:
        run_once()


def _aliases(domain_xml: str) -> set[str]:
    """The device aliases of a domain's XML."""
    return {a.get("name", "") for a in ET.fromstring(domain_xml).iterfind("devices/*/alias")}


def _alias_of(device_xml: str) -> str:
    alias = ET.fromstring(device_xml).find("alias")
    if alias is None or not alias.get("name"):
        raise ValueError("the device XML has no <alias name=...>")
    return alias.get("name")


def _call(method, *args):
    """``method(*args)`` with a libvirt error turned into HypervisorError."""
    try:
        return method(*args)
    except libvirt.libvirtError as e:
        raise exception.HypervisorError(e.get_error_message() or str(e)) from None


class LibvirtHypervisor:
    """Guests and live attach/detach on the libvirtd at ``uri``."""

    def __init__(self, uri: str) -> None:
        if libvirt is None:
            raise exception.HypervisorError(
                "libvirt-python is not installed (pip install 'acceld[libvirt]')")
        start_event_loop()
        self._uri = uri
        self._events = threading.Condition()
        # (domain, alias) of the unplugs not yet done -> libvirt's event ("removed",
        # "failed"; None: none yet)
        self._asked: dict[tuple[str, str], str | None] = {}
        self._conn = None
        self._callbacks: list[int] = []
        self._conn_lock = threading.Lock()
        self._connection()

    def _connection(self):
        """The connection, opened again (with its event callbacks) when libvirtd went
        away and came back; an unplug asked for meanwhile is found done by its absence
        from the live definition."""
        with self._conn_lock:
            if self._conn is not None and self._conn.isAlive():
                return self._conn
            self.close()
            self._conn = _call(libvirt.open, self._uri)
            self._callbacks = [
                _call(self._conn.domainEventRegisterAny, None, event, self._on_event, which)
                for event, which in (
                    (libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, "removed"),
                    (libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED, "failed"))]
            return self._conn

    def _on_event(self, _conn, dom, alias: str, which: str) -> None:
        """Notes the answer to an unplug this object asked for (others are not kept)."""
        key = (dom.UUIDString(), alias)
        with self._events:
            if key in self._asked:
                self._asked[key] = which
                self._events.notify_all()

    # -- guests --------------------------------------------------------------------------
    def _domain(self, instance_uuid: str):
        uuid = uuids.canonical(str(instance_uuid))
        try:
            if uuid is not None:
                return self._connection().lookupByUUIDString(uuid)
        except libvirt.libvirtError as e:
            if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                raise exception.HypervisorError(e.get_error_message()) from None
        raise exception.GuestNotFound(f"no guest {str(instance_uuid)[:40]!r} on {self._uri}")

    def _definitions(self, dom, alias: str) -> tuple[int, int]:
        """The AFFECT flags of the domain's definitions (the live one while the guest runs,
        the persistent one when it has one), and of those among them holding ``alias``."""
        present = holding = 0
        for flag, exists, xml_flags in (
                (libvirt.VIR_DOMAIN_AFFECT_LIVE, dom.isActive, 0),
                (libvirt.VIR_DOMAIN_AFFECT_CONFIG, dom.isPersistent,
                 libvirt.VIR_DOMAIN_XML_INACTIVE)):
            if _call(exists):
                present |= flag
                if alias in _aliases(_call(dom.XMLDesc, xml_flags)):
                    holding |= flag
        return present, holding

    def _guest(self, dom) -> Guest:
        running = bool(dom.isActive())
        xml = dom.XMLDesc(0 if running else libvirt.VIR_DOMAIN_XML_INACTIVE)
        ours = sorted(a for a in _aliases(xml) if devicexml.arq_of(a))
        return Guest(dom.UUIDString(), dom.name(), running, tuple(ours))

    def guests(self) -> list[Guest]:
        found = []
        for dom in _call(self._connection().listAllDomains, 0):
            try:
                found.append(self._guest(dom))
            except libvirt.libvirtError as e:
                if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:   # gone meanwhile
                    raise exception.HypervisorError(e.get_error_message()) from None
        return found

    def guest(self, instance_uuid: str) -> Guest:
        return _call(self._guest, self._domain(instance_uuid))

    # -- attach and detach ---------------------------------------------------------------
    def attach(self, instance_uuid: str, device_xml: str) -> None:
        dom = self._domain(instance_uuid)
        alias = _alias_of(device_xml)
        # an unplug answer kept from an earlier detach of this alias is not this device's
        self._forget((dom.UUIDString(), alias))
        present, holding = self._definitions(dom, alias)
        missing = present & ~holding
        if missing:
            _call(dom.attachDeviceFlags, device_xml, missing)

    def detach(self, instance_uuid: str, alias: str, timeout: float) -> str:
        dom = self._domain(instance_uuid)
        key = (dom.UUIDString(), alias)
        present = self._definitions(dom, alias)[1]    # the definitions holding it
        live = bool(present & libvirt.VIR_DOMAIN_AFFECT_LIVE)
        with self._events:
            waiting = key in self._asked
            if live and not waiting:         # before asking: the event may come first
                self._asked[key] = None
        ask = present & ~libvirt.VIR_DOMAIN_AFFECT_LIVE if waiting else present
        try:
            if ask:
                _call(dom.detachDeviceAlias, alias, ask)
        except exception.HypervisorError:
            if live and not waiting:
                self._forget(key)
            raise
        if not live:                 # not in the guest (any more): no event to wait for
            self._forget(key)
            return REMOVED if present or waiting else ABSENT
        return self._wait(key, alias, timeout)

    def _wait(self, key: tuple[str, str], alias: str, timeout: float) -> str:
        with self._events:
            event = self._events.wait_for(lambda: self._asked.get(key), timeout)
        if event is None:
            return PENDING
        self._forget(key)
        if event == "removed":
            return REMOVED
        raise exception.HypervisorError(f"the guest refused to release device {alias}")

    def _forget(self, key: tuple[str, str]) -> None:
        with self._events:
            self._asked.pop(key, None)

    def close(self) -> None:
        if self._conn is None:
            return
        for callback in self._callbacks:
            # a connection that broke has no callbacks left
            with contextlib.suppress(libvirt.libvirtError):
                self._conn.domainEventDeregisterAny(callback)
        self._callbacks = []
        with contextlib.suppress(libvirt.libvirtError):
            self._conn.close()
        self._conn = None
