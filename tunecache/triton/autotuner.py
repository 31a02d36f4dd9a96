"""`tunecache.triton.autotune`, its arguments checked, and the kernel it returns: Triton's
launch syntax and attributes, no Triton in it.

The decorator checks its arguments at once (`Options`: every check raises `BadArgumentError`
with a one-line message, in the order the arguments are listed), and applied to a kernel it
builds an `Autotuner` that remembers them, checked against the kernel's. Making and applying it
loads this module alone, with its package (tests/triton/test_decorator.py holds the list; an
exception class loads when a bad argument raises one): the arguments' checks live here, not in
a module of their own, because each module a warm process imports costs its first call about
0.15 ms on the H200's host. The GPU backend (`gpu.gpu_backend`, Triton and torch), the config
names, the key's form, the store and the bench come with the first call.

Everything Triton- or GPU-specific comes in through a `Backend` (`backend.py`); `gpu.py` builds
the GPU one, and the tests drive the very same machinery with a CPU kernel and a CPU backend.

Applying the decorator builds an `Autotuner` and nothing else: the arguments are checked against
the kernel's (so a bad one fails there, never on a launch), and the rest (the backend, the
configs by name, the store, the bench, and the modules behind them) is set up by the first call,
once (`flow.Flow`, which also holds the path of a miss; `warm.WarmStart` before it). A call of a
key answered before is one dict lookup and the kernel's own launch.
"""

from __future__ import annotations

import math
import sys
import time
from _thread import RLock  # threading costs ~2 ms to import; its RLock is this one
from collections.abc import Callable, Mapping, Sequence
from types import FunctionType, MappingProxyType

# Not `typing` at run time, nor the errors' module: applying the decorator loads neither.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeGuard

    from tunecache.errors import BadArgumentError
    from tunecache.keys import Key
    from tunecache.triton.backend import Backend
    from tunecache.triton.background import Pending
    from tunecache.triton.configs import Choice
    from tunecache.triton.flow import Flow
    from tunecache.triton.keys import KeySpec
    from tunecache.triton.warm import Source, WarmStart

__all__ = [
    "DEFAULTS",
    "DEFAULT_MAX_DISTANCE",
    "UNSEEN",
    "Autotuner",
    "Options",
    "autotune",
    "bad_argument",
    "check_max_distance",
    "key_problem",
]

# -- the decorator's arguments, checked -----------------------------------------------------

#: `max_distance`'s default: the resolver's own (`tunecache.resolve.DEFAULT_MAX_DISTANCE`,
#: which a test keeps equal), spelled out so that making the decorator imports no resolver
DEFAULT_MAX_DISTANCE = 1.0

#: what an unseen key gets: a tuned neighbour's config now (tuned later on request, or by a
#: daemon thread), or a tune right away as Triton does
UNSEEN = ("borrow", "background", "tune")


def key_problem(op: str, arg_names: Sequence[str], key: Sequence[str]) -> str | None:
    """What is wrong with `key` as the tuning key of kernel `op` with these arguments (a name
    that is no argument, or one named twice), in one line, or None."""
    names = list(arg_names)
    unknown = [k for k in key if k not in names]
    if unknown:
        return f"key names {unknown}, which are not arguments of {op} (its arguments: {names})"
    if len(set(key)) != len(key):
        return f"key names an argument twice: {list(key)}"
    return None


def bad_argument(message: str) -> BadArgumentError:
    """The BadArgumentError saying `message`, its module imported now: making and applying the
    decorator define no exception class unless an argument is bad."""
    from tunecache.errors import BadArgumentError

    return BadArgumentError(message)


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


#: every argument of `autotune` after `configs` and `key`, with its default there (Triton's
#: first, then ours): the one list of them that `Options` knows
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "prune_configs_by": None,
        "reset_to_zero": None,
        "restore_value": None,
        "pre_hook": None,
        "post_hook": None,
        "warmup": None,
        "rep": None,
        "use_cuda_graph": False,
        "do_bench": None,
        "cache_results": False,
        "max_distance": DEFAULT_MAX_DISTANCE,
        "unseen": "borrow",
        "dims": None,
        "name": None,
        "revision": "auto",
        "root": None,
        "path": None,
        "device": None,
        "bench": None,
        "flush_l2": True,
        "pending_limit": 32,
        "check_outputs": False,
        "check_tolerance": None,
    }
)


class Options:
    """The decorator's arguments, checked once, before any kernel is seen.

    `arguments` are `autotune`'s own, by name (`DEFAULTS` for those not given); they are
    checked in the order `autotune` lists them, Triton's `warmup` and `rep` (accepted, and
    ignored) and the GPU backend's `device` and `flush_l2` last.
    """

    def __init__(self, configs: Sequence[Any], key: Sequence[str], **arguments: Any) -> None:
        unknown = sorted(set(arguments) - set(DEFAULTS))
        if unknown:
            raise TypeError(f"Options() got unexpected keyword arguments: {', '.join(unknown)}")
        given = {**DEFAULTS, **arguments}
        #: the configs as given, each checked to be config-shaped
        self.given_configs = _check_configs(configs)
        self._configs: dict[str, Any] | None = None
        self.key = _check_key(key)
        self.perf_model, self.top_k, self.early_prune = _check_prune(given["prune_configs_by"])
        self.reset_to_zero = _names_list(given["reset_to_zero"], "reset_to_zero")
        self.restore_value = _names_list(given["restore_value"], "restore_value")
        for what in ("pre_hook", "post_hook", "do_bench"):
            if given[what] is not None and not callable(given[what]):
                raise bad_argument(f"{what} must be callable, got {given[what]!r}")
        self.pre_hook: Callable[..., Any] | None = given["pre_hook"]
        self.post_hook: Callable[..., Any] | None = given["post_hook"]
        self.do_bench: Callable[..., Any] | None = given["do_bench"]
        self.unseen: str = _check_unseen(given["unseen"])
        self.max_distance = check_max_distance(given["max_distance"])
        self.dims = _check_dims(given["dims"], self.key)
        self.name: str | None = _check_name(given["name"])
        self.revision: str | None = _check_revision(given["revision"])
        self.root, self.path = given["root"], given["path"]
        self.bench = _check_bench(given["bench"])
        self.pending_limit: int = _check_pending_limit(given["pending_limit"])
        _check_milliseconds(given["warmup"], given["rep"])
        #: the GPU identity to use instead of the detected one (a `tunecache.Device`), or None
        self.device = _check_device(given["device"])
        #: whether the GPU backend evicts the L2 cache before each timed launch
        self.flush_l2: bool = _check_flush_l2(given["flush_l2"])
        #: the arguments whose values each config's output is checked on (True: every tensor
        #: argument; [] : none), and the relative tolerance for floats (None: the dtype's)
        self.check_outputs: bool | list[str] = _check_outputs(given["check_outputs"])
        self.check_tolerance: float | None = _check_tolerance(given["check_tolerance"])

    @property
    def named_configs(self) -> dict[str, Any]:
        """The configs by name, in order, duplicates dropped (the first of equal names stays;
        a copy): named when first asked, by the kernel's first call, so that applying the
        decorator names none."""
        if self._configs is None:
            from tunecache.triton.warm import config_name

            names: dict[str, Any] = {}
            for config in self.given_configs:
                names.setdefault(config_name(config), config)
            self._configs = names
        return dict(self._configs)


def _real(value: object) -> TypeGuard[int | float]:
    """`tunecache.checks.is_real`, which loads only for a value that is not a float (a float
    is always one: the defaults are, and making the decorator loads one module less)."""
    if type(value) is float:
        return True
    from tunecache.checks import is_real

    return is_real(value)


def check_max_distance(value: object) -> float:
    """A nearest-shape cap as a float, or BadArgumentError: the resolver's rule and words
    (`tunecache.resolve.check_max_distance`, which a test holds to the same answers)."""
    if not _real(value) or not 0 <= value < math.inf:
        raise bad_argument(
            f"max_distance is a finite number >= 0 (0 borrows nothing), got {value!r}"
        )
    return float(value)


def _check_unseen(unseen: Any) -> Any:
    if unseen not in UNSEEN:
        raise bad_argument(f"unseen must be one of {UNSEEN}, got {unseen!r}")
    return unseen


def _check_name(name: Any) -> Any:
    if name is not None and (not isinstance(name, str) or not name.strip("_")):
        raise bad_argument(f"name must be a non-empty string, got {name!r}")
    return name


def _check_revision(revision: Any) -> Any:
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise bad_argument(f"revision is 'auto', None or a non-empty string: {revision!r}")
    return revision


def _check_pending_limit(limit: Any) -> Any:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise bad_argument(f"pending_limit is an int >= 0, got {limit!r}")
    return limit


def _check_milliseconds(warmup: Any, rep: Any) -> None:
    # Triton's own timings: accepted for compatibility, and ignored (the bench stops on
    # evidence, within `bench["budget"]`).
    for what, value in (("warmup", warmup), ("rep", rep)):
        if value is not None and (not _real(value)):
            raise bad_argument(f"{what} is a number of milliseconds, got {value!r}")


def _check_flush_l2(flush_l2: Any) -> Any:
    if not isinstance(flush_l2, bool):
        raise bad_argument(f"flush_l2 is a bool, got {flush_l2!r}")
    return flush_l2


def _check_outputs(value: Any) -> bool | list[str]:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise bad_argument(
            f"check_outputs is a bool or a non-empty list of argument names, got {value!r}"
        )
    return _names_list(value, "check_outputs")


def _check_tolerance(value: Any) -> Any:
    if value is not None and (not _real(value) or not 0 <= value < math.inf):
        raise bad_argument(f"check_tolerance is None or a finite number >= 0, got {value!r}")
    return None if value is None else float(value)


def _check_configs(configs: Sequence[Any]) -> list[Any]:
    if isinstance(configs, str | bytes) or not isinstance(configs, Sequence):
        raise bad_argument(f"configs is a list of triton.Config, got {configs!r}")
    # A config that is not config-shaped fails here, with its position (`warm.config_name`,
    # which names it at the first call, says the same of one).
    for i, config in enumerate(configs):
        if not isinstance(getattr(config, "kwargs", None), Mapping):
            raise bad_argument(
                f"config {i}: a config is a triton.Config (with .kwargs and .num_warps), "
                f"got {type(config).__name__}"
            )
    return list(configs)


def _check_key(key: Sequence[str]) -> list[str]:
    if isinstance(key, str) or not isinstance(key, Sequence):
        raise bad_argument(f"key is a list of argument names, got {key!r}")
    if not all(isinstance(k, str) for k in key):
        raise bad_argument(f"key is a list of argument names, got {list(key)!r}")
    return list(key)


def _check_dims(dims: Sequence[str] | None, key: list[str]) -> list[str] | None:
    if dims is not None and (
        isinstance(dims, str)
        or not isinstance(dims, Sequence)
        or not all(isinstance(d, str) for d in dims)
    ):
        raise bad_argument(f"dims is a list of key argument names, got {dims!r}")
    stray = [d for d in dims or () if d not in key]
    if stray:
        raise bad_argument(f"dims names {stray}, which are not in key {key}")
    return None if dims is None else list(dims)


def _check_device(device: Any) -> Any:
    if device is not None:
        # Only when one is given: making the decorator imports nothing it does not use.
        from tunecache.device import Device

        if not isinstance(device, Device):
            raise bad_argument(f"device is a tunecache.Device, got {device!r}")
    return device


def _names_list(value: Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise bad_argument(f"{what} is a list of argument names, got {value!r}")
    return list(value)


def _check_prune(
    prune: Mapping[str, Any] | None,
) -> tuple[Callable[..., Any] | None, int | float, Callable[..., Any] | None]:
    if not prune:
        return None, 1.0, None
    if not isinstance(prune, Mapping):
        raise bad_argument(f"prune_configs_by is a dict, got {prune!r}")
    unknown = sorted(set(prune) - _PRUNE_KEYS)
    if unknown:
        raise bad_argument(
            f"prune_configs_by has unknown fields {unknown}; known: {sorted(_PRUNE_KEYS)}"
        )
    perf_model = prune.get("perf_model")
    early = prune.get("early_config_prune")
    for what, fn in (("perf_model", perf_model), ("early_config_prune", early)):
        if fn is not None and not callable(fn):
            raise bad_argument(f"prune_configs_by[{what!r}] must be callable, got {fn!r}")
    top_k = prune.get("top_k", 1.0)
    if isinstance(top_k, bool) or not (
        (isinstance(top_k, float) and 0 < top_k <= 1.0) or (isinstance(top_k, int) and top_k >= 1)
    ):
        raise bad_argument(
            f"prune_configs_by['top_k'] is a float in (0, 1] or an int >= 1, got {top_k!r}"
        )
    return perf_model, top_k, early


def _check_bench(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise bad_argument(f"bench is a dict of tunecache.bench.bench options, got {options!r}")
    unknown = sorted(set(options) - _BENCH_KEYS)
    if unknown:
        raise bad_argument(f"bench has unknown options {unknown}; known: {sorted(_BENCH_KEYS)}")
    return dict(options)


# -- the kernel it returns ------------------------------------------------------------------

if TYPE_CHECKING:
    #: what makes a kernel's backend: the backend itself, or a call that builds it at the first
    #: call (a type only: the backend module loads with the first call)
    BackendSource = Backend | Callable[[], Backend]


def _kernel_arguments(fn: Any) -> list[str]:
    """The argument names of a `@triton.jit` kernel; BadArgumentError for anything else."""
    arg_names = getattr(fn, "arg_names", None)
    if not callable(getattr(fn, "run", None)) or arg_names is None:
        raise bad_argument(
            f"autotune decorates a @triton.jit kernel (with .run and .arg_names), got {fn!r}"
        )
    return list(arg_names)


class Autotuner:
    """A Triton kernel whose configs are tuned once per device and kept in the tunecache store.

    Launched like the kernel it wraps: `kernel[grid](*args, **kwargs)` or `kernel.run(...)`.
    `backend` is a `Backend`, or a call that makes one at the first call (the decorator's GPU
    backend, which needs torch).
    """

    def __init__(
        self,
        fn: Any,
        options: Options,
        backend: BackendSource,
        warm: Callable[[], Source] | None = None,
    ) -> None:
        self.arg_names = _kernel_arguments(fn)
        self.fn = fn
        self.base_fn = fn
        # The Python function under @triton.jit (and any @triton.heuristics): it names the key.
        while not isinstance(self.base_fn, FunctionType) and hasattr(self.base_fn, "fn"):
            self.base_fn = self.base_fn.fn
        checked = options.check_outputs if isinstance(options.check_outputs, list) else []
        for what, names in (
            ("reset_to_zero", options.reset_to_zero),
            ("restore_value", options.restore_value),
            ("check_outputs", checked),
        ):
            stray = [n for n in names if n not in self.arg_names]
            if stray:
                raise bad_argument(f"{what} names {stray}, which are not kernel arguments")
        self.options = options
        self.keys = list(options.key)
        #: the kernel's name in keys
        self.op: str = options.name or getattr(self.base_fn, "__name__", None) or "kernel"
        # KeySpec's own checks of the key, made now (the spec is built by the first call).
        problem = key_problem(self.op, self.arg_names, self.keys)
        if problem is not None:
            raise bad_argument(problem)
        #: how calls become keys, with the kernel's source revision (set by the first call)
        self.spec: KeySpec
        self.reset_to_zero = options.reset_to_zero
        self.restore_value = options.restore_value
        self.restore_copies: dict[str, Any] = {}
        self.pre_hook: Callable[..., Any] = options.pre_hook or self._default_pre_hook
        self.post_hook: Callable[..., Any] = options.post_hook or self._default_post_hook
        #: the config the last call launched (Triton's Autotuner.best_config)
        self.best_config: Any = None
        #: the arguments by name while a miss is resolved (as Triton's `nargs`)
        self.nargs: dict[str, Any] | None = None
        #: seconds the last tuning benched (first launches included), and then spent handing
        #: its record to the writer (the write itself happens behind the launch)
        self.bench_time: float | None = None
        self.store_time: float | None = None
        #: seconds the last tuning spent checking its configs' outputs (`check_outputs`)
        self.outputs_time: float | None = None
        #: each benched config's [median, p20, p80] in ms, as Triton's Autotuner keeps them
        self.configs_timings: dict[Any, list[float]] = {}
        #: how many distinct keys were answered each way, over the life of this kernel
        self.stats = dict.fromkeys(("exact", "borrowed", "reused", "tuned", "single"), 0)
        #: background tuning failures, as one line each
        self.errors: list[str] = []
        self._source = backend
        #: how the warm start sees the devices (`warm.Source`; None: the backend's own)
        self._warm_source = warm
        #: the warm start (`warm.WarmStart`; None: not tried yet, False: none)
        self._warm: WarmStart | bool | None = None
        self._flow: Flow | None = None
        self._single: Choice | None = None
        self._building = RLock()

    def __repr__(self) -> str:
        return f"<tunecache.triton.Autotuner {self.op} configs={len(self.options.given_configs)}>"

    # -- what the first call sets up ------------------------------------------------------------

    def _ready(self) -> Flow:
        """The kernel's machinery, built by whatever needs it first, once."""
        flow = self._flow
        if flow is not None:
            return flow
        with self._building:
            if self._flow is None:
                from tunecache.triton.backend import Backend
                from tunecache.triton.flow import Flow
                from tunecache.triton.keys import KeySpec, kernel_revision

                options = self.options
                revision = kernel_revision(self.fn, options.revision)
                self.spec = KeySpec(self.op, self.arg_names, options.key, options.dims, revision)
                source = self._source
                backend = source if isinstance(source, Backend) else source()
                flow = Flow(self, backend)
                self._single = flow.single
                self._flow = flow
            return self._flow

    @property
    def backend(self) -> Backend:
        """What the kernel needs from the machine it runs on (built at the first call)."""
        return self._ready().backend

    # -- what the key and the configs are -------------------------------------------------------

    @property
    def configs(self) -> list[Any]:
        """The configs, in order, duplicates dropped (Triton's `Autotuner.configs`)."""
        return self._ready().configs.configs

    @configs.setter
    def configs(self, configs: list[Any]) -> None:
        self._ready().configs.configs = configs

    @property
    def candidates(self) -> tuple[str, ...]:
        """The configs' names, in order: the candidate list stored with every entry."""
        return self._ready().configs.names

    @property
    def checksum(self) -> str:
        """The checksum of the candidate list: entries tuned against another list differ."""
        from tunecache.candidates import checksum

        return checksum(self.candidates)

    def key(self, *args: Any, **kwargs: Any) -> Key:
        """The tunecache key a call with these arguments is tuned under."""
        self._ready()
        return self.spec.make(args, kwargs)

    @property
    def cache(self) -> dict[tuple[Any, ...], Any]:
        """Tuning key -> config answered so far on the current device (Triton's `cache`)."""
        flow = self._ready()
        index = flow.backend.current()
        state = flow.states.get(index)
        warm = self.warm_start
        # A device's state starts with what the warm start answered; before it is opened,
        # those answers are the warm start's alone.
        found = dict(warm.answered(index)) if warm is not None and state is None else {}
        if state is not None:
            found.update(state.memo)
        return {raw: c[0] for raw, c in found.items()}

    # -- launching ------------------------------------------------------------------------------

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    @property
    def warm_start(self) -> WarmStart | None:
        """The kernel's warm start (`warm.WarmStart`: answers kept from earlier processes),
        made when first asked (by the first call, or by its flow); None where it has none."""
        found = self._warm
        if found is None:
            found = self._start()
        return None if isinstance(found, bool) else found

    def _start(self) -> WarmStart | bool:
        """Make the warm start, once; False where there is none or it cannot probe the device
        (the flow then does, and says why in its own words)."""
        with self._building:
            if self._warm is None:
                from tunecache.triton.warm import WarmStart, backend_source

                # A backend given as itself (not a call that builds it): its module is loaded.
                backends = sys.modules.get("tunecache.triton.backend")
                try:
                    source = self._warm_source
                    if source is not None:
                        made = source()
                    elif backends is not None and isinstance(self._source, backends.Backend):
                        made = backend_source(self._source)
                    else:
                        made = None
                    found = None if made is None else WarmStart.start(self, made, self._building)
                except Exception:
                    found = None
                self._warm = found if found is not None else False
            return self._warm

    def _warm_choice(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Choice | None:
        """What the warm start answers for this call (None: the flow decides)."""
        warm = self._warm
        if warm is None:
            warm = self._start()
        if isinstance(warm, bool):
            return None
        try:
            return warm.choice(warm.source.current(), warm.raw(args, kwargs))
        except Exception:
            # A device it cannot probe, say: the flow's first call says why, in its words.
            self._warm = False
            return None

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch the kernel with the config this call's key resolves to."""
        choice = self._single
        if choice is None and self._flow is None and self._warm is not False:
            # Before any miss: the warm start answers, a dict lookup a call once answered.
            choice = self._warm_choice(args, kwargs)
        if choice is None:
            flow = self._flow
            if flow is None:
                flow = self._ready()
                if self._single is not None:
                    return self.run(*args, **kwargs)
            index = flow.backend.current()
            state = flow.states.get(index)
            if state is None:
                state = flow.state(index)
            raw = self.spec.raw(args, kwargs)
            try:
                choice = state.memo.get(raw)
            except TypeError:
                raise bad_argument(
                    f"{self.spec.op}: a key argument's value is not hashable: {raw!r}"
                ) from None
            if choice is None:
                choice = flow.miss(state, raw, args, kwargs)
        config, meta, hook = choice
        self.best_config = config
        if hook is not None:
            hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **meta})
        return self.fn.run(*args, **kwargs, **meta)

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every config this call could use, without running any (Triton's warmup)."""
        from tunecache.triton.configs import all_kwargs

        self.nargs = dict(zip(self.arg_names, args, strict=False))
        try:
            return [
                self.fn.warmup(*args, **kwargs, **all_kwargs(c)) for c in self.prune_configs(kwargs)
            ]
        finally:
            self.nargs = None

    def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]:
        """The configs Triton would bench for the call whose `nargs` are set."""
        configs = self._ready().configs
        nargs = self.nargs or {}
        return configs.top_k(configs.legal(nargs, kwargs), nargs, kwargs)

    # -- pending keys ---------------------------------------------------------------------------

    @property
    def pending(self) -> list[Pending]:
        """Keys served a borrowed config and not tuned yet, oldest first."""
        return [] if self._flow is None else self._flow.pending.listing()

    def tune_pending(self) -> list[Key]:
        """Tune every pending key now, on copies of its first call's arguments; return them.

        The copies were made when the key was borrowed; they are released once it is tuned.
        A key borrowed while `pending_limit` keys were already held kept no arguments: it
        forgets its borrowed answer instead, so its next call borrows again and is kept.
        The records are written behind, as every tuning's are (`wait_pending()` flushes them).
        """
        return [] if self._flow is None else self._flow.pending.tune_all()

    def wait_pending(self, timeout: float | None = None) -> bool:
        """Wait until the background thread has tuned every key queued and every record this
        process has tuned is in the store (`tunecache.triton.flush`); False on timeout."""
        # Neither module is loaded for this: a process that met only stored keys queued
        # nothing, and waits for nothing (no pending keys made, no writer loaded).
        from tunecache.triton.warm import loaded_writer

        deadline = None if timeout is None else time.monotonic() + timeout
        if self._flow is not None and not self._flow.wait_pending(timeout):
            return False
        writer = loaded_writer()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return True if writer is None else bool(writer.flush(left))

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
        if not reset_only and self.restore_value:
            from tunecache.triton.backend import clone

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


# -- the decorator ---------------------------------------------------------------------------


def autotune(
    configs: Sequence[Any],
    key: Sequence[str],
    prune_configs_by: Mapping[str, Any] | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: int | None = None,
    rep: int | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool = False,
    *,
    max_distance: float = DEFAULT_MAX_DISTANCE,
    unseen: str = "borrow",
    dims: Sequence[str] | None = None,
    name: str | None = None,
    revision: str | None = "auto",
    root: Any = None,
    path: Any = None,
    device: Any = None,
    bench: Mapping[str, Any] | None = None,
    flush_l2: bool = True,
    pending_limit: int = 32,
    check_outputs: bool | Sequence[str] = False,
    check_tolerance: float | None = None,
) -> Callable[[Any], Autotuner]:
    """Decorate a `@triton.jit` kernel so its configs are tuned once per device and key, and
    kept in the tunecache store.

    The arguments Triton's `autotune` takes mean what they mean there: `configs`, `key`,
    `prune_configs_by` (`perf_model`, `top_k`, `early_config_prune`), `reset_to_zero`,
    `restore_value`, `pre_hook`, `post_hook` and `do_bench` (a timer `do_bench(fn, quantiles)`
    in ms, used instead of tunecache's adaptive bench). `warmup`, `rep` and `use_cuda_graph`
    (deprecated in Triton) are accepted and ignored: the bench stops on evidence, within
    `bench["budget"]`. `cache_results` is accepted and ignored: results always persist.

    Ours: `max_distance` caps how far (summed |log2| ratio of the sizes) an unseen key may
    borrow a tuned neighbour's config; `unseen` is "borrow" (serve the neighbour's config now,
    tune on `kernel.tune_pending()`), "background" (a daemon thread tunes it) or "tune" (tune
    now, as Triton). `dims` names the key arguments that are sizes (default: every key argument
    whose value is a non-negative int). `name` replaces the kernel's name in keys; `revision`
    ("auto": a digest of the kernel's source; None: none; or your own string) makes an edited
    kernel start afresh. `root` and `path` place the store as `tunecache.open` does; `device`
    (a `tunecache.Device`) replaces the detected GPU identity. `bench` overrides `GPU_BENCH`;
    `flush_l2` evicts the L2 cache before each timed launch, as Triton's `do_bench` does.
    `pending_limit` caps how many borrowed keys keep their first call's arguments.
    `check_outputs` checks configs before timing them: after each config's first launch, the
    arguments it names (True: every tensor argument) are compared with what the first config
    that ran left there (`tunecache.compare`'s rules: integers exactly, floats within
    `check_tolerance` of the reference's largest magnitude, default the square root of the
    dtype's epsilon); a config that differs is recorded as a wrong output, never benched or
    chosen.

    Bad arguments raise BadArgumentError here, before any kernel is seen, or when the
    decorator is applied (names that are not the kernel's arguments); never on a launch.
    """
    # Every argument, by name, as `autotune` was given it: Options checks them all.
    options = Options(
        configs,
        key,
        prune_configs_by=prune_configs_by,
        reset_to_zero=reset_to_zero,
        restore_value=restore_value,
        pre_hook=pre_hook,
        post_hook=post_hook,
        warmup=warmup,
        rep=rep,
        use_cuda_graph=use_cuda_graph,
        do_bench=do_bench,
        cache_results=cache_results,
        max_distance=max_distance,
        unseen=unseen,
        dims=dims,
        name=name,
        revision=revision,
        root=root,
        path=path,
        device=device,
        bench=bench,
        flush_l2=flush_l2,
        pending_limit=pending_limit,
        check_outputs=check_outputs,
        check_tolerance=check_tolerance,
    )

    def decorator(fn: Any) -> Autotuner:
        return _decorate(fn, options)

    return decorator


def _decorate(fn: Any, options: Options) -> Autotuner:
    def backend() -> Backend:
        # At the kernel's first call: Triton and torch are the GPU backend's to import.
        from tunecache.triton.gpu import gpu_backend

        return gpu_backend(options.device, options.flush_l2)

    def warm() -> Source:
        # The GPU as the warm start sees it, without the backend's modules.
        from tunecache.triton.warm import gpu_source

        return gpu_source(options.device)

    return Autotuner(fn, options, backend, warm)
