"""Microversions of the Cyborg-compatible v2 API: the list, negotiation and headers.

``OpenStack-API-Version: accelerator X.Y`` (read by microversion-parse; a bare ``X.Y`` is
accepted, as Cyborg does, and logged as deprecated); no header means the minimum, what
Nova sends. A version this service cannot serve is a 406."""

from __future__ import annotations

import functools
import logging

import microversion_parse

from acceld.api import errors

LOG = logging.getLogger(__name__)

SERVICE_TYPE = "accelerator"
HEADER = "OpenStack-API-Version"
ENV_KEY = "acceld.microversion"

# One line per version: what a client gets from that version on. Append only.
VERSIONS = [
    "2.0",  # Ussuri: the v2 API (device_profiles, accelerator_requests, deployables, devices)
    "2.1",  # Victoria: ARQ bind (PATCH) accepts /project_id
    "2.2",  # Yoga: GET /v2/device_profiles/{name_or_uuid} accepts a name
    "2.3",  # 2023.2: devices show "status"; POST /v2/devices/{uuid}/enable|disable
]

# microversion-parse's (major, minor) named tuple, ordered as versions are.
Version = microversion_parse.Version


def parse(text: str) -> Version:
    """``X.Y`` (two decimal numbers) as a :class:`Version`; ValueError for anything else."""
    parts = text.strip().split(".")
    if len(parts) != 2 or not all(part.isdecimal() for part in parts):
        raise ValueError(text)
    return microversion_parse.parse_version_string(text)


MIN_VERSION = parse(VERSIONS[0])
MAX_VERSION = parse(VERSIONS[-1])


def headers(version: Version | None) -> dict[str, str]:
    """The headers of every /v2 response (``version`` None: negotiation failed)."""
    out = {"OpenStack-API-Minimum-Version": str(MIN_VERSION),
           "OpenStack-API-Maximum-Version": str(MAX_VERSION), "Vary": HEADER}
    if version is not None:
        out[HEADER] = f"{SERVICE_TYPE} {version}"
    return out


HEADER_NAMES = frozenset(name.lower() for name in headers(MIN_VERSION))


@functools.cache
def header_items(version: Version | None) -> list[tuple[str, str]]:
    """:func:`headers` as WSGI header tuples, built once per version (a shared list)."""
    return list(headers(version).items())


def _requested(value: str | None) -> str | None:
    """The accelerator entry of the header value (microversion-parse reads it), else a
    bare ``X.Y`` entry (deprecated); None when it names no version for this service."""
    if value is None:
        return None
    version = microversion_parse.get_version({HEADER: value}, SERVICE_TYPE)
    if version is not None:
        return version
    for entry in value.split(","):
        if len(entry.split()) == 1:
            LOG.warning("Deprecated %s header without a service type: %r", HEADER, entry)
            return entry.strip()
    return None


def _not_acceptable(detail: str) -> errors.HTTPError:
    return errors.HTTPError(406, detail, "acceld.microversion", headers(None))


@functools.lru_cache(maxsize=256)
def negotiate(value: str | None) -> Version:
    """The version to serve for the header ``value``; 406 (HTTPError) when there is none.
    Answers are kept per header value (a few distinct ones in practice)."""
    requested = _requested(value)
    if requested is None:
        return MIN_VERSION
    if requested.lower() == "latest":
        return MAX_VERSION
    try:
        version = parse(requested)
    except ValueError:
        raise _not_acceptable(f"Invalid value for {HEADER} header: {requested!r} is not "
                              "'X.Y' or 'latest'.") from None
    supported = f"The supported version range is: [{MIN_VERSION}, {MAX_VERSION}]."
    if version.major != MAX_VERSION.major:
        raise _not_acceptable(f"Mutually exclusive versions requested. Version {version} "
                              f"requested but not supported by this service. {supported}")
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise _not_acceptable(f"Version {version} was requested but the minor version is "
                              f"not supported by this service. {supported}")
    return version


def of(environ: dict[str, object]) -> Version:
    """The version the router negotiated for this request."""
    version = environ.get(ENV_KEY)
    assert isinstance(version, Version), "only /v2 routes have a microversion"
    return version
