"""Schema creation and upgrades, applied when a cache is opened.

- A new database gets `create_all` and is stamped at head (faster than replaying history).
- An older revision is upgraded inside one `BEGIN IMMEDIATE` transaction, so of several processes
  opening it at once exactly one migrates and the others find it current.
- A newer revision that this tunecache does not know is never written: the caller opens it
  read-only.

Alembic costs about half a second to import, so it is imported only when a database is created
or upgraded; a database already at `HEAD` is checked with one plain query.
"""

from __future__ import annotations

import enum
import io
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from tunecache.errors import SchemaTooNewError, StoreError
from tunecache.store.engine import read_connection
from tunecache.store.models import Base

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD",
    "Outcome",
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "script_location",
]

#: the newest revision under migrations/versions; a test keeps it equal to Alembic's head
HEAD = "0002"


class Outcome(enum.Enum):
    """What opening did to the schema."""

    CURRENT = "current"
    CREATED = "created"
    UPGRADED = "upgraded"


def script_location() -> str:
    """The folder of the Alembic scripts: inside an installed wheel, else the checkout's."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise StoreError("tunecache's migration scripts are missing from this installation")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration built in code (no ini file, no logging setup)."""
    from alembic.config import Config

    # Alembic's default stdout is the sys.stdout of the moment alembic was imported; a library
    # must not print into its host program's output anyway, so its chatter goes nowhere.
    config = Config(stdout=io.StringIO())
    config.set_main_option("script_location", script_location())
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def current_revision(conn: Connection) -> str | None:
    """The revision stamped in the database, or None for a database without one."""
    has_table = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'")
    ).first()
    if has_table is None:
        return None
    row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    return None if row is None else str(row[0])


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def _check_known(revision: str, path: Path) -> None:
    if revision not in _known_revisions():
        raise SchemaTooNewError(
            f"cache database {path} is at schema revision {revision!r}, newer than this "
            f"tunecache knows (head {HEAD!r}); it is opened read-only: upgrade tunecache to write"
        )


def ensure_schema(engine: Engine, path: Path) -> Outcome:
    """Bring the database at `path` to `HEAD`, creating it if empty.

    Raises SchemaTooNewError, without writing, when the database is at a revision this
    tunecache does not know, and StoreError when the file holds tables that are not a cache.
    """
    with read_connection(engine) as conn:
        revision = current_revision(conn)
    if revision == HEAD:
        return Outcome.CURRENT
    if revision is not None:
        _check_known(revision, path)

    # The write lock is taken before looking again: whoever gets it first creates or upgrades,
    # and everyone after it finds the work done.
    with engine.begin() as conn:
        revision = current_revision(conn)
        if revision == HEAD:
            return Outcome.CURRENT
        if revision is None:
            tables = set(inspect(conn).get_table_names())
            if tables:
                raise StoreError(
                    f"{path} holds tables ({', '.join(sorted(tables)[:5])}) but no tunecache "
                    "schema revision: it is not a tunecache cache"
                )
            Base.metadata.create_all(conn)
            _stamp_head(conn)
            return Outcome.CREATED
        _check_known(revision, path)
        from alembic import command

        command.upgrade(alembic_config(conn), HEAD)
        return Outcome.UPGRADED


def _stamp_head(conn: Connection) -> None:
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    MigrationContext.configure(conn).stamp(script, HEAD)
