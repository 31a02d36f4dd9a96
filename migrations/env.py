"""Alembic environment for the cache database, run from code or from the alembic command."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from tunecache.store.models import Base

# No logging.config.fileConfig here: when tunecache migrates a cache inside a host program,
# configuring logging from an ini file would overwrite the host's own logging setup.
config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate on the connection tunecache passed in, or on the ini file's URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from tunecache.store.engine import make_engine

    url = config.get_main_option("sqlalchemy.url") or ""
    if not url.startswith("sqlite:///"):
        raise SystemExit("set sqlalchemy.url = sqlite:///PATH to run alembic by hand")
    engine = make_engine(url.removeprefix("sqlite:///"))
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("tunecache migrations run online only: SQLite batch mode needs a database")
run_migrations_online()
