"""Alembic environment: runs on the connection handed in by ``acceld.db.migration``."""

from alembic import context

from acceld.db import models

config = context.config
target_metadata = models.Base.metadata

connection = config.attributes.get("connection")
if connection is None:  # offline / CLI use with a URL
    from sqlalchemy import create_engine

    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=target_metadata,
                          render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
