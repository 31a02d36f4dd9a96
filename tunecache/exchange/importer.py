"""Import an export into a cache, all or nothing, under a conflict policy.

The whole document is decoded and checked before one write transaction applies it, so a bad file
leaves the cache exactly as it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection

from tunecache.cache import Cache, Progress
from tunecache.device import Device
from tunecache.errors import BadArgumentError, DeviceMismatchError
from tunecache.exchange.export import read_entries
from tunecache.exchange.reports import EntryAction, ImportReport, evidence
from tunecache.exchange.wire import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_SIZE,
    ExportedEntry,
    decode_document,
    iso,
)
from tunecache.keys import parse
from tunecache.store import queries, rows

__all__ = ["POLICIES", "import_cache", "origin_device"]

#: conflict policies: keep the local entry, keep the one with stronger evidence, keep both
POLICIES = ("local", "evidence", "both")


def _evidence_of(entry: ExportedEntry) -> tuple[int, int, int]:
    return evidence(
        sum(1 for v in entry.verdicts if v.verdict == "validated"),
        sum(v.rounds for v in entry.verdicts),
        entry.samples,
    )


@dataclass(slots=True)
class _Plan:
    """The actions an import decided on, before it writes any of them."""

    actions: list[EntryAction] = field(default_factory=list)
    #: entries to write on the local device, with the local entry's id they replace, if any
    local: list[tuple[ExportedEntry, int | None]] = field(default_factory=list)
    #: entries to keep beside a local one, under the origin device
    aside: list[ExportedEntry] = field(default_factory=list)


def origin_device(source: Device, origin: str) -> Device:
    """The device row that holds a source's entries kept beside local ones (policy "both").

    It is the source's own identity with `+origin.<tag>` added to its client version, the tag
    naming the source device and `origin` (a path, or the export's time): a different
    identity, so the resolver of a real device never reads it, while merging the same source
    again updates the same rows instead of piling up copies.
    """
    tag = hashlib.sha256(f"{source.fingerprint}\n{origin}".encode()).hexdigest()[:8]
    suffix = ("." if "+" in source.client_version else "+") + f"origin.{tag}"
    return replace(source, client_version=source.client_version[: 64 - len(suffix)] + suffix)


def _plan(
    incoming: Iterable[ExportedEntry],
    local: Mapping[tuple[str, str], tuple[int, ExportedEntry]],
    policy: str,
) -> _Plan:
    plan = _Plan()
    for entry in incoming:
        found = local.get(entry.ident)
        if found is None:
            action = "added"
            plan.local.append((entry, None))
        elif found[1].content() == entry.content():
            action = "unchanged"
        elif policy == "evidence" and _evidence_of(entry) > _evidence_of(found[1]):
            action = "replaced"
            plan.local.append((entry, found[0]))
        elif policy == "both":
            action = "kept-both"
            plan.aside.append(entry)
        else:
            action = "kept-local"
        plan.actions.append(EntryAction(entry.key, entry.checksum, action))
    return plan


class _Writer:
    """Writes planned entries inside one transaction, remembering the model rows it made."""

    def __init__(self, conn: Connection, run_id: int) -> None:
        self.conn = conn
        self.run_id = run_id
        self.verdicts = 0
        self._models: dict[tuple[str, str], int] = {}

    def _model(self, name: str, fingerprint: str) -> int:
        found = self._models.get((name, fingerprint))
        if found is None:
            found = self._models[name, fingerprint] = rows.model_row(self.conn, name, fingerprint)
        return found

    def write(self, device_id: int, entry: ExportedEntry, replaces: int | None) -> None:
        conn = self.conn
        values = {
            "choice": entry.choice,
            "heuristic": entry.heuristic,
            "status": entry.status,
            "speedup": entry.speedup,
            "run_id": self.run_id,
            "created_at": entry.created_at,
            "updated_at": entry.updated_at,
        }
        key_id = rows.key_row(conn, parse(entry.key))
        set_id = rows.candidate_set_row(conn, entry.signature, entry.names, entry.checksum)
        if replaces is None:
            # A row of this device may exist even if the plan saw none: an entry kept aside
            # from the same export before, under the same origin device.
            found = queries.entry_at(conn, device_id, key_id, set_id)
            replaces = None if found is None else found[0]
        if replaces is None:
            entry_id = rows.insert_entry(conn, device_id, key_id, set_id, values)
        else:
            entry_id = replaces
            rows.update_entry(conn, entry_id, values)
            rows.clear_evidence(conn, entry_id, verdicts=True)
        if entry.record is not None and entry.blob is not None:
            rows.insert_record(
                conn, entry_id, entry.record, entry.blob, entry.heuristic, entry.updated_at
            )
        for v in entry.verdicts:
            rows.insert_verdict(
                conn,
                self._model(v.model, v.fingerprint),
                entry_id,
                {
                    "verdict": v.verdict,
                    "gain": v.gain,
                    "rounds": v.rounds,
                    "confirmations": v.confirmations,
                    "run_id": self.run_id,
                    "created_at": v.created_at,
                    "updated_at": v.updated_at,
                },
            )
            self.verdicts += 1


def import_cache(
    cache: Cache,
    data: bytes,
    *,
    allow_other_device: bool = False,
    policy: str = "local",
    origin: str | None = None,
    kind: str = "import",
    progress: Progress | None = None,
    max_size: int = MAX_SIZE,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
) -> ImportReport:
    """Import an export into this cache, all or nothing, and say what happened to each entry.

    A file from another device identity is refused with DeviceMismatchError unless
    `allow_other_device`; then its entries arrive with status "unvalidated" and without the
    other device's verdicts, which say nothing about this one. Where the file and the cache
    both hold an entry for a key and candidate set, `policy` decides (see POLICIES and the
    `evidence` function). `origin` names the source in the `runs` row that logs the import.
    """
    if policy not in POLICIES:
        raise BadArgumentError(f"policy must be one of {POLICIES}, got {policy!r}")
    doc = decode_document(data, max_size, max_depth, max_items)
    other = doc.device.fingerprint != cache.device.fingerprint
    if other and not allow_other_device:
        try:
            cache.device.require_same(doc.device, "the export file")
        except DeviceMismatchError as error:
            raise DeviceMismatchError(
                f"{error} (allow another device to import its entries as unvalidated)"
            ) from None
    incoming: Sequence[ExportedEntry] = doc.entries
    if other:
        incoming = [replace(e, status="unvalidated", verdicts=()) for e in incoming]
    source = origin if origin is not None else f"an export made {iso(doc.exported_at)}"
    aside_device = origin_device(doc.device, source)
    report = ImportReport(
        kind=kind,
        policy=policy,
        source_device=doc.device.as_dict(),
        source_fingerprint=doc.device.fingerprint,
        exported_at=doc.exported_at,
        tool=doc.tool,
        other_device=other,
        run_id=None,
        origin_device=None,
    )
    with cache.transaction(write=True) as tx:
        device_id = tx.device_id()
        local = [] if device_id is None else read_entries(tx.conn, device_id)
        plan = _plan(incoming, {e.ident: (i, e) for i, e in local}, policy)
        if not plan.local and not plan.aside:
            return replace(report, actions=tuple(plan.actions))
        notes = (
            f"{kind} from {source}: device {doc.device.dirname} {doc.device.client} "
            f"{doc.device.client_version} ({doc.device.fingerprint}), exported "
            f"{iso(doc.exported_at)} by tunecache {doc.tool}; policy {policy}"
        )
        run_id = tx.start_run(kind, notes, status="finished")
        writer = _Writer(tx.conn, run_id)
        own = tx.device_row()
        total = len(plan.local) + len(plan.aside)
        for done, (entry, replaces) in enumerate(plan.local):
            if progress is not None and done % 256 == 0:
                progress(kind, done, total)
            writer.write(own, entry, replaces)
        aside_id = rows.device_row(tx.conn, aside_device) if plan.aside else None
        for entry in plan.aside:
            assert aside_id is not None
            writer.write(aside_id, entry, None)
        if progress is not None:
            progress(kind, total, total)
    return replace(
        report,
        run_id=run_id,
        origin_device=aside_device.fingerprint if plan.aside else None,
        actions=tuple(plan.actions),
        verdicts=writer.verdicts,
    )
