"""A kernel's way to the store, one device at a time: what it reads on a miss, what it writes.

A device's resolver table (`tunecache.resolve.Table`, stdlib sqlite3) answers every miss; the
writable `Cache` (SQLAlchemy) opens on the first write only. A store that cannot be opened or
written leaves the tunings in memory, with one warning per kernel and cause.
"""

from __future__ import annotations

import sqlite3
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.candidates import checksum
from tunecache.errors import TunecacheError, TunecacheWarning
from tunecache.resolve import Table
from tunecache.triton.backend import Backend
from tunecache.triton.configs import Choice
from tunecache.triton.options import Options

if TYPE_CHECKING:
    from tunecache.cache import Cache
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

    __slots__ = ("cache", "device", "index", "memo", "table")

    def __init__(self, index: int, device: Device, table: Table) -> None:
        #: the device's number, as the backend counts them
        self.index = index
        #: the device's identity: the store's path and rows
        self.device = device
        #: the resolver's view of the store, reloaded after each write
        self.table = table
        #: Triton tuning key -> the choice to launch
        self.memo: dict[tuple[Any, ...], Choice] = {}
        #: the writable cache, opened on the first write; False once it failed to open
        self.cache: Cache | bool | None = None


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
        table = Table.open(
            device=device,
            root=self._options.root,
            path=self._options.path,
            use="all",
            max_distance=self._options.max_distance,
        )
        return DeviceState(index, device, table)

    def cache(self, state: DeviceState) -> Cache | None:
        """The device's writable cache, opened once; None when it cannot be opened."""
        if state.cache is None:
            from tunecache.cache import Cache

            try:
                state.cache = Cache.open(
                    device=state.device, root=self._options.root, path=self._options.path
                )
            except TunecacheError as error:
                state.cache = False
                self._warn("open", f"tunecache: {self._op}'s tunings stay in memory: {error}")
        return state.cache if not isinstance(state.cache, bool) else None

    def write(self, target: Target, choice: str, record: TimingRecord) -> float | None:
        """Store a decision with its record (one atomic write), then see it in the table;
        the seconds that took, or None when nothing was stored."""
        start = time.perf_counter()
        state = target.state
        cache = self.cache(state)
        if cache is None:
            return None
        from tunecache.cache import NewEntry  # loaded with the cache already: no cost here

        try:
            # One transaction, no `runs` row: a key is tuned inside a user's first call, where
            # two more write transactions per key are time the user waits for. The batch path
            # reads nothing back: the table is reloaded below anyway.
            cache.put_many([NewEntry(target.key, choice, target.names, record=record)])
        except TunecacheError as error:
            self._warn("write", f"tunecache: {self._op}'s tuning not stored: {error}")
            return None
        old, state.table = state.table, state.table.reload()
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

    def previous(self, target: Target, legal: Sequence[str]) -> Previous | None:
        """Of this key's entries tuned against other config lists, the one whose list covers
        the most legal configs (the newest of equals): its list, its choice and its record."""
        entries = self.old_entries(target)
        if not entries:
            return None
        cache = self.cache(target.state)
        if cache is None:
            return None
        wanted = set(legal)
        # max() keeps the first of equals: the entries come newest first.
        entry_id, old_names, choice = max(entries, key=lambda e: len(wanted.intersection(e[1])))
        try:
            return Previous(old_names, choice, cache.record(entry_id))
        except TunecacheError as error:
            self._warn("read", f"tunecache: cannot read {self._op}'s old entry: {error}")
            return None
