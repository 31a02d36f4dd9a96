"""The kernel `tunecache.triton.autotune` returns: Triton's launch syntax and attributes, no
Triton in it.

Everything Triton- or GPU-specific comes in through a `Backend` (`backend.py`); `gpu.py` builds
the GPU one, and the tests drive the very same machinery with a CPU kernel and a CPU backend.

Applying the decorator builds an `Autotuner` and nothing else: the arguments are checked against
the kernel's (so a bad one fails there, never on a launch), and the rest (the backend, the
configs by name, the store, the bench, and the modules behind them) is set up by the first call,
once (`flow.Flow`, which also holds the path of a miss). A call of a key answered before is one
dict lookup and the kernel's own launch.
"""

from __future__ import annotations

import time
from _thread import RLock  # threading costs ~2 ms to import; its RLock is this one
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any

from tunecache.errors import BadArgumentError
from tunecache.triton.keys import KeySpec, kernel_revision

if TYPE_CHECKING:
    from tunecache.keys import Key
    from tunecache.triton.backend import Backend
    from tunecache.triton.background import Pending
    from tunecache.triton.configs import Choice
    from tunecache.triton.flow import Flow
    from tunecache.triton.options import Options

__all__ = ["Autotuner"]

if TYPE_CHECKING:
    #: what makes a kernel's backend: the backend itself, or a call that builds it at the first
    #: call (a type only: the backend module loads with the first call)
    BackendSource = Backend | Callable[[], Backend]


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
    `backend` is a `Backend`, or a call that makes one at the first call (the decorator's GPU
    backend, which needs torch).
    """

    def __init__(self, fn: Any, options: Options, backend: BackendSource) -> None:
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
                raise BadArgumentError(f"{what} names {stray}, which are not kernel arguments")
        self.options = options
        self.keys = list(options.key)
        op = options.name or getattr(self.base_fn, "__name__", None) or "kernel"
        #: how calls become keys (its checks run here: a key that names no argument fails now)
        # The revision (a digest of the kernel's source) is worked out by the first call.
        self.spec = KeySpec(op, self.arg_names, options.key, options.dims)
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
        self._flow: Flow | None = None
        self._single: Choice | None = None
        self._building = RLock()

    def __repr__(self) -> str:
        return f"<tunecache.triton.Autotuner {self.spec.op} configs={len(self.options.configs)}>"

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

                self.spec.revision = kernel_revision(self.fn, self.options.revision)
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
        state = flow.states.get(flow.backend.current())
        return {} if state is None else {raw: c[0] for raw, c in state.memo.items()}

    # -- launching ------------------------------------------------------------------------------

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch the kernel with the config this call's key resolves to."""
        choice = self._single
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
                raise BadArgumentError(
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
        from tunecache.triton.writer import WRITER

        deadline = None if timeout is None else time.monotonic() + timeout
        if self._flow is not None and not self._flow.pending.wait(timeout):
            return False
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return WRITER.flush(left)

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
