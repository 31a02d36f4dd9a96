"""The statements sync runs on each side: which entries changed since a mark, each with all its
evidence, the entries of the same keys on the other side, the runs that wrote them, where each
came from, and the marks themselves (`tunecache.store.changes` gives the tables).

Reads run in the caller's transaction (a read for the side copied from, the write for the side
copied to); writes of entries go through the batch path (`tunecache.store.bulk`). Nothing here
decides anything: `tunecache.fleet` compares and settles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    bindparam,
    delete,
    exc,
    func,
    insert,
    select,
    text,
    update,
)

from tunecache.store import models as tables
from tunecache.store import queries
from tunecache.store.changes import (
    CHANGE_SEQUENCE,
    ENTRY_CHANGES,
    ENTRY_ORIGINS,
    SYNC_MARKS,
    SYNC_STORE,
)
from tunecache.store.prepared import Lookup, Prepared
from tunecache.store.values import TIMING_VALUES, RecordRow, TimingRow, VerdictFacts

__all__ = [
    "SyncedEntry",
    "SyncedRun",
    "SyncedVerdict",
    "change_numbers",
    "copy_runs",
    "entries",
    "entries_between",
    "entries_of_keys",
    "has_change_after",
    "highest_change",
    "latest_change",
    "mark",
    "runs",
    "set_mark",
    "store_id",
    "touch_record_entries",
    "write_origins",
]

# The tables sync reads: the entries' own, then revision 0006's.
_E, _K, _S, _T = tables.ENTRIES, tables.KEYS, tables.CANDIDATE_SETS, tables.TIMING_RECORDS
_V, _M, _R, _CT = tables.VALIDATIONS, tables.MODELS, tables.RUNS, tables.CANDIDATE_TIMINGS
_CH, _O = ENTRY_CHANGES, ENTRY_ORIGINS

#: the columns of a run that sync copies (its device is the side's own row)
RUN_COLUMNS = (
    "kind",
    "status",
    "tool_version",
    "hostname",
    "platform",
    "python_version",
    "pid",
    "started_at",
    "finished_at",
    "notes",
)


@dataclass(frozen=True, slots=True)
class SyncedVerdict(VerdictFacts):
    """A model's verdict on an entry, as one side holds it."""

    run_id: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SyncedEntry:
    """An entry as one side holds it, with what sync compares and copies: its decision, the
    summary of its record (and the record itself where asked for), its verdicts and origin."""

    id: int
    key: str
    checksum: str
    set_id: int
    #: the decision
    status: str
    choice: str
    heuristic: str | None
    speedup: float | None
    #: when it was made and last changed, and the run (of its own side) that wrote it
    created_at: datetime
    updated_at: datetime
    run_id: int | None
    #: the record's summary columns and size, or None without one (what `content` compares)
    summary: tuple[Any, ...] | None
    #: the record's rows, where its data was read
    record: RecordRow | None
    verdicts: tuple[SyncedVerdict, ...]
    #: the host that tuned it and where it was synced from, where it came by sync
    origin: tuple[str, str] | None

    @property
    def samples(self) -> int:
        """How many raw samples its record holds (0 without one)."""
        return 0 if self.summary is None else int(self.summary[5])

    def content(self) -> tuple[Any, ...]:
        """What two sides must agree on for the entry to be the same: the decision, the
        record's summary and every verdict's facts (ids and times are each side's own)."""
        facts = sorted(
            (v.model, v.fingerprint, v.verdict, v.gain, v.rounds, v.confirmations)
            for v in self.verdicts
        )
        return (self.choice, self.heuristic, self.status, self.speedup, self.summary, facts)


@dataclass(frozen=True, slots=True)
class SyncedRun:
    """A run as one side logged it: the columns sync copies, by name (RUN_COLUMNS)."""

    id: int
    values: Mapping[str, Any]

    def natural_key(self) -> tuple[Any, ...]:
        """What names the same run on both sides: its kind, host, process and start."""
        v = self.values
        return (v["kind"], v["hostname"], v["pid"], v["started_at"])


# --- the database's id, marks, change numbers ------------------------------------------------


def store_id(conn: Connection) -> str:
    """This database's id for sync (`sync_store.store_id`)."""
    return str(conn.execute(select(SYNC_STORE.c.store_id)).scalar_one())


def mark(conn: Connection, store: str, device: str, direction: str) -> tuple[str, int] | None:
    """The mark kept for syncing `device` with the store `store` in `direction`: the id of the
    database its number counts in, and the number; None where there is none."""
    m = SYNC_MARKS.c
    row = conn.execute(
        select(m.counted_in, m.seq).where(
            m.store_id == store, m.device == device, m.direction == direction
        )
    ).first()
    return None if row is None else (str(row[0]), int(row[1]))


def set_mark(
    conn: Connection,
    store: str,
    device: str,
    direction: str,
    *,
    counted_in: str,
    seq: int,
    remote: str,
    now: datetime,
) -> None:
    """Keep `seq` (counted in the database `counted_in`) as the mark of `device`'s sync with
    `store` in `direction`, replacing the one before."""
    m = SYNC_MARKS.c
    conn.execute(
        delete(SYNC_MARKS).where(m.store_id == store, m.device == device, m.direction == direction)
    )
    conn.execute(
        insert(SYNC_MARKS).values(
            store_id=store,
            device=device,
            direction=direction,
            counted_in=counted_in,
            seq=seq,
            remote=remote,
            synced_at=now,
        )
    )


def has_change_after(conn: Connection, device: int, after: int) -> bool:
    """Whether any of the device row's entries changed after `after` (the change numbers'
    index finds the lowest such number, and one is enough)."""
    first = conn.execute(
        select(_CH.c.seq)
        .join(_E, _E.c.id == _CH.c.entry_id)
        .where(_CH.c.seq > after, _E.c.device_id == device)
        .order_by(_CH.c.seq)
        .limit(1)
    ).first()
    return first is not None


def change_numbers(conn: Connection, device: int, after: int) -> list[int]:
    """The change numbers of the device row's entries changed after `after`, lowest first.

    The highest number of all is asked first, from the index alone: a sync with nothing new
    (almost every one) costs that, whatever the planner would make of the join below on a
    table whose statistics are not yet gathered."""
    highest = conn.execute(select(func.max(_CH.c.seq))).scalar()
    if highest is None or int(highest) <= after:
        return []
    return [
        int(s)
        for (s,) in conn.execute(
            select(_CH.c.seq)
            .join(_E, _E.c.id == _CH.c.entry_id)
            .where(_CH.c.seq > after, _E.c.device_id == device)
            .order_by(_CH.c.seq)
        )
    ]


def highest_change(conn: Connection) -> int:
    """The highest change number this database has given, of any device (0 before any): on
    SQLite its counter, which counts pruned entries too; on PostgreSQL its sequence's, where
    the role may read it, else the highest held (which pruning the newest entries lowers)."""
    if conn.dialect.name == "sqlite":
        found = conn.execute(select(SYNC_STORE.c.seq)).scalar()
        return 0 if found is None else int(found)
    held = conn.execute(select(func.max(_CH.c.seq))).scalar()
    try:
        # The sequence's own last number, which no deletion lowers, where the role may read it.
        with conn.begin_nested():
            given = conn.execute(  # a constant name, no value of anyone's
                text(
                    f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {CHANGE_SEQUENCE}"
                )
            ).scalar()
    except exc.DBAPIError:
        given = None
    return max(int(held or 0), int(given or 0))


def touch_record_entries(conn: Connection, record_ids: Sequence[int], now: datetime) -> None:
    """Give the entries of these timing records a new change number (their `updated_at` set
    to `now`), before the records are deleted: a record's deletion alone is no write of an
    entry, and no trigger would count it, so no sync would ever carry it."""
    for part in queries.chunks(sorted(set(record_ids))):
        owners = select(_T.c.entry_id).where(_T.c.id.in_(part)).scalar_subquery()
        conn.execute(update(_E).where(_E.c.id.in_(owners)).values(updated_at=now))


def latest_change(conn: Connection, device: int) -> int:
    """The highest change number of the device row's entries (0 without any)."""
    found = conn.execute(
        select(func.max(_CH.c.seq))
        .join(_E, _E.c.id == _CH.c.entry_id)
        .where(_E.c.device_id == device)
    ).scalar()
    return 0 if found is None else int(found)


# --- entries with their evidence ---------------------------------------------------------------

_SUMMARY = (
    _T.c.format_version,
    _T.c.best,
    _T.c.best_median_s,
    _T.c.heuristic_median_s,
    _T.c.candidates_count,
    _T.c.samples_count,
    _T.c.failures_count,
    func.length(_T.c.data),
)


# An entry's own columns that `_entry_select` reads, in order, after its id, key and set.
_DECISION = ("choice", "heuristic", "status", "speedup", "run_id", "created_at", "updated_at")


def _entry_select(*, data: bool, changes: bool) -> Select[Any]:
    """The entries with their keys, sets, record summaries (and data) and origins; with
    `changes`, their change numbers joined too."""
    columns: list[Any] = [
        _E.c.id,
        _K.c.text,
        _S.c.checksum,
        _S.c.id,
        *(_E.c[name] for name in _DECISION),
        _T.c.id,
        *_SUMMARY,
        _O.c.host,
        _O.c.source,
    ]
    if data:
        columns.append(_T.c.data)
    joined = _CH.join(_E, _E.c.id == _CH.c.entry_id) if changes else _E
    return (
        select(*columns)
        .select_from(joined)
        .join(_K, _K.c.id == _E.c.key_id)
        .join(_S, _S.c.id == _E.c.candidate_set_id)
        .outerjoin(_T, _T.c.entry_id == _E.c.id)
        .outerjoin(_O, _O.c.entry_id == _E.c.id)
    )


# SyncedVerdict's fields in order, after the entry's id.
_VERDICT_COLUMNS = (
    _V.c.entry_id,
    _M.c.name,
    _M.c.fingerprint,
    *(_V.c[name] for name in ("verdict", "gain", "rounds", "confirmations", "run_id")),
    *(_V.c[name] for name in ("created_at", "updated_at")),
)
_TIMING_COLUMNS = (_CT.c.record_id, *(_CT.c[name] for name in TIMING_VALUES))
# A device's changes numbered in (w_after, w_upto]: what one chunk of a sync reads, each
# question one statement found by the change numbers' index, whatever the chunk's size.
_IN_RANGE = (
    (_CH.c.seq > bindparam("w_after"))
    & (_CH.c.seq <= bindparam("w_upto"))
    & (_E.c.device_id == bindparam("w_device"))
)
_RANGE = ("w_after", "w_upto", "w_device")
_CHANGED = _CH.join(_E, _E.c.id == _CH.c.entry_id)
_ENTRIES_BETWEEN = Prepared(_entry_select(data=True, changes=True).where(_IN_RANGE), _RANGE)
_VERDICTS_BETWEEN = Prepared(
    select(*_VERDICT_COLUMNS)
    .select_from(_CHANGED.join(_V, _V.c.entry_id == _E.c.id).join(_M, _M.c.id == _V.c.model_id))
    .where(_IN_RANGE),
    _RANGE,
)
_TIMINGS_BETWEEN = Prepared(
    select(*_TIMING_COLUMNS)
    .select_from(_CHANGED.join(_T, _T.c.entry_id == _E.c.id).join(_CT, _CT.c.record_id == _T.c.id))
    .where(_IN_RANGE),
    _RANGE,
)
# The entries of a device by key text, or any by id, with what they are compared on.
_ENTRIES_OF_KEYS = Lookup(
    _entry_select(data=False, changes=False).where(_E.c.device_id == bindparam("w_device")),
    _K.c.text,
    ("w_device",),
)
_ENTRIES_BY_ID = Lookup(_entry_select(data=True, changes=False), _E.c.id)
_VERDICTS_ON = Lookup(
    select(*_VERDICT_COLUMNS).select_from(_V.join(_M, _M.c.id == _V.c.model_id)), _V.c.entry_id
)
_TIMINGS_OF = Lookup(select(*_TIMING_COLUMNS), _CT.c.record_id)
_INSERT_ORIGIN = Prepared(insert(_O), ("entry_id", "host", "source", "synced_at"))
_DELETE_ORIGIN = Prepared(delete(_O).where(_O.c.entry_id == bindparam("w_entry")), ("w_entry",))


def entries_between(conn: Connection, device: int, after: int, upto: int) -> list[SyncedEntry]:
    """The device row's entries whose latest change is numbered in (`after`, `upto`], with
    all their evidence and their records' rows, in change order."""
    at = (after, upto, device)
    rows = _ENTRIES_BETWEEN.fetch(conn, at)
    found = _entries(
        rows,
        _VERDICTS_BETWEEN.fetch(conn, at),
        _TIMINGS_BETWEEN.fetch(conn, at),
        data=True,
    )
    return list(found.values())


def entries(conn: Connection, ids: Sequence[int]) -> list[SyncedEntry]:
    """The entries of these ids with all their evidence and their records' rows, in the
    order of `ids`."""
    rows = list(_ENTRIES_BY_ID.rows(conn, list(ids)))
    verdicts = list(_VERDICTS_ON.rows(conn, [r[0] for r in rows]))
    timings = list(_TIMINGS_OF.rows(conn, [r[11] for r in rows if r[11] is not None]))
    found = _entries(rows, verdicts, timings, data=True)
    return [found[i] for i in ids if i in found]


def entries_of_keys(
    conn: Connection, device: int, keys: Sequence[str]
) -> dict[tuple[str, str], SyncedEntry]:
    """The device row's entries of these key texts, by (key, checksum), with their record
    summaries and verdicts (not their records' rows)."""
    rows = list(_ENTRIES_OF_KEYS.rows(conn, sorted(set(keys)), device))
    verdicts = list(_VERDICTS_ON.rows(conn, [r[0] for r in rows]))
    found = _entries(rows, verdicts, (), data=False)
    return {(e.key, e.checksum): e for e in found.values()}


def _entries(
    rows: Sequence[Sequence[Any]],
    verdict_rows: Iterable[Sequence[Any]],
    timing_rows: Iterable[Sequence[Any]],
    *,
    data: bool,
) -> dict[int, SyncedEntry]:
    """The entries of `rows` (an `_entry_select`'s), with the verdicts and (with `data`) the
    records' rows among `verdict_rows` and `timing_rows`, by id in the order of `rows`."""
    verdicts: dict[int, list[SyncedVerdict]] = {}
    for v in verdict_rows:
        verdicts.setdefault(int(v[0]), []).append(SyncedVerdict(*v[1:]))
    timings: dict[int, list[TimingRow]] = {}
    for t in timing_rows:
        # The driver's own value: SQLite's 0 or 1 is written as PostgreSQL's boolean.
        timings.setdefault(int(t[0]), []).append(
            TimingRow(t[1], t[2], t[3], t[4], t[5], t[6], bool(t[7]), t[8])
        )
    out = {}
    for r in rows:
        summary = None if r[11] is None else tuple(r[12:20])
        record = None
        if data and r[11] is not None:
            record = RecordRow(
                data=bytes(r[22]),
                best=r[13],
                best_median_s=r[14],
                heuristic_median_s=r[15],
                candidates_count=int(r[16]),
                samples_count=int(r[17]),
                failures_count=int(r[18]),
                timings=tuple(timings.get(int(r[11]), ())),
                format_version=int(r[12]),
            )
        entry_id = int(r[0])
        out[entry_id] = SyncedEntry(
            id=entry_id,
            key=str(r[1]),
            checksum=str(r[2]),
            set_id=int(r[3]),
            choice=str(r[4]),
            heuristic=r[5],
            status=str(r[6]),
            speedup=r[7],
            run_id=r[8],
            created_at=r[9],
            updated_at=r[10],
            summary=summary,
            record=record,
            verdicts=tuple(verdicts.get(entry_id, ())),
            origin=None if r[20] is None else (str(r[20]), str(r[21])),
        )
    return out


# --- runs and origins --------------------------------------------------------------------------


def runs(conn: Connection, ids: Iterable[int]) -> dict[int, SyncedRun]:
    """The runs of these ids, by id."""
    wanted = sorted(set(ids))
    out = {}
    for part in queries.chunks(wanted):
        for row in conn.execute(
            select(_R.c.id, *(_R.c[c] for c in RUN_COLUMNS)).where(_R.c.id.in_(part))
        ):
            out[int(row[0])] = SyncedRun(int(row[0]), dict(zip(RUN_COLUMNS, row[1:], strict=True)))
    return out


def copy_runs(conn: Connection, device: int, found: Iterable[SyncedRun]) -> dict[int, int]:
    """The ids on this side of the other side's runs `found`, logged under the device row
    `device`: a run already here (the same kind, host, process and start) is the same run,
    the others are inserted; by the other side's id."""
    given = list(found)
    if not given:
        return {}
    pids = sorted({r.values["pid"] for r in given})
    here: dict[tuple[Any, ...], int] = {}
    for part in queries.chunks(pids):
        for row in conn.execute(
            select(_R.c.id, _R.c.kind, _R.c.hostname, _R.c.pid, _R.c.started_at).where(
                _R.c.device_id == device, _R.c.pid.in_(part)
            )
        ):
            here[tuple(row[1:])] = int(row[0])
    out = {}
    for run in given:
        at = run.natural_key()
        if at not in here:
            made = conn.execute(insert(_R).values(device_id=device, **run.values))
            key = made.inserted_primary_key
            assert key is not None
            here[at] = int(key[0])
        out[run.id] = here[at]
    return out


def write_origins(
    conn: Connection,
    origins: Sequence[tuple[int, str, str, datetime]],
    *,
    replacing: Sequence[int],
) -> None:
    """Say where each entry came from, (entry id, host, source, when), after taking away what
    was said of the entries `replacing` (those that were there before: a new entry has no
    origin yet)."""
    _DELETE_ORIGIN.run(conn, [(e,) for e in replacing])
    _INSERT_ORIGIN.run(conn, origins)
