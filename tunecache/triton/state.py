"""A kernel's way to the store, one device at a time: what it reads on a miss, what it writes.

A device's `StoreReader` (`stored.py`, stdlib sqlite3) answers a stored key with one indexed
read, and reads the old entries a changed config list reuses. The resolver's table
(`tunecache.resolve.Table`, stdlib sqlite3 too) is opened only for what that reader does not do:
a nearest tuned shape for a key that may borrow one, and the guarded answer for a store the
reader cannot read. A decision is handed to the process's writer (`tunecache.triton.writer`),
which stores it behind the launch; it is served from memory at once, so later keys of this
process find it, and borrow from it, whether or not it is written yet. A store that cannot be
written leaves the tunings in memory, with one warning per kernel and cause.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tunecache import paths
from tunecache.candidates import checksum
from tunecache.errors import StoreError, TunecacheError, TunecacheWarning
from tunecache.identity import check_fields, fingerprint
from tunecache.triton.autotuner import Options
from tunecache.triton.backend import Backend
from tunecache.triton.configs import Choice
from tunecache.triton.stored import StoreReader, Unreadable
from tunecache.triton.warm import loaded_writer, triton_unhashed

if TYPE_CHECKING:
    from tunecache.codec import TimingRecord
    from tunecache.device import Device
    from tunecache.identity import Fields
    from tunecache.keys import Key
    from tunecache.resolve import Answer, Table
    from tunecache.triton.writer import Destination

__all__ = [
    "DeviceState",
    "KernelStore",
    "OldEntry",
    "Previous",
    "Target",
    "WarnOnce",
    "loaded_writer",
]

#: an entry of a key tuned against another config list: (entry id, config list, choice)
OldEntry = tuple[int, tuple[str, ...], str]


class Previous:
    """The old entry of a key that a changed config list reuses.

    (Plain classes with slots, not NamedTuples: those cost a warm process's first call a
    tenth of a millisecond each to define.)
    """

    __slots__ = ("choice", "names", "record")

    def __init__(self, names: tuple[str, ...], choice: str, record: TimingRecord | None) -> None:
        #: the config list it was tuned against
        self.names = names
        #: the config it chose
        self.choice = choice
        #: its timing record (None: it has none)
        self.record = record


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
    """One device's view: its identity, its store, its memo of answered calls."""

    __slots__ = (
        "_destination",
        "_device",
        "decided",
        "fields",
        "index",
        "memo",
        "reader",
        "root",
        "table",
    )

    def __init__(
        self,
        index: int,
        device: Device | Fields,
        reader: StoreReader,
        root: Any = None,
    ) -> None:
        #: the device's number, as the backend counts them
        self.index = index
        #: the checked fields of the device's identity (`Device.fields`): the store's path, and
        #: its rows' fingerprint
        self.fields: Fields = device if isinstance(device, tuple) else device.fields
        self._device = None if isinstance(device, tuple) else device
        #: the store's own reads (exact keys, old entries), through stdlib sqlite3
        self.reader = reader
        #: the resolver's view of the store with this process's decisions added in memory,
        #: opened by the first question only it answers (`KernelStore.table`); None till then
        self.table: Table | None = None
        #: this kernel's decisions in this process, by (key text, config-list checksum): the
        #: key, the config list, the choice and its timing record
        self.decided: dict[tuple[str, str], tuple[Key, tuple[str, ...], str, TimingRecord]] = {}
        #: Triton tuning key -> the choice to launch
        self.memo: dict[tuple[Any, ...], Choice] = {}
        #: the cache root the store was found under (None: an explicit path), as it was then
        self.root = root
        self._destination: Destination | None = None

    @property
    def device(self) -> Device:
        """The device's identity (given, or built from `fields` when first asked: by the
        first key that is tuned, borrowed or written; a stored key needs only the fields)."""
        if self._device is None:
            from tunecache.device import Device

            self._device = Device(*self.fields)
        return self._device

    @property
    def destination(self) -> Destination:
        """Where the writer stores this device's decisions (made by the first decision: a warm
        process that only meets stored keys never loads the writer)."""
        if self._destination is None:
            from tunecache.triton.writer import Destination

            path = self.reader.path
            assert path is not None
            options_path = None if self.root is not None else path
            self._destination = Destination(path, self.device, self.root, options_path)
        return self._destination


class Target:
    """Where a key's decision goes: the device, the key, and the candidate list it is decided
    against (the kernel's configs, then any `early_config_prune` made up)."""

    __slots__ = ("key", "names", "state", "sum")

    def __init__(self, state: DeviceState, key: Key, names: tuple[str, ...]) -> None:
        self.state, self.key, self.names = state, key, names
        #: the candidate list's checksum, as entries are stored under it
        self.sum = checksum(names)


class KernelStore:
    """One kernel's reads and writes of the store, for any of its devices."""

    def __init__(self, op: str, options: Options, backend: Backend, warn: WarnOnce) -> None:
        self._op, self._options, self._backend = op, options, backend
        self.warn = warn

    def open(self, index: int) -> DeviceState:
        """Device `index`'s state: its store located, nothing read yet (no SQLAlchemy).

        A backend that gives the identity's fields (the GPU's) builds no `Device` for it: the
        store's path (as `paths.locate` makes it) and the rows' fingerprint (as
        `Device.fingerprint` is) come from the fields, checked as a Device checks them."""
        backend, options = self._backend, self._options
        found: Device | Fields = (
            backend.device(index) if backend.fields is None else backend.fields(index)
        )
        fields = found if isinstance(found, tuple) else found.fields
        if isinstance(found, tuple):
            check_fields(*fields)  # a backend's own fields, checked as a Device checks them
        cpu, threads, _, client, version = fields
        # The root as it is now: a record written later (at exit, say) goes to this store
        # even if the environment that named it ($TUNECACHE_DIR) has changed meanwhile.
        root = None if options.path is not None else paths.cache_root(client, options.root)
        if root is None:
            db = paths.explicit_path(options.path)
        else:
            db = paths.database_path_of(client, version, cpu, threads, root)
        state = DeviceState(index, found, StoreReader(db, fingerprint(fields)), root)
        if triton_unhashed():
            # Before this process's first launch: Triton's installation hash from the file
            # beside the store, not 0.4 s of hashing (tunecache.triton.jitkey).
            from tunecache.triton import jitkey

            jitkey.remember(db.parent)  # which does nothing where it is off
        writer = loaded_writer()
        if writer is not None:
            # Another kernel of this process may have decisions for this store on their way:
            # this one sees them, as it sees every other process's (a few ms, and only then).
            writer.settle(db)
        return state

    def table(self, state: DeviceState) -> Table:
        """The device's resolver table, with this kernel's decisions in memory: opened by the
        first question that needs it."""
        if state.table is None:
            from tunecache.resolve import Table

            options = self._options
            table = Table.open(
                device=state.device,
                root=options.root,
                path=options.path,
                use="all",
                max_distance=options.max_distance,
            )
            if state.decided:
                added = [(key, names, choice) for key, names, choice, _ in state.decided.values()]
                opened, table = table, table.derive(add=added)
                opened.close()
            state.table = table
        return state.table

    def exact(self, target: Target) -> str | None:
        """The config stored (or decided in this process) for exactly this key and config
        list, or None; when the store cannot be read by the state's own reader, the resolver's
        table answers (and says why)."""
        state = target.state
        found = state.decided.get((target.key.text, target.sum))
        if found is not None:
            return found[2]
        try:
            return state.reader.choice(target.key.text, target.sum)
        except Unreadable:
            answer = self.resolve(target)
            return answer.choice if answer.source == "exact" else None

    def resolve(self, target: Target) -> Answer:
        """The resolver's answer for the key (exact, then nearest shape, then the first
        config as the heuristic)."""
        return self.table(target.state).resolve(target.key, target.names, target.names[0])

    def write(self, target: Target, choice: str, record: TimingRecord) -> float:
        """Hand a decision with its record to the writer, and serve it from memory at once;
        the seconds that took (the caller's, not the write's: that happens behind)."""
        from tunecache.triton.writer import WRITER, Record

        start = time.perf_counter()
        state = target.state
        decided = (target.key, target.names, choice)
        state.decided[target.key.text, target.sum] = (*decided, record)
        record_ = Record(
            state.destination, target.key, choice, target.names, record, self._op, self.warn
        )
        WRITER.put(record_)
        old = state.table
        if old is not None:
            state.table = old.derive(add=[decided])
            old.close()
        return time.perf_counter() - start

    def old_entries(self, target: Target) -> list[OldEntry]:
        """This key's entries tuned against other config lists, newest first, as (entry id,
        config list, choice), through the state's reader: this runs before a key is borrowed,
        which must stay fast."""
        key = target.key
        return target.state.reader.others(key.text, key.signature, target.sum)

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
            self.warn("read", f"tunecache: cannot read {self._op}'s old entry: {error}")
            return None

    def _record(self, state: DeviceState, entry_id: int) -> TimingRecord | None:
        """An entry's timing record, read through the read contract and decoded."""
        from tunecache.codec import decode

        try:
            data = state.reader.record(entry_id)
        except Unreadable as error:
            raise StoreError(f"cache database {state.reader.path}: {error}") from None
        return None if data is None else decode(data)
