"""when a failed Placement sync of a host is tried again

``placement_sync.next_retry_at``: the time the conductor tries again a host whose last
sync failed (NULL once a sync succeeds), shown by ``GET /v1/placement``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("placement_sync", sa.Column("next_retry_at", sa.DateTime(), nullable=True))
