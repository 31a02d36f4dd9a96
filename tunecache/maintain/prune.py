"""Prune a device's entries: stale, unvalidated, old or masked ones, and version folders."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from tunecache.cache import Cache
from tunecache.candidates import candidate_names, checksum
from tunecache.errors import BadArgumentError, TunecacheError
from tunecache.maintain.reports import Report, aware
from tunecache.maintain.versions import PrunedVersion, prune_versions
from tunecache.store import rows, upkeep
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


def _select_prunable(
    conn: Connection,
    device_id: int,
    *,
    stale: bool,
    current: Mapping[str, Sequence[str]] | None,
    unvalidated: bool,
    older_than: datetime | None,
    masked: bool,
) -> tuple[list[PrunedEntry], int, list[int], list[int]]:
    """The entries each chosen kind would remove, with their reasons, how many were spared,
    and the keys and candidate sets that would have no entry left once they are gone.

    SQL decides all of it (`upkeep.prunable`, `upkeep.orphaned_sets`): only the selected
    entries reach Python. An entry still being tuned or validated is never pruned under the
    writer's feet. Only rows this prune leaves empty count as orphans: rows that were orphans
    already are doctor's business.
    """
    stale_sets = None
    if stale:
        sums = None if current is None else {sig: checksum(n) for sig, n in current.items()}
        stale_sets = upkeep.stale_sets(conn, device_id, sums)
    selection = upkeep.PruneSelection(device_id, stale_sets, unvalidated, older_than, masked)
    found = upkeep.prunable(conn, selection)
    chosen = [row for row in found if not row.spared]
    entries = [
        PrunedEntry(
            row.id, row.key, row.checksum, row.choice, row.status, row.updated_at, row.reasons
        )
        for row in chosen
    ]
    keys = sorted({row.key_id for row in chosen if row.last_of_key})
    sets = upkeep.orphaned_sets(conn, selection, {row.set_id for row in chosen})
    return entries, len(found) - len(chosen), keys, sets


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
        chosen, spared, keys, sets = _select_prunable(
            tx.conn,
            device_id,
            stale=stale,
            current=current,
            unvalidated=unvalidated,
            older_than=older_than if older else None,
            masked=masked,
        )
        ids = [e.id for e in chosen]
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
