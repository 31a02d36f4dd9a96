"""Recorded misses: the keys a process asked of its tables and found no entry for, kept in the
store as pending keys so that they can be tuned offline (`tunecache tune --pending`).

    with tunecache.record_misses() as recorder:     # or TUNECACHE_RECORD_MISSES=1
        serve()                                       # every miss is noted, off the hot path
    recorder.recorded, recorder.dropped               # distinct keys noted, sightings dropped

PyTorch TunableOp's record-then-tune-offline workflow: a production process serves from the
cache as it is, and writes down what it met without an answer. A miss is a question a table
answered from the heuristic or from a borrowed neighbour (`MISSED`): no entry of its own.

- **Off the hot path.** A hit never reaches this module: a table remembers each answer, so only
  the first asking of a question in a table (`Table`'s slow path, which already read the
  database for it) calls `noted`, and what it does there is one dictionary update under a lock.
  Nothing is written by the asking thread: a background thread writes what was noted every
  `interval` seconds, in one transaction per cache file, and the rest is written when the
  `with` block ends (`Recorder.close`) or, for the process option, at the process's exit.
- **Bounded.** A recorder takes at most `cap` distinct keys (default CAP); a sighting of a key
  beyond them is dropped and counted (`Recorder.dropped`), and the store keeps at most
  `tunecache.store.pending.MAX_PENDING` keys per device.
- **No SQLAlchemy while serving, and no schema change.** The rows go through stdlib sqlite3
  (`tunecache.store.pending`, imported by the writer's first batch). A file that writer refuses
  (no cache there, or not any more; an older schema) is never created or upgraded from a
  serving process: its keys are dropped, and counted (`Recorder.dropped`). Open the cache once
  with `tunecache.open` (which creates or upgrades it) to record into it. A fleet tuning
  session's temporary mirror (`never_record`) notes nothing.
- **Keys asked before the recorder started.** A table remembers its answers: a key a table
  answered before the recorder started is a hit from then on and is not noted by that table
  (a table opened after the start notes it on its first asking). Start recording before the
  tables are opened (TUNECACHE_RECORD_MISSES=1 records from the first one); forgetting the
  memos at the start would cost every hit a check, which the hit path does not pay.
- **The op.** Each key is written with the op's importable name (MODULE:ATTR, or FILE.py:ATTR
  for a script), found among the tunable ops of the process (`tunecache.dispatch.registry`)
  by its signature and candidate list when the batch is written, so `tune --pending` can bench
  it later.

A recorder is process-wide, as a profile is: every table of every thread notes into it. A
process forked while recording starts with nothing noted (the parent writes what it noted).
"""

from __future__ import annotations

import os
import sys

# Not `typing` at run time: the resolver's import path stays light (tests/test_import.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from threading import Event, Thread
    from typing import Any

    from tunecache.keys import Key
    from tunecache.resolve.answer import Answer
    from tunecache.resolve.reader import Reader
    from tunecache.store.direct import DirectStore
    from tunecache.store.pending import Pending

__all__ = [
    "CAP",
    "ENV",
    "INTERVAL",
    "MISSED",
    "Recorder",
    "keep",
    "noted",
    "never_record",
    "op_name",
    "record_misses",
]

#: the answer sources that are misses: no entry of the key's own answered it
MISSED = frozenset({"heuristic", "nearest"})
#: the most distinct keys one recorder takes
CAP = 10_000
#: seconds between the background writer's batches
INTERVAL = 1.0
#: the environment variable that records the misses of the whole process ("1")
ENV = "TUNECACHE_RECORD_MISSES"

#: the recorder in force, or None; read only where a question found no entry
recorder: Recorder | None = None
#: the cache files whose tables note no miss (`never_record`)
_unrecorded: set[str] = set()


def never_record(path: Path) -> None:
    """Note no miss of the tables that read the cache file at `path`: a file that is not the
    process's cache (a fleet tuning session's temporary mirror, removed when it ends)."""
    _unrecorded.add(str(path))


def noted(
    reader: Reader | None, key: Key, names: tuple[str, ...], heuristic: str, answer: Answer
) -> None:
    """Note a table's answer for the recorder in force, if it is a miss of a table that reads
    a cache file (an in-memory table has nowhere to keep it)."""
    found = recorder
    if found is not None and reader is not None and answer.source in MISSED:
        if _unrecorded and str(reader.path) in _unrecorded:
            return
        found.note(reader.path, reader.device, key, names, heuristic, answer.source)


class Recorder:
    """The keys noted so far, and the thread that writes them as pending keys."""

    def __init__(self, *, cap: int = CAP, interval: float = INTERVAL) -> None:
        from _thread import allocate_lock

        from tunecache.errors import BadArgumentError

        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise BadArgumentError(f"cap is an int >= 1, got {cap!r}")
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
            raise BadArgumentError(f"interval is a number of seconds > 0, got {interval!r}")
        self.cap = cap
        self.interval = float(interval)
        #: distinct keys taken, sightings dropped beyond the cap (here or by the store), keys
        #: written, and why the last batch could not be written (None: it was)
        self.recorded = 0
        self.dropped = 0
        self.written = 0
        self.error: str | None = None
        self._lock = allocate_lock()
        self._writing = allocate_lock()
        # (file, device, key, names) -> [heuristic, source, sightings, first, last, op]
        self._batch: dict[tuple[Path, str, Key, tuple[str, ...]], list[Any]] = {}
        self._seen: set[tuple[Path, str, Key, tuple[str, ...]]] = set()
        self._stores: dict[Path, DirectStore] = {}
        self._thread: Thread | None = None
        self._stop: Event | None = None
        if hasattr(os, "register_at_fork"):
            import weakref

            forked = weakref.WeakMethod(self._forked)
            os.register_at_fork(after_in_child=lambda: _call(forked()))

    # -- the asking side ------------------------------------------------------------------------

    def note(
        self,
        path: Path,
        device: str,
        key: Key,
        names: tuple[str, ...],
        heuristic: str,
        source: str = "heuristic",
        op: str | None = None,
    ) -> None:
        """Note one asking of a key without an entry; written later, by the writer. `op` names
        the op (None: the process's tunable op of that signature and list, if any)."""
        import time

        now = time.time()
        place = (path, device, key, names)
        with self._lock:
            row = self._batch.get(place)
            if row is not None:
                row[2] += 1
                row[4] = now
                row[5] = op or row[5]
                return
            if place not in self._seen:
                if len(self._seen) >= self.cap:
                    self.dropped += 1
                    return
                self._seen.add(place)
                self.recorded += 1
            self._batch[place] = [heuristic, source, 1, now, now, op]
            if self._thread is None:
                self._start()

    def _forked(self) -> None:
        """In a child of a fork: what the parent noted is the parent's to write, and its locks
        and thread are not the child's (a lock the parent's writer held would never open)."""
        from _thread import allocate_lock

        self._lock, self._writing = allocate_lock(), allocate_lock()
        self._batch = {}
        self._thread = self._stop = None
        self._stores = {}

    def _start(self) -> None:
        import threading

        stop = threading.Event()
        thread = threading.Thread(target=self._work, args=(stop,), name="tunecache-misses")
        thread.daemon = True
        try:
            thread.start()
        except RuntimeError:
            return  # the interpreter is shutting down: close() or the exit writes it
        self._thread, self._stop = thread, stop

    def _work(self, stop: Event) -> None:
        # The thread ends once a batch finds nothing new, so an idle process holds none of
        # ours; the next miss starts another.
        while not stop.wait(self.interval):
            self.flush()
            with self._lock:
                if not self._batch and self._stop is stop:
                    self._thread = self._stop = None
                    return

    # -- the writing side -----------------------------------------------------------------------

    def flush(self) -> int:
        """Write every key noted so far, one transaction per cache file; how many were
        written. A batch that cannot be written is said once (TunecacheWarning) and dropped."""
        with self._writing:
            with self._lock:
                batch, self._batch = self._batch, {}
            if not batch:
                return 0
            return sum(self._write(path, items) for path, items in _by_file(batch).items())

    def _write(self, path: Path, items: dict[str, list[Pending]]) -> int:
        from tunecache.errors import TunecacheError

        try:
            written, dropped = _store_rows(self._store(path), items)
        except TunecacheError as error:
            self._failed(path, str(error))
            return 0
        except Exception as error:  # a bug: said, and the next batch still written
            self._failed(path, f"{type(error).__name__}: {error}")
            return 0
        self.written += written
        self.dropped += dropped
        return written

    def _store(self, path: Path) -> DirectStore:
        from tunecache.store.direct import DirectStore

        store = self._stores.get(path)
        if store is None:
            store = self._stores[path] = DirectStore(path, None)
        return store

    def _failed(self, path: Path, text: str) -> None:
        if self.error is None:
            import warnings

            from tunecache.errors import TunecacheWarning

            message = f"tunecache: the missed keys for {path} were not recorded: {text}"
            try:
                warnings.warn(message, TunecacheWarning, stacklevel=2)
            except Warning:
                import logging

                logging.getLogger("tunecache").warning(message)
        self.error = text

    def close(self) -> None:
        """Stop the writer's thread and write what is left."""
        with self._lock:
            stop, thread = self._stop, self._thread
            self._thread = self._stop = None
        if stop is not None:
            stop.set()
        if thread is not None and thread.is_alive():
            thread.join()
        self.flush()
        for store in self._stores.values():
            store.close()


def _call(method: Any) -> None:
    """Call a method a weak reference still finds (a recorder dropped since is not kept
    alive by the fork hook)."""
    if method is not None:
        method()


_kept: Recorder | None = None


def keep(
    path: Path,
    device: str,
    key: Key,
    candidates: tuple[str, ...],
    heuristic: str,
    *,
    source: str,
    op: str | None = None,
) -> None:
    """Keep a key as pending in the cache file at `path` for the device fingerprint `device`,
    whether or not misses are being recorded: for a client with keys to tune later (the
    Triton client's borrowed configs, `source="triton"`). Queued for a recorder of the
    process's own (the same batches, bound and stdlib writes as `record_misses`), whose last
    batch is written at exit."""
    global _kept
    if _kept is None:
        _kept = record_misses().recorder
        import atexit

        atexit.register(_kept.close)
    _kept.note(path, device, key, candidates, heuristic, source, op)


def _by_file(
    batch: dict[tuple[Path, str, Key, tuple[str, ...]], list[Any]],
) -> dict[Path, dict[str, list[Pending]]]:
    """A batch as pending keys, by file and device, each with its op's name where known."""
    from datetime import UTC, datetime

    from tunecache.candidates import checksum
    from tunecache.keys import format_key
    from tunecache.store.pending import Pending

    out: dict[Path, dict[str, list[Pending]]] = {}
    for (path, device, key, names), (heuristic, source, count, first, last, op) in batch.items():
        item = Pending(
            format_key(key),
            checksum(names),
            names,
            heuristic,
            op or _op_for(key, names),
            source,
            count,
            datetime.fromtimestamp(first, UTC),
            datetime.fromtimestamp(last, UTC),
        )
        out.setdefault(path, {}).setdefault(device, []).append(item)
    return out


def _store_rows(store: DirectStore, items: dict[str, list[Pending]]) -> tuple[int, int]:
    """Write each device's pending keys: (written, dropped). A file the direct writer refuses
    (absent, removed, not at the current schema) is never created or upgraded from here: its
    keys are all dropped."""
    from tunecache.store.direct import DirectWriteRefused
    from tunecache.store.pending import record_pending

    try:
        done = [record_pending(store, device, rows) for device, rows in items.items()]
    except DirectWriteRefused:
        return 0, sum(len(rows) for rows in items.values())
    return sum(w for w, _ in done), sum(d for _, d in done)


def _op_for(key: Key, names: tuple[str, ...]) -> str | None:
    """The importable name of the process's tunable op that asks this key with these
    candidates (the longest signature that matches), or None."""
    dispatch = sys.modules.get("tunecache.dispatch")
    if dispatch is None:
        return None
    best = None
    for signature, op in dispatch.registry().items():
        fits = key.signature == signature or key.signature.startswith(signature + "_")
        if fits and op.candidates == names and (best is None or len(signature) > len(best[0])):
            best = (signature, op)
    return None if best is None else op_name(best[1])


def op_name(op: object) -> str | None:
    """An op's importable name: MODULE:ATTR, or FILE.py:ATTR for one defined in a script or
    a file loaded by path; None for an op that has no name of its own to import it by."""
    module, qualname = getattr(op, "__module__", None), getattr(op, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module == "tunecache.dispatch":
        return None  # a Tunable made without a function: nothing names it
    loaded = sys.modules.get(module)
    # A script's __file__ is gone once it has run (at exit): its loader still knows the file.
    where = getattr(loaded, "__file__", None) or getattr(
        getattr(loaded, "__loader__", None), "path", None
    )
    if (module == "__main__" or module.startswith("_tunecache_")) and isinstance(where, str):
        return f"{os.path.abspath(where)}:{qualname}" if where.endswith(".py") else None
    return f"{module}:{qualname}"


class record_misses:
    """Record, while active, every key the process's tables answer without an entry of its own,
    as pending keys in the store; a context manager, or `start()` for the rest of the process.

    `cap` bounds the distinct keys taken, `interval` the seconds between the writer's batches.
    Leaving the block writes what is left before it returns; a process started with
    TUNECACHE_RECORD_MISSES=1 records from its first table on, and writes at exit. A key a
    table answered before recording started is a hit of that table's memo, and not recorded;
    a cache file that is missing or at an older schema is never created or upgraded: its keys
    are dropped (`Recorder.dropped`).
    """

    def __init__(self, *, cap: int = CAP, interval: float = INTERVAL) -> None:
        self.recorder = Recorder(cap=cap, interval=interval)
        self._previous: list[Recorder | None] = []

    def __enter__(self) -> Recorder:
        global recorder
        self._previous.append(recorder)
        recorder = self.recorder
        return self.recorder

    def __exit__(self, *exc: object) -> None:
        global recorder
        recorder = self._previous.pop()
        self.recorder.close()

    def start(self) -> Recorder:
        """Record for the rest of the process: what is left is written at its exit."""
        import atexit

        global recorder
        recorder = self.recorder
        atexit.register(self.recorder.close)
        return self.recorder


if os.environ.get(ENV, "") == "1":
    record_misses().start()
