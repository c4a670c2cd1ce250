"""Deterministic identities: the same hardware always gets the same UUIDs."""

from __future__ import annotations

import uuid

_NS = uuid.UUID("6c8a3b8e-2f0d-4f4e-9d35-5a0c1e7b2a11")


def device_uuid(host: str, driver: str, identity: str) -> str:
    return str(uuid.uuid5(_NS, f"device/{host}/{driver}/{identity}"))


def controlpath_uuid(device_uuid_: str) -> str:
    return str(uuid.uuid5(_NS, f"cpid/{device_uuid_}"))


def deployable_uuid(device_uuid_: str, name: str) -> str:
    return str(uuid.uuid5(_NS, f"deployable/{device_uuid_}/{name}"))


def rp_uuid(deployable_uuid_: str) -> str:
    """The Placement resource provider UUID of a deployable."""
    return str(uuid.uuid5(_NS, f"rp/{deployable_uuid_}"))


def attach_handle_uuid(deployable_uuid_: str, info_key: str) -> str:
    return str(uuid.uuid5(_NS, f"handle/{deployable_uuid_}/{info_key}"))


def attribute_uuid(deployable_uuid_: str, key: str) -> str:
    return str(uuid.uuid5(_NS, f"attribute/{deployable_uuid_}/{key}"))
