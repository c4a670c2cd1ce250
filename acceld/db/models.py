"""SQLAlchemy models: the Cyborg v2 schema and the seed's v1 fields as one model.

A device an agent discovers is one ``devices`` row; the v1 API shows it as an
accelerator and the v2 API as a device. v1-only fields (life cycle ``state``, ``health``,
``acc_specs``, ``revision``, attachment) are columns of the same row.
"""

from __future__ import annotations

import datetime

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime.datetime:
    """Naive UTC now: every timestamp in the database is naive UTC."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


# driver_states.capabilities: room for every capability (tests/unit/test_reports.py)
CAPABILITIES_LENGTH = 255


class _Row:
    """Every table's id (first) and timestamps, but ``generations``."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-1)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime, onupdate=utcnow)


class Service(_Row, Base):
    """A running acceld process (agent or conductor) and the host's report bookmark."""

    __tablename__ = "services"
    __table_args__ = (UniqueConstraint("host", "binary", name="uniq_services0host0binary"),)

    host: Mapped[str] = mapped_column(String(255))
    binary: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(64), default="")
    last_seen_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    report_epoch: Mapped[str | None] = mapped_column(String(64))
    report_seq: Mapped[int | None] = mapped_column(Integer)
    report_digest: Mapped[str | None] = mapped_column(String(64))
    provider_name: Mapped[str | None] = mapped_column(String(255))
    # an agent's: its compute node's uuid as Nova keeps it (its provider's in Placement)
    compute_node_uuid: Mapped[str | None] = mapped_column(String(36))
    # an agent's: the conductor that owns its host (it recorded the last heartbeat)
    conductor: Mapped[str | None] = mapped_column(String(255))


class PlacementSync(_Row, Base):
    """Per host: what acceld last wrote to Placement and whether it matches."""

    __tablename__ = "placement_sync"
    __table_args__ = (UniqueConstraint("host", name="uniq_placement_sync0host"),)

    host: Mapped[str] = mapped_column(String(255))
    compute_rp_uuid: Mapped[str | None] = mapped_column(String(36))
    provider_digests: Mapped[str] = mapped_column(Text, default="{}")
    provider_generations: Mapped[str | None] = mapped_column(Text)
    in_sync: Mapped[bool] = mapped_column(Boolean, default=False)
    last_synced_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    last_attempt_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    conflicts: Mapped[str] = mapped_column(Text, default="[]")
    next_retry_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class DriverState(_Row, Base):
    """What an agent says about one of its drivers (for driver-list)."""

    __tablename__ = "driver_states"
    __table_args__ = (UniqueConstraint("host", "name", name="uniq_driver_states0host0name"),)

    host: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(64), default="")
    state: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    device_count: Mapped[int] = mapped_column(Integer, default=0)
    # JSON: the driver's explanation of its last discovery (checks, expected/found,
    # skipped devices) and what it can do beyond discovery (host_work, program)
    explanation: Mapped[str | None] = mapped_column(Text)
    # the canonical JSON list of the driver's capabilities (a few names of a fixed set):
    # VARCHAR, so a sorted read that selects it stays off an on-disk temporary table on
    # MariaDB (migration 0006)
    capabilities: Mapped[str | None] = mapped_column(String(CAPABILITIES_LENGTH))


class Device(_Row, Base):
    __tablename__ = "devices"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_devices0uuid"),
        UniqueConstraint("name", name="uniq_devices0name"),
        UniqueConstraint("hostname", "driver_name", "identity",
                         name="uniq_devices0hostname0driver0identity"),
        Index("devices_hostname_idx", "hostname"),
    )

    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    hostname: Mapped[str | None] = mapped_column(String(255))
    driver_name: Mapped[str | None] = mapped_column(String(64))
    identity: Mapped[str | None] = mapped_column(String(255))
    type: Mapped[str | None] = mapped_column(String(16))
    vendor: Mapped[str | None] = mapped_column(String(255))
    model: Mapped[str | None] = mapped_column(String(255))
    std_board_info: Mapped[str | None] = mapped_column(Text)
    vendor_board_info: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="enabled")
    state: Mapped[str] = mapped_column(String(16), default="inactive")
    health: Mapped[str] = mapped_column(String(16), default="ok")
    health_reasons: Mapped[str | None] = mapped_column(Text)   # JSON list from the driver
    acc_specs: Mapped[str] = mapped_column(Text, default="{}")
    revision: Mapped[int] = mapped_column(Integer, default=1)
    attach_type: Mapped[str | None] = mapped_column(String(16))
    attached_to: Mapped[str | None] = mapped_column(String(255))
    # the project whose request attached it to an instance (None: an admin's, or a host)
    attached_project_id: Mapped[str | None] = mapped_column(String(255))
    # an instance attachment's hot-plug substate (acceld.states HOT_*, docs/hot-plug.md):
    # being attached, attached, or its detach asked; None for a host attachment or none
    hot_plug: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    op_id: Mapped[str | None] = mapped_column(String(36))
    op_started_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    # the health life cycle (acceld.states LIFECYCLE_*, docs/health.md) and since when
    lifecycle: Mapped[str] = mapped_column(String(16), default="healthy",
                                           server_default="healthy")
    lifecycle_reason: Mapped[str | None] = mapped_column(Text)
    lifecycle_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    # JSON {name: count} of the driver's error counters in the last applied report: the
    # baseline the next report's counters are compared with
    health_counters: Mapped[str | None] = mapped_column(Text)
    # an operator's drain: no new binds, existing ones kept
    maintenance: Mapped[bool] = mapped_column(Boolean, default=False)
    maintenance_reason: Mapped[str | None] = mapped_column(Text)
    maintenance_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class ControlpathID(_Row, Base):
    __tablename__ = "controlpath_ids"
    __table_args__ = (UniqueConstraint("uuid", name="uniq_controlpath_ids0uuid"),
                      Index("controlpath_ids_device_id_idx", "device_id"))

    uuid: Mapped[str] = mapped_column(String(36))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="RESTRICT"))
    cpid_type: Mapped[str] = mapped_column(String(16))
    cpid_info: Mapped[str] = mapped_column(String(255))


class Deployable(_Row, Base):
    __tablename__ = "deployables"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_deployables0uuid"),
        UniqueConstraint("device_id", "name", name="uniq_deployables0device0name"),
        # every bind finds its deployable by the resource provider Nova names
        Index("deployables_rp_uuid_idx", "rp_uuid"),
        Index("deployables_parent_id_idx", "parent_id"),
        Index("deployables_root_id_idx", "root_id"),
    )

    uuid: Mapped[str] = mapped_column(String(36))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("deployables.id",
                                                             ondelete="RESTRICT"))
    root_id: Mapped[int | None] = mapped_column(ForeignKey("deployables.id",
                                                           ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(255))
    num_accelerators: Mapped[int] = mapped_column(Integer)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="RESTRICT"))
    rp_uuid: Mapped[str | None] = mapped_column(String(36))
    driver_name: Mapped[str | None] = mapped_column(String(100))
    bitstream_id: Mapped[str | None] = mapped_column(String(36))


class Attribute(_Row, Base):
    __tablename__ = "attributes"
    __table_args__ = (UniqueConstraint("uuid", name="uniq_attributes0uuid"),
                      Index("attributes_deployable_id_idx", "deployable_id"))

    uuid: Mapped[str] = mapped_column(String(36))
    deployable_id: Mapped[int] = mapped_column(ForeignKey("deployables.id",
                                                          ondelete="RESTRICT"))
    key: Mapped[str] = mapped_column(Text)
    value: Mapped[str] = mapped_column(Text)


class AttachHandle(_Row, Base):
    __tablename__ = "attach_handles"
    __table_args__ = (UniqueConstraint("uuid", name="uniq_attach_handles0uuid"),
                      Index("attach_handles_deployable_id_idx", "deployable_id"),
                      Index("attach_handles_cpid_id_idx", "cpid_id"))

    uuid: Mapped[str] = mapped_column(String(36))
    deployable_id: Mapped[int] = mapped_column(ForeignKey("deployables.id",
                                                          ondelete="RESTRICT"))
    cpid_id: Mapped[int] = mapped_column(ForeignKey("controlpath_ids.id",
                                                    ondelete="RESTRICT"))
    in_use: Mapped[bool] = mapped_column(Boolean, default=False)
    attach_type: Mapped[str] = mapped_column(String(16))
    attach_info: Mapped[str] = mapped_column(String(255))


class DeviceProfile(_Row, Base):
    __tablename__ = "device_profiles"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_device_profiles0uuid"),
        UniqueConstraint("name", name="uniq_device_profiles0name"),
    )

    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    profile_json: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)


class ExtendedAcceleratorRequest(_Row, Base):
    """An ARQ: one accelerator requested for an instance (Cyborg v2)."""

    __tablename__ = "extended_accelerator_requests"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_extended_accelerator_requests0uuid"),
        Index("extended_accelerator_requests_project_id_idx", "project_id"),
        Index("extended_accelerator_requests_instance_uuid_idx", "instance_uuid"),
        Index("extended_accelerator_requests_device_profile_id_idx", "device_profile_id"),
        Index("extended_accelerator_requests_attach_handle_id_idx", "attach_handle_id"),
        Index("extended_accelerator_requests_deployable_id_idx", "deployable_id"),
    )

    uuid: Mapped[str] = mapped_column(String(36))
    project_id: Mapped[str | None] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), default="Initial")
    device_profile_id: Mapped[int] = mapped_column(ForeignKey("device_profiles.id",
                                                              ondelete="RESTRICT"))
    device_profile_group_id: Mapped[int] = mapped_column(Integer)
    hostname: Mapped[str | None] = mapped_column(String(255))
    device_rp_uuid: Mapped[str | None] = mapped_column(String(36))
    instance_uuid: Mapped[str | None] = mapped_column(String(36))
    attach_handle_id: Mapped[int | None] = mapped_column(ForeignKey("attach_handles.id",
                                                                    ondelete="RESTRICT"))
    deployable_id: Mapped[int | None] = mapped_column(ForeignKey("deployables.id",
                                                                 ondelete="RESTRICT"))
    substate: Mapped[str] = mapped_column(String(16), default="Initial")


class ProgramOperation(_Row, Base):
    """One FPGA program request; unique ``active_key``: one at a time per deployable."""

    __tablename__ = "program_operations"
    __table_args__ = (
        UniqueConstraint("uuid", name="uniq_program_operations0uuid"),
        UniqueConstraint("active_key", name="uniq_program_operations0active_key"),
        Index("program_operations_deployable_uuid_idx", "deployable_uuid"),
    )

    uuid: Mapped[str] = mapped_column(String(36))
    deployable_uuid: Mapped[str] = mapped_column(String(36))
    device_uuid: Mapped[str] = mapped_column(String(36))
    host: Mapped[str] = mapped_column(String(255))
    driver_name: Mapped[str] = mapped_column(String(64))
    identity: Mapped[str] = mapped_column(String(255))
    image_ref: Mapped[str] = mapped_column(String(1024))       # Glance id or local path
    image_sha256: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    progress: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str | None] = mapped_column(Text)
    active_key: Mapped[str | None] = mapped_column(String(36))
    # the ARQ whose bind this programming is part of (None: an operator's request)
    arq_uuid: Mapped[str | None] = mapped_column(String(36))
    started_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class BindWait(_Row, Base):
    """An instance whose ARQ binds Nova waits to hear about, until ``deadline``: whoever
    deletes the row (matching ``token``) tells Nova, once."""

    __tablename__ = "bind_waits"
    __table_args__ = (
        UniqueConstraint("instance_uuid", name="uniq_bind_waits0instance_uuid"),
        Index("bind_waits_deadline_idx", "deadline"),
    )

    instance_uuid: Mapped[str] = mapped_column(String(36))
    token: Mapped[str] = mapped_column(String(36))       # one per bind request
    host: Mapped[str] = mapped_column(String(255))       # its conductor owns the wait
    arq_uuids: Mapped[str] = mapped_column(Text)         # JSON list
    deadline: Mapped[datetime.datetime] = mapped_column(DateTime)


class LedgerEntry(Base):
    """One line of the allocation ledger (``acceld.objects.ledger``): append-only, never
    updated; no foreign key, so it outlives the ARQ, device and instance it names."""

    __tablename__ = "ledger"
    __table_args__ = (
        Index("ledger_at_idx", "at"),
        Index("ledger_project_id_at_idx", "project_id", "at"),
        Index("ledger_device_uuid_idx", "device_uuid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime.datetime] = mapped_column(DateTime)            # naive UTC
    event: Mapped[str] = mapped_column(String(16))       # bind | unbind | attach | detach
    kind: Mapped[str] = mapped_column(String(32))        # arq | hot_plug | accelerator | ...
    device_uuid: Mapped[str] = mapped_column(String(36))
    deployable_uuid: Mapped[str | None] = mapped_column(String(36))
    attach_handle_uuid: Mapped[str | None] = mapped_column(String(36))
    arq_uuid: Mapped[str | None] = mapped_column(String(36))
    instance_uuid: Mapped[str | None] = mapped_column(String(36))
    host: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str | None] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)


class Generation(Base):
    """A counter per cached view (``acceld.db.generations``)."""

    __tablename__ = "generations"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, default=0)


INVENTORY_TABLES = ("devices", "controlpath_ids", "deployables", "attributes",
                    "attach_handles", "driver_states")

# MySQL and MariaDB: every table in utf8mb4 (4-byte UTF-8: any Unicode character) with a
# binary collation, so text is stored and compared exactly as on PostgreSQL and SQLite
# (migration 0009 converts the tables of an existing database; the connection is utf8mb4
# too, acceld.db.api). The largest index, devices (hostname, driver_name, identity), is
# 574 characters: 2296 bytes, within InnoDB's 3072.
MYSQL_CHARSET, MYSQL_COLLATION = "utf8mb4", "utf8mb4_bin"
for _table in Base.metadata.tables.values():
    _table.dialect_kwargs.update(mysql_charset=MYSQL_CHARSET, mysql_collate=MYSQL_COLLATION)
