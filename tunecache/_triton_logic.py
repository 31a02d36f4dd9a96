"""The autotuner behind `tunecache.triton.autotune`, with no Triton in it.

Everything Triton- or GPU-specific (the device identity, synchronisation, which exceptions mean
"this config does not fit", the L2 flush) comes in through a `Backend`; `tunecache.triton` builds
the GPU one, and the tests drive the very same machinery with a CPU kernel and a CPU backend.

A call resolves like this:

1. the Triton tuning key of the call (a tuple: the key arguments' values and the tensors'
   dtypes) is looked up in a per-device dict: a hit costs one dict lookup, no SQL;
2. on a miss, the legal configs (after `early_config_prune`) and the tunecache key are worked
   out, and `resolve.Table` answers from the store through stdlib sqlite3, never SQLAlchemy:
   an exact entry for this config list is used as it is;
3. an entry of the same key tuned against another config list is reused by the rule of
   `_triton_keys.plan_reuse` (docs/triton.md), benching only what it must;
4. an unseen key within `max_distance` of a tuned one borrows its config at once (`unseen=
   "borrow"`) and is remembered as pending: `tune_pending()` tunes it later, or a daemon thread
   does (`unseen="background"`);
5. otherwise the key is tuned now, as Triton would, and the result written with every config's
   timings (only here are SQLAlchemy and the bench imported).
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FunctionType
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache._triton_keys import KeySpec, Plan, config_name, plan_reuse
from tunecache.candidates import checksum
from tunecache.errors import BadArgumentError, TunecacheError, TunecacheWarning
from tunecache.resolve import DEFAULT_MAX_DISTANCE, Answer, Table, check_max_distance

if TYPE_CHECKING:
    from tunecache.cache import Cache
    from tunecache.codec import CandidateTiming, TimingRecord
    from tunecache.device import Device
    from tunecache.keys import Key

__all__ = ["UNSEEN", "Autotuner", "Backend", "Options", "Pending"]

#: what an unseen key gets: a tuned neighbour's config now (tuned later on request, or by a
#: daemon thread), or a tune right away as Triton does
UNSEEN = ("borrow", "background", "tune")

_PRUNE_KEYS = frozenset({"perf_model", "top_k", "early_config_prune"})
_BENCH_KEYS = frozenset(
    {
        "min_samples",
        "max_samples",
        "drop_ratio",
        "lower_bound",
        "bound_threshold",
        "budget",
        "sample_time",
        "warmup",
    }
)
#: survivors of an old record benched again beside added configs (plan_reuse)
SURVIVORS = 3

# A memo value: the config, the keyword arguments that launch it, and its own pre-hook.
_Choice = tuple[Any, dict[str, Any], Any]


def _clone(value: Any) -> Any:
    """A private copy of a tensor argument (torch `.clone()`, numpy `.copy()`); others as is."""
    if getattr(value, "dtype", None) is None:
        return value
    for method in ("clone", "copy"):
        fn = getattr(value, method, None)
        if callable(fn):
            return fn()
    return value


@contextlib.contextmanager
def _no_context(index: int, background: bool) -> Iterator[None]:
    yield


class Backend:
    """What the autotuner needs from the machine its kernels run on."""

    __slots__ = (
        "bench",
        "clone",
        "context",
        "current",
        "default_config",
        "device",
        "failures",
        "flush",
        "sync",
    )

    def __init__(
        self,
        *,
        device: Callable[[int], Device],
        current: Callable[[], int] = lambda: 0,
        sync: Callable[[], object] | None = None,
        failures: tuple[type[Exception], ...] = (),
        context: Callable[[int, bool], contextlib.AbstractContextManager[Any]] = _no_context,
        clone: Callable[[Any], Any] = _clone,
        flush: Callable[[int], Callable[[], object] | None] | None = None,
        bench: Mapping[str, Any] | None = None,
        default_config: Callable[[], Any] | None = None,
    ) -> None:
        #: the identity of device number `index`, for the store's path and rows
        self.device = device
        #: the number of the device the calling thread launches on
        self.current = current
        #: waits for the work this thread queued (None: work is synchronous)
        self.sync = sync
        #: exceptions that mean "this config cannot run here" (out of resources): recorded as
        #: the config's failure and skipped, as Triton does; anything else propagates
        self.failures = failures
        #: a context that makes device `index` current (and, for background tuning, a stream
        #: of the tuning thread's own)
        self.context = context
        #: a private copy of one argument (made when a key is borrowed), so that tuning it
        #: later never writes the caller's tensors
        self.clone = clone
        #: for device `index`, a call that evicts the caches before each timed launch, or None
        self.flush = flush
        #: default `tunecache.bench.bench` options for this machine
        self.bench = dict(bench or {})
        #: the config used when the caller gives none (Triton: one default `Config`)
        self.default_config = default_config


class Options:
    """The decorator's arguments, checked once, before any kernel is seen."""

    def __init__(
        self,
        configs: Sequence[Any],
        key: Sequence[str],
        prune_configs_by: Mapping[str, Any] | None = None,
        reset_to_zero: Sequence[str] | None = None,
        restore_value: Sequence[str] | None = None,
        pre_hook: Callable[..., Any] | None = None,
        post_hook: Callable[..., Any] | None = None,
        do_bench: Callable[..., Any] | None = None,
        *,
        max_distance: float = DEFAULT_MAX_DISTANCE,
        unseen: str = "borrow",
        dims: Sequence[str] | None = None,
        name: str | None = None,
        revision: str | None = "auto",
        root: Any = None,
        path: Any = None,
        bench: Mapping[str, Any] | None = None,
        pending_limit: int = 32,
    ) -> None:
        if isinstance(configs, str | bytes) or not isinstance(configs, Sequence):
            raise BadArgumentError(f"configs is a list of triton.Config, got {configs!r}")
        # Names first: a config that is not config-shaped fails here, with its position.
        names: dict[str, Any] = {}
        for i, config in enumerate(configs):
            try:
                names.setdefault(config_name(config), config)
            except BadArgumentError as error:
                raise BadArgumentError(f"config {i}: {error}") from None
        #: the configs with duplicates dropped (the first of equal names stays)
        self.configs = list(names.values())
        if isinstance(key, str) or not isinstance(key, Sequence):
            raise BadArgumentError(f"key is a list of argument names, got {key!r}")
        if not all(isinstance(k, str) for k in key):
            raise BadArgumentError(f"key is a list of argument names, got {list(key)!r}")
        self.key = list(key)
        self.perf_model, self.top_k, self.early_prune = _check_prune(prune_configs_by)
        self.reset_to_zero = _names_list(reset_to_zero, "reset_to_zero")
        self.restore_value = _names_list(restore_value, "restore_value")
        hooks = (("pre_hook", pre_hook), ("post_hook", post_hook), ("do_bench", do_bench))
        for what, hook in hooks:
            if hook is not None and not callable(hook):
                raise BadArgumentError(f"{what} must be callable, got {hook!r}")
        self.pre_hook, self.post_hook, self.do_bench = pre_hook, post_hook, do_bench
        if unseen not in UNSEEN:
            raise BadArgumentError(f"unseen must be one of {UNSEEN}, got {unseen!r}")
        self.unseen = unseen
        self.max_distance = check_max_distance(max_distance)
        if dims is not None and (
            isinstance(dims, str)
            or not isinstance(dims, Sequence)
            or not all(isinstance(d, str) for d in dims)
        ):
            raise BadArgumentError(f"dims is a list of key argument names, got {dims!r}")
        stray = [d for d in dims or () if d not in self.key]
        if stray:
            raise BadArgumentError(f"dims names {stray}, which are not in key {self.key}")
        self.dims = None if dims is None else list(dims)
        if name is not None and (not isinstance(name, str) or not name.strip("_")):
            raise BadArgumentError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        if revision is not None and (not isinstance(revision, str) or not revision):
            raise BadArgumentError(f"revision is 'auto', None or a non-empty string: {revision!r}")
        self.revision = revision
        self.root, self.path = root, path
        self.bench = _check_bench(bench)
        if (
            not isinstance(pending_limit, int)
            or isinstance(pending_limit, bool)
            or pending_limit < 0
        ):
            raise BadArgumentError(f"pending_limit is an int >= 0, got {pending_limit!r}")
        self.pending_limit = pending_limit


def _names_list(value: Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise BadArgumentError(f"{what} is a list of argument names, got {value!r}")
    return list(value)


def _check_prune(
    prune: Mapping[str, Any] | None,
) -> tuple[Callable[..., Any] | None, int | float, Callable[..., Any] | None]:
    if not prune:
        return None, 1.0, None
    if not isinstance(prune, Mapping):
        raise BadArgumentError(f"prune_configs_by is a dict, got {prune!r}")
    unknown = sorted(set(prune) - _PRUNE_KEYS)
    if unknown:
        raise BadArgumentError(
            f"prune_configs_by has unknown fields {unknown}; known: {sorted(_PRUNE_KEYS)}"
        )
    perf_model = prune.get("perf_model")
    early = prune.get("early_config_prune")
    for what, fn in (("perf_model", perf_model), ("early_config_prune", early)):
        if fn is not None and not callable(fn):
            raise BadArgumentError(f"prune_configs_by[{what!r}] must be callable, got {fn!r}")
    top_k = prune.get("top_k", 1.0)
    if isinstance(top_k, bool) or not (
        (isinstance(top_k, float) and 0 < top_k <= 1.0) or (isinstance(top_k, int) and top_k >= 1)
    ):
        raise BadArgumentError(
            f"prune_configs_by['top_k'] is a float in (0, 1] or an int >= 1, got {top_k!r}"
        )
    return perf_model, top_k, early


def _check_bench(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise BadArgumentError(f"bench is a dict of tunecache.bench.bench options, got {options!r}")
    unknown = sorted(set(options) - _BENCH_KEYS)
    if unknown:
        raise BadArgumentError(f"bench has unknown options {unknown}; known: {sorted(_BENCH_KEYS)}")
    return dict(options)


class Pending(NamedTuple):
    """A key served a borrowed config, waiting to be tuned."""

    key: Key
    #: the answer served: the neighbour's config, where it came from and how far it is
    answer: Answer
    #: whether the first call's arguments were kept, so it can be tuned without another call
    captured: bool


class _Item:
    """A pending key with what tuning it needs."""

    __slots__ = ("answer", "args", "index", "key", "kwargs", "legal", "names", "raw")

    def __init__(
        self,
        index: int,
        raw: tuple[Any, ...],
        key: Key,
        answer: Answer,
        names: tuple[str, ...],
        legal: list[Any],
        call: tuple[tuple[Any, ...], dict[str, Any]] | None,
    ) -> None:
        self.index, self.raw, self.key, self.answer = index, raw, key, answer
        self.names, self.legal = names, legal
        self.args: tuple[Any, ...] | None = None if call is None else call[0]
        self.kwargs: dict[str, Any] | None = None if call is None else call[1]


class _State:
    """One device's view: its identity, its table, its memo of answered calls."""

    __slots__ = ("cache", "device", "index", "memo", "table")

    def __init__(self, index: int, device: Device, table: Table) -> None:
        self.index = index
        self.device = device
        self.table = table
        #: Triton tuning key -> the choice to launch
        self.memo: dict[tuple[Any, ...], _Choice] = {}
        #: the writable cache, opened on the first write; False once it failed to open
        self.cache: Cache | bool | None = None


def _all_kwargs(config: Any) -> dict[str, Any]:
    """The keyword arguments that launch a config: Triton's `Config.all_kwargs()`."""
    method = getattr(config, "all_kwargs", None)
    if callable(method):
        return dict(method())
    out = dict(config.kwargs)
    for field in ("num_warps", "num_ctas", "num_stages", "maxnreg", "ir_override"):
        value = getattr(config, field, None)
        if value is not None:
            out[field] = value
    return out


def _quantiles_ms(samples: Sequence[float]) -> list[float]:
    """Median, 20th and 80th percentile in milliseconds: Triton's `configs_timings` form."""
    if not samples:
        return [math.inf, math.inf, math.inf]
    ordered = sorted(samples)
    n = len(ordered) - 1

    def at(p: float) -> float:
        return ordered[round(p * n)] * 1e3

    return [at(0.5), at(0.2), at(0.8)]


class Autotuner:
    """A Triton kernel whose configs are tuned once per device and kept in the tunecache store.

    Launched like the kernel it wraps: `kernel[grid](*args, **kwargs)` or `kernel.run(...)`.
    """

    def __init__(self, fn: Any, options: Options, backend: Backend) -> None:
        arg_names = getattr(fn, "arg_names", None)
        if not callable(getattr(fn, "run", None)) or arg_names is None:
            raise BadArgumentError(
                f"autotune decorates a @triton.jit kernel (with .run and .arg_names), got {fn!r}"
            )
        self.fn = fn
        self.base_fn = fn
        # The Python function under @triton.jit (and any @triton.heuristics): it names the key.
        while not isinstance(self.base_fn, FunctionType) and hasattr(self.base_fn, "fn"):
            self.base_fn = self.base_fn.fn
        self.arg_names = list(arg_names)
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
        self.configs = list(configs)
        self.keys = list(options.key)
        op = options.name or getattr(self.base_fn, "__name__", None) or "kernel"
        self.spec = KeySpec(op, self.arg_names, options.key, options.dims, self._revision(fn))
        self._names = tuple(config_name(c) for c in self.configs)
        self._by_name: dict[str, Any] = dict(zip(self._names, self.configs, strict=True))
        self._choices: dict[str, _Choice] = {}
        self._single = self._choice(self._names[0]) if len(self.configs) == 1 else None
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
        self._states: dict[int, _State] = {}
        self._lock = threading.RLock()
        self._pending: dict[tuple[int, tuple[Any, ...]], _Item] = {}
        self._queue: deque[_Item] = deque()
        self._busy = 0
        self._idle = threading.Condition(threading.Lock())
        self._worker: threading.Thread | None = None
        self._warned: set[str] = set()
        #: background tuning failures, as one line each
        self.errors: list[str] = []

    def _revision(self, fn: Any) -> str | None:
        """The signature token that ties entries to this kernel's code: a digest of its source
        (`revision="auto"`), the caller's own revision string, or none."""
        from tunecache._triton_keys import escape, revision_token

        revision = self.options.revision
        if revision != "auto":
            return None if revision is None else "R" + escape(revision)
        inner = fn
        while inner is not None and getattr(inner, "src", None) is None:
            inner = getattr(inner, "fn", None)
        source = getattr(inner, "src", None)
        return revision_token(source) if isinstance(source, str) else None

    def __repr__(self) -> str:
        return f"<tunecache.triton.Autotuner {self.spec.op} configs={len(self.configs)}>"

    # -- what the key and the configs are -------------------------------------------------------

    @property
    def candidates(self) -> tuple[str, ...]:
        """The configs' names, in order: the candidate list stored with every entry."""
        return self._names

    @property
    def checksum(self) -> str:
        """The checksum of the candidate list: entries tuned against another list differ."""
        return checksum(self._names)

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
                self.fn.warmup(*args, **kwargs, **_all_kwargs(c))
                for c in self.prune_configs(kwargs)
            ]
        finally:
            self.nargs = None

    def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]:
        """The configs Triton would bench for the call whose `nargs` are set."""
        nargs = self.nargs or {}
        return self._top_k(self._legal(nargs, kwargs), nargs, kwargs)

    # -- pending keys ---------------------------------------------------------------------------

    @property
    def pending(self) -> list[Pending]:
        """Keys served a borrowed config and not tuned yet, oldest first."""
        with self._lock:
            return [Pending(i.key, i.answer, i.args is not None) for i in self._pending.values()]

    def tune_pending(self) -> list[Key]:
        """Tune every pending key now, on copies of its first call's arguments; return them.

        The copies were made when the key was borrowed; they are released once it is tuned.

        A key borrowed while `pending_limit` keys were already held kept no arguments: it
        forgets its borrowed answer instead, so its next call borrows again and is kept.
        """
        with self._lock:
            items = list(self._pending.values())
            for item in items:
                if item.args is None:
                    self._pending.pop((item.index, item.raw), None)
                    state = self._states.get(item.index)
                    if state is not None:
                        state.memo.pop(item.raw, None)
        return [item.key for item in items if item.args is not None and self._tune_item(item)]

    def wait_pending(self, timeout: float | None = None) -> bool:
        """Wait until the background thread has tuned every key queued; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._queue and not self._busy, timeout)

    # -- the miss path --------------------------------------------------------------------------

    def _state(self, index: int) -> _State:
        with self._lock:
            state = self._states.get(index)
            if state is None:
                device = self.backend.device(index)
                table = Table.open(
                    device=device,
                    root=self.options.root,
                    path=self.options.path,
                    use="all",
                    max_distance=self.options.max_distance,
                )
                state = self._states[index] = _State(index, device, table)
            return state

    def _choice(self, name: str) -> _Choice:
        found = self._choices.get(name)
        if found is None:
            config = self._by_name[name]
            found = self._choices[name] = (
                config,
                _all_kwargs(config),
                getattr(config, "pre_hook", None),
            )
        return found

    def _miss(
        self, state: _State, raw: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Choice:
        with self._lock:
            found = state.memo.get(raw)
            if found is not None:
                return found
            nargs = dict(zip(self.arg_names, args, strict=False))
            self.nargs = nargs
            try:
                name = self._decide(state, raw, args, kwargs, nargs)
            finally:
                self.nargs = None
            choice = self._choice(name)
            state.memo[raw] = choice
            return choice

    def _decide(
        self,
        state: _State,
        raw: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        nargs: dict[str, Any],
    ) -> str:
        """The config name for a key not answered yet in this process."""
        legal = self._legal(nargs, kwargs)
        legal_names = [self._name_of(c) for c in legal]
        if len(legal) == 1:
            self.stats["single"] += 1
            return legal_names[0]
        key = self.spec.make(args, kwargs)
        names = self._names + tuple(n for n in legal_names if n not in self._names)
        answer = state.table.resolve(key, names, names[0])
        if answer.source == "exact" and answer.choice in legal_names:
            self.stats["exact"] += 1
            return answer.choice
        defer = self.options.unseen != "tune"
        if answer.source != "exact" and self._old_entries(state, key, checksum(names)):
            name, deferred = self._settle(state, key, names, legal, args, kwargs, nargs, defer)
            if not deferred:
                return name
            answer = Answer(name, "nearest", None, 0.0, key)
        elif not (defer and answer.source == "nearest" and answer.choice in legal_names):
            return self._settle(state, key, names, legal, args, kwargs, nargs, False)[0]
        self._borrow(state, raw, key, answer, names, legal, args, kwargs)
        return answer.choice

    def _name_of(self, config: Any) -> str:
        for name, known in self._by_name.items():
            if known is config:
                return name
        name = config_name(config)
        # A config early_config_prune made up: a candidate of the keys that meet it.
        self._by_name.setdefault(name, config)
        return name

    def _legal(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[Any]:
        early = self.options.early_prune
        if early is None:
            return self.configs
        legal = list(early(self.configs, nargs, **kwargs))
        if not legal:
            raise BadArgumentError(
                f"{self.spec.op}: early_config_prune returned no config; it must keep one"
            )
        return legal

    def _top_k(self, legal: list[Any], nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[Any]:
        model = self.options.perf_model
        if model is None:
            return legal
        top_k = self.options.top_k
        if isinstance(top_k, float):
            # Triton 3.6 takes int(len * top_k), which can be 0 and then crashes; keep one.
            top_k = max(1, int(len(self.configs) * top_k))
        if len(legal) <= top_k:
            return legal
        estimates = [model(**nargs, **kwargs, **_all_kwargs(c)) for c in legal]
        order = sorted(range(len(legal)), key=lambda i: estimates[i])
        return [legal[i] for i in order[:top_k]]

    def _old_entries(
        self, state: _State, key: Key, sum_: str
    ) -> list[tuple[int, tuple[str, ...], str]]:
        """This key's entries tuned against other config lists, newest first, as (entry id,
        config list, choice). Stdlib sqlite3 through the read contract: this runs before a
        key is borrowed, which must stay fast."""
        path = state.table.path
        if path is None or not path.exists():
            return []
        try:
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error:
            return []
        try:
            rows = conn.execute(
                "SELECT entry_id, checksum, choice FROM read_entries_v1 WHERE key = ?"
                " AND device = ? AND checksum != ? AND status != 'rejected'"
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

    def _borrow(
        self,
        state: _State,
        raw: tuple[Any, ...],
        key: Key,
        answer: Answer,
        names: tuple[str, ...],
        legal: list[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.stats["borrowed"] += 1
        held = sum(1 for i in self._pending.values() if i.args is not None)
        call = self._snapshot(args, kwargs) if held < self.options.pending_limit else None
        if call is None:
            self._warn_once(
                "pending_limit",
                f"tunecache: {self.spec.op} holds {held} pending keys' arguments "
                "(pending_limit); later borrowed keys keep none until tune_pending() runs",
            )
        item = _Item(state.index, raw, key, answer, names, legal, call)
        self._pending[state.index, raw] = item
        if self.options.unseen == "background" and call is not None:
            self._enqueue(item)

    # -- tuning ---------------------------------------------------------------------------------

    def _settle(
        self,
        state: _State,
        key: Key,
        names: tuple[str, ...],
        legal: list[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        nargs: dict[str, Any],
        defer: bool,
        reset: bool = True,
    ) -> tuple[str, bool]:
        """Decide a key by reuse or by benching, and store it; returns (config name, deferred).

        With `defer`, a key whose reuse needs a bench keeps its old winner for now, pending.
        With `reset`, the caller's `reset_to_zero` arguments are zeroed after the bench, for
        the real launch that follows; copies tuned later need no reset.
        """
        legal_names = [self._name_of(c) for c in legal]
        previous = self._previous(state, key, names, legal_names)
        plan = None
        if previous is not None:
            old_names, old_choice, record = previous
            plan = plan_reuse(legal_names, old_names, old_choice, record, SURVIVORS)
            if plan.choice is not None:
                self.stats["reused"] += 1
                self._write(state, key, names, plan.choice, self._kept(plan, record, old_names))
                return plan.choice, False
            if defer and old_choice in legal_names:
                return old_choice, True
            benched = [self._by_name[n] for n in plan.bench]
        else:
            benched = self._top_k(legal, nargs, kwargs)
        self.stats["tuned"] += 1
        start = time.perf_counter()
        best, record = self._measure(benched, args, kwargs, nargs)
        if plan is not None and previous is not None:
            record = self._merged(record, plan, previous[0], legal_names)
        self.bench_time = time.perf_counter() - start
        if best is None:
            # Every config failed: as Triton, launch the first and let its error surface.
            return legal_names[0], False
        self._write(state, key, names, best, record)
        if reset:
            winner = self._by_name[best]
            self.pre_hook({**nargs, **kwargs, **_all_kwargs(winner)}, reset_only=True)
        return best, False

    def _previous(
        self, state: _State, key: Key, names: tuple[str, ...], legal: Sequence[str]
    ) -> tuple[tuple[str, ...], str, TimingRecord | None] | None:
        """Of this key's entries tuned against other config lists, the one whose list covers
        the most legal configs (the newest of equals): its list, its choice and its record."""
        entries = self._old_entries(state, key, checksum(names))
        if not entries:
            return None
        cache = self._cache(state)
        if cache is None:
            return None
        wanted = set(legal)
        # max() keeps the first of equals: the entries come newest first.
        entry_id, old_names, choice = max(entries, key=lambda e: len(wanted.intersection(e[1])))
        try:
            return old_names, choice, cache.record(entry_id)
        except TunecacheError as error:
            self._warn_once("read", f"tunecache: cannot read {self.spec.op}'s old entry: {error}")
            return None

    def _kept(
        self, plan: Plan, record: TimingRecord | None, old_names: tuple[str, ...]
    ) -> TimingRecord:
        from tunecache.codec import TimingRecord

        settings = dict(record.settings) if record is not None else {}
        settings.update(reused_from=checksum(old_names), reuse=plan.reason)
        env = dict(record.env) if record is not None else {}
        return TimingRecord(candidates=plan.keep, settings=settings, env=env)

    def _merged(
        self,
        record: TimingRecord,
        plan: Plan,
        old_names: tuple[str, ...],
        legal_names: list[str],
    ) -> TimingRecord:
        from tunecache.codec import TimingRecord

        fresh = {c.name: c for c in record.candidates}
        kept = {c.name: c for c in plan.keep}
        candidates = tuple(fresh.get(n) or kept[n] for n in legal_names if n in fresh or n in kept)
        settings = dict(record.settings)
        settings.update(reused_from=checksum(old_names), reuse=plan.reason)
        return TimingRecord(candidates=candidates, settings=settings, env=record.env)

    def _measure(
        self,
        configs: list[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        nargs: dict[str, Any],
    ) -> tuple[str | None, TimingRecord]:
        """Bench configs on this call's arguments: every config's timings, and the fastest."""
        from tunecache import bench as _bench
        from tunecache.codec import CandidateTiming, TimingRecord

        backend = self.backend
        calls = {self._name_of(c): self._kernel_call(c, args, kwargs, nargs) for c in configs}
        errors: dict[str, str] = {}
        # One untimed launch of each config first: it compiles and loads the kernel (seconds,
        # not microseconds), so the bench's first timed call is a warm one; a config that
        # does not fit fails here, as in Triton, and is recorded and skipped.
        for name, call in calls.items():
            try:
                call()
                if backend.sync is not None:
                    backend.sync()
            except backend.failures as error:
                errors[name] = _bench.error_text(error)
        runnable = {n: c for n, c in calls.items() if n not in errors}
        settings: dict[str, Any] = {"kernel": self.spec.op, "configs": len(self.configs)}
        if not runnable:
            record = TimingRecord(
                candidates=tuple(CandidateTiming(n, error=errors[n]) for n in calls),
                settings=settings,
            )
            self.configs_timings = {c: _quantiles_ms(()) for c in configs}
            return None, record
        if self.options.do_bench is not None:
            measured, best = self._timed_by_user(runnable)
            settings["timer"] = "do_bench"
        else:
            measured, best, more = self._benched(runnable, args)
            settings.update(more)
        timings = tuple(
            CandidateTiming(n, error=errors[n]) if n in errors else measured[n]
            for n in calls
            if n in errors or n in measured
        )
        record = TimingRecord(candidates=timings, settings=settings, env=_bench.environment())
        self.configs_timings = {
            self._by_name[c.name]: _quantiles_ms(c.samples if c.error is None else ())
            for c in timings
        }
        return best, record

    def _benched(
        self, runnable: dict[str, Callable[[], None]], args: tuple[Any, ...]
    ) -> tuple[dict[str, CandidateTiming], str | None, dict[str, Any]]:
        from tunecache import bench as _bench

        backend = self.backend
        flush = backend.flush(backend.current()) if backend.flush is not None else None
        unexpected: list[BaseException] = []

        def guarded(call: Callable[[], None]) -> Callable[[], None]:
            def timed() -> None:
                if flush is not None:
                    flush()
                try:
                    call()
                except backend.failures:
                    raise
                except Exception as error:
                    unexpected.append(error)
                    raise

            return timed

        options = {**backend.bench, **self.options.bench}
        candidates = {n: guarded(c) for n, c in runnable.items()}
        result = _bench.bench(candidates, sync=backend.sync, **options)
        finished = False
        if not result.complete and not unexpected:
            # The budget ran out before every config had its samples (slow kernels: about
            # 8 ms a launch with 12 configs). A key is tuned once per device, and a ranking
            # with holes would be served for good: finish the measurement without the budget.
            result = _bench.bench(candidates, sync=backend.sync, **{**options, "budget": None})
            finished = True
        if unexpected:
            raise unexpected[0]
        measured = {c.name: c for c in result.record.candidates}
        more = {k: v for k, v in result.record.settings.items()}
        more["budget_overrun"] = finished
        more["l2_flush"] = flush is not None
        return measured, result.best, more

    def _timed_by_user(
        self, runnable: dict[str, Callable[[], None]]
    ) -> tuple[dict[str, CandidateTiming], str | None]:
        """Time each config with the caller's `do_bench(fn, quantiles=...)`, as Triton does."""
        from tunecache.codec import CandidateTiming

        do_bench = self.options.do_bench
        assert do_bench is not None
        measured: dict[str, CandidateTiming] = {}
        medians: dict[str, float] = {}
        for name, call in runnable.items():
            try:
                got = do_bench(call, quantiles=(0.5, 0.2, 0.8))
            except self.backend.failures as error:
                from tunecache.bench import error_text

                measured[name] = CandidateTiming(name, error=error_text(error))
                continue
            values = [float(v) for v in (got if isinstance(got, list | tuple) else [got])]
            if not values or not all(math.isfinite(v) and v >= 0 for v in values):
                measured[name] = CandidateTiming(name, error=f"do_bench returned {got!r}")
                continue
            # Milliseconds, as Triton's timers return them; the record keeps seconds. The
            # median of [p20, p50, p80] is the p50 the timer reported.
            samples = sorted(v / 1e3 for v in values)
            medians[name] = values[0] / 1e3
            measured[name] = CandidateTiming(name, samples=tuple(samples))
        best = min(medians, key=lambda n: medians[n]) if medians else None
        return measured, best

    def _kernel_call(
        self, config: Any, args: tuple[Any, ...], kwargs: dict[str, Any], nargs: dict[str, Any]
    ) -> Callable[[], None]:
        """One launch of `config` on these arguments, with the hooks around it (Triton's
        `kernel_call`)."""
        conflicts = kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise BadArgumentError(
                f"{self.spec.op}: {sorted(conflicts)} are passed by the caller and set by the "
                "configs; don't pass auto-tuned meta-parameters"
            )
        current = {**kwargs, **_all_kwargs(config)}
        full_nargs = {**nargs, **current}
        own_hook = getattr(config, "pre_hook", None)

        def call() -> None:
            if own_hook:
                own_hook(full_nargs)
            self.pre_hook(full_nargs)
            try:
                self.fn.run(*args, **current)
            except Exception as error:
                self.post_hook(full_nargs, exception=error)
                raise
            self.post_hook(full_nargs, exception=None)

        return call

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
                name: _clone(kwargs[name])
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

    # -- the store ------------------------------------------------------------------------------

    def _cache(self, state: _State) -> Cache | None:
        if state.cache is None:
            from tunecache.cache import Cache

            try:
                state.cache = Cache.open(
                    device=state.device, root=self.options.root, path=self.options.path
                )
            except TunecacheError as error:
                state.cache = False
                self._warn_once(
                    "open", f"tunecache: {self.spec.op}'s tunings stay in memory: {error}"
                )
        return state.cache if not isinstance(state.cache, bool) else None

    def _write(
        self, state: _State, key: Key, names: tuple[str, ...], choice: str, record: TimingRecord
    ) -> None:
        """Store a decision with its record (one atomic write), then see it in the table."""
        start = time.perf_counter()
        cache = self._cache(state)
        if cache is None:
            return
        try:
            # One transaction, no `runs` row: a key is tuned inside a user's first call, where
            # two more write transactions per key are time the user waits for.
            cache.put(key, choice=choice, candidates=names, record=record)
        except TunecacheError as error:
            self._warn_once("write", f"tunecache: {self.spec.op}'s tuning not stored: {error}")
            return
        old, state.table = state.table, state.table.reload()
        old.close()
        self.store_time = time.perf_counter() - start

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            warnings.warn(message, TunecacheWarning, stacklevel=4)

    # -- pending keys, tuned later --------------------------------------------------------------

    def _snapshot(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Private copies of a call's tensor arguments, made now, in the caller's thread and
        stream: the pending key is benched later on the data it was called with, and the
        caller's tensors are never written by that bench. A tensor passed twice is copied
        once, so the copies alias as the originals did."""
        clone = self.backend.clone
        copies: dict[int, Any] = {}

        def copy(value: Any) -> Any:
            found = copies.get(id(value))
            if found is None:
                found = copies[id(value)] = clone(value)
            return found

        return tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()}

    def _tune_item(self, item: _Item, background: bool = False) -> bool:
        """Tune one pending key on the copies of its arguments; True once it is decided."""
        state = self._states[item.index]
        assert item.args is not None and item.kwargs is not None
        args, kwargs = item.args, item.kwargs
        with self.backend.context(item.index, background), self._lock:
            if (item.index, item.raw) not in self._pending:
                return False
            nargs = dict(zip(self.arg_names, args, strict=False))
            # Tuned on copies of the arguments: no launch follows on them, so no reset (one on
            # a background stream could still be queued when the copies are freed).
            name, _ = self._settle(
                state, item.key, item.names, item.legal, args, kwargs, nargs, False, reset=False
            )
            state.memo[item.raw] = self._choice(name)
            del self._pending[item.index, item.raw]
        return True

    def _enqueue(self, item: _Item) -> None:
        with self._idle:
            self._queue.append(item)
            self._idle.notify_all()
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name=f"tunecache-{self.spec.op}", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            with self._idle:
                self._idle.wait_for(lambda: bool(self._queue))
                item = self._queue.popleft()
                self._busy += 1
            try:
                self._tune_item(item, background=True)
            except Exception as error:
                self.errors.append(f"{item.key.text}: {type(error).__name__}: {error}")
                self._warn_once("background", f"tunecache: background tuning failed: {error}")
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
