"""Timing a kernel's configs on one call's arguments: every config's timings, and the fastest.

Each config is launched once untimed first (it compiles and loads the kernel; a config that
does not fit fails there, as in Triton, and is recorded and skipped). The rest is timed by
tunecache's adaptive bench (`tunecache.bench.bench`, with the backend's L2 flush before each
timed launch), or by the caller's `do_bench(fn, quantiles)` as Triton does. The bench and the
codec (numpy, cbor2) are imported only here, and only when something is timed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from tunecache.errors import BadArgumentError
from tunecache.triton.autotuner import Options
from tunecache.triton.backend import Backend
from tunecache.triton.configs import ConfigSet, all_kwargs
from tunecache.triton.writer import WRITER

if TYPE_CHECKING:
    from tunecache.codec import CandidateTiming, TimingRecord

__all__ = ["Call", "Launcher", "Measurement", "Measurer", "kernel_call", "quantiles_ms"]


def _is_tensor(value: object) -> bool:
    """Whether an argument is an array with elements (a tensor or a numpy array)."""
    shape = getattr(value, "shape", None)
    return getattr(value, "dtype", None) is not None and shape is not None and len(shape) > 0


class Call(NamedTuple):
    """One call's arguments: as passed, and all of them by name (Triton's `nargs`)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    nargs: dict[str, Any]


class Launcher(Protocol):
    """What launching one config needs of the autotuner: its kernel and its hooks."""

    #: the `@triton.jit` kernel, launched by `fn.run(*args, **kwargs)`
    fn: Any
    #: called with every argument by name before each launch
    pre_hook: Callable[..., Any]
    #: called with every argument by name and `exception=` after each launch
    post_hook: Callable[..., Any]
    #: seconds the last measurement spent checking outputs (set here; None: none checked)
    outputs_time: float | None


class Measurement(NamedTuple):
    """What timing some configs found."""

    #: the fastest config's name, or None when none ran
    best: str | None
    #: every config's timings or failure, the bench settings and the environment
    record: TimingRecord
    #: each timed config's [median, p20, p80] in ms (Triton's `configs_timings`)
    timings: dict[Any, list[float]]


def quantiles_ms(samples: Sequence[float]) -> list[float]:
    """Median, 20th and 80th percentile in milliseconds: Triton's `configs_timings` form."""
    if not samples:
        return [math.inf, math.inf, math.inf]
    ordered = sorted(samples)
    n = len(ordered) - 1

    def at(p: float) -> float:
        return ordered[round(p * n)] * 1e3

    return [at(0.5), at(0.2), at(0.8)]


def kernel_call(kernel: Launcher, op: str, config: Any, call: Call) -> Callable[..., None]:
    """One launch of `config` on these arguments, with the hooks around it (Triton's
    `kernel_call`). Given `between`, the launch calls it after the kernel ran and before the
    post-hook: where the outputs are looked at, before `restore_value` puts the saved
    arguments back."""
    conflicts = call.kwargs.keys() & config.kwargs.keys()
    if conflicts:
        raise BadArgumentError(
            f"{op}: {sorted(conflicts)} are passed by the caller and set by the "
            "configs; don't pass auto-tuned meta-parameters"
        )
    args = call.args
    current = {**call.kwargs, **all_kwargs(config)}
    full_nargs = {**call.nargs, **current}
    own_hook = getattr(config, "pre_hook", None)

    def launch(between: Callable[[], None] | None = None) -> None:
        if own_hook:
            own_hook(full_nargs)
        kernel.pre_hook(full_nargs)
        try:
            kernel.fn.run(*args, **current)
            if between is not None:
                between()
        except Exception as error:
            kernel.post_hook(full_nargs, exception=error)
            raise
        kernel.post_hook(full_nargs, exception=None)

    return launch


class Measurer:
    """Times a kernel's configs on one call's arguments, with the backend's bench options."""

    def __init__(
        self, kernel: Launcher, op: str, configs: ConfigSet, options: Options, backend: Backend
    ) -> None:
        self._kernel, self._op = kernel, op
        self._configs, self._options, self._backend = configs, options, backend

    def measure(self, configs: list[Any], call: Call) -> Measurement:
        """Bench configs on this call's arguments: every config's timings, and the fastest."""
        from tunecache.codec import CandidateTiming, TimingRecord
        from tunecache.evidence import environment

        calls = {
            self._configs.name_of(c): kernel_call(self._kernel, self._op, c, call) for c in configs
        }
        errors = self._first_launches(calls, call)
        runnable = {n: c for n, c in calls.items() if n not in errors}
        settings: dict[str, Any] = {"kernel": self._op, "configs": len(self._configs.configs)}
        if not runnable:
            record = TimingRecord(
                candidates=tuple(CandidateTiming(n, error=errors[n]) for n in calls),
                settings=settings,
            )
            return Measurement(None, record, {c: quantiles_ms(()) for c in configs})
        # Never beside the writer's SQLAlchemy path (a store being made): its imports hold the
        # GIL for hundreds of ms, and every host-timed sample would carry those stalls.
        WRITER.quiet()
        if self._options.do_bench is not None:
            measured, best = self._timed_by_user(runnable)
            settings["timer"] = "do_bench"
        else:
            measured, best, more = self._benched(runnable)
            settings.update(more)
        timings = tuple(
            CandidateTiming(n, error=errors[n]) if n in errors else measured[n]
            for n in calls
            if n in errors or n in measured
        )
        record = TimingRecord(candidates=timings, settings=settings, env=environment())
        by_name = self._configs.by_name
        quantiles = {
            by_name[c.name]: quantiles_ms(c.samples if c.error is None else ()) for c in timings
        }
        return Measurement(best, record, quantiles)

    def _first_launches(
        self, calls: Mapping[str, Callable[..., None]], call: Call
    ) -> dict[str, str]:
        """One untimed launch of each config, so the bench's first timed call is a warm one
        (compiling and loading a kernel takes seconds, not microseconds): the configs that
        do not fit, and with `check_outputs` those whose outputs differ from the first
        config's that ran, with their errors. The outputs are looked at inside the launch,
        after the kernel and before its post-hook (which `restore_value` uses to put the
        arguments back as they were)."""
        from tunecache.evidence import error_text

        backend = self._backend
        checked = self._checked(call)
        values = {**call.nargs, **call.kwargs}
        reference: dict[str, Any] = {}
        spent = 0.0
        errors: dict[str, str] = {}
        wrong: list[str] = []  # the launch in hand's refusal, if its outputs differ

        def look() -> None:
            nonlocal spent
            if backend.sync is not None:
                backend.sync()
            if not checked:
                return
            start = time.perf_counter()
            if not reference:
                reference.update((n, backend.clone(values[n])) for n in checked)
            else:
                differs = self._wrong(reference, values)
                if differs is not None:
                    wrong.append(differs)
            spent += time.perf_counter() - start

        for name, launch in calls.items():
            wrong.clear()
            try:
                launch(look)
            except backend.failures as error:
                errors[name] = error_text(error)
                continue
            if wrong:
                errors[name] = wrong[0]
        self._kernel.outputs_time = spent if checked else None
        return errors

    def _checked(self, call: Call) -> list[str]:
        """The arguments `check_outputs` names that this call passed."""
        wanted = self._options.check_outputs
        values = {**call.nargs, **call.kwargs}
        if wanted is True:
            return [n for n, v in values.items() if _is_tensor(v)]
        return [n for n in wanted or () if values.get(n) is not None]

    def _wrong(self, reference: dict[str, Any], values: dict[str, Any]) -> str | None:
        """The refusal of a config whose output arguments differ from the reference's."""
        from tunecache.evidence import WRONG, refusal_text

        for name, expected in reference.items():
            differs = self._backend.difference(
                expected, values[name], self._options.check_tolerance
            )
            if differs is not None:
                return refusal_text(WRONG, f"{name}: {differs}")
        return None

    def _benched(
        self, runnable: dict[str, Callable[[], None]]
    ) -> tuple[dict[str, CandidateTiming], str | None, dict[str, Any]]:
        """Time the configs with tunecache's adaptive bench: their timings, the fastest, and
        the bench's settings for the record."""
        from tunecache import bench

        backend = self._backend
        flush = backend.flush(backend.current()) if backend.flush is not None else None
        unexpected: list[BaseException] = []

        def guarded(launch: Callable[[], None]) -> Callable[[], None]:
            def timed() -> None:
                if flush is not None:
                    flush()
                try:
                    launch()
                except backend.failures:
                    raise
                except Exception as error:
                    unexpected.append(error)
                    raise

            return timed

        options = {**backend.bench, **self._options.bench}
        candidates = {n: guarded(c) for n, c in runnable.items()}
        result = bench.bench(candidates, sync=backend.sync, **options)
        finished = False
        if not result.complete and not unexpected:
            # The budget ran out before every config had its samples (slow kernels: about
            # 8 ms a launch with 12 configs). A key is tuned once per device, and a ranking
            # with holes would be served for good: finish the measurement without the budget.
            result = bench.bench(candidates, sync=backend.sync, **{**options, "budget": None})
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

        do_bench = self._options.do_bench
        assert do_bench is not None
        measured: dict[str, CandidateTiming] = {}
        medians: dict[str, float] = {}
        for name, launch in runnable.items():
            try:
                got = do_bench(launch, quantiles=(0.5, 0.2, 0.8))
            except self._backend.failures as error:
                from tunecache.evidence import error_text

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
