"""What a kernel's first call sets up, and the path of a key not answered yet in this process.

`Autotuner` (autotuner.py) keeps only what applying the decorator needs; its first call builds a
`Flow`, once: the backend, the configs by name, the store per device, the measurer and the
pending keys, and the modules they take (the resolver, sqlite3, the bench's). A miss resolves
like this:

1. the Triton tuning key of the call (a tuple: the key arguments' values and the tensors'
   dtypes) is looked up in a per-device dict: a hit costs one dict lookup, no SQL;
2. on a miss, the legal configs (after `early_config_prune`) are worked out; when pruning leaves
   one config (`early_config_prune`, or `perf_model` with a `top_k` of one), it is launched
   without a bench and nothing is stored, as in Triton;
3. the tunecache key is made, and `resolve.Table` answers from the store through stdlib sqlite3:
   an exact entry for this config list is used as it is;
4. an entry of the same key tuned against another config list is reused by the rule of
   `reuse.plan_reuse` (docs/triton.md), benching only what it must;
5. an unseen key within `max_distance` of a tuned one borrows its config at once (`unseen=
   "borrow"`) and is remembered as pending (`background.py`): `tune_pending()` tunes it later,
   or a daemon thread does (`unseen="background"`);
6. otherwise the key is tuned now, as Triton would (`measure.py`), the winner launched, and its
   record handed to the writer (`state.py`, `writer.py`), which stores it behind the launch.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from tunecache.resolve import Answer
from tunecache.triton.backend import Backend
from tunecache.triton.background import PendingItem, PendingKeys
from tunecache.triton.configs import Choice, ConfigSet, all_kwargs
from tunecache.triton.measure import Call, Measurer
from tunecache.triton.reuse import SURVIVORS, Plan, kept_record, merged_record, plan_reuse
from tunecache.triton.state import (
    DeviceState,
    KernelStore,
    OldEntry,
    Previous,
    Target,
    WarnOnce,
)
from tunecache.triton.writer import WRITER

if TYPE_CHECKING:
    from tunecache.codec import TimingRecord
    from tunecache.triton.autotuner import Autotuner

__all__ = ["Flow"]


class Flow:
    """A kernel's machinery, built at its first call: devices, configs, store, bench, pending.

    The Triton-visible results of a miss (`stats`, `nargs`, `configs_timings`, `bench_time`,
    `store_time`) are set on the kernel, as Triton's Autotuner keeps them.
    """

    def __init__(self, kernel: Autotuner, backend: Backend) -> None:
        self.kernel = kernel
        self.backend = backend
        options = kernel.options
        configs = options.configs
        if not configs:
            if backend.default_config is None:
                from tunecache.errors import BadArgumentError

                raise BadArgumentError("autotune needs at least one config")
            configs = [backend.default_config()]
        op = kernel.spec.op
        #: the configs by name, with Triton's pruning of them
        self.configs = ConfigSet(list(configs), options, op, backend.no_config_error)
        #: what every call launches when there is one config: no key, no store, as in Triton
        self.single: Choice | None = (
            self.configs.choice(self.configs.names[0]) if len(configs) == 1 else None
        )
        #: held by every miss (and by the background tuner while it tunes)
        self.lock = threading.RLock()
        #: device number -> its state (its table and its memo of answered calls)
        self.states: dict[int, DeviceState] = {}
        warn = WarnOnce()
        self.store = KernelStore(op, options, backend, warn)
        self.measurer = Measurer(kernel, op, self.configs, options, backend)
        self.pending = PendingKeys(
            op, options, backend, self.lock, warn, self.decide_pending, kernel.errors
        )

    def state(self, index: int) -> DeviceState:
        """Device `index`'s state, opened on its first call."""
        with self.lock:
            state = self.states.get(index)
            if state is None:
                state = self.states[index] = self.store.open(index)
            return state

    def miss(
        self,
        state: DeviceState,
        raw: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Choice:
        """The choice for a call whose Triton key this process has not answered yet."""
        kernel = self.kernel
        with self.lock:
            found = state.memo.get(raw)
            if found is not None:
                return found
            nargs = dict(zip(kernel.arg_names, args, strict=False))
            kernel.nargs = nargs
            try:
                name = self._decide(state, raw, Call(args, kwargs, nargs))
            finally:
                kernel.nargs = None
            choice = self.configs.choice(name)
            state.memo[raw] = choice
            return choice

    def _decide(self, state: DeviceState, raw: tuple[Any, ...], call: Call) -> str:
        """The config name for a key not answered yet in this process."""
        # A store this process's writer is creating reads as damaged until its schema commits
        # (the resolver would answer the heuristic for good): the miss waits for it. Only the
        # first process of a device ever does, for the time Cache takes to create the store.
        WRITER.quiet()
        stats = self.kernel.stats
        configs = self.configs
        legal = configs.legal(call.nargs, call.kwargs)
        only = configs.only(legal, call.nargs, call.kwargs)
        if only is not None:
            stats["single"] += 1
            return configs.name_of(only)
        legal_names = [configs.name_of(c) for c in legal]
        key = self.kernel.spec.make(call.args, call.kwargs)
        known = configs.names
        target = Target(state, key, known + tuple(n for n in legal_names if n not in known))
        answer = state.table.resolve(key, target.names, target.names[0])
        if answer.source == "exact" and answer.choice in legal_names:
            stats["exact"] += 1
            return answer.choice
        defer = self.kernel.options.unseen != "tune"
        # Read once: the same question decides between reuse and a bench below.
        old = self.store.old_entries(target) if answer.source != "exact" else []
        if old:
            name, deferred = self._settle(target, legal, call, defer, old=old)
            if not deferred:
                return name
            answer = Answer(name, "nearest", None, 0.0, key)
        elif not (defer and answer.source == "nearest" and answer.choice in legal_names):
            return self._settle(target, legal, call, False, old=old)[0]
        stats["borrowed"] += 1
        self.pending.hold(PendingItem(target, raw, answer, legal), call.args, call.kwargs)
        return answer.choice

    def decide_pending(self, item: PendingItem) -> None:
        """Tune a pending key on the copies of its arguments, and memoise its config."""
        assert item.args is not None and item.kwargs is not None
        WRITER.quiet()  # as _decide: the store's old entries are read first
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
