"""Schema creation and upgrades, applied when a cache is opened.

- Before anything writes, `inspect_file` looks at the file through a read-only connection: a
  database this tunecache must not change (another program's, a newer schema's) is refused or
  opened read-only without a single byte written, not even a journal-mode switch.
- A new database gets `create_all` and is stamped at head (faster than replaying history).
- An older revision is upgraded inside one `BEGIN IMMEDIATE` transaction, so of several processes
  opening it at once exactly one migrates and the others find it current.
- A newer revision that this tunecache does not know is never written.
- A file's tables, indexes and views are checked against its revision's (`tunecache.store.schema`):
  a table missing or altered makes the file damaged (`check_writable_schema` refuses it, and the
  quarantine moves it aside at tunecache's own location); an index or view missing or altered
  holds no data and is made again by `mend`, in one write transaction.

Alembic costs about half a second to import, so it is imported only when a database is created
or upgraded; a database already at `HEAD` is checked with plain queries.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import io
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Engine, create_engine, text

from tunecache.errors import SchemaTooNewError, StoreError
from tunecache.paths import sqlite_uri
from tunecache.store import schema
from tunecache.store.engine import busy_errors, read_connection, transaction
from tunecache.store.models import Base
from tunecache.store.schema import Drift, SchemaRow
from tunecache.store.wal import never_checkpoint

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD",
    "FileState",
    "Outcome",
    "alembic_config",
    "check_writable_schema",
    "current_revision",
    "ensure_fleet_schema",
    "ensure_schema",
    "inspect_file",
    "mend",
    "mend_schema",
    "migration_connection",
    "read_fleet_state",
    "read_state",
    "schema_drift",
    "script_location",
    "table_damage",
]

#: the newest revision under migrations/versions; a test keeps it equal to Alembic's head
HEAD = "0006"

# Tables every revision has had: a file stamped with a revision but missing them is damaged.
_CORE_TABLES = frozenset({"devices", "keys", "candidate_sets", "entries"})


class Outcome(enum.Enum):
    """What opening did to the schema."""

    CURRENT = "current"
    CREATED = "created"
    UPGRADED = "upgraded"


@dataclass(frozen=True, slots=True)
class FileState:
    """What a database file holds, as seen through a read-only connection."""

    #: the revisions stamped in alembic_version (one for a sound cache, none for a new file)
    revisions: tuple[str, ...]
    #: the names of its tables, SQLite's own excepted
    tables: frozenset[str]
    #: its rows of `sqlite_master` (`tunecache.store.schema.SCHEMA_QUERY`)
    objects: tuple[SchemaRow, ...] = ()
    #: the database's dialect: the expected objects (`tunecache.store.schema`) are SQLite's
    #: SQL, so only a SQLite file's are compared with its revision's
    dialect: str = "sqlite"

    @property
    def revision(self) -> str | None:
        """The one stamped revision, or None."""
        return self.revisions[0] if self.revisions else None


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


def inspect_file(path: Path, busy_timeout: float) -> FileState:
    """Read the revision and tables of the database at `path` without writing to it.

    A missing or empty file is a new database. Raises StoreError when the file is not a
    readable SQLite database.
    """
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return FileState((), frozenset())
    if not path.is_file():
        raise StoreError(f"cache database {path} is not a file")
    uri = sqlite_uri(path, mode="ro")
    with busy_errors(path, busy_timeout):
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout)
        try:
            never_checkpoint(conn)
            return read_state(conn.execute)
        finally:
            conn.close()


def read_state(run: Callable[[str], Iterable[Sequence[Any]]]) -> FileState:
    """The FileState of a database, read with `run`: a function that executes one SQL statement
    on a connection to it (stdlib sqlite3's `execute`, SQLAlchemy's `exec_driver_sql`)."""
    # sqlite_master's columns are text (sql NULL for an automatic index): no conversion needed.
    objects = cast("tuple[SchemaRow, ...]", tuple(map(tuple, run(schema.SCHEMA_QUERY))))
    tables = frozenset(name for type_, name, _, _ in objects if type_ == "table")
    revisions: tuple[str, ...] = ()
    if "alembic_version" in tables:
        revisions = tuple(str(row[0]) for row in run("SELECT version_num FROM alembic_version"))
    return FileState(revisions, tables, objects)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def read_fleet_state(conn: Connection) -> FileState:
    """The FileState of the fleet store (PostgreSQL) on `conn`: its revisions and the tables of
    its schema (the one its search_path names first)."""
    tables = frozenset(
        str(name)
        for (name,) in conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
    )
    revisions: tuple[str, ...] = ()
    if "alembic_version" in tables:
        found = conn.exec_driver_sql("SELECT version_num FROM alembic_version")
        revisions = tuple(str(row[0]) for row in found)
    return FileState(revisions, tables, (), dialect="postgresql")


def check_writable_schema(state: FileState, path: Path | str) -> None:
    """Refuse, before anything writes, a file this tunecache must not change.

    Raises StoreError for a file that is not a sound tunecache cache and SchemaTooNewError for
    one at a revision this tunecache does not know (the caller may still read it).
    """
    if len(state.revisions) > 1:
        raise StoreError(
            f"cache database {path} has {len(state.revisions)} schema revisions stamped "
            f"({', '.join(state.revisions)}); it is damaged"
        )
    revision = state.revision
    if revision is None:
        foreign = state.tables - {"alembic_version"}
        if foreign:
            raise StoreError(
                f"{path} holds tables ({', '.join(sorted(foreign)[:5])}) but no tunecache "
                "schema revision: it is not a tunecache cache"
            )
        return
    if revision != HEAD and revision not in _known_revisions():
        raise SchemaTooNewError(
            f"cache database {path} is at schema revision {revision!r}, newer than this "
            f"tunecache knows (head {HEAD!r}); it is opened read-only: upgrade tunecache to write"
        )
    missing = _CORE_TABLES - state.tables
    if missing:
        raise StoreError(
            f"cache database {path} is stamped at revision {revision!r} but lacks the tables "
            f"{', '.join(sorted(missing))}; it is damaged"
        )
    damaged = table_damage(state)
    if damaged:
        raise StoreError(
            f"cache database {path} is damaged: its tables are not those of its revision "
            f"{revision!r} ({schema.describe(damaged)})"
        )


def table_damage(state: FileState) -> tuple[Drift, ...]:
    """The tables of the file that are missing, or altered from what its revision has: a
    column, key or unique constraint changed (a table only written differently is not).
    Nothing for a fleet store: its tables are PostgreSQL's, not the SQL the digests are of."""
    if state.dialect != "sqlite":
        return ()
    found = [d for d in schema.drift(state.objects, state.revision) if d.holds_data]
    if not any(d.change == "altered" for d in found):
        return tuple(found)
    sql = {(type_, name): text for type_, name, _, text in state.objects}
    expected = _expected_objects()
    return tuple(
        d
        for d in found
        if d.change != "altered"
        or _structure(sql[("table", d.name)], d.name)
        != _structure(expected[("table", d.name)][1], d.name)
    )


def _structure(sql: str | None, table: str) -> object:
    """What a table is, as SQLite reads its CREATE statement: its columns, foreign keys and
    unique constraints, whatever the text's spelling and order."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(sql or "")
        quoted = table.replace('"', '""')
        unique = []
        for _, index, is_unique, origin, partial in conn.execute(f'PRAGMA index_list("{quoted}")'):
            columns = [row[2] for row in conn.execute(f"PRAGMA index_info('{index}')")]
            unique.append((is_unique, origin, partial, columns))
        return (
            conn.execute(f'PRAGMA table_xinfo("{quoted}")').fetchall(),
            sorted(row[2:] for row in conn.execute(f'PRAGMA foreign_key_list("{quoted}")')),
            sorted(unique),
            "AUTOINCREMENT" in (sql or "").upper(),
        )
    except sqlite3.Error:
        return None  # not a table SQLite can read: altered
    finally:
        conn.close()


@functools.lru_cache(maxsize=1)
def _expected_objects() -> dict[tuple[str, str], tuple[str, str | None]]:
    """The objects a new cache is created with, (type, name) -> (table, SQL): what `mend` makes
    again. Read from a database in memory made by `create_all`, once per process."""
    engine = create_engine("sqlite://")
    try:
        with engine.begin() as conn:
            Base.metadata.create_all(conn)
            rows = conn.exec_driver_sql(schema.SCHEMA_QUERY).fetchall()
    finally:
        engine.dispose()
    return {(str(t), str(n)): (str(table), sql) for t, n, table, sql in rows}


def current_revision(conn: Connection) -> str | None:
    """The revision stamped in the database, or None for a database without one."""
    if conn.dialect.name == "postgresql":
        has_table = conn.execute(text("SELECT to_regclass('alembic_version')")).scalar()
    else:
        has_table = conn.execute(
            text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'")
        ).first()
    if has_table is None:
        return None
    row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    return None if row is None else str(row[0])


@contextlib.contextmanager
def migration_connection(engine: Engine, path: Path) -> Iterator[Connection]:
    """A connection in a `BEGIN IMMEDIATE` transaction, set up to change the schema safely.

    Foreign keys are off while the schema changes: a batch migration rebuilds a table by copy,
    drop and rename, and dropping a parent table with foreign keys on would cascade its deletes
    into every child (validations, timing records). `legacy_alter_table` lets the rename go
    through while the `decisions` view briefly names a dropped table. Both are per-connection
    pragmas that only take effect outside a transaction, so they are set before BEGIN. Before
    commit, `foreign_key_check` proves the data is still consistent.
    """
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        raw.execute("PRAGMA foreign_keys = OFF")
        raw.execute("PRAGMA legacy_alter_table = ON")
        try:
            with conn.begin():
                yield conn
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise StoreError(
                        f"schema change of {path} would leave {len(broken)} rows with dangling "
                        f"references (first in table {broken[0][0]!r}); nothing was changed"
                    )
        finally:
            raw.execute("PRAGMA legacy_alter_table = OFF")
            raw.execute("PRAGMA foreign_keys = ON")


def ensure_schema(engine: Engine, path: Path) -> Outcome:
    """Bring the database at `path` to `HEAD`, creating it if empty.

    The caller has already refused what must not be written (see `check_writable_schema`);
    this re-checks under the write lock, since another process may have acted in between.
    """
    with read_connection(engine) as conn:
        revision = current_revision(conn)
    if revision == HEAD:
        return Outcome.CURRENT

    # The write lock is taken before looking again: whoever gets it first creates or upgrades,
    # and everyone after it finds the work done.
    with migration_connection(engine, path) as conn:
        return _bring_to_head(conn, read_state(conn.exec_driver_sql), path)


def _bring_to_head(conn: Connection, state: FileState, where: Path | str) -> Outcome:
    """Create or upgrade the database on `conn`, whose state (read under the writers' lock)
    is `state`, to HEAD, in the caller's transaction."""
    if state.revisions == (HEAD,):
        return Outcome.CURRENT
    check_writable_schema(state, where)
    if state.revision is None:
        Base.metadata.create_all(conn)
        _stamp_head(conn)
        return Outcome.CREATED
    _upgrade(conn, where)
    return Outcome.UPGRADED


def ensure_fleet_schema(engine: Engine, where: str) -> Outcome:
    """`ensure_schema` for a fleet store on PostgreSQL (`tunecache.store.postgres`), named
    `where` in messages (its masked URL).

    The revision is read first without a lock; a store not at HEAD is created or upgraded in
    one write transaction, which holds the writers' advisory lock (every write transaction on
    the store does), and the revision is read again under it: of several hosts starting at
    once, exactly one creates or upgrades, and the others find the work done. PostgreSQL's DDL
    is transactional, so a migration that fails leaves the store as it was.
    """
    with transaction(engine, read=True) as conn:
        revision = current_revision(conn)
    if revision == HEAD:
        return Outcome.CURRENT
    with transaction(engine) as conn:
        return _bring_to_head(conn, read_fleet_state(conn), where)


def schema_drift(conn: Connection) -> tuple[Drift, ...]:
    """The indexes, views and triggers of the database on `conn` that are not those of its
    revision: what `mend` would make again or drop."""
    state = read_state(conn.exec_driver_sql)
    return tuple(d for d in schema.drift(state.objects, state.revision) if not d.holds_data)


def mend(conn: Connection) -> tuple[Drift, ...]:
    """Make again, in the caller's write transaction, every index and view of revision HEAD that
    the database on `conn` lacks or has altered, and drop indexes and triggers on tunecache's
    tables that no revision has; what it changed. None of them holds data. A database at
    another revision is left as it is (an older one is upgraded first)."""
    state = read_state(conn.exec_driver_sql)
    if state.revision != HEAD:
        return ()
    found = tuple(d for d in schema.drift(state.objects, HEAD) if not d.holds_data)
    if not found:
        return ()
    expected = _expected_objects()
    # An object of another kind under a name the revision gives an index or view is dropped
    # too (one namespace holds them all); a table of that name holds data, and is not.
    taken = {name: type_ for type_, name, _, _ in state.objects if type_ != "table"}
    drops = [(d.type, d.name) for d in found if d.change != "missing"]
    drops += [(taken[d.name], d.name) for d in found if taken.get(d.name, d.type) != d.type]
    for type_, name in drops:
        quoted = name.replace('"', '""')
        conn.exec_driver_sql(f'DROP {type_.upper()} IF EXISTS "{quoted}"')
    for d in found:
        if d.change != "unexpected":
            sql = expected[(d.type, d.name)][1]
            assert sql is not None
            conn.exec_driver_sql(sql)
    return found


def mend_schema(engine: Engine, path: Path, busy_timeout: float) -> tuple[Drift, ...]:
    """`mend` in one write transaction of its own (the writers' lock held, the drift found again
    under it: of several processes mending at once, one does the work)."""
    with busy_errors(path, busy_timeout), transaction(engine) as conn:
        return mend(conn)


def _upgrade(conn: Connection, path: Path | str) -> None:
    from alembic import command
    from alembic.util import CommandError

    try:
        command.upgrade(alembic_config(conn), HEAD)
    except CommandError as error:
        raise StoreError(f"cannot upgrade cache database {path}: {error}") from error


def _stamp_head(conn: Connection) -> None:
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    MigrationContext.configure(conn).stamp(script, HEAD)
