"""every foreign key column indexed

PostgreSQL and SQLite index a referencing column only when asked (InnoDB makes one of its
own, which an explicit index replaces). Without them a host's Placement sync read its
deployables' attach handles and attributes, and its devices' control path ids, by a
scan of the whole table, and each delete of a referenced row scanned the referencing
table: the cost of every host's sync grew with the fleet (bench/README, ``scale.py``).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

INDEXES = (
    ("controlpath_ids", "device_id"),
    ("deployables", "parent_id"),
    ("deployables", "root_id"),
    ("attributes", "deployable_id"),
    ("attach_handles", "deployable_id"),
    ("attach_handles", "cpid_id"),
    ("extended_accelerator_requests", "device_profile_id"),
    ("extended_accelerator_requests", "attach_handle_id"),
    ("extended_accelerator_requests", "deployable_id"),
)


def upgrade() -> None:
    for table, column in INDEXES:
        op.create_index(f"{table}_{column}_idx", table, [column])
