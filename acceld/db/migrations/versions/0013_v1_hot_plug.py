"""the hot-plug substate of a v1 instance attachment

``devices.hot_plug``: Attaching, Attached or Detaching while the device is attached to an
instance (``PUT /v1/accelerators/{uuid}``), as an ARQ's ``substate`` follows its hot plug,
so that the reconcile never attaches again a device whose detach was asked. The existing
instance attachments start Attached.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("hot_plug", sa.String(length=16), nullable=True))
    devices = sa.table("devices", sa.column("attach_type", sa.String),
                       sa.column("hot_plug", sa.String))
    op.execute(devices.update().where(devices.c.attach_type == "instance")
               .values(hot_plug="Attached"))
