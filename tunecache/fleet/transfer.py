"""Sync a local cache with a fleet store: pull this device's entries down, push local ones up.

Each direction reads the entries of one device identity changed since its high-water mark on
the side it reads (`tunecache.store.changes`), in one read transaction there (one snapshot),
a chunk at a time in change order, and writes them on the other side through the batch path,
each settled against the entry already there by `tunecache.fleet.rules`.

A pull commits each chunk in a local write transaction of its own, with that chunk's mark: the
local writers (the Triton client, tuners) wait for one chunk, never for the whole read of the
remote. Marks are monotonic, so a pull killed at any point leaves the local cache holding whole
chunks, a prefix of the remote's changes, and a mark that never passes an uncommitted row: the
next pull starts where the last committed chunk ended. A push writes in one transaction on the
fleet store, and its mark locally after the store committed, so a push killed between the two
sends the same entries again, which the store then finds unchanged. The hot path is never
involved: the resolver reads the local file only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection

from tunecache.cache import Cache, Transaction
from tunecache.candidates import checksum
from tunecache.device import Device
from tunecache.errors import (
    BadArgumentError,
    BadKeyError,
    BadRecordError,
    ReadOnlyStoreError,
    TunecacheWarning,
)
from tunecache.fleet.reports import DirectionReport, SyncReport, empty_conflicts, empty_counts
from tunecache.fleet.rules import Settled, settle
from tunecache.keys import Key, parse
from tunecache.store import bulk, postgres, queries, rows, syncing
from tunecache.store.engine import DEFAULT_BUSY_TIMEOUT
from tunecache.store.models import utcnow
from tunecache.store.syncing import SyncedEntry
from tunecache.store.values import ENTRY_STATUSES, VERDICTS, EntryWrite, VerdictWrite

__all__ = ["CHUNK", "DIRECTIONS", "REMOTE_VAR", "open_remote", "sync"]

#: what `sync` does: pull, push, or both (push first, then pull)
DIRECTIONS = ("pull", "push", "both")
#: the variable that names the default remote
REMOTE_VAR = "TUNECACHE_REMOTE"
#: entries read and written per statement batch
CHUNK = 2000


def open_remote(
    remote: str | None, device: Device, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> Cache:
    """The remote store named by `remote` (a store URL, or a cache file's path), or by
    TUNECACHE_REMOTE where `remote` is None, opened for the device identity `device`."""
    if remote is None:
        remote = os.environ.get(REMOTE_VAR, "").strip() or None
    if remote is None:
        raise BadArgumentError(f"no remote: pass --remote URL or set {REMOTE_VAR}")
    if not isinstance(remote, str):
        raise BadArgumentError(f"a remote is a store URL or a path, not {type(remote).__name__}")
    if "://" in remote:
        return Cache.open(url=remote, device=device, busy_timeout=busy_timeout)
    return Cache.open(path=remote, device=device, busy_timeout=busy_timeout)


def sync(local: Cache, remote: Cache | str | None = None, *, direction: str = "both") -> SyncReport:
    """Sync the local cache's device identity with `remote` (an open Cache, a store URL or a
    cache file's path; None: TUNECACHE_REMOTE) in `direction` ("pull", "push" or "both"), and
    say what each direction did.

    Only the entries of `local.device` are read and written on either side: to sync another
    identity, open the local cache for it. A read-only role can pull; its push fails with one
    line naming the privilege it lacks, before anything is written.
    """
    if direction not in DIRECTIONS:
        raise BadArgumentError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not isinstance(local, Cache):
        raise BadArgumentError(f"the local side is an open Cache, not {type(local).__name__}")
    opened = None
    if not isinstance(remote, Cache):
        opened = open_remote(remote, local.device, local.busy_timeout)
    store = remote if isinstance(remote, Cache) else opened
    assert store is not None
    try:
        if store.device.fingerprint != local.device.fingerprint:
            raise BadArgumentError(
                f"sync copies one device identity: {store.where} was opened for "
                f"{store.device.fingerprint}, the local cache for {local.device.fingerprint}"
            )
        done = []
        if direction in ("push", "both"):
            done.append(_push(local, store))
        if direction in ("pull", "both"):
            done.append(_pull(local, store))
        return SyncReport(tuple(done))
    finally:
        if opened is not None:
            opened.close()


@dataclass
class _Copied:
    """What copying one direction's changes did."""

    last: int
    read: int = 0
    counts: dict[str, int] = field(default_factory=empty_counts)
    conflicts: dict[str, dict[str, int]] = field(default_factory=empty_conflicts)
    run_id: int | None = None

    #: whether the mark was reset to 0 (the side read is behind it)
    reset: bool = False

    def report(
        self, direction: str, remote: str, device: str, before: int, start: float
    ) -> DirectionReport:
        """The direction's report."""
        return DirectionReport(
            direction=direction,
            remote=remote,
            device=device,
            read=self.read,
            counts=self.counts,
            conflicts={rule: by for rule, by in self.conflicts.items()},
            mark_before=before,
            mark_after=self.last,
            run_id=self.run_id,
            seconds=time.perf_counter() - start,
            mark_reset=self.reset,
        )

    @property
    def written(self) -> bool:
        """Whether anything was written."""
        return self.run_id is not None


@dataclass(frozen=True, slots=True)
class _Marks:
    """The marks of one device's sync with one remote store, kept in the local cache on `conn`:
    a pull's count in the remote's change numbers, a push's in the local cache's."""

    conn: Connection
    remote_id: str
    local_id: str
    device: str
    #: the remote, as messages name it
    remote: str

    def counted_in(self, direction: str) -> str:
        """The database whose change numbers the mark of `direction` counts."""
        return self.remote_id if direction == "pull" else self.local_id

    def get(self, direction: str) -> int:
        """The number to read after: 0 where there is no mark, or it counts in another
        database than the one read (a store made again, a salvaged copy)."""
        found = syncing.mark(self.conn, self.remote_id, self.device, direction)
        return found[1] if found is not None and found[0] == self.counted_in(direction) else 0

    def start(self, direction: str, source: Connection) -> tuple[int, bool]:
        """The number to read after on `source` (the side `direction` reads), and whether the
        mark was reset (a pull's: a push reads the local cache, whose marks are restored with
        it): a mark above the highest number `source` has given counts in a past
        the side no longer holds (a store restored from a backup keeps its id), and read from
        it the direction would skip every entry numbered up to it, so it reads from zero
        (entries found equal are counted `unchanged`) and says so, once, as a warning."""
        kept = self.get(direction)
        highest = syncing.highest_change(source)
        if kept <= highest:
            return kept, False
        warnings.warn(
            f"sync {direction}: {self.remote} has given change numbers up to {highest} only, below "
            f"the mark {kept} (restored from a backup?): reading every entry from zero",
            TunecacheWarning,
            stacklevel=4,
        )
        return 0, True

    def keep(self, direction: str, seq: int) -> None:
        """Keep `seq` as the mark of `direction`."""
        at = self.counted_in(direction)
        syncing.set_mark(
            self.conn,
            self.remote_id,
            self.device,
            direction,
            counted_in=at,
            seq=seq,
            remote=self.remote,
            now=utcnow(),
        )


def _pull(local: Cache, remote: Cache) -> DirectionReport:
    start = time.perf_counter()
    device = local.device.fingerprint
    with remote.transaction() as rtx:
        rid = syncing.store_id(rtx.conn)
        with local.transaction() as ltx:
            lid = syncing.store_id(ltx.conn)
            _refuse_itself(rid, lid, local)
            marks = _Marks(ltx.conn, rid, lid, device, remote.where)
            before, reset = marks.start("pull", rtx.conn)
            own = ltx.device_id()
            unpushed = own is not None and syncing.has_change_after(
                ltx.conn, own, marks.get("push")
            )
            stamp = syncing.highest_change(ltx.conn)
        source = rtx.device_id()
        copied = _Copied(before, reset=reset)
        copier = _Copier(rtx.conn, None, "pull", remote.where, _HOST, per_chunk=local, stamp=stamp)

        def marked(tx: Transaction, done: _Copied, last: bool) -> None:
            here = _Marks(tx.conn, rid, lid, device, remote.where)
            here.keep("pull", done.last)
            if last and done.written and not unpushed and copier.alone:
                # What the pull wrote came from the remote, and nothing else was written here
                # meanwhile: nothing of it needs pushing back.
                assert copier.device is not None
                here.keep("push", syncing.latest_change(tx.conn, copier.device))

        copier.committing = marked
        if source is not None:
            copied = copier.copy(source, before)
            copied.reset = reset
        if reset and copied.last == before:
            # Nothing to read from zero: the mark goes back to it all the same.
            with local.transaction(write=True) as ltx:
                _Marks(ltx.conn, rid, lid, device, remote.where).keep("pull", 0)
    return copied.report("pull", remote.where, device, before, start)


def _push(local: Cache, remote: Cache) -> DirectionReport:
    start = time.perf_counter()
    device = local.device.fingerprint
    with remote.transaction() as rtx:
        rid = syncing.store_id(rtx.conn)
        if remote.url is not None:
            # A read-only role is refused whether or not there is anything to push.
            denied, _ = postgres.write_denied(rtx.conn, remote.url)
            if denied is not None:
                raise ReadOnlyStoreError(denied)
    with local.transaction() as ltx:
        lid = syncing.store_id(ltx.conn)
        _refuse_itself(rid, lid, local)
        marks = _Marks(ltx.conn, rid, lid, device, remote.where)
        before, pulled = marks.get("push"), marks.get("pull")
        own = ltx.device_id()
        copied = _Copied(before)
        advance: int | None = None
        if own is not None and syncing.has_change_after(ltx.conn, own, before):
            with remote.transaction(write=True) as wtx:
                theirs = wtx.device_id()
                unpulled = theirs is not None and syncing.has_change_after(wtx.conn, theirs, pulled)
                copier = _Copier(ltx.conn, wtx, "push", f"host {_HOST}", _HOST)
                copied = copier.copy(own, before)
                theirs = wtx.device_id()
                if copied.written and not unpulled and theirs is not None:
                    # What the push wrote came from here: nothing of it needs pulling back.
                    advance = syncing.latest_change(wtx.conn, theirs)
    if copied.last != before or advance is not None:
        with local.transaction(write=True) as ltx:
            marks = _Marks(ltx.conn, rid, lid, device, remote.where)
            marks.keep("push", copied.last)
            if advance is not None:
                marks.keep("pull", advance)
    return copied.report("push", remote.where, device, before, start)


def _refuse_itself(rid: str, lid: str, local: Cache) -> None:
    if rid == lid:
        raise BadArgumentError(f"cannot sync {local.where} with itself")


#: this host's name, as origins and runs name it
_HOST = socket.gethostname()


class _Batch(NamedTuple):
    """One chunk read from the source: its entries, their candidate lists by set id, the runs
    they name by id, and each entry's checked key by its text (None: refused)."""

    incoming: list[SyncedEntry]
    names: dict[int, tuple[str, ...]]
    runs: dict[int, syncing.SyncedRun]
    keys: dict[str, Key | None]


@dataclass
class _Copier:
    """Copies one device's changed entries from a connection read to a transaction written,
    a chunk at a time, settling each against the entry there."""

    source: Connection
    #: the one write transaction of the copy (a push's), or None: one per chunk on `per_chunk`
    target: Transaction | None
    direction: str
    #: where the entries written came from, as their origin rows say
    label: str
    #: the host an entry with neither an origin nor a run is credited to
    host: str
    now: datetime = field(default_factory=utcnow)
    #: the device's row on the side written, once known
    device: int | None = None
    #: whether that device had no entry there when the copy began
    fresh: bool = False
    #: the checksums of the candidate lists met
    sums: dict[tuple[str, ...], str] = field(default_factory=dict)
    #: the cache written a chunk at a time, each committed in a write transaction of its own
    per_chunk: Cache | None = None
    #: called in each chunk's transaction once it is written, with what was copied so far and
    #: whether it is the last chunk (a pull keeps its mark there)
    committing: Callable[[Transaction, _Copied, bool], None] | None = None
    #: the highest change number of the side written, as this copy last saw it (per_chunk):
    #: another number at the next chunk means another writer wrote in between
    stamp: int | None = None
    #: whether nothing but this copy wrote on the side written since `stamp` was first taken
    alone: bool = True

    def copy(self, source_device: int, after: int) -> _Copied:
        """Copy every change of the source's device row numbered after `after`, a chunk at a
        time, in `target` or (per_chunk) in a write transaction per chunk."""
        copied = _Copied(after)
        numbers = syncing.change_numbers(self.source, source_device, after)
        if not numbers:
            return copied
        bounds = [*numbers[CHUNK - 1 :: CHUNK], *numbers[-1:]]
        ranges = list(zip([after, *bounds], bounds, strict=False))
        ranges = [(a, b) for a, b in ranges if b > a]
        first = True
        with contextlib.closing(self._batches(source_device, ranges)) as batches:
            for batch, upto in batches:
                with self._transaction() as tx:
                    self.target = tx
                    self._look(first)
                    first = False
                    self._chunk(batch, copied)
                    copied.last = upto
                    last = upto == ranges[-1][1]
                    if last and copied.run_id is not None:
                        rows.set_run_notes(tx.conn, copied.run_id, self._notes(copied))
                    if self.committing is not None:
                        self.committing(tx, copied, last)
                    if self.per_chunk is not None:
                        self.stamp = syncing.highest_change(tx.conn)
        return copied

    def _transaction(self) -> contextlib.AbstractContextManager[Transaction]:
        """The transaction the next chunk is written in."""
        if self.per_chunk is not None:
            return self.per_chunk.transaction(write=True)
        assert self.target is not None
        return contextlib.nullcontext(self.target)

    def _look(self, first: bool) -> None:
        """Before a chunk is written: find this device's row and whether it had no entry on
        the side written (at the first chunk), and whether another writer wrote there since
        the chunk before (per_chunk: then the entries here must be looked up again)."""
        assert self.target is not None
        conn = self.target.conn
        if first:
            self.device = self.target.device_id()
            # A device with no entry here yet: no key of the source's can meet one.
            self.fresh = self.device is None or not queries.count_entries(conn, self.device)
        if self.per_chunk is not None and syncing.highest_change(conn) != self.stamp:
            self.alone = False
            self.fresh = self.device is None or not queries.count_entries(conn, self.device)

    def _batches(
        self, source_device: int, ranges: list[tuple[int, int]]
    ) -> Generator[tuple[_Batch, int]]:
        """The chunks of `ranges` read from the source, each with its upper bound. From a fleet
        store the next chunk is read by a thread while this one is written (the driver waits
        on the network without the GIL); a local source is read in turn (its connection
        belongs to this thread)."""
        if self.source.dialect.name != "postgresql" or len(ranges) < 2:
            for a, b in ranges:
                yield self._read(source_device, a, b), b
            return
        with ThreadPoolExecutor(1, thread_name_prefix="tunecache-sync") as reader:
            ahead = reader.submit(self._read, source_device, *ranges[0])
            for (_, b), following in zip(ranges, [*ranges[1:], None], strict=True):
                batch = ahead.result()
                if following is not None:
                    ahead = reader.submit(self._read, source_device, *following)
                yield batch, b

    def _read(self, source_device: int, after: int, upto: int) -> _Batch:
        """One chunk of the source: its entries, their candidate lists and runs."""
        incoming = syncing.entries_between(self.source, source_device, after, upto)
        names = queries.set_names(self.source, {e.set_id for e in incoming})
        wanted = {e.run_id for e in incoming} | {v.run_id for e in incoming for v in e.verdicts}
        found = syncing.runs(self.source, {r for r in wanted if r is not None})
        # Checked here, in the reading thread: its CPU time overlaps the writes of the chunk
        # before (SQLite writes without the GIL).
        keys = {e.key: self._legal(e, names[e.set_id]) for e in incoming}
        return _Batch(incoming, names, found, keys)

    def _notes(self, copied: _Copied) -> str:
        done = ", ".join(f"{n} {a}" for a, n in copied.counts.items() if n)
        return f"sync {self.direction} ({self.label}): {copied.read} read, {done}"

    def _chunk(self, batch: _Batch, copied: _Copied) -> None:
        """Settle one chunk against the entries here, count what became of each, and write
        what is to be written."""
        assert self.target is not None
        conn = self.target.conn
        incoming = batch.incoming
        copied.read += len(incoming)
        here: dict[tuple[str, str], SyncedEntry] = {}
        if self.device is not None and not self.fresh:
            here = syncing.entries_of_keys(conn, self.device, [e.key for e in incoming])
        chosen: list[tuple[SyncedEntry, Settled]] = []
        for e in incoming:
            settled = settle(e, here.get((e.key, e.checksum)))
            if settled.written is not None and batch.keys[e.key] is None:
                settled = Settled("refused", None)
            copied.counts[settled.action] += 1
            if settled.rule is not None:
                by = copied.conflicts[settled.rule]
                by[settled.action] = by.get(settled.action, 0) + 1
            if settled.written is not None:
                chosen.append((e, settled))
        if not chosen:
            return
        if copied.run_id is None:
            copied.run_id = self.target.start_run("sync", None, status="finished")
            self.device = self.target.device_row()
        assert self.device is not None
        writes, origins = self._writes(batch, chosen, here)
        written = bulk.write_entries(conn, self.device, writes, now=self.now)
        hosts = iter(origins)
        syncing.write_origins(
            conn,
            [
                (w.id, next(hosts), self.label, self.now)
                for w, (_, s) in zip(written, chosen, strict=True)
                if s.fields_from == "incoming"
            ],
            # Only the entries written with the incoming fields came from elsewhere: a merge
            # that keeps the fields here keeps its origin (or its having none: this host's own).
            replacing=[
                w.id
                for w, (e, s) in zip(written, chosen, strict=True)
                if s.fields_from == "incoming" and (e.key, e.checksum) in here
            ],
        )

    def _writes(
        self,
        batch: _Batch,
        chosen: list[tuple[SyncedEntry, Settled]],
        here: dict[tuple[str, str], SyncedEntry],
    ) -> tuple[list[EntryWrite], list[str]]:
        """The rows to write for the entries `chosen`, with their runs copied here, and the
        origin host of each written with the incoming entry's fields, in order."""
        assert self.device is not None and self.target is not None
        conn = self.target.conn
        kept = [here[e.key, e.checksum].id for e, s in chosen if s.fields_from == "here"]
        theirs = {x.id: x for x in syncing.entries(conn, kept)}
        wanted = {e.run_id for e, s in chosen if s.fields_from == "incoming"}
        wanted |= {v.run_id for e, _ in chosen for v in e.verdicts}
        found = {r: batch.runs[r] for r in wanted if r is not None and r in batch.runs}
        runs = syncing.copy_runs(conn, self.device, found.values())
        writes, origins = [], []
        for e, s in chosen:
            w = s.written
            key = batch.keys[e.key]
            assert w is not None and key is not None  # refused entries are not written
            mine = {id(v) for v in e.verdicts}
            if s.fields_from == "here":
                record = theirs[here[e.key, e.checksum].id].record
                run_id = w.run_id
            else:
                record, run_id = e.record, runs.get(e.run_id) if e.run_id is not None else None
                run = found.get(e.run_id) if e.run_id is not None else None
                host = e.origin[0] if e.origin else run.values["hostname"] if run else self.host
                origins.append(host)
            # The incoming verdicts name the other side's runs: those copied here, instead.
            verdicts = tuple(
                VerdictWrite(
                    **v.facts(),
                    run_id=(runs.get(v.run_id) if v.run_id is not None else None)
                    if id(v) in mine
                    else v.run_id,
                    updated_at=v.updated_at,
                    created_at=v.created_at,
                )
                for v in w.verdicts
            )
            # EntryWrite's fields in order: the key and list, the run and time, the decision,
            # then its creation time, record and verdicts (the other side's replace these).
            writes.append(
                EntryWrite(
                    key,
                    batch.names[e.set_id],
                    w.checksum,
                    run_id,
                    w.updated_at,
                    w.choice,
                    w.heuristic,
                    w.status,
                    w.speedup,
                    w.created_at,
                    record,
                    verdicts,
                    False,
                )
            )
        return writes, origins

    def _legal(self, entry: SyncedEntry, names: tuple[str, ...]) -> Key | None:
        """The key of an entry read from the other side, if it is one this side may hold: its
        key parses, its list hashes to its checksum, its choice and heuristic are on the list,
        its status and verdicts are words the store knows. None (refused, unwritten) else."""
        sum_ = self.sums.get(names)
        try:
            if sum_ is None:
                sum_ = self.sums[names] = checksum(names)
            key = parse(entry.key)
        except (BadKeyError, BadRecordError):
            return None
        legal = (
            sum_ == entry.checksum
            and entry.choice in names
            and (entry.heuristic is None or entry.heuristic in names)
            and entry.status in ENTRY_STATUSES
            and all(v.verdict in VERDICTS for v in entry.verdicts)
        )
        return key if legal else None
