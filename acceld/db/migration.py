"""Schema migrations: ``acceld db upgrade|version`` and test set-up."""

from __future__ import annotations

import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from acceld.db.api import Database

_DIR = os.path.join(os.path.dirname(__file__), "migrations")


def _config(db: Database) -> Config:
    cfg = Config(os.path.join(_DIR, "alembic.ini"))
    cfg.set_main_option("script_location", _DIR)
    cfg.set_main_option("sqlalchemy.url", db.url.replace("%", "%%"))
    return cfg


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to ``revision``; idempotent."""
    cfg = _config(db)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def version(db: Database) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
