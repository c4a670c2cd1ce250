"""driver_states.capabilities as VARCHAR(255), not TEXT

A bind reads its candidate handles with their driver's capabilities, sorted by handle id.
On MariaDB a TEXT column in a sorted join sends the sort to an on-disk temporary table:
that read took 0.52 ms against 0.23 ms with the column as VARCHAR (acceld_bench on
MariaDB 10.11). The column holds the canonical JSON list of the capabilities a driver
declared, from a fixed set (``acceld.reports.CAPABILITIES``), so it is short;
``tests/unit/test_reports.py`` checks that the whole set fits.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("driver_states") as batch:
        batch.alter_column("capabilities", type_=sa.String(255), existing_type=sa.Text(),
                           existing_nullable=True)
