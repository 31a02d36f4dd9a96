"""Every question the package asks of a cache database, one function each.

The store API (`tunecache.cache`), exchange and maintenance read through these functions, inside
a transaction they hold (`Cache.transaction`): a question written once is answered the same way
everywhere. Writes live in `tunecache.store.rows`; the resolver's stdlib-sqlite3 reads of the
read-contract views live in `tunecache.resolve`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Table,
    and_,
    bindparam,
    exists,
    false,
    func,
    or_,
    select,
)

from tunecache.store import models as tables

__all__ = [
    "CHUNK",
    "ORPHANS",
    "EntryFilter",
    "EntryLink",
    "PruneRow",
    "PruneSelection",
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
    "entry_links",
    "entry_owned",
    "foreign_key_violations",
    "illegal_choices",
    "integrity",
    "models",
    "open_run_touched",
    "orphaned_sets",
    "orphans",
    "prunable",
    "record_data",
    "records",
    "run",
    "run_exists",
    "running_runs",
    "runs_noted",
    "set_checksums",
    "set_names",
    "stale_sets",
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
) -> list[StoredEntry]:
    """A device's entries with their keys and candidate sets, those `where` selects.

    `order` is "recent" (last updated first) or "key" (key text, then checksum). `records` adds
    each entry's timing-record bytes and sample count.
    """
    columns = [
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
        select(*columns)
        .join(_K, _K.c.id == _E.c.key_id)
        .join(_S, _S.c.id == _E.c.candidate_set_id)
        .where(*where.clauses(device))
    )
    if records:
        query = query.outerjoin(_T, _T.c.entry_id == _E.c.id)
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


class EntryLink(NamedTuple):
    """An entry row's links and choices, as the whole-file checks need them."""

    id: int
    key_id: int
    set_id: int
    choice: str
    heuristic: str | None


def entry_links(conn: Connection) -> list[EntryLink]:
    """Every entry of every device: its key and candidate set rows, its choice and heuristic."""
    e = _E.c
    rows = conn.execute(select(e.id, e.key_id, e.candidate_set_id, e.choice, e.heuristic))
    return [EntryLink(*row) for row in rows]


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


def set_checksums(conn: Connection) -> list[tuple[int, str, tuple[str, ...]]]:
    """(id, stored checksum, names in order) of every candidate set in the file."""
    names: dict[int, tuple[str, ...]] = {}
    for set_id, name in conn.execute(
        select(_C.c.set_id, _C.c.name).order_by(_C.c.set_id, _C.c.position)
    ):
        names[set_id] = (*names.get(set_id, ()), name)
    return [
        (int(set_id), str(sum_), names.get(set_id, ()))
        for set_id, sum_ in conn.execute(select(_S.c.id, _S.c.checksum))
    ]


def record_data(conn: Connection, entry_id: int, device: int | None) -> bytes | None:
    """The CBOR bytes of an entry's timing record, if the entry is the device's and has one."""
    data = conn.execute(
        select(_T.c.data)
        .join(_E, _E.c.id == _T.c.entry_id)
        .where(_T.c.entry_id == entry_id, _E.c.device_id == device)
    ).scalar()
    return None if data is None else bytes(data)


def records(conn: Connection) -> Iterator[tuple[int, Any]]:
    """(id, stored bytes) of every timing record in the file, streamed."""
    for record_id, data in conn.execute(select(_T.c.id, _T.c.data)):
        yield int(record_id), data


# --- verdicts and models ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerdictFacts:
    """What a model's verdict on an entry says: the model, the verdict, the evidence behind it."""

    model: str
    fingerprint: str
    verdict: str
    gain: float | None
    rounds: int
    confirmations: int

    def facts(self) -> dict[str, Any]:
        """These fields alone, by name: to build another kind of verdict from this one."""
        return {f.name: getattr(self, f.name) for f in fields(VerdictFacts)}


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
    order: Literal["entry", "updated"] = "entry",
) -> list[StoredVerdict]:
    """The verdicts on a device's entries, filtered as asked.

    `order` is "entry" (entry id, then model name and fingerprint) or "updated" (oldest
    first, so a dict built from them keeps each key's latest verdict).
    """
    if device is None:
        return []
    where: list[ColumnElement[bool]] = [_E.c.device_id == device]
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


def running_runs(conn: Connection, hostname: str) -> list[tuple[int, int]]:
    """(id, pid) of every run still marked "running" that was started on `hostname`."""
    rows = conn.execute(
        select(_R.c.id, _R.c.pid).where(_R.c.status == "running", _R.c.hostname == hostname)
    )
    return [(int(run_id), int(pid)) for run_id, pid in rows]


# --- the whole file's health -------------------------------------------------------------------


def integrity(conn: Connection) -> tuple[str, ...]:
    """What SQLite's integrity check says of the file: ("ok",) when it is sound."""
    return tuple(str(row[0]) for row in conn.exec_driver_sql("PRAGMA integrity_check"))


def foreign_key_violations(conn: Connection) -> list[tuple[str, int]]:
    """(table, rowid) of every row whose foreign key names a row that no longer exists."""
    return [
        (str(row[0]), int(row[1]))
        for row in conn.exec_driver_sql("PRAGMA foreign_key_check")
        if row[1] is not None
    ]


#: the rows nothing uses any more, by kind: (table, what they are)
ORPHANS: dict[str, tuple[Table, str]] = {
    "orphaned-keys": (_K, "keys no entry uses"),
    "orphaned-candidate-sets": (_S, "candidate sets no entry uses"),
    "orphaned-models": (_M, "models with no verdict"),
    "orphaned-devices": (_D, "device identities with no entry and no run"),
}


def orphans(conn: Connection, kind: str, keep_device: str) -> list[int]:
    """Ids of the rows of one ORPHANS kind; a device with fingerprint `keep_device` (the one
    the cache is opened for) is never an orphan."""
    unused: dict[str, list[ColumnElement[bool]]] = {
        "orphaned-keys": [~exists().where(_E.c.key_id == _K.c.id)],
        "orphaned-candidate-sets": [~exists().where(_E.c.candidate_set_id == _S.c.id)],
        "orphaned-models": [~exists().where(_V.c.model_id == _M.c.id)],
        "orphaned-devices": [
            ~exists().where(_E.c.device_id == _D.c.id),
            ~exists().where(_R.c.device_id == _D.c.id),
            _D.c.fingerprint != keep_device,
        ],
    }
    table = ORPHANS[kind][0]
    return [int(row[0]) for row in conn.execute(select(table.c.id).where(*unused[kind]))]


# --- maintenance, decided in SQL ---------------------------------------------------------------
#
# Prune and doctor judge every entry of a device, or of the file, in SQL: each question is one
# statement whose lookups go through an index (migration 0004), and only the rows that answer
# it reach Python. tests/store/test_queries.py checks their plans.


@dataclass(frozen=True, slots=True)
class PruneSelection:
    """What prune selects among the entries of the device row `device`: each kind that is set.

    A candidate set belongs to one signature, that of its entries' keys (the store writes them
    so), so being stale is a property of an entry's candidate set (see `stale_sets`).
    """

    device: int
    #: the ids of the stale candidate sets, or None to leave stale entries alone
    stale: tuple[int, ...] | None = None
    #: entries no model has validated
    unvalidated: bool = False
    #: entries last updated before this time (exclusive)
    older_than: datetime | None = None
    #: entries every model that judged them masked (at least one did)
    masked: bool = False

    def reasons(self, e: Any) -> dict[str, ColumnElement[bool]]:
        """The condition of each kind chosen on a row of `e` (an alias of `entries`), by the
        name prune reports it under, in the order it reports them."""
        out: dict[str, ColumnElement[bool]] = {}
        if self.stale is not None:
            out["stale"] = e.c.candidate_set_id.in_(_inline(self.stale))
        if self.unvalidated:
            out["unvalidated"] = ~_judged(e, _V.c.verdict == "validated")
        if self.older_than is not None:
            out["older"] = e.c.updated_at < self.older_than
        if self.masked:
            out["masked"] = and_(_judged(e), ~_judged(e, _V.c.verdict != "masked"))
        return out

    def chosen(self, e: Any) -> ColumnElement[bool]:
        """Whether prune removes a row of `e`: the device's, selected by a kind, not spared.

        No part of it is ever NULL, so `~chosen` is exactly "stays".
        """
        reasons = list(self.reasons(e).values())
        if not reasons:
            return false()
        return and_(e.c.device_id == self.device, or_(*reasons), ~open_run_touched(e))


def _inline(ids: Iterable[int]) -> BindParameter[Any]:
    """Integer ids for an IN list, rendered into the statement: any number of them, and none
    counts against SQLite's limit on bound parameters (they come from the store itself)."""
    # unique: two such lists in one statement must not share a name, or one takes the
    # other's values.
    values = [int(i) for i in ids]
    return bindparam("ids", values, expanding=True, literal_execute=True, unique=True)


def _judged(e: Any, *where: ColumnElement[bool]) -> ColumnElement[bool]:
    """Whether a model that exists gave the entry row of `e` a verdict matching `where`."""
    return exists().where(_V.c.entry_id == e.c.id, _M.c.id == _V.c.model_id, *where).correlate(e)


def open_run_touched(e: Any) -> ColumnElement[bool]:
    """Whether a run still marked "running" wrote or judged the entry row of `e` (an alias of
    `entries`): prune never removes such an entry under its writer's feet. Never NULL."""
    running = select(_R.c.id).where(_R.c.status == "running")
    judged = select(_V.c.entry_id).join(_R, _R.c.id == _V.c.run_id).where(_R.c.status == "running")
    return or_(and_(e.c.run_id.is_not(None), e.c.run_id.in_(running)), e.c.id.in_(judged))


def stale_sets(
    conn: Connection, device: int, current: Mapping[str, str] | None = None
) -> tuple[int, ...]:
    """Ids of the candidate sets whose entries are stale, by `current` (signature -> checksum of
    the client's list now; other signatures are never stale) or, without it, against the set
    of each signature's most recently updated entry of the device (the highest id among those
    updated at the same moment)."""
    sets = conn.execute(select(_S.c.id, _S.c.signature, _S.c.checksum).order_by(_S.c.id)).all()
    if current is not None:
        return tuple(int(i) for i, sig, sum_ in sets if sig in current and current[sig] != sum_)
    ranked = (
        select(
            _E.c.candidate_set_id.label("set_id"),
            func.row_number()
            .over(partition_by=_K.c.signature, order_by=(_E.c.updated_at.desc(), _E.c.id.desc()))
            .label("rank"),
        )
        .join(_K, _K.c.id == _E.c.key_id)
        .where(_E.c.device_id == device)
        .subquery()
    )
    latest = set(conn.execute(select(ranked.c.set_id).where(ranked.c.rank == 1)).scalars())
    return tuple(int(i) for i, _, _ in sets if i not in latest)


class PruneRow(NamedTuple):
    """A device's entry that a kind of prune selects, with its rows and what each kind says."""

    id: int
    key: str
    #: its key row and candidate set row
    key_id: int
    set_id: int
    checksum: str
    choice: str
    status: str
    updated_at: datetime
    #: the names of the kinds that select it, in the order prune reports them
    reasons: tuple[str, ...]
    #: a run still open wrote or judged it: prune spares it
    spared: bool
    #: once prune removed what it chose, no entry of any device would use its key
    last_of_key: bool


def prunable(conn: Connection, selection: PruneSelection) -> list[PruneRow]:
    """The device's entries that a kind selects, spared ones included, by key text then
    checksum; each with its reasons and whether its key goes with what prune removes."""
    e, o = _E.alias("e"), _E.alias("o")
    reasons = selection.reasons(e)
    if not reasons:
        return []
    # The key stays if another entry of it stays (of any device: keys are shared).
    last_of_key = ~exists().where(o.c.key_id == e.c.key_id, o.c.id != e.c.id, ~selection.chosen(o))
    query = (
        select(
            e.c.id,
            _K.c.text,
            e.c.key_id,
            e.c.candidate_set_id,
            _S.c.checksum,
            e.c.choice,
            e.c.status,
            e.c.updated_at,
            open_run_touched(e),
            last_of_key,
            *reasons.values(),
        )
        .join(_K, _K.c.id == e.c.key_id)
        .join(_S, _S.c.id == e.c.candidate_set_id)
        .where(e.c.device_id == selection.device, or_(*reasons.values()))
        .order_by(_K.c.text, _S.c.checksum)
    )
    # SQLite answers each condition 0 or 1: each pattern of them names its reasons once.
    said = {
        hits: tuple(name for name, hit in zip(reasons, hits, strict=True) if hit)
        for hits in itertools.product((0, 1), repeat=len(reasons))
    }
    return [
        PruneRow._make((*row[:8], said[tuple(row[10:])], bool(row[8]), bool(row[9])))
        for row in conn.execute(query)
    ]


def orphaned_sets(conn: Connection, selection: PruneSelection, used: Iterable[int]) -> list[int]:
    """Of the candidate sets `used` by the entries prune removes, the ids of those no entry of
    any device would use once they are gone."""
    o = _E.alias("o")
    stays = exists().where(o.c.candidate_set_id == _S.c.id, ~selection.chosen(o))
    query = select(_S.c.id).where(_S.c.id.in_(_inline(set(used))), ~stays).order_by(_S.c.id)
    return [int(set_id) for set_id in conn.execute(query).scalars()]


def illegal_choices(conn: Connection) -> list[int]:
    """Ids of the entries, of every device, whose choice or heuristic is not a name of their
    candidate set."""
    e = _E.c

    def named(column: ColumnElement[Any]) -> ColumnElement[bool]:
        return exists().where(_C.c.set_id == e.candidate_set_id, _C.c.name == column)

    query = (
        select(e.id)
        .where(or_(~named(e.choice), and_(e.heuristic.is_not(None), ~named(e.heuristic))))
        .order_by(e.id)
    )
    return [int(entry_id) for entry_id in conn.execute(query).scalars()]
