"""device health life cycle and maintenance (drain) of one device

``devices.lifecycle`` (healthy, suspect, quarantined, resetting, failed) with its reason
and time, ``devices.health_counters`` (the driver's error counters last reported: what a
rise is measured from), and ``devices.maintenance`` (an operator's drain) with its reason
and time. Existing devices start healthy and in service.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("lifecycle", sa.String(length=16), nullable=False,
                                   server_default="healthy"))
        batch.add_column(sa.Column("lifecycle_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("lifecycle_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("health_counters", sa.Text(), nullable=True))
        batch.add_column(sa.Column("maintenance", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column("maintenance_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("maintenance_at", sa.DateTime(), nullable=True))
    # the default filled the existing rows; new ones get theirs from acceld (as every
    # other Boolean column: MySQL reflects a Boolean default as text, not as false)
    with op.batch_alter_table("devices") as batch:
        batch.alter_column("maintenance", existing_type=sa.Boolean(), existing_nullable=False,
                           server_default=None)
