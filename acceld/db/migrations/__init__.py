"""Alembic migrations for the acceld schema."""
