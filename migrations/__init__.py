"""Alembic migration scripts of the cache database (installed as tunecache._migrations)."""
