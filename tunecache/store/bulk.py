"""Many entries written at once: a batch of decisions with their timing records and verdicts,
in a handful of statements whatever its size.

`write_entries` is what `Cache.put` and `Cache.put_many` write through, and what any caller that
writes entries in bulk (an import, a merge) should write through: it finds or makes the keys,
candidate sets and models of the whole batch with one lookup each, then inserts and replaces
the entries, their records and verdicts with one executemany per statement (`Prepared`). Like
`tunecache.store.rows`, it runs inside a write transaction the caller holds and checks nothing:
the caller checked everything first (`tunecache.writes` does it for the store API). The values
it writes are plain ones (`tunecache.store.values`, re-exported here), which the stdlib-sqlite3
writer (`tunecache.store.direct`) writes as the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, delete, insert, literal_column, select, update

from tunecache.store import models as tables
from tunecache.store import queries
from tunecache.store.models import utcnow
from tunecache.store.prepared import Lookup, Prepared
from tunecache.store.values import (
    ENTRY_VALUES,
    RECORD_VALUES,
    TIMING_VALUES,
    EntryWrite,
    OldEntry,
    RecordRow,
    Slot,
    TimingRow,
    VerdictWrite,
    collapse,
    dims_text,
    record_row,
)

__all__ = [
    "EntryWrite",
    "RecordRow",
    "TimingRow",
    "VerdictWrite",
    "Written",
    "dims_text",
    "entries_of_keys",
    "insert_records",
    "record_row",
    "write_entries",
    "write_undecided",
]


_E, _K, _S, _V = tables.ENTRIES, tables.KEYS, tables.CANDIDATE_SETS, tables.VALIDATIONS
_M, _T = tables.MODELS, tables.TIMING_RECORDS

_INSERT_KEY = Prepared(insert(_K), ("text", "signature", "dims"))
_INSERT_SET = Prepared(insert(_S), ("signature", "checksum", "size", "created_at"))
_INSERT_CANDIDATE = Prepared(insert(tables.CANDIDATES), ("set_id", "position", "name"))
_INSERT_MODEL = Prepared(insert(_M), ("name", "fingerprint", "created_at"))
_INSERT_ENTRY = Prepared(
    insert(_E), ("device_id", "key_id", "candidate_set_id", *ENTRY_VALUES, "created_at")
)
_WHERE_ENTRY = _E.c.id == bindparam("w_id")
_UPDATE_ENTRY = Prepared(update(_E).where(_WHERE_ENTRY), (*ENTRY_VALUES, "w_id"))
_UPDATE_ENTRY_CREATED = Prepared(
    update(_E).where(_WHERE_ENTRY), (*ENTRY_VALUES, "created_at", "w_id")
)
_DELETE_RECORD = Prepared(delete(_T).where(_T.c.entry_id == bindparam("w_entry")), ("w_entry",))
_DELETE_VERDICTS = Prepared(delete(_V).where(_V.c.entry_id == bindparam("w_entry")), ("w_entry",))
_INSERT_RECORD = Prepared(insert(_T), ("entry_id", *RECORD_VALUES, "created_at"))
_INSERT_TIMING = Prepared(insert(tables.CANDIDATE_TIMINGS), ("record_id", *TIMING_VALUES))
_VERDICT_VALUES = ("verdict", "gain", "rounds", "confirmations", "run_id", "updated_at")
# Each reads those columns' values off an EntryWrite, RecordRow or VerdictWrite, in order.
_entry_values = attrgetter(*ENTRY_VALUES)
_record_values = attrgetter(*RECORD_VALUES)
_verdict_values = attrgetter(*_VERDICT_VALUES)
_INSERT_VERDICT = Prepared(insert(_V), ("model_id", "entry_id", *_VERDICT_VALUES, "created_at"))
_WHERE_VERDICT = (_V.c.model_id == bindparam("w_model")) & (_V.c.entry_id == bindparam("w_entry"))
_UPDATE_VERDICT = Prepared(
    update(_V).where(_WHERE_VERDICT), (*_VERDICT_VALUES, "w_model", "w_entry")
)
_UPDATE_VERDICT_CREATED = Prepared(
    update(_V).where(_WHERE_VERDICT), (*_VERDICT_VALUES, "created_at", "w_model", "w_entry")
)


# Each matches the first column of an index: keys.text, (signature, checksum), (name, fingerprint).
_FIND_KEY = Lookup(select(_K.c.id, _K.c.text), _K.c.text)
_FIND_SET = Lookup(select(_S.c.id, _S.c.signature, _S.c.checksum), _S.c.signature)
_FIND_MODEL = Lookup(select(_M.c.id, _M.c.name, _M.c.fingerprint), _M.c.name)
_OF_DEVICE = _E.c.device_id == bindparam("w_device")
_NEW_ENTRIES = Lookup(
    select(_E.c.id, _E.c.key_id, _E.c.candidate_set_id).where(_OF_DEVICE),
    _E.c.key_id,
    ("w_device",),
)
_ENTRIES_AT = Lookup(
    select(_E.c.id, _E.c.key_id, _E.c.candidate_set_id, _E.c.choice, _E.c.created_at).where(
        _OF_DEVICE
    ),
    _E.c.key_id,
    ("w_device",),
)
_RECORDS_OF = Lookup(select(_T.c.id, _T.c.entry_id), _T.c.entry_id)
_VERDICTS_ON = Lookup(select(_V.c.model_id, _V.c.entry_id), _V.c.entry_id)


# --- many entries at once ----------------------------------------------------------------------


class Written(NamedTuple):
    """Where `write_entries` left one entry: its id, and its creation time."""

    id: int
    created_at: datetime


def write_entries(
    conn: Connection, device: int, entries: Sequence[EntryWrite], *, now: datetime | None = None
) -> list[Written]:
    """Write `entries` of the device row `device`, in order, as one `Cache.put` each would in
    one transaction, with a handful of statements for the whole batch; where each one is, in
    the order given.

    Two writes of one key and list end as the later one left it (the earlier one's verdicts go
    if the later changes the choice). Keys, candidate sets and models are found or made; `now`
    (default: the current time) dates the candidate sets and models made.
    """
    now = utcnow() if now is None else now
    # A Key formats its text on every read of `text`: once per entry is enough.
    texts = [(e.key.text,) for e in entries]
    key_ids = _find_or_make(
        conn,
        _FIND_KEY,
        {
            text: (text[0], e.key.signature, dims_text(e.key))
            for text, e in zip(texts, entries, strict=True)
        },
        _INSERT_KEY,
    )[0]
    set_ids = _set_ids(conn, entries, now)
    places = [
        (key_ids[text], set_ids[e.key.signature, e.checksum])
        for text, e in zip(texts, entries, strict=True)
    ]
    slots = collapse(entries, places, _entries_at(conn, device, places))
    _write_entry_rows(conn, device, list(slots.values()))
    _write_records(conn, list(slots.values()))
    _write_verdicts(conn, list(slots.values()), now)
    return [Written(slots[at].entry_id, slots[at].created) for at in places]


def write_undecided(
    conn: Connection, device: int, entry: EntryWrite, *, now: datetime | None = None
) -> Written | None:
    """Write `entry` as `write_entries` would, only where no model decided its key and list
    yet: no entry there, or an unvalidated one no model has a verdict on; None, writing
    nothing, where one did. Inside the caller's write transaction, so nothing decides the key
    between the look and the write (on PostgreSQL the entry's row is locked for it)."""
    where = queries.EntryFilter(key=entry.key.text, checksum=entry.checksum)
    for found in queries.entries(conn, device, where, lock=True):
        if found.status != "unvalidated" or queries.verdicts(conn, device, entry_id=found.id):
            return None
    (written,) = write_entries(conn, device, [entry], now=now)
    return written


def _find(
    conn: Connection, lookup: Lookup, wanted: Iterable[tuple[Any, ...]], *fixed: Any
) -> dict[tuple[Any, ...], int]:
    """The ids of the rows whose other columns, as `lookup` selects them after the id, hold
    each of `wanted` (the first of them is the one it matches), if any does."""
    want = set(wanted)
    out: dict[tuple[Any, ...], int] = {}
    for row in lookup.rows(conn, sorted({key[0] for key in want}), *fixed):
        found = tuple(row[1:])
        if found in want:
            out[found] = int(row[0])
    return out


def _find_or_make(
    conn: Connection,
    lookup: Lookup,
    wanted: Mapping[tuple[Any, ...], tuple[Any, ...]],
    make: Prepared,
) -> tuple[dict[tuple[Any, ...], int], list[tuple[Any, ...]]]:
    """The ids of the rows `lookup` finds for each key of `wanted`, inserting the missing ones
    (`wanted`'s value is the row `make` inserts); and the keys made."""
    found = _find(conn, lookup, wanted)
    missing = [key for key in wanted if key not in found]
    if missing:
        make.run(conn, [wanted[key] for key in missing])
        found.update(_find(conn, lookup, missing))
    return found, missing


def _set_ids(
    conn: Connection, entries: Sequence[EntryWrite], now: datetime
) -> dict[tuple[Any, ...], int]:
    """The ids of the entries' candidate sets by (signature, checksum), made with their
    candidates where new."""
    names = {(e.key.signature, e.checksum): e.names for e in entries}
    found, made = _find_or_make(
        conn,
        _FIND_SET,
        {key: (*key, len(names[key]), now) for key in names},
        _INSERT_SET,
    )
    _INSERT_CANDIDATE.run(
        conn, [(found[key], i, name) for key in made for i, name in enumerate(names[key])]
    )
    return found


def _entries_at(
    conn: Connection, device: int, places: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], OldEntry]:
    """The device's entries at these (key id, set id) places, as they stand."""
    want = set(places)
    out: dict[tuple[int, int], OldEntry] = {}
    found = _ENTRIES_AT.rows(conn, sorted({key_id for key_id, _ in want}), device)
    for entry_id, key_id, set_id, choice, created_at in found:
        if (key_id, set_id) in want:
            out[key_id, set_id] = OldEntry(int(entry_id), str(choice), created_at)
    return out


def _write_entry_rows(conn: Connection, device: int, slots: Sequence[Slot]) -> None:
    """Insert the new entries and replace the old ones (their records and, where they go,
    their verdicts with them); every slot learns its entry id."""
    new = [s for s in slots if s.old is None]
    _INSERT_ENTRY.run(
        conn,
        [(device, s.key_id, s.set_id, *_entry_values(s.final), s.created) for s in new],
    )
    if new:
        made = _find(conn, _NEW_ENTRIES, [(s.key_id, s.set_id) for s in new], device)
        for s in new:
            s.entry_id = made[s.key_id, s.set_id]
    old = [s for s in slots if s.old is not None]
    for s in old:
        assert s.old is not None
        s.entry_id = s.old.id
    _UPDATE_ENTRY.run(
        conn, [(*_entry_values(s.final), s.entry_id) for s in old if s.created_at is None]
    )
    _UPDATE_ENTRY_CREATED.run(
        conn,
        [
            (*_entry_values(s.final), s.created_at, s.entry_id)
            for s in old
            if s.created_at is not None
        ],
    )
    _DELETE_RECORD.run(conn, [(s.entry_id,) for s in old])
    _DELETE_VERDICTS.run(conn, [(s.entry_id,) for s in old if s.clear_verdicts])


def _write_records(conn: Connection, slots: Sequence[Slot]) -> None:
    """Insert the timing record of every slot that has one, with its per-candidate rows."""
    insert_records(
        conn,
        [(s.entry_id, s.final.record, s.final.updated_at) for s in slots if s.final.record],
    )


def insert_records(conn: Connection, records: Sequence[tuple[int, RecordRow, datetime]]) -> None:
    """Insert timing records, each (entry id, its rows, its time), for entries that have none,
    with their per-candidate rows."""
    _INSERT_RECORD.run(
        conn, [(entry_id, *_record_values(r), when) for entry_id, r, when in records]
    )
    if not any(r.timings for _, r, _ in records):
        return
    with_rows = [entry_id for entry_id, r, _ in records if r.timings]
    ids = {
        int(entry_id): int(record_id) for record_id, entry_id in _RECORDS_OF.rows(conn, with_rows)
    }
    _INSERT_TIMING.run(conn, [(ids[entry_id], *t) for entry_id, r, _ in records for t in r.timings])


def _write_verdicts(conn: Connection, slots: Sequence[Slot], now: datetime) -> None:
    """Write the verdicts that outlived the batch, each replacing its model's earlier one."""
    given = [(s, v) for s in slots for v in s.verdicts.values()]
    if not given:
        return
    models = _find_or_make(
        conn,
        _FIND_MODEL,
        {(v.model, v.fingerprint): (v.model, v.fingerprint, now) for _, v in given},
        _INSERT_MODEL,
    )[0]
    kept = [s.entry_id for s in slots if s.old is not None and not s.clear_verdicts]
    standing = {(int(m), int(e)) for m, e in _VERDICTS_ON.rows(conn, kept)}
    rows = [(models[v.model, v.fingerprint], s.entry_id, v) for s, v in given]
    _INSERT_VERDICT.run(
        conn,
        [
            (m, e, *_verdict_values(v), v.updated_at if v.created_at is None else v.created_at)
            for m, e, v in rows
            if (m, e) not in standing
        ],
    )
    replaced = [(m, e, v) for m, e, v in rows if (m, e) in standing]
    _UPDATE_VERDICT.run(
        conn, [(*_verdict_values(v), m, e) for m, e, v in replaced if v.created_at is None]
    )
    _UPDATE_VERDICT_CREATED.run(
        conn, [(*_verdict_values(v), v.created_at, m, e) for m, e, v in replaced if v.created_at]
    )


# --- entries by key, with their records (export and import) ------------------------------------

# "+ 0" keeps the device's indexes from serving its condition, so that SQLite finds the keys'
# few entries by the keys' index instead of walking all of the device's (see
# queries.EntryFilter); a literal, so that the statement's only parameters are named ones.
_ENTRIES_OF_KEYS = Lookup(
    queries.entry_select(records=True).where(
        _E.c.device_id + literal_column("0") == bindparam("w_device")
    ),
    _K.c.text,
    ("w_device",),
)


def entries_of_keys(
    conn: Connection, device: int, keys: Sequence[str]
) -> list[queries.StoredEntry]:
    """The entries of the device row `device` for these key texts, with their timing records,
    in (key, checksum) order: what an export writes and an import compares, a chunk of keys
    at a time, through prepared statements (SQLAlchemy's own execution of the same query
    takes twice as long, a fifth of an export's time)."""
    found = []
    for row in _ENTRIES_OF_KEYS.rows(conn, keys, device):
        data, samples = row[-2:]
        values = (*row[:-2], None if data is None else bytes(data), samples or 0)
        found.append(queries.StoredEntry(*values))
    found.sort(key=lambda e: (e.key, e.checksum))
    return found
