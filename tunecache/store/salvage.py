"""Salvage: every row of a damaged cache database that can still be read, copied into a new one.

A damaged page should cost the rows stored on it, not the cache (issue 16: random bytes in one
page of one index used to move all 30,000 entries of a cache aside). Before a damaged cache is
moved aside (store/quarantine.py), `salvage` builds its replacement in a file of its own:

- The schema is the source's revision's: at HEAD the one this tunecache creates (so a missing
  view, index or table comes back whole and empty), at an older revision the source's own SQL
  (the open that follows upgrades it as usual).
- Each table is read in rowid order, `NOT INDEXED`, so the damage of an index costs nothing:
  the indexes are built afresh. Where the table's own b-tree fails (SQLITE_CORRUPT), the read
  steps around the damage: it looks for the first rowid past it from which the table reads
  again (doubling a step, then halving it back), and goes on from there. A damaged leaf page
  costs the rows it held; a damaged interior page the rows below it.
- The rows kept are made consistent before anything uses them: a candidate set that lost one of
  its candidates goes, a timing record that lost one of its candidate rows goes, and then every
  row whose reference is gone goes too (or loses the reference, where the schema says SET NULL),
  so an entry whose key, device or candidate set was lost is dropped and counted as lost, never
  half-kept. An entry whose timing record alone was lost keeps its decision without the evidence.
- Sync's high-water marks are not copied (`NOT_SALVAGED`): the copy may have lost entries a
  mark has moved past, so its next sync starts from zero and brings them back.
- The replacement is checked (`integrity_check`, `foreign_key_check`) and synced before the
  caller swaps it in; until then the damaged file is untouched.

REINDEX would repair damage confined to an index in place, but SQLite frees an index's pages by
walking them first, and a page of random bytes stops that walk (SQLITE_CORRUPT): rebuilding is
the one way that works for every page, and it keeps every row when only an index was hit.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import exc

from tunecache.errors import SchemaTooNewError, StoreError
from tunecache.paths import sqlite_uri
from tunecache.store import migrate
from tunecache.store.engine import busy_errors, is_busy, make_engine

__all__ = [
    "NOT_SALVAGED",
    "SALVAGE_NOTE",
    "CannotSalvage",
    "Salvage",
    "is_corrupt",
    "salvage",
    "side_files",
]

#: the file, in a quarantine folder, that records what the salvage of that cache kept
SALVAGE_NOTE = "SALVAGE.json"

_CORRUPT_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR_SHORT_READ")
_PASSING_CODES = (
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_PERM",
)
#: the tables a salvaged copy starts empty: sync's high-water marks (a mark would skip, at the
#: next pull, the entries this copy lost; from zero, a pull reads them all and adds them back)
NOT_SALVAGED = frozenset({"sync_marks"})
# Tables revision 0006's triggers write as entries and verdicts are written (tunecache.store.
# changes): copied after every other table.
_NUMBERED_LAST = frozenset({"entry_changes", "sync_store"})
_MIN_ROWID = -(2**63)
_MAX_ROWID = 2**63 - 1
# Rows copied per INSERT batch, so a table of any size is copied in bounded memory.
_CHUNK = 2000
# Tables whose rows record their own completeness: a row whose parts were lost goes, with the
# rows that hang on it. (table, its count column, the child table, the child's reference)
_WHOLE_OR_NOTHING = (
    ("candidate_sets", "size", "candidates", "set_id"),
    ("timing_records", "candidates_count", "candidate_timings", "record_id"),
)
# Rows that exist only for the entries that use them: (table, the entries' reference to it)
_ORPHANS = (("keys", "key_id"), ("candidate_sets", "candidate_set_id"))


class CannotSalvage(StoreError):
    """Nothing of a damaged cache can be read back into a new one (no readable schema, or no
    tunecache schema revision): it is moved aside and a fresh cache starts."""


@dataclass(frozen=True, slots=True)
class Salvage:
    """What salvaging a damaged cache kept of it, and what it lost."""

    revision: str
    entries_kept: int
    #: entries the damaged file held that the replacement does not (unreadable or inconsistent)
    entries_lost: int
    #: False where no count of the damaged file's entries could be read: then `entries_lost`
    #: counts only the entries read and dropped, and more may have been lost
    exact: bool
    #: rows kept by table
    kept: dict[str, int] = field(default_factory=dict)
    #: rows lost by table, where any were or where the damaged file's rows could not be
    #: counted (then those read and dropped)
    lost: dict[str, int] = field(default_factory=dict)
    #: the rowid ranges a read stepped around, as "table first..last"
    skipped: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line: how many entries were kept and how many lost, and the rows lost from
        other tables (the timing records of entries kept without their evidence, say)."""
        lost = f"{self.entries_lost:,}" if self.exact else f"at least {self.entries_lost:,}"
        others = [f"{n:,} {t}" for t, n in sorted(self.lost.items()) if t != "entries" and n]
        return f"{self.entries_kept:,} entries kept, {lost} lost" + (
            f" (rows lost besides: {', '.join(others)})" if others else ""
        )

    def to_json(self) -> str:
        """The figures as JSON, for the note left beside the damaged file."""
        return json.dumps({**asdict(self), "skipped": list(self.skipped)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Salvage:
        """The figures `to_json` wrote."""
        data = json.loads(text)
        return cls(**{**data, "skipped": tuple(data.get("skipped", ()))})


def is_corrupt(error: BaseException) -> bool:
    """Whether a driver error means the file is damaged, not busy or unreachable."""
    orig = getattr(error, "orig", error)
    name = str(getattr(orig, "sqlite_errorname", "") or "")
    text = str(orig).lower()
    return name.startswith(_CORRUPT_CODES) or "malformed" in text or "not a database" in text


def side_files(db: Path) -> list[Path]:
    """The files SQLite and tunecache keep beside a database being built at `db`."""
    return [db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal", ".write-lock")]


def _remove(db: Path) -> None:
    for each in (db, *side_files(db)):
        each.unlink(missing_ok=True)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def salvage(source: Path, target: Path, busy_timeout: float) -> Salvage:
    """Copy every row of the damaged cache database at `source` that can still be read into a
    new cache database at `target`, whole and consistent, and say what was kept and lost.

    `target` is replaced if it exists (what an earlier salvage cut short left). The caller holds
    the writers' lock of `source`, so nothing commits to it meanwhile. Raises CannotSalvage
    where nothing can be read, or where the copy fails for any reason but one that passes
    (then the damaged file is moved aside anyway: a damaged cache must never make every open
    fail); StoreBusyError or StoreError where the files cannot be read or written for such a
    reason (a lock held too long, a full disk: then nothing should be moved, and a later open
    tries again). `target` is left only when this returns.
    """
    _remove(target)
    try:
        with contextlib.closing(_open_source(source, busy_timeout)) as src:
            revision, tables = _schema(src, source)
            with busy_errors(target, busy_timeout):
                _create(src, target, revision, busy_timeout)
                with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as dst:
                    found = _fill(src, dst, tables)
        _sync(target)
    except CannotSalvage:
        _remove(target)
        raise
    except BaseException as error:
        _remove(target)
        driver = error.__cause__ if isinstance(error, StoreError) else error
        if isinstance(driver, sqlite3.Error | exc.DBAPIError) and not _passes(driver):
            raise CannotSalvage(f"the copy failed: {' '.join(str(error).split())}") from error
        raise
    return found


def _passes(error: BaseException) -> bool:
    """Whether a driver error is one that goes away by itself (a lock, a full disk, a file
    system that refused a write), not something about what the damaged file holds."""
    if is_busy(error):
        return True
    orig = getattr(error, "orig", error)
    name = str(getattr(orig, "sqlite_errorname", "") or "")
    return name.startswith(_PASSING_CODES) and not is_corrupt(error)


def _open_source(source: Path, busy_timeout: float) -> sqlite3.Connection:
    uri = sqlite_uri(source, mode="ro")  # a path that is not UTF-8 still names its file
    with busy_errors(source, busy_timeout):
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
        # Checks each cell's size as a page is read: a scribbled page fails where it is, instead
        # of handing back rows made of garbage.
        conn.execute("PRAGMA cell_size_check = ON")
        conn.execute("PRAGMA query_only = ON")
    return conn


def _schema(src: sqlite3.Connection, source: Path) -> tuple[str, list[str]]:
    """The source's revision and the tables its schema names."""
    try:
        state = migrate.read_state(src.execute)
    except sqlite3.DatabaseError as error:
        if not is_corrupt(error):
            raise StoreError(f"cache database {source}: {error}") from error
        raise CannotSalvage(f"its schema cannot be read ({error})") from error
    if state.revision is None or len(state.revisions) != 1:
        raise CannotSalvage("it has no single tunecache schema revision")
    if state.revision != migrate.HEAD:
        # Rebuilt from its own SQL, which must be whole; at HEAD a missing table is rebuilt
        # empty. A newer revision's SQL is copied as it is (and the cache read, not written).
        try:
            migrate.check_writable_schema(state, source)
        except SchemaTooNewError:
            pass
        except StoreError as error:
            raise CannotSalvage(str(error)) from error
    # One snapshot for every table read: nothing else commits meanwhile (the caller holds the
    # writers' lock), but a reader's checkpoint may still move pages from the -wal.
    src.execute("BEGIN")
    return state.revision, sorted(state.tables - {"alembic_version"})


def _create(src: sqlite3.Connection, target: Path, revision: str, busy_timeout: float) -> None:
    """An empty cache database at `target` with the schema of `revision`."""
    if revision == migrate.HEAD:
        # What a new cache gets: create_all and the stamp, every view and index with it.
        engine = make_engine(target, busy_timeout=busy_timeout)
        try:
            migrate.ensure_schema(engine, target)
        finally:
            engine.dispose()
            target.with_name(target.name + ".write-lock").unlink(missing_ok=True)
        return
    statements = src.execute(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
        "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, rowid"
    ).fetchall()
    with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as dst:
        dst.execute("BEGIN")
        for (sql,) in statements:
            dst.execute(sql)
        version = src.execute("SELECT version_num FROM alembic_version").fetchone()
        dst.execute("INSERT INTO alembic_version (version_num) VALUES (?)", version)
        dst.execute("COMMIT")


def _fill(src: sqlite3.Connection, dst: sqlite3.Connection, tables: Sequence[str]) -> Salvage:
    """Copy each table, make what was kept consistent, and check the result."""
    # The copy is one transaction of a file nobody else has open: its journal in memory (a
    # refused chunk rolls back to a savepoint), no syncs; the file is synced whole once it is
    # finished, and deleted if anything goes wrong before.
    dst.execute("PRAGMA journal_mode = MEMORY")
    dst.execute("PRAGMA synchronous = OFF")
    dst.execute("PRAGMA foreign_keys = OFF")
    present = {r[0] for r in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    dst.execute("BEGIN")
    # Rows each table held in the damaged file: counted where it can be, else those read.
    held: dict[str, int] = {}
    exact: dict[str, bool] = {}
    skipped: list[str] = []
    # Sync's change numbers last, in place of what the triggers wrote while entries and
    # verdicts were copied: the copy keeps the numbers its rows had.
    for table in sorted(tables, key=lambda name: name in _NUMBERED_LAST):
        if table not in present or table in NOT_SALVAGED:
            continue
        if table in _NUMBERED_LAST:
            dst.execute(f"DELETE FROM {_quote(table)}")
        columns = [c for c in _columns(dst, table) if c in set(_columns(src, table))]
        counted = _count(src, table)
        read, gaps = _copy(src, dst, table, columns)
        held[table], exact[table] = (read, False) if counted is None else (counted, True)
        skipped += [f"{table} {lo}..{hi}" for lo, hi in gaps]
    _sequences(src, dst)
    _make_consistent(dst)
    dst.execute("COMMIT")
    problems = [r[0] for r in dst.execute("PRAGMA integrity_check(5)")]
    if problems != ["ok"] or dst.execute("PRAGMA foreign_key_check").fetchone() is not None:
        raise CannotSalvage(f"the salvaged copy does not check out: {problems}")
    dst.execute("PRAGMA journal_mode = WAL")
    kept = {t: int(dst.execute(f"SELECT count(*) FROM {_quote(t)}").fetchone()[0]) for t in held}
    lost = {t: n - kept[t] for t, n in held.items() if n > kept[t] or not exact[t]}
    revision = str(dst.execute("SELECT version_num FROM alembic_version").fetchone()[0])
    return Salvage(
        revision=revision,
        entries_kept=kept.get("entries", 0),
        entries_lost=lost.get("entries", 0),
        exact=exact.get("entries", True),
        kept=kept,
        lost=lost,
        skipped=tuple(skipped),
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({_quote(table)})")]


def _count(src: sqlite3.Connection, table: str) -> int | None:
    """How many rows `table` of the damaged file holds: the most any of its b-trees (the table
    itself, each index) can count, since a damaged one fails or counts short; None if none
    can."""
    indexes = [str(r[1]) for r in src.execute(f"PRAGMA index_list({_quote(table)})")]
    counts = []
    for how in ["NOT INDEXED", *(f"INDEXED BY {_quote(i)}" for i in indexes)]:
        try:
            counts.append(
                int(src.execute(f"SELECT count(*) FROM {_quote(table)} {how}").fetchone()[0])
            )
        except sqlite3.DatabaseError as error:
            if not is_corrupt(error):
                raise
    return max(counts) if counts else None


def _copy(
    src: sqlite3.Connection, dst: sqlite3.Connection, table: str, columns: list[str]
) -> tuple[int, list[tuple[int, int]]]:
    """Copy the rows of `table` that can be read, in rowid order; how many were read, and the
    rowid ranges stepped around."""
    names = ", ".join(map(_quote, columns))
    read = f"SELECT rowid, {names} FROM {_quote(table)} NOT INDEXED WHERE rowid >= ? ORDER BY rowid"
    insert = f"INSERT INTO {_quote(table)} ({names}) VALUES ({', '.join('?' * len(columns))})"
    probe = read + " LIMIT 1"
    skipped: list[tuple[int, int]] = []
    start: int | None = _MIN_ROWID
    read_in_all = 0
    while start is not None:
        read_here, first_unread = _copy_from(src, dst, read, insert, start)
        read_in_all += read_here
        if first_unread is None:
            break
        # The driver reads a row ahead: the step that failed took the row before it along,
        # so the rows from `first_unread` on are read one at a time until one fails.
        row = _first_row(src, probe, first_unread)
        if row is None:
            break
        if row:
            _insert(dst, insert, [row[1:]])
            read_in_all += 1
            start = row[0] + 1 if row[0] < _MAX_ROWID else None
            continue
        start = _readable_from(src, probe, first_unread)
        skipped.append((first_unread, _MAX_ROWID if start is None else start - 1))
    return read_in_all, skipped


def _first_row(src: sqlite3.Connection, probe: str, rowid: int) -> Sequence[Any] | None:
    """The first row from `rowid` on, None where there is none, () where it cannot be read."""
    try:
        found = src.execute(probe, (rowid,)).fetchall()
    except sqlite3.DatabaseError as error:
        if not is_corrupt(error):
            raise
        return ()
    return found[0] if found else None


def _copy_from(
    src: sqlite3.Connection, dst: sqlite3.Connection, read: str, insert: str, start: int
) -> tuple[int, int | None]:
    """Copy rows from rowid `start` on until the table ends or a read fails: how many were
    read, and the first rowid not read where a read failed (else None)."""
    rows: list[Sequence[Any]] = []
    last = start - 1
    read_here = 0
    try:
        for row in src.execute(read, (start,)):
            rows.append(row[1:])
            last = row[0]
            read_here += 1
            if len(rows) >= _CHUNK:
                _insert(dst, insert, rows)
                rows = []
    except sqlite3.DatabaseError as error:
        if not is_corrupt(error):
            raise
        _insert(dst, insert, rows)
        return read_here, (last + 1 if last < _MAX_ROWID else None)
    _insert(dst, insert, rows)
    return read_here, None


def _insert(dst: sqlite3.Connection, insert: str, rows: list[Sequence[Any]]) -> None:
    """Insert rows; a row the new schema refuses (a constraint it breaks: rows read from
    damage that looks like data) is left out, the rest go in."""
    try:
        dst.execute("SAVEPOINT chunk")
        dst.executemany(insert, rows)
        dst.execute("RELEASE chunk")
    except sqlite3.IntegrityError:
        dst.execute("ROLLBACK TO chunk")
        dst.execute("RELEASE chunk")
        for row in rows:
            with contextlib.suppress(sqlite3.IntegrityError):
                dst.execute(insert, row)


def _readable_from(src: sqlite3.Connection, probe: str, lo: int) -> int | None:
    """The smallest rowid from `lo` on from which the table reads again, or None if it never
    does: a step that doubles until a read succeeds, then a bisection back to the edge of the
    damage. A read from inside a damaged page fails, one from past it does not."""

    def readable(rowid: int) -> bool:
        return _first_row(src, probe, rowid) != ()

    bad, step = lo, 1
    while True:
        good = min(lo + step, _MAX_ROWID)
        if readable(good):
            break
        if good == _MAX_ROWID:
            return None
        bad, step = good, step * 2
    while good - bad > 1:
        middle = (bad + good) // 2
        if readable(middle):
            good = middle
        else:
            bad = middle
    return good


def _sequences(src: sqlite3.Connection, dst: sqlite3.Connection) -> None:
    """AUTOINCREMENT goes on from where the damaged file's counters were, so no id of a lost
    row is ever handed out again."""
    try:
        counters = src.execute("SELECT name, seq FROM sqlite_sequence").fetchall()
    except sqlite3.DatabaseError as error:
        if not is_corrupt(error):
            raise
        return
    for name, seq in counters:
        updated = dst.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name)
        ).rowcount
        if not updated:
            dst.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))


def _make_consistent(dst: sqlite3.Connection) -> None:
    """Drop what lost a part of itself, then every row whose reference is gone, then the keys
    and candidate sets no entry uses any more (what doctor would call orphans), and the rows
    that hung on those."""
    tables = {r[0] for r in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for parent, count, child, ref in _WHOLE_OR_NOTHING:
        if parent in tables and child in tables and count in _columns(dst, parent):
            dst.execute(
                f"DELETE FROM {parent} WHERE {count} != "
                f"(SELECT count(*) FROM {child} c WHERE c.{ref} = {parent}.id)"
            )
    _drop_dangling(dst, tables)
    for orphan, column in _ORPHANS:
        if orphan in tables and "entries" in tables and column in _columns(dst, "entries"):
            dst.execute(f"DELETE FROM {orphan} WHERE id NOT IN (SELECT {column} FROM entries)")
    _drop_dangling(dst, tables)


def _drop_dangling(dst: sqlite3.Connection, tables: set[str]) -> None:
    """Delete every row whose reference names a row that is gone, or clear the reference where
    the schema says SET NULL, until none is left (a dropped row can leave its own children
    dangling)."""
    actions = {
        (table, int(fk[0])): (str(fk[3]), str(fk[6]).upper())
        for table in tables
        for fk in dst.execute(f"PRAGMA foreign_key_list({_quote(table)})")
    }
    # Each pass drops one level of the reference graph, which has fewer levels than tables.
    for _ in range(len(tables) + 2):
        broken = dst.execute("PRAGMA foreign_key_check").fetchall()
        if not broken:
            return
        for table, rowid, _parent, fkid in broken:
            column, on_delete = actions[(table, int(fkid))]
            if on_delete == "SET NULL":
                dst.execute(
                    f"UPDATE {_quote(table)} SET {_quote(column)} = NULL WHERE rowid = ?", (rowid,)
                )
            else:
                dst.execute(f"DELETE FROM {_quote(table)} WHERE rowid = ?", (rowid,))
    raise CannotSalvage("the salvaged rows still have dangling references after every pass")


def _sync(target: Path) -> None:
    """The finished file reaches the disk before anything names it the cache."""
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
