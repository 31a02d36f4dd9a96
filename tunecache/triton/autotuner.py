"""The autotuner behind `tunecache.triton.autotune`, with no Triton in it.

Everything Triton- or GPU-specific comes in through a `Backend` (`backend.py`); `gpu.py` builds
the GPU one, and the tests drive the very same machinery with a CPU kernel and a CPU backend.

A call resolves like this:

1. the Triton tuning key of the call (a tuple: the key arguments' values and the tensors'
   dtypes) is looked up in a per-device dict: a hit costs one dict lookup, no SQL;
2. on a miss, the legal configs (after `early_config_prune`) and the tunecache key are worked
   out, and `resolve.Table` answers from the store through stdlib sqlite3, never SQLAlchemy:
   an exact entry for this config list is used as it is;
3. an entry of the same key tuned against another config list is reused by the rule of
   `reuse.plan_reuse` (docs/triton.md), benching only what it must;
4. an unseen key within `max_distance` of a tuned one borrows its config at once (`unseen=
   "borrow"`) and is remembered as pending (`background.py`): `tune_pending()` tunes it later,
   or a daemon thread does (`unseen="background"`);
5. otherwise the key is tuned now, as Triton would (`measure.py`), and the result written with
   every config's timings (`state.py`; only here are SQLAlchemy and the bench imported).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any

from tunecache.candidates import checksum
from tunecache.errors import BadArgumentError
from tunecache.resolve import Answer
from tunecache.triton.backend import Backend, clone
from tunecache.triton.background import Pending, PendingItem, PendingKeys
from tunecache.triton.configs import Choice, ConfigSet, all_kwargs
from tunecache.triton.keys import KeySpec, kernel_revision
from tunecache.triton.measure import Call, Measurer
from tunecache.triton.options import Options
from tunecache.triton.reuse import SURVIVORS, Plan, kept_record, merged_record, plan_reuse
from tunecache.triton.state import DeviceState, KernelStore, Previous, Target, WarnOnce

if TYPE_CHECKING:
    from tunecache.codec import TimingRecord
    from tunecache.keys import Key

__all__ = ["Autotuner"]


def _kernel_arguments(fn: Any) -> list[str]:
    """The argument names of a `@triton.jit` kernel; BadArgumentError for anything else."""
    arg_names = getattr(fn, "arg_names", None)
    if not callable(getattr(fn, "run", None)) or arg_names is None:
        raise BadArgumentError(
            f"autotune decorates a @triton.jit kernel (with .run and .arg_names), got {fn!r}"
        )
    return list(arg_names)


class Autotuner:
    """A Triton kernel whose configs are tuned once per device and kept in the tunecache store.

    Launched like the kernel it wraps: `kernel[grid](*args, **kwargs)` or `kernel.run(...)`.
    """

    def __init__(self, fn: Any, options: Options, backend: Backend) -> None:
        self.arg_names = _kernel_arguments(fn)
        self.fn = fn
        self.base_fn = fn
        # The Python function under @triton.jit (and any @triton.heuristics): it names the key.
        while not isinstance(self.base_fn, FunctionType) and hasattr(self.base_fn, "fn"):
            self.base_fn = self.base_fn.fn
        for what, names in (
            ("reset_to_zero", options.reset_to_zero),
            ("restore_value", options.restore_value),
        ):
            stray = [n for n in names if n not in self.arg_names]
            if stray:
                raise BadArgumentError(f"{what} names {stray}, which are not kernel arguments")
        configs = options.configs
        if not configs:
            if backend.default_config is None:
                raise BadArgumentError("autotune needs at least one config")
            configs = [backend.default_config()]
        self.options = options
        self.backend = backend
        self.keys = list(options.key)
        op = options.name or getattr(self.base_fn, "__name__", None) or "kernel"
        revision = kernel_revision(fn, options.revision)
        self.spec = KeySpec(op, self.arg_names, options.key, options.dims, revision)
        self._configs = ConfigSet(list(configs), options, op)
        self._single = self._configs.choice(self._configs.names[0]) if len(configs) == 1 else None
        self.reset_to_zero = options.reset_to_zero
        self.restore_value = options.restore_value
        self.restore_copies: dict[str, Any] = {}
        self.pre_hook: Callable[..., Any] = options.pre_hook or self._default_pre_hook
        self.post_hook: Callable[..., Any] = options.post_hook or self._default_post_hook
        #: the config the last call launched (Triton's Autotuner.best_config)
        self.best_config: Any = None
        #: the arguments by name while a miss is resolved (as Triton's `nargs`)
        self.nargs: dict[str, Any] | None = None
        #: seconds the last tuning benched (first launches included) and then stored its result
        self.bench_time: float | None = None
        self.store_time: float | None = None
        #: each benched config's [median, p20, p80] in ms, as Triton's Autotuner keeps them
        self.configs_timings: dict[Any, list[float]] = {}
        #: how many distinct keys were answered each way, over the life of this kernel
        self.stats = dict.fromkeys(("exact", "borrowed", "reused", "tuned", "single"), 0)
        self._states: dict[int, DeviceState] = {}
        self._lock = threading.RLock()
        warn = WarnOnce()
        self._store = KernelStore(op, options, backend, warn)
        self._measurer = Measurer(self, op, self._configs, options, backend)
        self._pending = PendingKeys(op, options, backend, self._lock, warn, self._decide_pending)
        #: background tuning failures, as one line each
        self.errors: list[str] = self._pending.errors

    def __repr__(self) -> str:
        return f"<tunecache.triton.Autotuner {self.spec.op} configs={len(self.configs)}>"

    # -- what the key and the configs are -------------------------------------------------------

    @property
    def configs(self) -> list[Any]:
        """The configs, in order, duplicates dropped (Triton's `Autotuner.configs`)."""
        return self._configs.configs

    @configs.setter
    def configs(self, configs: list[Any]) -> None:
        self._configs.configs = configs

    @property
    def candidates(self) -> tuple[str, ...]:
        """The configs' names, in order: the candidate list stored with every entry."""
        return self._configs.names

    @property
    def checksum(self) -> str:
        """The checksum of the candidate list: entries tuned against another list differ."""
        return checksum(self._configs.names)

    def key(self, *args: Any, **kwargs: Any) -> Key:
        """The tunecache key a call with these arguments is tuned under."""
        return self.spec.make(args, kwargs)

    @property
    def cache(self) -> dict[tuple[Any, ...], Any]:
        """Tuning key -> config answered so far on the current device (Triton's `cache`)."""
        state = self._states.get(self.backend.current())
        return {} if state is None else {raw: c[0] for raw, c in state.memo.items()}

    # -- launching ------------------------------------------------------------------------------

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch the kernel with the config this call's key resolves to."""
        choice = self._single
        if choice is None:
            index = self.backend.current()
            state = self._states.get(index)
            if state is None:
                state = self._state(index)
            raw = self.spec.raw(args, kwargs)
            try:
                choice = state.memo.get(raw)
            except TypeError:
                raise BadArgumentError(
                    f"{self.spec.op}: a key argument's value is not hashable: {raw!r}"
                ) from None
            if choice is None:
                choice = self._miss(state, raw, args, kwargs)
        config, meta, hook = choice
        self.best_config = config
        if hook is not None:
            hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **meta})
        return self.fn.run(*args, **kwargs, **meta)

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every config this call could use, without running any (Triton's warmup)."""
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        try:
            return [
                self.fn.warmup(*args, **kwargs, **all_kwargs(c)) for c in self.prune_configs(kwargs)
            ]
        finally:
            self.nargs = None

    def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]:
        """The configs Triton would bench for the call whose `nargs` are set."""
        nargs = self.nargs or {}
        return self._configs.top_k(self._configs.legal(nargs, kwargs), nargs, kwargs)

    # -- pending keys ---------------------------------------------------------------------------

    @property
    def pending(self) -> list[Pending]:
        """Keys served a borrowed config and not tuned yet, oldest first."""
        return self._pending.listing()

    def tune_pending(self) -> list[Key]:
        """Tune every pending key now, on copies of its first call's arguments; return them.

        The copies were made when the key was borrowed; they are released once it is tuned.

        A key borrowed while `pending_limit` keys were already held kept no arguments: it
        forgets its borrowed answer instead, so its next call borrows again and is kept.
        """
        return self._pending.tune_all()

    def wait_pending(self, timeout: float | None = None) -> bool:
        """Wait until the background thread has tuned every key queued; False on timeout."""
        return self._pending.wait(timeout)

    # -- the miss path --------------------------------------------------------------------------

    def _state(self, index: int) -> DeviceState:
        with self._lock:
            state = self._states.get(index)
            if state is None:
                state = self._states[index] = self._store.open(index)
            return state

    def _miss(
        self,
        state: DeviceState,
        raw: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Choice:
        with self._lock:
            found = state.memo.get(raw)
            if found is not None:
                return found
            nargs = dict(zip(self.arg_names, args, strict=False))
            self.nargs = nargs
            try:
                name = self._decide(state, raw, Call(args, kwargs, nargs))
            finally:
                self.nargs = None
            choice = self._configs.choice(name)
            state.memo[raw] = choice
            return choice

    def _decide(self, state: DeviceState, raw: tuple[Any, ...], call: Call) -> str:
        """The config name for a key not answered yet in this process."""
        legal = self._configs.legal(call.nargs, call.kwargs)
        legal_names = [self._configs.name_of(c) for c in legal]
        if len(legal) == 1:
            self.stats["single"] += 1
            return legal_names[0]
        key = self.spec.make(call.args, call.kwargs)
        known = self._configs.names
        target = Target(state, key, known + tuple(n for n in legal_names if n not in known))
        answer = state.table.resolve(key, target.names, target.names[0])
        if answer.source == "exact" and answer.choice in legal_names:
            self.stats["exact"] += 1
            return answer.choice
        defer = self.options.unseen != "tune"
        if answer.source != "exact" and self._store.old_entries(target):
            name, deferred = self._settle(target, legal, call, defer)
            if not deferred:
                return name
            answer = Answer(name, "nearest", None, 0.0, key)
        elif not (defer and answer.source == "nearest" and answer.choice in legal_names):
            return self._settle(target, legal, call, False)[0]
        self.stats["borrowed"] += 1
        self._pending.hold(PendingItem(target, raw, answer, legal), call.args, call.kwargs)
        return answer.choice

    def _decide_pending(self, item: PendingItem) -> None:
        """Tune a pending key on the copies of its arguments, and memoise its config."""
        assert item.args is not None and item.kwargs is not None
        nargs = dict(zip(self.arg_names, item.args, strict=False))
        call = Call(item.args, item.kwargs, nargs)
        # Tuned on copies of the arguments: no launch follows on them, so no reset (one on
        # a background stream could still be queued when the copies are freed).
        name, _ = self._settle(item.target, item.legal, call, defer=False, reset=False)
        item.target.state.memo[item.raw] = self._configs.choice(name)

    # -- tuning ---------------------------------------------------------------------------------

    def _settle(
        self, target: Target, legal: list[Any], call: Call, defer: bool, reset: bool = True
    ) -> tuple[str, bool]:
        """Decide a key by reuse or by benching, and store it; returns (config name, deferred).

        With `defer`, a key whose reuse needs a bench keeps its old winner for now, pending.
        With `reset`, the caller's `reset_to_zero` arguments are zeroed after the bench, for
        the real launch that follows; copies tuned later need no reset.
        """
        legal_names = [self._configs.name_of(c) for c in legal]
        previous = self._store.previous(target, legal_names)
        if previous is None:
            benched = self._configs.top_k(legal, call.nargs, call.kwargs)
            return self._tune(target, legal_names, benched, call, None, reset), False
        plan = plan_reuse(legal_names, previous.names, previous.choice, previous.record, SURVIVORS)
        if plan.choice is not None:
            self.stats["reused"] += 1
            self._write(target, plan.choice, kept_record(plan, previous.record, previous.names))
            return plan.choice, False
        if defer and previous.choice in legal_names:
            return previous.choice, True
        benched = [self._configs.by_name[n] for n in plan.bench]
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
        """Bench `benched` on this call, store the winner with every config's timings (and
        the old ones `reuse` keeps), and return it."""
        self.stats["tuned"] += 1
        start = time.perf_counter()
        measured = self._measurer.measure(benched, call)
        self.configs_timings = measured.timings
        record = measured.record
        if reuse is not None:
            plan, previous = reuse
            record = merged_record(record, plan, previous.names, legal_names)
        self.bench_time = time.perf_counter() - start
        if measured.best is None:
            # Every config failed: as Triton, launch the first and let its error surface.
            return legal_names[0]
        self._write(target, measured.best, record)
        if reset:
            winner = self._configs.by_name[measured.best]
            self.pre_hook({**call.nargs, **call.kwargs, **all_kwargs(winner)}, reset_only=True)
        return measured.best

    def _write(self, target: Target, choice: str, record: TimingRecord) -> None:
        elapsed = self._store.write(target, choice, record)
        if elapsed is not None:
            self.store_time = elapsed

    # -- Triton's default hooks -----------------------------------------------------------------

    def _default_pre_hook(self, kwargs: dict[str, Any], reset_only: bool = False) -> None:
        for name in self.reset_to_zero:
            target = kwargs.get(name)
            if target is None:
                continue
            if callable(getattr(target, "zero_", None)):
                target.zero_()
            else:
                target[...] = 0
        if not reset_only:
            self.restore_copies = {
                name: clone(kwargs[name])
                for name in self.restore_value
                if kwargs.get(name) is not None
            }

    def _default_post_hook(self, kwargs: dict[str, Any], exception: BaseException | None) -> None:
        for name, saved in self.restore_copies.items():
            target = kwargs[name]
            if callable(getattr(target, "copy_", None)):
                target.copy_(saved)
            else:
                target[...] = saved
        self.restore_copies = {}
