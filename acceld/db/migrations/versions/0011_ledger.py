"""allocation ledger: one append-only row per bind, unbind, attach and detach

``ledger``: who held which device, from when (``acceld.objects.ledger``). No foreign
key: a row outlives the ARQ (hard-deleted), the device and the instance it names.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from acceld.db.models import MYSQL_CHARSET, MYSQL_COLLATION

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("device_uuid", sa.String(length=36), nullable=False),
        sa.Column("deployable_uuid", sa.String(length=36), nullable=True),
        sa.Column("attach_handle_uuid", sa.String(length=36), nullable=True),
        sa.Column("arq_uuid", sa.String(length=36), nullable=True),
        sa.Column("instance_uuid", sa.String(length=36), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        mysql_charset=MYSQL_CHARSET, mysql_collate=MYSQL_COLLATION,
    )
    op.create_index("ledger_at_idx", "ledger", ["at"])
    op.create_index("ledger_project_id_at_idx", "ledger", ["project_id", "at"])
    op.create_index("ledger_device_uuid_idx", "ledger", ["device_uuid"])
