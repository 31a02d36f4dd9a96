"""What a kernel's first call sets up, and the path of a key not answered yet in this process.

`Autotuner` (autotuner.py) keeps only what applying the decorator needs; its first call builds a
`Flow`, once: the backend, the configs by name and the store per device; the measurer, the
pending keys, the resolver's table and the writer (and the modules they take: the bench's,
numpy's index, the writer's thread) come with the first key that needs them. A miss resolves
like this:

1. the Triton tuning key of the call (a tuple: the key arguments' values and the tensors'
   dtypes) is looked up in a per-device dict: a hit costs one dict lookup, no SQL;
2. on a miss, the legal configs (after `early_config_prune`) are worked out; when pruning leaves
   one config (`early_config_prune`, or `perf_model` with a `top_k` of one), it is launched
   without a bench and nothing is stored, as in Triton;
3. the tunecache key is made, and the device's store reader (`stored.py`: stdlib sqlite3, one
   indexed read) answers: an exact entry for this config list is used as it is;
4. an entry of the same key tuned against another config list is reused by the rule of
   `reuse.plan_reuse` (docs/triton.md), benching only what it must;
5. an unseen key within `max_distance` of a tuned one (the resolver's `Table`, opened now)
   borrows its config at once (`unseen="borrow"`) and is remembered as pending
   (`background.py`): `tune_pending()` tunes it later, or a daemon thread does
   (`unseen="background"`);
6. otherwise the key is tuned now, as Triton would (`measure.py`), the winner launched, and its
   record handed to the writer (`state.py`, `writer.py`), which stores it behind the launch.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from tunecache.triton.backend import Backend
from tunecache.triton.configs import Choice, ConfigSet, all_kwargs
from tunecache.triton.keys import same_specialization
from tunecache.triton.state import (
    DeviceState,
    KernelStore,
    OldEntry,
    Target,
    WarnOnce,
)
from tunecache.triton.warm import loaded_writer

if TYPE_CHECKING:
    from tunecache.codec import TimingRecord
    from tunecache.triton.autotuner import Autotuner
    from tunecache.triton.background import PendingItem, PendingKeys
    from tunecache.triton.measure import Call, Measurer
    from tunecache.triton.reuse import Plan
    from tunecache.triton.state import Previous

__all__ = ["Flow"]

#: a call's positional arguments (or its Triton tuning key), and keyword arguments
Args = tuple[Any, ...]
Kwargs = dict[str, Any]


def _quiet() -> None:
    """Wait while this process's writer is creating a store (`writer.RecordWriter.quiet`), if
    the writer was ever loaded: a store it is creating reads as damaged until its schema
    commits (the resolver would answer the heuristic for good). Only the first process of a
    device ever waits, for the time Cache takes to create the store."""
    writer = loaded_writer()
    if writer is not None:
        writer.quiet()


class Flow:
    """A kernel's machinery, built at its first call: devices, configs, store, bench, pending.

    What a stored key needs (the configs by name, the store's reader) is built at once; the
    bench (`measure.py`), the pending keys (`background.py`), the reuse rule and the writer are
    loaded by the first key that needs them, so a warm process that only meets stored keys
    never imports them.

    The Triton-visible results of a miss (`stats`, `nargs`, `configs_timings`, `bench_time`,
    `store_time`) are set on the kernel, as Triton's Autotuner keeps them.
    """

    def __init__(self, kernel: Autotuner, backend: Backend) -> None:
        self.kernel = kernel
        self.backend = backend
        options = kernel.options
        named = options.named_configs
        configs = list(named.values())
        names: tuple[str, ...] | None = tuple(named)
        if not configs:
            if backend.default_config is None:
                from tunecache.errors import BadArgumentError

                raise BadArgumentError("autotune needs at least one config")
            configs, names = [backend.default_config()], None
        op = kernel.spec.op
        #: the configs by name, with Triton's pruning of them (named once, by `Options`)
        self.configs = ConfigSet(configs, options, op, backend.no_config_error, names)
        #: what every call launches when there is one config: no key, no store, as in Triton
        self.single: Choice | None = (
            self.configs.choice(self.configs.names[0]) if len(configs) == 1 else None
        )
        #: held by every miss (and by the background tuner while it tunes)
        self.lock = threading.RLock()
        #: device number -> its state (its table and its memo of answered calls)
        self.states: dict[int, DeviceState] = {}
        self.warn = WarnOnce()
        self.store = KernelStore(op, options, backend, self.warn)
        self._measurer: Measurer | None = None
        self._pending: PendingKeys | None = None

    @property
    def measurer(self) -> Measurer:
        """What times the configs (built by the first key benched)."""
        if self._measurer is None:
            from tunecache.triton.measure import Measurer

            kernel = self.kernel
            self._measurer = Measurer(
                kernel, kernel.spec.op, self.configs, kernel.options, self.backend
            )
        return self._measurer

    @property
    def pending(self) -> PendingKeys:
        """The kernel's pending keys (made by the first key borrowed, or the first look)."""
        if self._pending is None:
            from tunecache.triton.background import PendingKeys

            kernel = self.kernel
            self._pending = PendingKeys(
                kernel.spec.op,
                kernel.options,
                self.backend,
                self.lock,
                self.warn,
                self.decide_pending,
                kernel.errors,
            )
        return self._pending

    def wait_pending(self, timeout: float | None = None) -> bool:
        """Wait until the background thread has tuned every key queued (`PendingKeys.wait`);
        True at once where no key was ever borrowed (the pending keys were never made)."""
        return True if self._pending is None else self._pending.wait(timeout)

    def state(self, index: int) -> DeviceState:
        """Device `index`'s state, opened on its first call."""
        with self.lock:
            state = self.states.get(index)
            if state is None:
                state = self.store.open(index)
                warm = self.kernel.warm_start
                if warm is not None:
                    # What the warm start answered stays answered (one dict lookup a call).
                    state.memo.update(warm.answered(index))
                self.states[index] = state
            return state

    def miss(self, state: DeviceState, raw: Args, args: Args, kwargs: Kwargs) -> Choice:
        """The choice for a call whose Triton key this process has not answered yet."""
        kernel = self.kernel
        with self.lock:
            found = state.memo.get(raw)
            if found is not None:
                return found
            nargs = dict(zip(kernel.arg_names, args, strict=False))
            kernel.nargs = nargs
            try:
                name = self._decide(state, raw, (args, kwargs, nargs))
            finally:
                kernel.nargs = None
            choice = self.configs.choice(name)
            state.memo[raw] = choice
            return choice

    def _decide(self, state: DeviceState, raw: Args, given: tuple[Args, Kwargs, Kwargs]) -> str:
        """The config name for a key not answered yet in this process; `given` is the call's
        arguments, its keyword arguments, and all of them by name."""
        args, kwargs, nargs = given
        _quiet()
        stats = self.kernel.stats
        configs = self.configs
        legal = configs.legal(nargs, kwargs)
        only = configs.only(legal, nargs, kwargs)
        if only is not None:
            stats["single"] += 1
            return configs.name_of(only)
        legal_names = [configs.name_of(c) for c in legal]
        key = self.kernel.spec.make(args, kwargs)
        known = configs.names
        target = Target(state, key, known + tuple(n for n in legal_names if n not in known))
        store = self.store
        exact = store.exact(target)
        if exact is not None and exact in legal_names:
            stats["exact"] += 1
            warm = self.kernel.warm_start
            if warm is not None and (key.text, target.sum) not in state.decided:
                # The store's answer: kept for the next process.
                warm.learn(state, raw, exact, target.names)
            return exact
        from tunecache.triton.measure import Call

        call = Call(args, kwargs, nargs)
        defer = self.kernel.options.unseen != "tune"
        # Read once: the same question decides between reuse and a bench below.
        old = store.old_entries(target) if exact is None else []
        if old:
            name, deferred = self._settle(target, legal, call, defer, old=old)
            if not deferred:
                return name
            from tunecache.resolve import Answer

            answer = Answer(name, "nearest", None, 0.0, key)
        else:
            # Only a key that may borrow asks for a nearest shape (the resolver's index):
            # a key tuned now needs nothing but the exact answer above.
            near = store.resolve(target) if defer and exact is None else None
            if (
                near is None
                or near.source != "nearest"
                or near.choice not in legal_names
                # A neighbour Triton compiles apart ranks configs for another kernel: tuned
                # now instead (docs/triton.md, "Borrowing").
                or (
                    near.borrowed_from is not None
                    and not same_specialization(key, near.borrowed_from)
                )
            ):
                return self._settle(target, legal, call, False, old=old)[0]
            answer = near
        stats["borrowed"] += 1
        from tunecache.triton.background import PendingItem

        self.pending.hold(PendingItem(target, raw, answer, legal), call.args, call.kwargs)
        return answer.choice

    def decide_pending(self, item: PendingItem) -> None:
        """Tune a pending key on the copies of its arguments, and memoise its config."""
        from tunecache.triton.measure import Call

        assert item.args is not None and item.kwargs is not None
        _quiet()  # as _decide: the store's old entries are read first
        nargs = dict(zip(self.kernel.arg_names, item.args, strict=False))
        call = Call(item.args, item.kwargs, nargs)
        # Tuned on copies of the arguments: no launch follows on them, so no reset (one on
        # a background stream could still be queued when the copies are freed).
        name, _ = self._settle(item.target, item.legal, call, defer=False, reset=False)
        item.target.state.memo[item.raw] = self.configs.choice(name)

    # -- tuning ---------------------------------------------------------------------------------

    def _settle(
        self,
        target: Target,
        legal: list[Any],
        call: Call,
        defer: bool,
        reset: bool = True,
        old: list[OldEntry] | None = None,
    ) -> tuple[str, bool]:
        """Decide a key by reuse or by benching, and store it; returns (config name, deferred).

        With `defer`, a key whose reuse needs a bench keeps its old winner for now, pending.
        With `reset`, the caller's `reset_to_zero` arguments are zeroed after the bench, for
        the real launch that follows; copies tuned later need no reset. `old` is the key's
        entries under other config lists, if the caller has read them already.
        """
        configs = self.configs
        legal_names = [configs.name_of(c) for c in legal]
        previous = self.store.previous(target, legal_names, old)
        if previous is None:
            benched = configs.top_k(legal, call.nargs, call.kwargs)
            return self._tune(target, legal_names, benched, call, None, reset), False
        from tunecache.triton.reuse import SURVIVORS, kept_record, plan_reuse

        plan = plan_reuse(legal_names, previous.names, previous.choice, previous.record, SURVIVORS)
        if plan.choice is not None:
            self.kernel.stats["reused"] += 1
            self._write(target, plan.choice, kept_record(plan, previous.record, previous.names))
            return plan.choice, False
        if defer and previous.choice in legal_names:
            return previous.choice, True
        benched = [configs.by_name[n] for n in plan.bench]
        return self._tune(target, legal_names, benched, call, (plan, previous), reset), False

    def _tune(
        self,
        target: Target,
        legal_names: list[str],
        benched: list[Any],
        call: Call,
        reuse: tuple[Plan, Previous] | None,
        reset: bool,
    ) -> str:
        """Bench `benched` on this call, hand the winner with every config's timings (and the
        old ones `reuse` keeps) to the writer, and return it."""
        kernel = self.kernel
        kernel.stats["tuned"] += 1
        start = time.perf_counter()
        measured = self.measurer.measure(benched, call)
        kernel.configs_timings = measured.timings
        record = measured.record
        if reuse is not None:
            from tunecache.triton.reuse import merged_record

            plan, previous = reuse
            record = merged_record(record, plan, previous.names, legal_names)
        kernel.bench_time = time.perf_counter() - start
        if measured.best is None:
            # Every config failed: as Triton, launch the first and let its error surface.
            return legal_names[0]
        self._write(target, measured.best, record)
        if reset:
            winner = self.configs.by_name[measured.best]
            kernel.pre_hook({**call.nargs, **call.kwargs, **all_kwargs(winner)}, reset_only=True)
        return measured.best

    def _write(self, target: Target, choice: str, record: TimingRecord) -> None:
        self.kernel.store_time = self.store.write(target, choice, record)
