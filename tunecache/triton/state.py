"""A kernel's way to the store, one device at a time: what it reads on a miss, what it writes.

A device's resolver table (`tunecache.resolve.Table`, stdlib sqlite3) answers every miss, and the
old entries a changed config list reuses are read the same way. A decision is handed to the
process's writer (`tunecache.triton.writer`), which stores it behind the launch; the table serves
it from memory at once, so later keys of this process borrow from it whether or not it is written
yet. A store that cannot be written leaves the tunings in memory, with one warning per kernel and
cause.
"""

from __future__ import annotations

import sqlite3
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache import paths
from tunecache.candidates import checksum
from tunecache.errors import StoreError, TunecacheError, TunecacheWarning
from tunecache.resolve import Table
from tunecache.triton.backend import Backend
from tunecache.triton.configs import Choice
from tunecache.triton.options import Options
from tunecache.triton.writer import WRITER, Destination, Record

if TYPE_CHECKING:
    from tunecache.codec import TimingRecord
    from tunecache.device import Device
    from tunecache.keys import Key

__all__ = ["DeviceState", "KernelStore", "OldEntry", "Previous", "Target", "WarnOnce"]

#: an entry of a key tuned against another config list: (entry id, config list, choice)
OldEntry = tuple[int, tuple[str, ...], str]


class Previous(NamedTuple):
    """The old entry of a key that a changed config list reuses."""

    #: the config list it was tuned against
    names: tuple[str, ...]
    #: the config it chose
    choice: str
    #: its timing record (None: it has none)
    record: TimingRecord | None


class WarnOnce:
    """Warns once per topic (a kernel's store failing to open, a background failure, ...)."""

    def __init__(self) -> None:
        #: the topics warned about so far
        self.topics: set[str] = set()

    def __call__(self, topic: str, message: str) -> None:
        """Warn `message` as a TunecacheWarning, unless `topic` was warned about before."""
        if topic not in self.topics:
            self.topics.add(topic)
            warnings.warn(message, TunecacheWarning, stacklevel=4)


class DeviceState:
    """One device's view: its identity, its table, its memo of answered calls."""

    __slots__ = ("destination", "device", "index", "memo", "table")

    def __init__(self, index: int, device: Device, table: Table) -> None:
        #: the device's number, as the backend counts them
        self.index = index
        #: the device's identity: the store's path and rows
        self.device = device
        #: the resolver's view of the store, with this process's decisions added in memory
        self.table = table
        #: Triton tuning key -> the choice to launch
        self.memo: dict[tuple[Any, ...], Choice] = {}
        #: where the writer stores this device's decisions (None: the table has no file)
        self.destination: Destination | None = None


class Target(NamedTuple):
    """Where a key's decision goes: the device, the key, and the candidate list it is decided
    against (the kernel's configs, then any `early_config_prune` made up)."""

    state: DeviceState
    key: Key
    names: tuple[str, ...]


class KernelStore:
    """One kernel's reads and writes of the store, for any of its devices."""

    def __init__(self, op: str, options: Options, backend: Backend, warn: WarnOnce) -> None:
        self._op, self._options, self._backend, self._warn = op, options, backend, warn

    def open(self, index: int) -> DeviceState:
        """Device `index`'s state, with its table opened (no SQLAlchemy)."""
        device = self._backend.device(index)
        options = self._options
        table = Table.open(
            device=device,
            root=options.root,
            path=options.path,
            use="all",
            max_distance=options.max_distance,
        )
        state = DeviceState(index, device, table)
        if table.path is not None:
            # The root as it is now: a record written later (at exit, say) goes to this store
            # even if the environment that named it ($TUNECACHE_DIR) has changed meanwhile.
            root = (
                None if options.path is not None else paths.cache_root(device.client, options.root)
            )
            state.destination = Destination(table.path, device, root, options.path)
            # Another kernel of this process may have decisions for this store on their way:
            # this one sees them, as it sees every other process's (a few ms, and only then).
            WRITER.settle(table.path)
        return state

    def write(self, target: Target, choice: str, record: TimingRecord) -> float:
        """Hand a decision with its record to the writer, and serve it from the table at once;
        the seconds that took (the caller's, not the write's: that happens behind)."""
        start = time.perf_counter()
        state = target.state
        if state.destination is not None:
            decided = (target.key, choice, target.names, record)
            WRITER.put(Record(state.destination, *decided, self._op, self._warn))
        old = state.table
        state.table = old.derive(add=[(target.key, target.names, choice)])
        old.close()
        return time.perf_counter() - start

    def old_entries(self, target: Target) -> list[OldEntry]:
        """This key's entries tuned against other config lists, newest first, as (entry id,
        config list, choice). Stdlib sqlite3 through the read contract: this runs before a
        key is borrowed, which must stay fast."""
        state, key = target.state, target.key
        sum_ = checksum(target.names)
        path = state.table.path
        if path is None or not path.is_file():
            return []  # a FIFO there would block the open below: nothing to borrow from it
        try:
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error:
            return []
        try:
            rows = conn.execute(
                # "+device": without it SQLite walks every entry of the device in the order of
                # its (device, updated_at) index instead of sorting the key's one or two rows.
                "SELECT entry_id, checksum, choice FROM read_entries_v1 WHERE key = ?"
                " AND +device = ? AND checksum != ? AND status != 'rejected'"
                " ORDER BY updated_at DESC, entry_id DESC",
                (key.text, state.device.fingerprint, sum_),
            ).fetchall()
            out = []
            for entry_id, old_sum, choice in rows:
                names = conn.execute(
                    "SELECT name FROM read_candidates_v1 WHERE signature = ? AND checksum = ?"
                    " ORDER BY position",
                    (key.signature, old_sum),
                ).fetchall()
                out.append((int(entry_id), tuple(n for (n,) in names), str(choice)))
        except sqlite3.Error:
            return []
        finally:
            conn.close()
        return out

    def previous(
        self, target: Target, legal: Sequence[str], entries: list[OldEntry] | None = None
    ) -> Previous | None:
        """Of this key's entries tuned against other config lists (`entries`, if read already),
        the one whose list covers the most legal configs (the newest of equals): its list, its
        choice and its record."""
        if entries is None:
            entries = self.old_entries(target)
        if not entries:
            return None
        wanted = set(legal)
        # max() keeps the first of equals: the entries come newest first.
        entry_id, old_names, choice = max(entries, key=lambda e: len(wanted.intersection(e[1])))
        try:
            return Previous(old_names, choice, self._record(target.state, entry_id))
        except TunecacheError as error:
            self._warn("read", f"tunecache: cannot read {self._op}'s old entry: {error}")
            return None

    def _record(self, state: DeviceState, entry_id: int) -> TimingRecord | None:
        """An entry's timing record, read through the read contract and decoded."""
        from tunecache.codec import decode

        path = state.table.path
        assert path is not None
        try:
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5.0)
            try:
                found = conn.execute(
                    "SELECT data FROM read_records_v1 WHERE entry_id = ?", (entry_id,)
                ).fetchone()
            finally:
                conn.close()
        except sqlite3.Error as error:
            raise StoreError(f"cache database {path}: {error}") from error
        return None if found is None or found[0] is None else decode(bytes(found[0]))
