"""driver explanations and capabilities, device health reasons, FPGA program operations

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("driver_states", schema=None) as batch_op:
        batch_op.add_column(sa.Column("explanation", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("capabilities", sa.Text(), nullable=True))
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("health_reasons", sa.Text(), nullable=True))
    op.create_table(
        "program_operations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("deployable_uuid", sa.String(length=36), nullable=False),
        sa.Column("device_uuid", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("driver_name", sa.String(length=64), nullable=False),
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("image_ref", sa.String(length=1024), nullable=False),
        sa.Column("image_sha256", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("progress", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("active_key", sa.String(length=36), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid", name="uniq_program_operations0uuid"),
        sa.UniqueConstraint("active_key", name="uniq_program_operations0active_key"),
    )
    with op.batch_alter_table("program_operations", schema=None) as batch_op:
        batch_op.create_index("program_operations_deployable_uuid_idx", ["deployable_uuid"],
                              unique=False)
