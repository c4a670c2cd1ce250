"""the project of a v1 attachment, and the ARQ a program operation binds

``devices.attached_project_id``: the project whose request attached an accelerator to an
instance (v1), so the v1 API shows the instance only to that project and to admins, as
the v2 API does with ARQs. ``program_operations.arq_uuid``: the accelerator request whose
bind programs the FPGA (a device profile's ``accel:bitstream_id`` or
``accel:function_id``); the bind finishes when the operation does.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("devices", sa.Column("attached_project_id", sa.String(255), nullable=True))
    op.add_column("program_operations", sa.Column("arq_uuid", sa.String(36), nullable=True))
