"""Tuned keys' records, written behind the launch: one thread per process, flushed when it counts.

A key is tuned inside its first call, and the caller waits for it; writing the decision and its
timing record is not something the launch needs. So the winner is launched as soon as it is
known, and the record is handed to this process's writer (`WRITER`), whose thread writes what is
queued, one transaction per store (`tunecache.store.direct.DirectStore`: stdlib sqlite3, the
rows `Cache.put_many` writes, no SQLAlchemy). A store that does not exist yet, or is at another
schema revision, or that DirectStore refuses for any other reason, is written through `Cache`
instead (created, upgraded or refused as `Cache.open` does), in the same thread: the first
launch never waits for a store to be made.

When is a record there? Another process could need it from the moment it is decided, so the
writer starts on it at once (no timer, no batching delay; records that arrive meanwhile go in its
next transaction): a record is in the store one transaction after its launch, a few ms. And for
certain (`flush`):

- before `Autotuner.wait_pending()` or `tunecache.triton.flush()` returns;
- before this process forks (`os.fork`, multiprocessing's "fork"): the child starts with nothing
  queued and finds the records in the store;
- before this process exits normally (atexit): the next process finds them.

What is acknowledged: a process killed before its record's transaction committed (SIGKILL,
`os._exit`, a crash) loses that key's record, never half of one (one SQLite transaction), and the
next process that meets the key tunes it again. A process started without a fork (subprocess,
multiprocessing's "spawn"), or another program, that asks for a key within those milliseconds
tunes it too, as two processes tuning one key at once always have: call `flush()` before
starting one that must find them.

A bench must not share the interpreter with the SQLAlchemy path (its import holds the GIL for
hundreds of ms, and host-timed samples would carry those stalls): `quiet()` waits while the
writer is on it, and the measurer calls it before timing.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.candidates import checksum
from tunecache.errors import StoreBusyError, StoreError, TunecacheError

if TYPE_CHECKING:
    from tunecache.cache import Cache
    from tunecache.codec import TimingRecord
    from tunecache.device import Device
    from tunecache.keys import Key
    from tunecache.store.direct import DirectStore

__all__ = ["WRITER", "Destination", "Note", "Record", "RecordWriter", "flush"]


class Destination(NamedTuple):
    """The store a record goes to: its file, its device, and where `Cache.open` finds it."""

    db: Path
    device: Device
    #: `Cache.open`'s `root` and `path`, as the kernel was given them
    root: Any
    path: Any


class Record(NamedTuple):
    """One tuned key's decision, queued for its store."""

    destination: Destination
    key: Key
    choice: str
    #: the candidate list it was decided against
    names: tuple[str, ...]
    record: TimingRecord
    #: the kernel's name, and its WarnOnce (`warn(topic, message)`) for a record not stored
    op: str
    warn: Callable[[str, str], None]


class Note:
    """A key served a borrowed config, queued for its store's pending keys
    (`tunecache.store.pending`), so that it outlives the process until some process tunes it:
    its store, its key, the candidate list it was borrowed against (the first config is the
    heuristic), and the kernel's name and WarnOnce, as a `Record` has them."""

    __slots__ = ("destination", "key", "names", "op", "warn")

    def __init__(
        self,
        destination: Destination,
        key: Key,
        names: tuple[str, ...],
        op: str,
        warn: Callable[[str, str], None],
    ) -> None:
        self.destination, self.key, self.names, self.op, self.warn = (
            destination, key, names, op, warn
        )  # fmt: skip


#: what the writer's queue holds
Item = Record | Note


class RecordWriter:
    """A process's queue of records, and the thread that writes them.

    The thread runs while there is something to write and ends when the queue is empty, so an
    idle process holds no thread of ours (and forks without one).
    """

    def __init__(self) -> None:
        self._setup()
        self._registered = False
        self._stores: dict[Path, DirectStore] = {}
        self._caches: dict[Path, Cache] = {}
        #: stores that could not be opened at all: later records for them are dropped
        self._failed: set[Path] = set()
        #: seconds the last transaction took, and how many records it wrote (diagnostics)
        self.last_write: tuple[float, int] | None = None

    def _setup(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Item] = deque()
        #: how many records each store has queued or being written
        self._owed: dict[Path, int] = {}
        self._thread: threading.Thread | None = None
        self._busy = False
        self._heavy = False

    # -- the caller's side ----------------------------------------------------------------------

    def put(self, record: Item) -> None:
        """Queue a record (or a pending key's note); the writer's thread starts on it at
        once."""
        with self._cond:
            if not self._registered:
                self._registered = True
                atexit.register(self.flush)
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(before=self.flush, after_in_child=self._forget)
            self._queue.append(record)
            db = record.destination.db
            self._owed[db] = self._owed.get(db, 0) + 1
            if self._thread is None:
                thread = threading.Thread(target=self._work, name="tunecache-writer", daemon=True)
                try:
                    thread.start()
                except RuntimeError:
                    return  # the interpreter is shutting down: flush() writes it
                self._thread = thread

    @property
    def pending(self) -> int:
        """How many records are queued or being written."""
        with self._cond:
            return sum(self._owed.values())

    def flush(self, timeout: float | None = None) -> bool:
        """Write every record queued so far before returning; False if `timeout` seconds ran
        out first. Where no thread of ours runs (interpreter shutdown), it writes them here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            batch = self._take() if self._thread is None else []
        if batch:
            self._write(batch)
        with self._cond:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._cond.wait_for(lambda: not self._queue and not self._busy, left):
                return False
            worker = self._thread
        if worker is not None and worker is not threading.current_thread():
            # It is on its way out (nothing is queued): a fork right after must not see it.
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return True

    def settle(self, db: Path) -> None:
        """Wait until every record queued for the store at `db` is written (or given up): what
        a kernel's first look at a store waits for, so that it sees this process's decisions."""
        with self._cond:
            if not self._owed.get(db):
                return
            if self._thread is not None:
                self._cond.wait_for(lambda: not self._owed.get(db))
                return
        self.flush()  # no thread writes them (interpreter shutdown): written here

    def quiet(self) -> None:
        """Wait while the writer is on its Python-heavy path: the SQLAlchemy one (creating or
        upgrading a store), or the first import of its own modules."""
        with self._cond:
            self._cond.wait_for(lambda: not self._heavy)

    def _forget(self) -> None:
        # In a forked child: the parent's thread, locks and connections are not this process's.
        self._setup()
        self._stores, self._caches = {}, {}

    # -- the thread's side ----------------------------------------------------------------------

    def _work(self) -> None:
        ended = False
        try:
            while True:
                with self._cond:
                    batch = self._take()
                    if not batch:
                        # Under the lock that put() takes: a record queued from now on starts
                        # another thread.
                        self._thread = None
                        self._cond.notify_all()
                        ended = True
                        return
                self._write(batch)
        finally:
            if not ended:
                # An error escaped (a bug, said by threading's hook): the queue is not left to
                # a thread that is gone; the next put() starts another, flush() writes the rest.
                with self._cond:
                    if self._thread is threading.current_thread():
                        self._thread = None
                    self._cond.notify_all()

    def _take(self) -> list[Item]:
        """Everything queued, now being written (the caller holds the condition's lock)."""
        batch = list(self._queue)
        self._queue.clear()
        self._busy = bool(batch)
        return batch

    def _write(self, batch: list[Item]) -> None:
        """Write a batch, one transaction per store; a failure is warned about, never raised
        (nobody is there to catch it)."""
        try:
            self._write_groups(batch)
        finally:
            with self._cond:
                self._busy = False
                for record in batch:
                    db = record.destination.db
                    self._owed[db] -= 1
                    if not self._owed[db]:
                        del self._owed[db]
                self._cond.notify_all()

    def _write_groups(self, batch: list[Item]) -> None:
        groups: dict[Path, list[Item]] = {}
        for record in batch:
            groups.setdefault(record.destination.db, []).append(record)
        for db, records in groups.items():
            if db in self._failed:
                continue
            start = time.perf_counter()
            try:
                self._store(records)
            except TunecacheError as error:
                _warn(records, "write", "tuning not stored", error)
            except Exception as error:  # a bug: said, and the next batch still written
                _warn(records, "write", "tuning not stored", error)
            else:
                self.last_write = (time.perf_counter() - start, len(records))

    def _store(self, items: list[Item]) -> None:
        """Write one store's part of a batch: the records (one transaction), then the pending
        keys noted (one more), then the records' keys cleared from the pending keys (a key
        tuned here, or by any process, is no longer pending)."""
        if "tunecache.store.pending" not in sys.modules:
            # The first write of a process imports the direct writer and the codec's checks
            # (~10 ms of Python): a bench starting meanwhile waits for that too (`quiet`).
            with self._heavy_path():
                import tunecache.store.pending  # noqa: F401
        from tunecache.store.pending import Pending, clear_pending, record_pending
        from tunecache.writes import NewEntry

        records = [r for r in items if isinstance(r, Record)]
        notes = [n for n in items if isinstance(n, Note)]
        destination = items[0].destination
        if records:
            entries = [NewEntry(r.key, r.choice, r.names, record=r.record) for r in records]
            self._direct(
                items, lambda store: store.put_many(entries), lambda c: c.put_many(entries)
            )
        fingerprint = destination.device.fingerprint
        if notes:
            rows = [
                Pending(n.key.text, checksum(n.names), n.names, n.names[0], n.op, "triton")
                for n in notes
            ]
            self._direct(items, lambda store: record_pending(store, fingerprint, rows))
        if records:
            tuned = [(r.key.text, checksum(r.names)) for r in records]
            self._direct(items, lambda store: clear_pending(store, fingerprint, tuned))

    def _direct(
        self,
        items: list[Item],
        write: Callable[[DirectStore], object],
        cached: Callable[[Cache], object] | None = None,
    ) -> None:
        """One write through the store's DirectStore; a store it refuses (none yet, another
        schema revision) is created or upgraded through `Cache` first (or refused as
        `Cache.open` refuses it), then written by `cached` (None: by `write` again)."""
        from tunecache.store.direct import DirectStore, DirectWriteRefused

        destination = items[0].destination
        store = self._stores.get(destination.db)
        if store is None:
            store = self._stores[destination.db] = DirectStore(destination.db, destination.device)
        try:
            write(store)
            return
        except StoreBusyError:
            raise
        except (DirectWriteRefused, StoreError):
            pass  # the store's own way: Cache creates, upgrades or refuses as it opens
        with self._heavy_path():
            cache = self._cache(items)
            if cache is not None and cached is not None:
                cached(cache)
        if cache is not None and cached is None:
            write(store)

    def _cache(self, records: list[Item]) -> Cache | None:
        destination = records[0].destination
        found = self._caches.get(destination.db)
        if found is None:
            from tunecache.cache import Cache

            try:
                found = Cache.open(
                    device=destination.device, root=destination.root, path=destination.path
                )
            except TunecacheError as error:
                self._failed.add(destination.db)
                _warn(records, "open", "tunings stay in memory", error)
                return None
            self._caches[destination.db] = found
        return found

    @contextmanager
    def _heavy_path(self) -> Iterator[None]:
        with self._cond:
            self._heavy = True
        try:
            yield
        finally:
            with self._cond:
                self._heavy = False
                self._cond.notify_all()


def _warn(records: list[Item], topic: str, what: str, error: BaseException) -> None:
    """Say once per kernel (its WarnOnce) that its records were not stored, and why."""
    text = str(error) if isinstance(error, TunecacheError) else f"{type(error).__name__}: {error}"
    seen: set[str] = set()
    for record in records:
        if record.op not in seen:
            seen.add(record.op)
            message = f"tunecache: {record.op}'s {what}: {text}"
            try:
                record.warn(topic, message)
            except Warning:
                # A filter turned it into an error: raised in this thread, it would stop the
                # writer for good. Said to the `tunecache` logger instead, as health does.
                import logging

                logging.getLogger("tunecache").warning(message)


#: this process's writer: every kernel's records go through it
WRITER = RecordWriter()


def flush(timeout: float | None = None) -> bool:
    """Write every record this process's kernels have queued before returning; False if
    `timeout` seconds ran out first."""
    return WRITER.flush(timeout)
