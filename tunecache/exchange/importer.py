"""Import an export into a cache, all or nothing, under a conflict policy.

The export is read from a stream item by item, every item checked, and staged in a temporary
file (`tunecache.exchange.staging`) until its end item has come: a bad export is refused
before anything touches the cache. Then one write transaction applies it a chunk at a time,
each chunk compared with the local entries of its keys (found by the keys' index) and written
through the batch path (`tunecache.store.bulk`), so memory is bounded by a chunk, whatever
the size of the export.
"""

from __future__ import annotations

import hashlib
import io
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from tunecache._cbor import short
from tunecache.cache import Cache, Progress, Transaction
from tunecache.device import Device
from tunecache.errors import BadArgumentError, CodecError, DeviceMismatchError
from tunecache.exchange.checking import WORKER_FROM, Checked, Checker, summary
from tunecache.exchange.export import read_keys
from tunecache.exchange.reports import EntryAction, ImportReport, evidence_of
from tunecache.exchange.staging import Staged, Staging
from tunecache.exchange.stream import Export, read_export
from tunecache.exchange.wire import MAX_DEPTH, ExportedEntry, fail, iso
from tunecache.paths import display
from tunecache.store import bulk, rows
from tunecache.store.models import utcnow

__all__ = ["POLICIES", "import_cache", "origin_device"]

#: conflict policies: keep the local entry, keep the one with stronger evidence, keep both
POLICIES = ("local", "evidence", "both")

# Records go to be checked in batches of BATCH entries (or BATCH_BYTES of records), at most
# BATCHES of them (and IN_FLIGHT_BYTES of records) out at once.
BATCH = 256
BATCH_BYTES = 4 * 1024 * 1024
BATCHES = 32
IN_FLIGHT_BYTES = 32 * 1024 * 1024


@dataclass(slots=True)
class _Plan:
    """The actions an import decided on for one chunk, before it writes any of them."""

    #: (key, checksum, action) of each entry, in order
    actions: list[tuple[str, str, str]] = field(default_factory=list)
    #: entries to write on the local device (new, or replacing the local one)
    local: list[Staged] = field(default_factory=list)
    #: entries to keep beside a local one, under the origin device
    aside: list[Staged] = field(default_factory=list)


def origin_device(source: Device, origin: str) -> Device:
    """The device row that holds a source's entries kept beside local ones (policy "both").

    It is the source's own identity with `+origin.<tag>` added to its client version, the tag
    naming the source device and `origin` (a path, or the export's time): a different
    identity, so the resolver of a real device never reads it, while merging the same source
    again updates the same rows instead of piling up copies.
    """
    tag = hashlib.sha256(f"{source.fingerprint}\n{origin}".encode()).hexdigest()[:8]
    suffix = ("." if "+" in source.client_version else "+") + f"origin.{tag}"
    return source.replace(client_version=source.client_version[: 64 - len(suffix)] + suffix)


def _plan(
    incoming: Iterable[Staged],
    local: Mapping[tuple[str, str], ExportedEntry],
    policy: str,
) -> _Plan:
    plan = _Plan()
    for staged in incoming:
        ident = staged.ident
        found = local.get(ident) if local else None
        if found is None:
            action = "added"
            plan.local.append(staged)
        else:
            entry = staged.entry()
            if found.content() == entry.content():
                action = "unchanged"
            elif policy == "evidence" and evidence_of(entry) > evidence_of(found):
                action = "replaced"
                plan.local.append(staged)
            elif policy == "both":
                action = "kept-both"
                plan.aside.append(staged)
            else:
                action = "kept-local"
        plan.actions.append((*ident, action))
    return plan


class _Applier:
    """Applies staged entries inside one write transaction, a chunk at a time: compares each
    chunk with the local entries of its keys, then writes what the policy keeps."""

    def __init__(self, tx: Transaction, kind: str, policy: str, notes: str, aside: Device) -> None:
        self.tx = tx
        self.kind = kind
        self.policy = policy
        self.notes = notes
        self.aside = aside
        self.now = utcnow()
        self.own = tx.device_id()
        self.names: dict[int, tuple[str, ...]] = {}
        # Each entry's key, checksum and action, in three lists of text until the report is
        # made: 100,000 objects kept alive through the whole transaction made the garbage
        # collector walk them again and again, a twentieth of an import's time.
        self.keys: list[str] = []
        self.checksums: list[str] = []
        self.done: list[str] = []
        self.run_id: int | None = None
        self.aside_id: int | None = None
        self.verdicts = 0

    def chunk(self, chunk: list[Staged]) -> None:
        """Compare and write one chunk of staged entries."""
        conn = self.tx.conn
        local: dict[tuple[str, str], ExportedEntry] = {}
        if self.own is not None:
            keys = sorted({staged.key for staged in chunk})
            local = {e.ident: e for _, e in read_keys(conn, self.own, keys, self.names)}
        plan = _plan(chunk, local, self.policy)
        for key, sum_, action in plan.actions:
            self.keys.append(key)
            self.checksums.append(sum_)
            self.done.append(action)
        if not plan.local and not plan.aside:
            return
        if self.run_id is None:
            self.run_id = self.tx.start_run(self.kind, self.notes, status="finished")
        self.own = own = self.tx.device_row()
        writes = [staged.write(self.run_id) for staged in plan.local]
        bulk.write_entries(conn, own, writes, now=self.now)
        if plan.aside:
            if self.aside_id is None:
                self.aside_id = rows.device_row(conn, self.aside)
            aside = [staged.write(self.run_id) for staged in plan.aside]
            bulk.write_entries(conn, self.aside_id, aside, now=self.now)
            writes += aside
        self.verdicts += sum(len(w.verdicts) for w in writes)


class _Stager:
    """Stages every entry of an export in order, each with its record checked: records go to
    the checker in batches while the export is read on, and an entry is staged once its batch
    is back.
    """

    def __init__(self, staging: Staging, checker: Checker, kind: str, expected: int) -> None:
        self.staging = staging
        self.checker = checker
        self.kind = kind
        self.expected = expected
        self.progress: Progress | None = None
        self._pending: deque[tuple[list[ExportedEntry], Future[list[Checked]]]] = deque()
        self._in_flight = 0

    def run(self, entries: Iterator[ExportedEntry], *, other: bool) -> None:
        """Stage them all. A refusal names the first bad entry in the export's order, whether
        the reading or the checking found it."""
        batch: list[ExportedEntry] = []
        size = 0
        while True:
            try:
                entry = next(entries, None)
            except CodecError:
                # The reading refused an entry: an earlier one's record may be refused first.
                self._send(batch, size)
                self._receive(everything=True)
                raise
            if entry is None:
                break
            if other:
                # Another device's verdicts say nothing about this one.
                entry = replace(entry, status="unvalidated", verdicts=())
            batch.append(entry)
            size += 0 if entry.blob is None else len(entry.blob)
            if len(batch) >= BATCH or size >= BATCH_BYTES:
                self._send(batch, size)
                batch, size = [], 0
        self._send(batch, size)
        self._receive(everything=True)
        if self.progress is not None:
            self.progress(self.kind, self.staging.count, self.staging.count)

    def _send(self, batch: list[ExportedEntry], size: int) -> None:
        tasks = [
            (e.blob, e.names, e.heuristic) for e in batch if e.record is None and e.blob is not None
        ]
        self._pending.append((batch, self.checker.submit(tasks)))
        self._in_flight += size
        self._receive(everything=False)

    def _receive(self, *, everything: bool) -> None:
        """Stage the batches that are back, in order; wait for the oldest while too many are
        out (or, with `everything`, until none is)."""
        pending = self._pending
        while pending and (
            everything
            or pending[0][1].done()
            or len(pending) > BATCHES
            or self._in_flight > IN_FLIGHT_BYTES
        ):
            batch, future = pending.popleft()
            results = iter(Checker.results(future))
            for e in batch:
                if e.blob is None:
                    checked: Checked | None = None
                elif e.record is not None:  # a version 1 export's, decoded as it was read
                    checked = summary(e.record, e.blob, e.heuristic)
                else:
                    checked = next(results)
                if isinstance(checked, str):
                    raise fail(f"entry {self.staging.count} ({short(e.key)}): {checked}")
                if self.progress is not None and self.staging.count % 256 == 0:
                    self.progress(self.kind, self.staging.count, self.expected)
                self.staging.add(e, checked)
                self._in_flight -= 0 if e.blob is None else len(e.blob)


def import_cache(
    cache: Cache,
    data: bytes | BinaryIO | Export,
    *,
    allow_other_device: bool = False,
    policy: str = "local",
    origin: str | None = None,
    kind: str = "import",
    progress: Progress | None = None,
    workers: int = 0,
    max_size: int | None = None,
    max_depth: int = MAX_DEPTH,
    max_items: int | None = None,
) -> ImportReport:
    """Import an export into this cache, all or nothing, and say what happened to each entry.

    `data` is an export's bytes, a binary stream of it (read an item at a time; a version 1
    export, one map, is read whole), or an export being read (`stream.Export`: another
    cache's, as a merge reads it). Every item is checked, and nothing is written until the
    whole export has been read and found good. A file from another device identity is
    refused with DeviceMismatchError unless `allow_other_device`; then its entries arrive
    with status "unvalidated" and without the other device's verdicts, which say nothing
    about this one. Where the file and the cache both hold an entry for a key and candidate
    set, `policy` decides (see POLICIES and the `evidence` function). `origin` names the
    source in the `runs` row that logs the import. `workers` processes may check the timing
    records beside this one, for an export of WORKER_FROM entries or more (see
    `tunecache.exchange.checking`; the command line uses one on a machine of more than one
    CPU). The limits are those of `tunecache.exchange.stream.read_export`.
    """
    if policy not in POLICIES:
        raise BadArgumentError(f"policy must be one of {POLICIES}, got {policy!r}")
    export = data if isinstance(data, Export) else _open(data, max_size, max_depth, max_items)
    header = export.header
    other = header.device.fingerprint != cache.device.fingerprint
    if other and not allow_other_device:
        try:
            cache.device.require_same(header.device, "the export file")
        except DeviceMismatchError as error:
            raise DeviceMismatchError(
                f"{error} (allow another device to import its entries as unvalidated)"
            ) from None
    # A path that is not UTF-8 is stored, and tagged, as its escaped text.
    source = display(origin) if origin is not None else f"an export made {iso(header.exported_at)}"
    aside = origin_device(header.device, source)
    notes = (
        f"{kind} from {source}: device {header.device.dirname} {header.device.client} "
        f"{header.device.client_version} ({header.device.fingerprint}), exported "
        f"{iso(header.exported_at)} by tunecache {header.tool}; policy {policy}"
    )
    workers = workers if header.entries >= WORKER_FROM else 0
    with closing(Staging(cache.path.parent)) as staging, closing(Checker(workers)) as checker:
        stager = _Stager(staging, checker, kind, header.entries)
        stager.progress = progress
        stager.run(export.entries, other=other)
        with cache.transaction(write=True) as tx:
            applier = _Applier(tx, kind, policy, notes, aside)
            done = 0
            for chunk in staging.chunks():
                if progress is not None:
                    progress("write", done, staging.count)
                applier.chunk(chunk)
                done += len(chunk)
            if progress is not None:
                progress("write", done, staging.count)
    return ImportReport(
        kind=kind,
        policy=policy,
        source_device=header.device.as_dict(),
        source_fingerprint=header.device.fingerprint,
        exported_at=header.exported_at,
        tool=header.tool,
        other_device=other,
        run_id=applier.run_id,
        origin_device=aside.fingerprint if applier.aside_id is not None else None,
        actions=tuple(map(EntryAction, applier.keys, applier.checksums, applier.done)),
        verdicts=applier.verdicts,
    )


def _open(
    data: bytes | BinaryIO, max_size: int | None, max_depth: int, max_items: int | None
) -> Export:
    """Start reading an export's bytes or binary stream, its records left to be checked."""
    if isinstance(data, bytes | bytearray | memoryview):
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        if max_size is not None and size > max_size:
            raise fail(f"{size} bytes exceed the limit of {max_size}")
        data = io.BytesIO(data)
    elif not callable(getattr(data, "read", None)):
        raise fail(f"expected bytes or a binary stream, got {type(data).__name__}")
    return read_export(
        data, max_size=max_size, max_depth=max_depth, max_items=max_items, records=False
    )
