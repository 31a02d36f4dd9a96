"""Keys served a borrowed config and not tuned yet: held, tuned on request, or by a thread.

A borrowed key keeps private copies of its first call's arguments (at most `pending_limit`
keys keep theirs), so it can be tuned later without another call and without ever writing the
caller's tensors: on `tune_pending()`, or with `unseen="background"` by a daemon thread of
the kernel's own, on a stream of that thread's own.

It is also kept in the store's pending keys (`tunecache.store.pending`, source "triton"), so
that it outlives the process: noted once per process, written by the process's writer thread
(`writer.Note`, never by the launch), and cleared there when any process stores the key's
decision. A later process that borrows it again knows how often earlier ones did
(`Pending.earlier`), and `tunecache pending` lists it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.triton.autotuner import Options
from tunecache.triton.backend import Backend
from tunecache.triton.state import Target, WarnOnce

if TYPE_CHECKING:
    from pathlib import Path

    from tunecache.keys import Key
    from tunecache.resolve import Answer
    from tunecache.triton.state import DeviceState

__all__ = ["Pending", "PendingItem", "PendingKeys"]


class Pending(NamedTuple):
    """A key served a borrowed config, waiting to be tuned."""

    key: Key
    #: the answer served: the neighbour's config, where it came from and how far it is
    answer: Answer
    #: whether the first call's arguments were kept, so it can be tuned without another call
    captured: bool
    #: how many times earlier processes borrowed it without anyone tuning it since (the
    #: store's pending count when this kernel first borrowed a key on this device; another
    #: kernel object of this process that borrowed it and was written by then counts too)
    earlier: int = 0


class PendingItem:
    """A pending key with what tuning it needs."""

    __slots__ = ("answer", "args", "earlier", "kwargs", "legal", "raw", "target")

    def __init__(
        self, target: Target, raw: tuple[Any, ...], answer: Answer, legal: list[Any]
    ) -> None:
        #: the device, key and candidate list it is tuned for
        self.target = target
        #: its Triton tuning key
        self.raw = raw
        #: the borrowed answer served meanwhile
        self.answer = answer
        #: the configs it may use
        self.legal = legal
        #: copies of its first call's arguments (None: none were kept)
        self.args: tuple[Any, ...] | None = None
        self.kwargs: dict[str, Any] | None = None
        #: how many times earlier processes borrowed it (`Pending.earlier`)
        self.earlier = 0


class PendingKeys:
    """A kernel's pending keys, and the daemon thread that tunes them in the background.

    `decide(item)` tunes one item and memoises its answer; it runs under `lock` (the kernel's
    own, which every miss holds) inside the backend's context for the item's device.
    """

    def __init__(
        self,
        op: str,
        options: Options,
        backend: Backend,
        lock: threading.RLock,
        warn: WarnOnce,
        decide: Callable[[PendingItem], None],
        errors: list[str] | None = None,
    ) -> None:
        self._op, self._options, self._backend = op, options, backend
        self._lock, self._warn, self._decide = lock, warn, decide
        #: (device index, tuning key) -> the pending item, oldest first; guarded by `lock`
        self.items: dict[tuple[int, tuple[Any, ...]], PendingItem] = {}
        self._queue: deque[PendingItem] = deque()
        self._busy = 0
        self._idle = threading.Condition(threading.Lock())
        self._worker: threading.Thread | None = None
        #: background tuning failures, as one line each (the kernel's own list, if given)
        self.errors: list[str] = [] if errors is None else errors
        #: (device index, tuning key) of the keys noted in the store's pending keys
        self._noted: set[tuple[int, tuple[Any, ...]]] = set()
        #: device index -> the store's pending keys of this device, as (key, checksum) -> count
        self._stored: dict[int, dict[tuple[str, str], int]] = {}

    def hold(self, item: PendingItem, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Remember a borrowed key (under `lock`), with copies of its call's arguments while
        fewer than `pending_limit` keys keep theirs; queue it for the thread with "background"."""
        held = sum(1 for i in self.items.values() if i.args is not None)
        if held < self._options.pending_limit:
            item.args, item.kwargs = self.snapshot(args, kwargs)
        else:
            self._warn(
                "pending_limit",
                f"tunecache: {self._op} holds {held} pending keys' arguments "
                "(pending_limit); later borrowed keys keep none until tune_pending() runs",
            )
        place = (item.target.state.index, item.raw)
        self.items[place] = item
        if place not in self._noted:
            self._noted.add(place)
            self._note(item)
        if self._options.unseen == "background" and item.args is not None:
            self._enqueue(item)

    def _note(self, item: PendingItem) -> None:
        """Say how often earlier processes borrowed the key, and queue it for the store's
        pending keys (written by the writer's thread)."""
        from tunecache.triton.writer import WRITER, Note

        target = item.target
        state = target.state
        stored = self._stored.get(state.index)
        if stored is None:
            stored = self._stored[state.index] = self._read_stored(state.reader.path, state)
        item.earlier = stored.get((target.key.text, target.sum), 0)
        WRITER.put(Note(state.destination, target.key, target.names, self._op, self._warn))

    def _read_stored(self, path: Path | None, state: DeviceState) -> dict[tuple[str, str], int]:
        """The device's pending keys in the store, by (key, checksum): read once per device,
        at its first borrowed key; none where the store cannot say (said once)."""
        from tunecache.errors import TunecacheError
        from tunecache.store.pending import pending_keys

        if path is None:
            return {}
        try:
            rows = pending_keys(path, state.device.fingerprint, timeout=5.0)
        except TunecacheError as error:
            self._warn("pending", f"tunecache: cannot read {self._op}'s pending keys: {error}")
            return {}
        return {(row.key, row.checksum): row.asked for row in rows}

    def listing(self) -> list[Pending]:
        """The pending keys, oldest first."""
        with self._lock:
            return [
                Pending(i.target.key, i.answer, i.args is not None, i.earlier)
                for i in self.items.values()
            ]

    def tune_all(self) -> list[Key]:
        """Tune every pending key that kept its arguments, and forget the borrowed answer of
        every one that did not; return the keys tuned."""
        with self._lock:
            items = list(self.items.values())
            for item in items:
                if item.args is None:
                    self.items.pop((item.target.state.index, item.raw), None)
                    item.target.state.memo.pop(item.raw, None)
        return [item.target.key for item in items if item.args is not None and self.tune(item)]

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the background thread has tuned every key queued; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._queue and not self._busy, timeout)

    def snapshot(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Private copies of a call's tensor arguments, made now, in the caller's thread and
        stream: the pending key is benched later on the data it was called with, and the
        caller's tensors are never written by that bench. A tensor passed twice is copied
        once, so the copies alias as the originals did."""
        clone = self._backend.clone
        copies: dict[int, Any] = {}

        def copy(value: Any) -> Any:
            found = copies.get(id(value))
            if found is None:
                found = copies[id(value)] = clone(value)
            return found

        return tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()}

    def tune(self, item: PendingItem, background: bool = False) -> bool:
        """Tune one pending key on the copies of its arguments; True once it is decided."""
        assert item.args is not None and item.kwargs is not None
        index = item.target.state.index
        with self._backend.context(index, background), self._lock:
            if (index, item.raw) not in self.items:
                return False
            self._decide(item)
            del self.items[index, item.raw]
        return True

    def _enqueue(self, item: PendingItem) -> None:
        with self._idle:
            self._queue.append(item)
            self._idle.notify_all()
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name=f"tunecache-{self._op}", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            with self._idle:
                self._idle.wait_for(lambda: bool(self._queue))
                item = self._queue.popleft()
                self._busy += 1
            try:
                self.tune(item, background=True)
            except Exception as error:
                self.errors.append(f"{item.target.key.text}: {type(error).__name__}: {error}")
                self._warn("background", f"tunecache: background tuning failed: {error}")
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
