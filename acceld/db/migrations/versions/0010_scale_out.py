"""scale out: persisted bind waits and the conductor that owns each agent host

``bind_waits``: one row per instance whose ARQ binds Nova waits to hear about, with its
deadline, so that any conductor can tell Nova when the one that started the bind died.
``services.conductor``: for an agent, the conductor that owns its host (the one that
recorded its last heartbeat).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

from acceld.db.models import MYSQL_CHARSET, MYSQL_COLLATION

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("services", sa.Column("conductor", sa.String(length=255), nullable=True))
    op.create_table(
        "bind_waits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("token", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("arq_uuids", sa.Text(), nullable=False),
        sa.Column("deadline", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("instance_uuid", name="uniq_bind_waits0instance_uuid"),
        mysql_charset=MYSQL_CHARSET, mysql_collate=MYSQL_COLLATION,
    )
    op.create_index("bind_waits_deadline_idx", "bind_waits", ["deadline"])
