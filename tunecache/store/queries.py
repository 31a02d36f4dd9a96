"""Every question the package asks of a cache database, one function each.

The store API (`tunecache.cache`), exchange and maintenance read through these functions, inside
a transaction they hold (`Cache.transaction`): a question written once is answered the same way
everywhere. Writes live in `tunecache.store.rows`; the resolver's stdlib-sqlite3 reads of the
read-contract views live in `tunecache.resolve`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    Table,
    exists,
    func,
    or_,
    select,
)

from tunecache.store import models as tables
from tunecache.store.values import VerdictFacts

__all__ = [
    "CHUNK",
    "EntryFilter",
    "StoredEntry",
    "StoredModel",
    "StoredVerdict",
    "VerdictFacts",
    "chunks",
    "count",
    "count_entries",
    "device_id",
    "devices_with_entries",
    "entries",
    "entry_at",
    "entry_owned",
    "entry_select",
    "keys_after",
    "models",
    "record_data",
    "run",
    "run_exists",
    "runs_noted",
    "set_names",
    "verdicts",
]

#: how many ids one statement binds at most: SQLite caps the number of bound parameters
CHUNK = 500

# Short names for the Core tables these statements are built from.
_E, _K, _S, _V = tables.ENTRIES, tables.KEYS, tables.CANDIDATE_SETS, tables.VALIDATIONS
_M, _R, _T = tables.MODELS, tables.RUNS, tables.TIMING_RECORDS
_C, _D = tables.CANDIDATES, tables.DEVICES


def chunks(ids: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """`ids` in slices of at most CHUNK, for statements that bind each of them."""
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def count(conn: Connection, table: Table) -> int:
    """How many rows `table` holds, of every device."""
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


# --- devices -----------------------------------------------------------------------------------


def device_id(conn: Connection, fingerprint: str) -> int | None:
    """The id of the device row with this fingerprint, or None if there is none."""
    found = conn.execute(select(_D.c.id).where(_D.c.fingerprint == fingerprint)).scalar()
    return None if found is None else int(found)


def devices_with_entries(conn: Connection) -> list[tuple[Any, ...]]:
    """The checked fields (cpu, threads, accelerator, client, client_version) of every device
    that owns at least one entry, as stored (not yet validated)."""
    d = _D.c
    rows = conn.execute(
        select(d.cpu, d.threads, d.accelerator, d.client, d.client_version).where(
            d.id.in_(select(_E.c.device_id))
        )
    )
    return [tuple(row) for row in rows]


# --- entries -----------------------------------------------------------------------------------


class StoredEntry(NamedTuple):
    """One entry row with its key and candidate set, as the entry questions return it."""

    id: int
    key: str
    signature: str
    dims: str
    set_id: int
    checksum: str
    choice: str
    heuristic: str | None
    status: str
    speedup: float | None
    run_id: int | None
    created_at: datetime
    updated_at: datetime
    #: the timing record's CBOR bytes, or None (always None unless asked for with `records`)
    data: bytes | None = None
    #: raw samples in the timing record (0 unless asked for with `records`)
    samples: int = 0

    def values_for(self, record: type) -> dict[str, Any]:
        """This row's values for the fields of the dataclass `record` that it has by name:
        to build another kind of entry from it, adding or overriding the rest."""
        return {f.name: getattr(self, f.name) for f in fields(record) if f.name in self._fields}


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """Which of a device's entries `entries` returns: every field that is not None must hold.

    `op` is a key's first token (every signature equal to it, or starting with it and "_");
    `model` keeps entries that model has a verdict on, either way; the ages compare the last
    update (`older_than` is exclusive, `newer_than` inclusive).
    """

    entry_id: int | None = None
    key: str | None = None
    checksum: str | None = None
    signature: str | None = None
    op: str | None = None
    model: str | None = None
    status: str | None = None
    older_than: datetime | None = None
    newer_than: datetime | None = None

    def clauses(self, device: int) -> list[ColumnElement[bool]]:
        """The WHERE clauses that select these entries of the device row `device`."""
        where: list[ColumnElement[bool]] = [_E.c.device_id == device]
        if self.key is not None:
            # A key has a handful of entries, found by its index. SQLite keeps no statistics
            # here, so it would rather walk all of the device's entries in the order of
            # ix_entries_device_id_updated_at (to spare sorting those few): "+ 0" keeps any
            # index from serving the device's condition.
            where = [_E.c.device_id + 0 == device]
        if self.entry_id is not None:
            where.append(_E.c.id == self.entry_id)
        if self.key is not None:
            where.append(_K.c.text == self.key)
        if self.checksum is not None:
            where.append(_S.c.checksum == self.checksum)
        if self.signature is not None:
            where.append(_K.c.signature == self.signature)
        if self.op is not None:
            # Tokens are joined by "_", which LIKE reads as a wildcard: autoescape keeps it
            # literal.
            prefix = _K.c.signature.startswith(self.op + "_", autoescape=True)
            where.append(or_(_K.c.signature == self.op, prefix))
        if self.model is not None:
            where.append(
                exists()
                .where(_V.c.entry_id == _E.c.id, _M.c.id == _V.c.model_id, _M.c.name == self.model)
                .correlate(_E)
            )
        if self.status is not None:
            where.append(_E.c.status == self.status)
        if self.older_than is not None:
            where.append(_E.c.updated_at < self.older_than)
        if self.newer_than is not None:
            where.append(_E.c.updated_at >= self.newer_than)
        return where


def entries(
    conn: Connection,
    device: int,
    where: EntryFilter = EntryFilter(),
    *,
    order: Literal["recent", "key"] = "recent",
    limit: int | None = None,
    records: bool = False,
    lock: bool = False,
) -> list[StoredEntry]:
    """A device's entries with their keys and candidate sets, those `where` selects.

    `order` is "recent" (last updated first) or "key" (key text, then checksum). `records` adds
    each entry's timing-record bytes and sample count. `lock` (in a write transaction) locks
    the entry rows found until it ends, where the database locks rows (PostgreSQL's FOR
    UPDATE; a SQLite writer holds the whole file already).
    """
    query = entry_select(records=records).where(*where.clauses(device))
    if lock:
        query = query.with_for_update(of=_E)
    if order == "recent":
        query = query.order_by(_E.c.updated_at.desc(), _E.c.id.desc())
    else:
        query = query.order_by(_K.c.text, _S.c.checksum)
    if limit is not None:
        query = query.limit(limit)
    out = []
    for row in conn.execute(query):
        values = tuple(row)
        if records:
            data, samples = values[-2:]
            values = (*values[:-2], None if data is None else bytes(data), samples or 0)
        out.append(StoredEntry(*values))
    return out


def count_entries(conn: Connection, device: int) -> int:
    """How many entries the device row `device` has."""
    query = select(func.count()).select_from(_E).where(_E.c.device_id == device)
    return int(conn.execute(query).scalar_one())


def entry_at(conn: Connection, device: int, key_id: int, set_id: int) -> tuple[int, str] | None:
    """The (id, choice) of a device's entry for this key row and candidate set, or None."""
    found = conn.execute(
        select(_E.c.id, _E.c.choice).where(
            _E.c.device_id == device, _E.c.key_id == key_id, _E.c.candidate_set_id == set_id
        )
    ).first()
    return None if found is None else (int(found.id), str(found.choice))


def entry_owned(conn: Connection, entry_id: int, device: int | None) -> bool:
    """Whether entry `entry_id` exists and belongs to the device row `device`."""
    found = conn.execute(
        select(_E.c.id).where(_E.c.id == entry_id, _E.c.device_id == device)
    ).scalar()
    return found is not None


def set_names(conn: Connection, set_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """The candidate names of each candidate set, in their order, by set id."""
    ids = sorted(set(set_ids))
    out: dict[int, list[str]] = {i: [] for i in ids}
    for part in chunks(ids):
        for set_id, name in conn.execute(
            select(_C.c.set_id, _C.c.name)
            .where(_C.c.set_id.in_(part))
            .order_by(_C.c.set_id, _C.c.position)
        ):
            out[set_id].append(name)
    return {i: tuple(v) for i, v in out.items()}


def record_data(conn: Connection, entry_id: int, device: int | None) -> bytes | None:
    """The CBOR bytes of an entry's timing record, if the entry is the device's and has one."""
    data = conn.execute(
        select(_T.c.data)
        .join(_E, _E.c.id == _T.c.entry_id)
        .where(_T.c.entry_id == entry_id, _E.c.device_id == device)
    ).scalar()
    return None if data is None else bytes(data)


# --- verdicts and models ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredVerdict(VerdictFacts):
    """A verdict as the store keeps it: its facts, the rows it links, its run and its times."""

    entry_id: int
    model_id: int
    run_id: int | None
    created_at: datetime
    updated_at: datetime


def verdicts(
    conn: Connection,
    device: int | None,
    *,
    entry_id: int | None = None,
    model: str | None = None,
    fingerprint: str | None = None,
    keys: Sequence[str] | None = None,
    order: Literal["entry", "updated"] = "entry",
) -> list[StoredVerdict]:
    """The verdicts on a device's entries, filtered as asked (`keys`: on the entries of these
    key texts, at most CHUNK of them).

    `order` is "entry" (entry id, then model name and fingerprint) or "updated" (oldest
    first, so a dict built from them keeps each key's latest verdict).
    """
    if device is None:
        return []
    where: list[ColumnElement[bool]] = [_E.c.device_id == device]
    if keys is not None:
        # A few entries found by their keys' index, not all the device's (see EntryFilter).
        where = [_E.c.device_id + 0 == device, _K.c.text.in_(keys)]
    if entry_id is not None:
        where.append(_V.c.entry_id == entry_id)
    if model is not None:
        where.append(_M.c.name == model)
    if fingerprint is not None:
        where.append(_M.c.fingerprint == fingerprint)
    query = (
        select(
            _V.c.entry_id,
            _V.c.model_id,
            _M.c.name.label("model"),
            _M.c.fingerprint,
            _V.c.verdict,
            _V.c.gain,
            _V.c.rounds,
            _V.c.confirmations,
            _V.c.run_id,
            _V.c.created_at,
            _V.c.updated_at,
        )
        .join(_M, _M.c.id == _V.c.model_id)
        .join(_E, _E.c.id == _V.c.entry_id)
        .where(*where)
    )
    if keys is not None:
        query = query.join(_K, _K.c.id == _E.c.key_id)
    if order == "entry":
        query = query.order_by(_V.c.entry_id, _M.c.name, _M.c.fingerprint)
    else:
        query = query.order_by(_V.c.updated_at, _V.c.id)
    return [StoredVerdict(**row._mapping) for row in conn.execute(query)]


class StoredModel(NamedTuple):
    """A model row: a workload by name and fingerprint."""

    id: int
    name: str
    fingerprint: str
    created_at: datetime


def models(conn: Connection) -> list[StoredModel]:
    """Every model in the file, by name and fingerprint."""
    query = select(_M.c.id, _M.c.name, _M.c.fingerprint, _M.c.created_at).order_by(
        _M.c.name, _M.c.fingerprint
    )
    return [StoredModel(*row) for row in conn.execute(query)]


# --- runs --------------------------------------------------------------------------------------


def run_exists(conn: Connection, run_id: int) -> bool:
    """Whether the `runs` table has this id."""
    return conn.execute(select(_R.c.id).where(_R.c.id == run_id)).scalar() is not None


def run(conn: Connection, run_id: int) -> dict[str, Any] | None:
    """The run with this id as its columns by name (the process that ran it: hostname, pid,
    tool and Python versions; its kind, status, times and notes), or None."""
    row = conn.execute(select(_R).where(_R.c.id == run_id)).first()
    return None if row is None else dict(row._mapping)


def runs_noted(conn: Connection, device: int | None, notes: str, status: str) -> list[int]:
    """Ids of a device's runs in `status` whose notes are exactly `notes`, oldest first."""
    rows = conn.execute(
        select(_R.c.id)
        .where(_R.c.device_id == device, _R.c.status == status, _R.c.notes == notes)
        .order_by(_R.c.id)
    )
    return [int(row.id) for row in rows]


# --- a device's entries a chunk of keys at a time (export, import) -------------------------------


def entry_select(*, records: bool = False) -> Select[Any]:
    """The query of entry rows with their keys and candidate sets, as StoredEntry holds them
    (with `records`, each one's timing-record bytes and sample count too), to add a WHERE
    clause and an order to."""
    columns: list[ColumnElement[Any]] = [
        _E.c.id,
        _K.c.text,
        _K.c.signature,
        _K.c.dims,
        _S.c.id.label("set_id"),
        _S.c.checksum,
        _E.c.choice,
        _E.c.heuristic,
        _E.c.status,
        _E.c.speedup,
        _E.c.run_id,
        _E.c.created_at,
        _E.c.updated_at,
    ]
    if records:
        columns += [_T.c.data, _T.c.samples_count]
    query = (
        select(*columns).join(_K, _K.c.id == _E.c.key_id).join(_S, _S.c.id == _E.c.candidate_set_id)
    )
    if records:
        query = query.outerjoin(_T, _T.c.entry_id == _E.c.id)
    return query


def keys_after(conn: Connection, device: int, after: str | None, limit: int) -> list[str]:
    """Up to `limit` texts of the keys the device row `device` has entries of, in text order,
    after `after` (from the first if None): a walk of the device's keys a chunk at a time,
    along the keys' own index."""
    has = exists().where(_E.c.key_id == _K.c.id, _E.c.device_id == device)
    query = select(_K.c.text).where(has).order_by(_K.c.text).limit(limit)
    if after is not None:
        query = query.where(_K.c.text > after)
    return [str(text) for text in conn.execute(query).scalars().all()]
