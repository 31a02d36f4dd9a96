"""The questions maintenance asks of a whole cache file: prune's selection, doctor's checks.

Prune and doctor judge every entry of a device, or of the file, in SQL: each question is one
statement whose lookups go through an index (migration 0004), and only the rows that answer it
reach Python; tests/store/test_queries.py checks their plans. The questions the store API,
exchange and listing ask are in `tunecache.store.queries`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

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
    "ORPHANS",
    "PruneRow",
    "PruneSelection",
    "foreign_key_violations",
    "illegal_choices",
    "integrity",
    "open_run_touched",
    "orphaned_sets",
    "orphans",
    "prunable",
    "records",
    "running_runs",
    "set_checksums",
    "stale_sets",
]

# Short names for the Core tables these statements are built from.
_E, _K, _S, _V = tables.ENTRIES, tables.KEYS, tables.CANDIDATE_SETS, tables.VALIDATIONS
_M, _R, _T = tables.MODELS, tables.RUNS, tables.TIMING_RECORDS
_C, _D = tables.CANDIDATES, tables.DEVICES


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


def records(conn: Connection) -> Iterator[tuple[int, Any]]:
    """(id, stored bytes) of every timing record in the file, streamed."""
    for record_id, data in conn.execute(select(_T.c.id, _T.c.data)):
        yield int(record_id), data


def running_runs(conn: Connection, hostname: str) -> list[tuple[int, int]]:
    """(id, pid) of every run still marked "running" that was started on `hostname`."""
    rows = conn.execute(
        select(_R.c.id, _R.c.pid).where(_R.c.status == "running", _R.c.hostname == hostname)
    )
    return [(int(run_id), int(pid)) for run_id, pid in rows]


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
