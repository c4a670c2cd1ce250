"""the compute node uuid an agent reports

``services.compute_node_uuid``: the uuid of the host's compute node as Nova keeps it
(``<state_path>/compute_id``), which is its provider's uuid in Placement; the conductor
finds the provider by it instead of by name. Existing rows have none until their agent
reports one.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.add_column(sa.Column("compute_node_uuid", sa.String(36), nullable=True))
