"""Database layer: models, migrations, engines and transactions (api.py)."""
