"""Prune a device's entries: stale, unvalidated, old or masked ones, and version folders."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from tunecache.cache import Cache
from tunecache.candidates import candidate_names, checksum
from tunecache.errors import BadArgumentError, TunecacheError
from tunecache.maintain.reports import Report, aware
from tunecache.maintain.versions import PrunedVersion, prune_versions
from tunecache.store import queries, rows
from tunecache.store.models import CANDIDATE_SETS, ENTRIES, KEYS

__all__ = ["PRUNE_KINDS", "PruneReport", "PrunedEntry", "prune"]

#: what `prune` can remove, as the command line names them
PRUNE_KINDS = ("versions", "stale", "unvalidated", "older", "masked")


@dataclass(frozen=True, slots=True)
class PrunedEntry(Report):
    """An entry prune removed (or, in a dry run, would remove), and why."""

    id: int
    key: str
    checksum: str
    choice: str
    status: str
    updated_at: datetime
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PruneReport(Report):
    """What prune removed, or in a dry run would remove."""

    dry_run: bool
    entries: tuple[PrunedEntry, ...] = ()
    versions: tuple[PrunedVersion, ...] = ()
    #: rows left without entries and removed with them: keys and candidate sets
    orphans: Mapping[str, int] = field(default_factory=dict)
    #: entries that matched but were spared because a run still writing them is open
    spared_active: int = 0


def _current_sets(
    found: Sequence[queries.StoredEntry], current: Mapping[str, Sequence[str]] | None
) -> dict[str, str]:
    """The current candidate-set checksum of each signature judged.

    With `current` (signature -> the client's list now), exactly those signatures; without, the
    set each signature of this device was most recently tuned against.
    """
    if current is not None:
        return {sig: checksum(names) for sig, names in current.items()}
    latest: dict[str, tuple[datetime, int, str]] = {}
    for row in found:
        seen = (row.updated_at, row.id, row.checksum)
        if row.signature not in latest or seen > latest[row.signature]:
            latest[row.signature] = seen
    return {sig: value[2] for sig, value in latest.items()}


def _reasons(
    row: queries.StoredEntry,
    said: list[str],
    sets: Mapping[str, str] | None,
    *,
    unvalidated: bool,
    older_than: datetime | None,
    masked: bool,
) -> list[str]:
    """Why each chosen kind would remove this entry (`said`: the verdicts it has)."""
    reasons = []
    if sets is not None and row.signature in sets and sets[row.signature] != row.checksum:
        reasons.append("stale")
    if unvalidated and "validated" not in said:
        reasons.append("unvalidated")
    if older_than is not None and row.updated_at < older_than:
        reasons.append("older")
    if masked and said and all(v == "masked" for v in said):
        reasons.append("masked")
    return reasons


def _select_prunable(
    conn: Connection,
    device_id: int,
    *,
    stale: bool,
    current: Mapping[str, Sequence[str]] | None,
    unvalidated: bool,
    older_than: datetime | None,
    masked: bool,
) -> tuple[list[PrunedEntry], int]:
    """The entries each chosen kind would remove, with their reasons, and how many were spared."""
    verdicts: dict[int, list[str]] = {}
    for v in queries.verdicts(conn, device_id):
        verdicts.setdefault(v.entry_id, []).append(v.verdict)
    # An entry still being tuned or validated is never pruned under the writer's feet.
    active = queries.open_run_entries(conn, device_id)
    found = queries.entries(conn, device_id, order="key")
    sets = _current_sets(found, current) if stale else None
    chosen: list[PrunedEntry] = []
    spared = 0
    for row in found:
        reasons = _reasons(
            row,
            verdicts.get(row.id, []),
            sets,
            unvalidated=unvalidated,
            older_than=older_than,
            masked=masked,
        )
        if not reasons:
            continue
        if row.id in active:
            spared += 1
            continue
        chosen.append(
            PrunedEntry(
                row.id,
                row.key,
                row.checksum,
                row.choice,
                row.status,
                row.updated_at,
                tuple(reasons),
            )
        )
    return chosen, spared


def _orphans(conn: Connection, removed: Iterable[int]) -> tuple[list[int], list[int]]:
    """The keys and candidate sets that would have no entry left once `removed` are gone."""
    gone = set(removed)
    keys: dict[int, bool] = {}
    sets: dict[int, bool] = {}
    for link in queries.entry_links(conn):
        kept = link.id not in gone
        keys[link.key_id] = keys.get(link.key_id, False) or kept
        sets[link.set_id] = sets.get(link.set_id, False) or kept
    # Only rows this prune leaves empty: rows that were orphans already are doctor's business.
    return (
        sorted(k for k, kept in keys.items() if not kept),
        sorted(s for s, kept in sets.items() if not kept),
    )


def _parse_current(current: Mapping[str, Sequence[str]] | None) -> dict[str, tuple[str, ...]]:
    if current is None:
        return {}
    if not isinstance(current, Mapping):
        raise BadArgumentError("the current candidate lists must map a signature to a list")
    out = {}
    for sig, names in current.items():
        if not isinstance(sig, str) or not sig:
            raise BadArgumentError(f"a signature must be non-empty text, got {sig!r}")
        try:
            out[sig] = candidate_names(names)
        except TunecacheError as error:
            raise BadArgumentError(f"candidates of {sig}: {error}") from None
    return out


def prune(
    cache: Cache,
    *,
    versions: bool = False,
    stale: bool = False,
    current: Mapping[str, Sequence[str]] | None = None,
    unvalidated: bool = False,
    older_than: datetime | None = None,
    masked: bool = False,
    dry_run: bool = False,
    root: str | os.PathLike[str] | None = None,
) -> PruneReport:
    """Remove what the chosen kinds select, or with `dry_run` only say what that would be.

    - `versions`: the version folders of this client other than the current one;
    - `stale`: entries tuned against a candidate list that is no longer current: `current`
      maps a signature to the client's list now (other signatures are left alone); without
      it, the list each signature was most recently tuned against is taken as current;
    - `unvalidated`: entries no model has validated;
    - `older_than`: entries last updated before that time;
    - `masked`: entries that every model that judged them masked.

    Entries of a run still open ("running") are spared and counted. Keys and candidate sets
    that no entry uses any more go with the entries. All entry removals are one transaction.
    """
    checked = _parse_current(current) if current is not None else None
    older_than = aware(older_than, "older_than")
    kinds = dict(stale=stale, unvalidated=unvalidated, older=older_than is not None, masked=masked)
    report = PruneReport(dry_run=dry_run)
    if any(kinds.values()):
        report = _prune_entries(cache, checked, older_than, dry_run=dry_run, **kinds)
    if versions:
        found = prune_versions(cache.device, root=root, dry_run=dry_run)
        report = PruneReport(
            dry_run,
            report.entries,
            tuple(found),
            report.orphans,
            report.spared_active,
        )
    return report


def _prune_entries(
    cache: Cache,
    current: Mapping[str, Sequence[str]] | None,
    older_than: datetime | None,
    *,
    dry_run: bool,
    stale: bool,
    unvalidated: bool,
    older: bool,
    masked: bool,
) -> PruneReport:
    # The selection runs inside the same transaction as the deletes: what is reported is
    # exactly what went, even with other writers about.
    with cache.transaction(write=not dry_run) as tx:
        device_id = tx.device_id()
        if device_id is None:
            return PruneReport(dry_run=dry_run, orphans={"keys": 0, "candidate_sets": 0})
        chosen, spared = _select_prunable(
            tx.conn,
            device_id,
            stale=stale,
            current=current,
            unvalidated=unvalidated,
            older_than=older_than if older else None,
            masked=masked,
        )
        ids = [e.id for e in chosen]
        keys, sets = _orphans(tx.conn, ids)
        if not dry_run:
            # Foreign keys cascade to timing records, candidate timings and verdicts.
            rows.delete_ids(tx.conn, ENTRIES, ids)
            rows.delete_ids(tx.conn, KEYS, keys)
            rows.delete_ids(tx.conn, CANDIDATE_SETS, sets)
    return PruneReport(
        dry_run=dry_run,
        entries=tuple(chosen),
        orphans={"keys": len(keys), "candidate_sets": len(sets)},
        spared_active=spared,
    )
