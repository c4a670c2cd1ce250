"""MySQL and MariaDB: every table in utf8mb4 with the binary collation

Tables made by the earlier migrations took the database's default character set, often
``utf8`` (3 bytes per character at most), where a character outside the Basic
Multilingual Plane (an emoji) fails the statement; and a case-insensitive default
collation made names that differ only in case collide, unlike on PostgreSQL and SQLite.
Each table is converted to ``utf8mb4`` / ``utf8mb4_bin`` (what the models declare,
``acceld.db.models.MYSQL_CHARSET``), and so is the database's default, for tables a
later migration makes. A conversion from a 3-byte or 1-byte character set may turn a
``TEXT`` column into ``MEDIUMTEXT`` so that it keeps room for as many characters. Other
databases: nothing to do.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

CHARSET, COLLATION = "utf8mb4", "utf8mb4_bin"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name not in ("mysql", "mariadb"):
        return
    op.execute(f"ALTER DATABASE CHARACTER SET {CHARSET} COLLATE {COLLATION}")
    for table in sa.inspect(bind).get_table_names():
        if table != "alembic_version":
            op.execute(f"ALTER TABLE `{table}` CONVERT TO CHARACTER SET {CHARSET} "
                       f"COLLATE {COLLATION}")
