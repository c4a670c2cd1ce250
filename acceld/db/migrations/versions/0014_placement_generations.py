"""the provider generations of a host's last sync

``placement_sync.provider_generations``: each provider's generation in Placement after
acceld's last successful sync of the host (JSON, uuid -> generation). Placement bumps a
provider's generation on every change to it (inventory, traits, aggregates, allocations),
so a full sync reads in full only the providers whose generation has moved since.
Existing rows have none: their next full sync reads every provider, as before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("placement_sync") as batch:
        batch.add_column(sa.Column("provider_generations", sa.Text(), nullable=True))
