"""Check a whole cache database file, and repair what can be repaired when asked."""

from __future__ import annotations

import concurrent.futures
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table

from tunecache import codec
from tunecache._cbor import check_bounds
from tunecache.cache import Cache, Progress
from tunecache.candidates import checksum
from tunecache.device import Device
from tunecache.errors import CodecError, TunecacheError
from tunecache.maintain.reports import Report, jsonable
from tunecache.processes import pid_alive
from tunecache.store import migrate, quarantine, queries, rows, schema, syncing, upkeep, wal
from tunecache.store.models import DEVICES, ENTRIES, TIMING_RECORDS, utcnow

__all__ = ["WAL_WARN_BYTES", "DoctorReport", "Problem", "doctor"]

#: a WAL file larger than this is worth a checkpoint (doctor reports it)
WAL_WARN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Problem(Report):
    """Something doctor found: what, how many rows, and what repairing it does."""

    kind: str
    count: int
    detail: str
    #: what --repair does about it, or None when doctor cannot repair it
    repair: str | None
    repaired: bool = False


@dataclass(frozen=True, slots=True)
class DoctorReport(Report):
    """The health of a cache database file."""

    path: str
    revision: str | None
    head: str
    integrity: tuple[str, ...]
    database_bytes: int
    wal_bytes: int
    devices: int
    entries: int
    problems: tuple[Problem, ...]
    repair: bool
    #: whether a WAL checkpoint ran (with repair)
    checkpointed: bool = False
    #: the SQLite library's version, and its known defects (docs/reliability.md says why
    #: tunecache's own connections are immune to the WAL-reset bug)
    sqlite: str = ""
    sqlite_defects: tuple[str, ...] = ()
    #: what the last salvage of a damaged file at this path kept and lost, and where the
    #: damaged file went (None where none was salvaged); history, not a problem
    salvaged: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, with `healthy` beside the fields."""
        return {**jsonable(self), "healthy": self.healthy}

    @property
    def healthy(self) -> bool:
        """Whether nothing is left to worry about: sound, current, no problem left unrepaired."""
        return (
            self.integrity == ("ok",)
            and self.revision == self.head
            and all(p.repaired for p in self.problems)
        )


@dataclass(slots=True)
class _Finding:
    kind: str
    detail: str
    repair: str | None
    rows: list[Any]
    fix: Callable[[Connection, list[Any]], None] | None


def _deleting(table: Table) -> Callable[[Connection, list[Any]], None]:
    """The repair that deletes the found rows of `table` by id."""

    def fix(conn: Connection, ids: list[Any]) -> None:
        rows.delete_ids(conn, table, ids)

    return fix


def _deleting_records(conn: Connection, ids: list[Any]) -> None:
    """The repair that deletes the found timing records, each entry's change numbered first
    (so a sync carries it: no trigger counts a record's deletion)."""
    syncing.touch_record_entries(conn, ids, utcnow())
    rows.delete_ids(conn, TIMING_RECORDS, ids)


def _bad_sets(conn: Connection) -> list[int]:
    """Candidate sets whose names do not match their checksum (one row per set and name: a
    file has far fewer of them than entries)."""
    bad = []
    for set_id, sum_, set_names in upkeep.set_checksums(conn):
        try:
            if checksum(set_names) != sum_:
                bad.append(set_id)
        except TunecacheError:
            bad.append(set_id)
    return bad


#: what the schema problem's repair does
_SCHEMA_REPAIR = f"make them again as revision {migrate.HEAD} has them"


def _schema_detail(drift: list[schema.Drift]) -> str:
    """What the schema problem is, naming the indexes and views."""
    return f"indexes or views not as revision {migrate.HEAD} has them: {schema.describe(drift)}"


def _schema_finding(conn: Connection) -> _Finding:
    """The indexes, views and triggers that are not those of the file's revision."""
    drift = list(migrate.schema_drift(conn))
    return _Finding(
        "schema",
        _schema_detail(drift),
        _SCHEMA_REPAIR,
        drift,
        _mend,
    )


def _mend(conn: Connection, _found: list[Any]) -> None:
    """The schema problem's repair: what it finds again under the lock, made again."""
    migrate.mend(conn)


def _find(conn: Connection, local: Device, progress: Progress | None) -> list[_Finding]:
    """Every problem doctor knows how to look for, read within one transaction."""
    out = [
        _schema_finding(conn),
        _Finding(
            "dangling-rows",
            "rows pointing at a row that no longer exists",
            "delete them",
            list(upkeep.foreign_key_violations(conn)),
            rows.delete_rowids,
        ),
    ]
    for kind, (table, detail) in upkeep.ORPHANS.items():
        out.append(
            _Finding(
                kind,
                detail,
                "delete them",
                upkeep.orphans(conn, kind, local.fingerprint),
                _deleting(table),
            )
        )
    host = socket.gethostname()
    stale_runs = [run_id for run_id, pid in upkeep.running_runs(conn, host) if not pid_alive(pid)]
    out.append(
        _Finding(
            "stale-runs",
            "runs still marked running whose process on this host is gone",
            "mark them failed",
            stale_runs,
            rows.fail_runs,
        )
    )
    out.append(
        _Finding(
            "illegal-choices",
            "entries whose choice or heuristic is not in their candidate set",
            "delete them",
            upkeep.illegal_choices(conn),
            _deleting(ENTRIES),
        )
    )
    out.append(
        _Finding(
            "bad-candidate-sets",
            "candidate sets whose names do not match their checksum",
            None,
            _bad_sets(conn),
            None,
        )
    )
    out.append(
        _Finding(
            "unreadable-records",
            "timing records that do not decode",
            "delete the records (the entries stay)",
            _unreadable_records(conn, progress),
            _deleting_records,
        )
    )
    return out


def _unreadable_records(conn: Connection, progress: Progress | None) -> list[int]:
    """Timing records whose bytes the bounded decoder refuses before it builds anything: over
    the size limit, or failing the pre-scan of every CBOR item header (docs/reliability.md says
    why doctor checks that and does not decode every record)."""
    total = queries.count(conn, TIMING_RECORDS)
    bad = []
    for done, (record_id, data) in enumerate(upkeep.records(conn)):
        if progress is not None and done % 256 == 0:
            progress("records", done, total)
        if not _readable(data):
            bad.append(record_id)
    if progress is not None:
        progress("records", total, total)
    return bad


def _readable(data: object) -> bool:
    """Whether stored record bytes pass the size limit and the pre-scan of every CBOR header."""
    if not isinstance(data, bytes):
        return False
    try:
        check_bounds(
            data,
            max_size=codec.MAX_SIZE,
            max_depth=codec.MAX_DEPTH,
            max_items=codec.MAX_ITEMS,
            prefix="timing record: ",
        )
    except CodecError:
        return False
    return True


def _examine(
    conn: Connection, local: Device, repair: bool, progress: Progress | None
) -> list[Problem]:
    """Find the problems, and with `repair` fix them until none that can be fixed is left.

    One repair can make another problem (an illegal entry deleted leaves its key unused), so
    repairs run again on what they leave, a few passes at most, all in the caller's transaction.
    """
    found: dict[str, Problem] = {}
    for _ in range(3 if repair else 1):
        findings = [f for f in _find(conn, local, progress) if f.rows]
        fixable = [f for f in findings if repair and f.fix is not None]
        for f in findings:
            before = found.get(f.kind)
            # Rows a pass already repaired count once more only if the pass finds new ones.
            count = len(f.rows) + (before.count if before is not None and before.repaired else 0)
            found[f.kind] = Problem(f.kind, count, f.detail, f.repair, f in fixable)
        for f in fixable:
            assert f.fix is not None
            f.fix(conn, f.rows)
        if not fixable:
            break
    return list(found.values())


def _integrity(cache: Cache) -> tuple[str, ...]:
    """SQLite's integrity check of a cache's file, on a read transaction of its own. doctor
    runs it in a thread: SQLite runs it without holding the GIL, so it takes the other core
    while doctor's own thread checks the records (about a fifth of a doctor of 100,000
    entries). A repair runs it in its write transaction instead, to see the file it repairs."""
    with cache.transaction() as tx:
        return upkeep.integrity(tx.conn)


def doctor(cache: Cache, *, repair: bool = False, progress: Progress | None = None) -> DoctorReport:
    """Check the whole database file and report; repair what can be repaired only if asked.

    Repairs run in one write transaction that finds the problems again under the lock, so it
    repairs exactly what it reports (indexes and views opening found missing or altered are made
    again just before, as a cache's first write does). A checkpoint then folds the WAL back
    into the database.
    """
    wal_file = Path(str(cache.path) + "-wal")
    mended = list(cache.mend_schema()) if repair else []
    # A check that only reports runs SQLite's integrity check beside the rest, on another core.
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tunecache-doctor")
    beside = None if repair else pool.submit(_integrity, cache)
    pool.shutdown(wait=False)
    with cache.transaction(write=repair) as tx:
        integrity = upkeep.integrity(tx.conn) if beside is None else ()
        revision = migrate.current_revision(tx.conn)
        devices = queries.count(tx.conn, DEVICES)
        entries = queries.count(tx.conn, ENTRIES)
        problems = _examine(tx.conn, cache.device, repair, progress)
    if beside is not None:
        integrity = beside.result()
    if mended:
        # Repaired just before the transaction, so it found none of them again.
        problems.insert(
            0, Problem("schema", len(mended), _schema_detail(mended), _SCHEMA_REPAIR, True)
        )
    found_wal = wal_file.stat().st_size if wal_file.exists() else 0
    checkpointed = False
    wal_bytes = found_wal
    if repair:
        checkpointed = cache.checkpoint()
        wal_bytes = wal_file.stat().st_size if wal_file.exists() else 0
    if found_wal > WAL_WARN_BYTES:
        problems.append(
            Problem(
                "large-wal",
                1,
                f"the WAL holds {found_wal} bytes not yet folded into the database",
                "checkpoint it",
                # Repaired only if the checkpoint finished: a reader may have held it back.
                checkpointed and wal_bytes <= WAL_WARN_BYTES,
            )
        )
    return DoctorReport(
        path=str(cache.path),
        revision=revision,
        head=migrate.HEAD,
        integrity=integrity,
        database_bytes=cache.path.stat().st_size if cache.path.exists() else 0,
        wal_bytes=wal_bytes,
        devices=devices,
        entries=entries,
        problems=tuple(problems),
        repair=repair,
        checkpointed=checkpointed,
        sqlite=wal.SQLITE_VERSION,
        sqlite_defects=tuple(d.name for d in wal.wal_defects()),
        salvaged=_salvaged(cache.path),
    )


def _salvaged(db: Path) -> str | None:
    """The last salvage of the file at `db`, in one line (see quarantine.last_salvage)."""
    found = quarantine.last_salvage(db)
    return None if found is None else f"{found[1].summary()}; the damaged file is in {found[0]}"
