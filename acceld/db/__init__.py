"""Database layer: models, migrations and engine set-up (enginefacade)."""
