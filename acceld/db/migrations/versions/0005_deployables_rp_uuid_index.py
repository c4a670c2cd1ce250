"""deployables.rp_uuid indexed: a bind finds its deployable by it

Without the index every bind read every deployable row (on MariaDB, a full scan of the
table for each instance boot).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("deployables_rp_uuid_idx", "deployables", ["rp_uuid"])
