"""Adaptive benching: time one key's candidates side by side and stop once the answer is known.

Fixed-sample benching (Triton's `do_bench`: 25 ms of warm-up and 100 ms of repetitions for every
candidate) spends most of its time confirming what a few samples already showed. `bench` instead:

1. probes every candidate first: one timed call each, in declaration order, before any is
   calibrated, so a slow candidate cannot spend the budget before the others were seen at all.
   The probe is also the first of the `warmup` calls. A first call is typically cold (caches,
   lazy initialisation, first-touch pages), so a probe time is pessimistic;
2. finishes each candidate's warm-up (`warmup` - 1 untimed calls) and calibrates its inner loop,
   starting from the probe's time, so one sample lasts about `sample_time`, far above the
   clock's resolution (a candidate whose probe already lasted `sample_time` needs no more
   calibration calls);
3. takes samples round-robin, one per candidate per round, so a slow drift of the machine (another
   process, a clock change) hits every candidate alike instead of whichever ran last;
4. stops as early as the evidence allows, for one of these reasons (`BenchResult.stopped`):

   - ``"converged"``: after `min_samples` rounds the leader (lowest median) is settled against
     every remaining rival: the leader's high quantile is at most (1 + INDIFFERENCE) times the
     rival's low quantile. Either the rival is clearly slower, or both sit so tightly within
     INDIFFERENCE of each other that picking the leader costs at most that much if the rival
     were really faster. The quantiles are the min and max for up to 4 samples and trim one more
     sample from each end for every 4 more, so one outlier of a shared machine can neither fake
     nor forever block a decision.
   - ``"bound"``: a candidate's median over at least 2 samples reached `lower_bound` /
     `bound_threshold`: nothing can be much faster, so further measurement cannot pay off.
   - ``"budget"``: the clock budget for this key is spent; the decision rests on what was
     measured. A candidate cut off before its first sample keeps one fallback sample: its last
     calibration batch, or its (cold, pessimistic) probe if calibration never started. A
     candidate cut off before its probe has no samples and no error, and takes no part.
   - ``"max_samples"``: every remaining candidate has `max_samples` samples.
   - ``"single"``: only one candidate could be measured (one was given or the others raised);
     it still gets `min_samples` samples, because the record is evidence.
   - ``"failed"``: every candidate raised, so there is no best.

The budget is checked before every step: a probe, an untimed warm-up call, a calibration batch,
a sample. A step under way is never interrupted (clock reads inside a timed region would distort
it), so the budget can be overrun, by exactly this much at most:

- in the probe pass a probe still starts while elapsed < budget + the longest probe so far, so
  one candidate whose first call alone outlasts the budget cannot hide those declared after it;
  the probe pass therefore ends before budget + the longest probe + the last probe, which is at
  most budget + 2 x the slowest single call of any candidate;
- after the probe pass, a step starts only while elapsed < budget, so the overrun is at most one
  step: one warm-up call of one candidate, or one batch of its `inner_loops` calls (which
  calibration sizes to about `sample_time`, under 2 x `sample_time` while timings are steady).

That is: elapsed < budget + max(longest probe + last probe, longest later step), plus the
bench's own bookkeeping between clock reads. `BenchResult.complete` (and the record's
``settings["complete"]``) says whether the budget cut the evidence short.

Between rounds, once every candidate has `min_samples` samples, a candidate whose median is more
than `drop_ratio` times the leader's is dropped (pruned), as cubecl's autotuner does.

Everything is timed through the injected `clock`, so tests drive `bench` with a fake clock and
scripted timings, and a GPU caller passes a `sync` that waits for queued work before every clock
read that opens or closes a timed region.
"""

from __future__ import annotations

import functools
import inspect
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from tunecache import codec
from tunecache.checks import is_finite, is_int
from tunecache.errors import BadArgumentError
from tunecache.evidence import environment, error_text

__all__ = [
    "INDIFFERENCE",
    "SAMPLE_TIME",
    "BenchResult",
    "Stopped",
    "bench",
    "check_settings",
    "settings_defaults",
    "survivors",
]

#: default seconds per sample: ~1000x perf_counter's resolution, yet cheap enough that ten
#: samples of a fast op cost a tenth of what fixed-sample benching spends
SAMPLE_TIME = 2e-3
#: a rival whose time may be at most this fraction better than the leader's is not worth more
#: samples: picking the leader costs at most this much
INDIFFERENCE = 0.05

#: why `bench` stopped sampling
Stopped = Literal["converged", "bound", "budget", "max_samples", "single", "failed"]
# Stopping rules that decide on purpose: whatever they leave unmeasured was not needed.
_DECIDED: frozenset[str] = frozenset({"converged", "bound", "single", "max_samples"})

# Calibration grows the inner loop at most this much per step, so one noisy, short first batch
# cannot make the next batch run for a thousand times too long.
_MAX_GROWTH = 10.0
# More calls per sample than this means the candidate does (almost) nothing; stop growing.
_MAX_LOOPS = 2**40


@dataclass(frozen=True, slots=True)
class BenchResult:
    """What `bench` measured for one key: the full record and the decision read from it."""

    #: every candidate (declaration order), every sample in seconds per call, settings and env
    record: codec.TimingRecord
    #: the fastest median among candidates that ran, raised nothing and were not pruned
    best: str | None
    #: candidates that ran without error (pruned ones included), fastest median first
    ranking: tuple[str, ...]
    #: seconds per call, for every candidate that has samples
    medians: Mapping[str, float]
    #: name -> one-line error text, for candidates that raised
    errors: Mapping[str, str]
    #: candidates dropped early because their median exceeded drop_ratio x the best
    pruned: tuple[str, ...]
    #: why sampling stopped
    stopped: Stopped
    #: seconds of the injected clock spent in `bench`, calibration and warm-up included
    elapsed: float

    @property
    def complete(self) -> bool:
        """False when the budget cut the evidence short: some candidate that did not raise has
        fewer than min_samples samples, was not pruned, and no stopping rule had decided.

        A tuner should treat an incomplete record as a hint, not as a measured ranking: its
        short candidates may rest on one cold probe, or on nothing at all.
        """
        minimum = self.record.settings.get("min_samples")
        return _is_complete(
            self.stopped,
            ((c.error is not None, c.pruned, len(c.samples)) for c in self.record.candidates),
            minimum if isinstance(minimum, int) else 1,
        )

    def survivors(self, keep: int = 3, within: float | None = None) -> tuple[str, ...]:
        """The short list worth confirming by whole-model runs (`survivors` of the record)."""
        return survivors(self.record, keep, within)


def survivors(
    record: codec.TimingRecord, keep: int = 3, within: float | None = None
) -> tuple[str, ...]:
    """The best `keep` candidates of a timing record that were not pruned and did not raise,
    fastest median first, each within `within` (default: the bench's drop_ratio) of the best.
    A record read back from the store ranks exactly as the bench that made it did."""
    if not is_int(keep) or keep < 1:
        raise BadArgumentError(f"keep must be an int >= 1, got {keep!r}")
    if within is None:
        ratio = record.settings.get("drop_ratio")
        within = float(ratio) if isinstance(ratio, (int, float)) else math.inf
    elif not is_finite(within) or not within >= 1.0:
        raise BadArgumentError(f"within must be a number >= 1, got {within!r}")
    ran = [c for c in record.candidates if c.error is None and not c.pruned and c.samples]
    medians = {c.name: statistics.median(c.samples) for c in ran}
    # sorted() is stable: equal medians keep declaration order, as the bench's ranking does.
    ranked = sorted(medians, key=lambda name: medians[name])
    if not ranked:
        return ()
    limit = medians[ranked[0]] * within
    return tuple(name for name in ranked if medians[name] <= limit)[:keep]


def bench(
    candidates: Mapping[str, Callable[[], object]],
    *,
    min_samples: int = 3,
    max_samples: int = 10,
    drop_ratio: float = 1.5,
    lower_bound: float | None = None,
    bound_threshold: float = 0.8,
    budget: float | None = 1.0,
    sample_time: float = SAMPLE_TIME,
    warmup: int = 1,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BenchResult:
    """Time each zero-argument candidate, interleaved, and pick the fastest by median.

    `lower_bound` is a time per call no candidate can beat (a roofline estimate); `budget` caps
    the clock seconds spent on this key, calibration and warm-up included (None: no cap). A
    candidate that raises an Exception is recorded with its error and skipped; KeyboardInterrupt
    and SystemExit propagate. Raises BadArgumentError for bad options or no candidates.
    """
    _check_candidates(candidates)
    check_settings(
        min_samples=min_samples,
        max_samples=max_samples,
        drop_ratio=drop_ratio,
        lower_bound=lower_bound,
        bound_threshold=bound_threshold,
        budget=budget,
        sample_time=sample_time,
        warmup=warmup,
        sync=sync,
        clock=clock,
    )
    run = _Run(candidates, sample_time, warmup, budget, sync, clock)
    run.probe_all()
    for name in candidates:
        if run.spent():
            break
        if name in run.probes:
            run.calibrate(name)
    stopped, rounds = _sample(
        run, min_samples, max_samples, drop_ratio, lower_bound, bound_threshold
    )
    run.fill_fallbacks()
    elapsed = max(0.0, clock() - run.start)
    settings: dict[str, codec.Scalar] = {
        "min_samples": min_samples,
        "max_samples": max_samples,
        "drop_ratio": float(drop_ratio),
        "lower_bound": None if lower_bound is None else float(lower_bound),
        "bound_threshold": float(bound_threshold),
        "budget": None if budget is None else float(budget),
        "sample_time": float(sample_time),
        "warmup": warmup,
        "indifference": INDIFFERENCE,
        "sync": sync is not None,
        "clock": getattr(clock, "__qualname__", type(clock).__qualname__),
        "stopped": stopped,
        "rounds": rounds,
        "elapsed": elapsed,
        "complete": run.complete(stopped, min_samples),
    }
    return run.result(stopped, elapsed, settings)


# --- the sampling loop -----------------------------------------------------------------------


def _sample(
    run: _Run,
    min_samples: int,
    max_samples: int,
    drop_ratio: float,
    lower_bound: float | None,
    bound_threshold: float,
) -> tuple[Stopped, int]:
    """Take rounds of samples until a stopping rule fires; return why and how many rounds ran."""
    if not run.active:
        return ("budget" if run.spent() else "failed"), 0
    # Decided before sampling: a rival that falls away later (pruned, raised) leaves a leader
    # that was compared, which is convergence, not a lone candidate.
    single = len(run.active) == 1
    limit = None if lower_bound is None else lower_bound / bound_threshold
    rounds = 0
    while rounds < max_samples:
        took = False
        for name in list(run.active):
            if run.spent():
                return "budget", rounds + int(took)
            took = run.sample(name) or took
            # Only a candidate still active may stop the bench: one that just raised is out.
            if limit is not None and name in run.active and run.reached(name, limit):
                return "bound", rounds + 1
        rounds += 1
        if not run.active:
            return "failed", rounds
        if rounds < min_samples:
            continue
        run.prune(drop_ratio)
        if single:
            return "single", rounds
        if run.settled():
            return "converged", rounds
    return "max_samples", rounds


class _Run:
    """The state of one `bench` call: what was calibrated, sampled, pruned, and what raised."""

    def __init__(
        self,
        candidates: Mapping[str, Callable[[], object]],
        sample_time: float,
        warmup: int,
        budget: float | None,
        sync: Callable[[], object] | None,
        clock: Callable[[], float],
    ) -> None:
        self.fns = dict(candidates)
        self.order = list(candidates)
        self.sample_time = sample_time
        self.warmup = warmup
        self.budget = budget
        self.sync = sync
        self.clock = clock
        self.loops: dict[str, int] = {}
        self.samples: dict[str, list[float]] = {name: [] for name in candidates}
        #: seconds of each candidate's first, timed call (cold: a pessimistic fallback)
        self.probes: dict[str, float] = {}
        #: seconds per call of each calibrated candidate's last calibration batch
        self.spare: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self.pruned: list[str] = []
        #: calibrated candidates still being sampled, in declaration order
        self.active: list[str] = []
        self.start = clock()

    def spent(self) -> bool:
        """True once the budget is used up."""
        return self.budget is not None and self.clock() - self.start >= self.budget

    def timed(self, fn: Callable[[], object], loops: int) -> float:
        """Seconds that `loops` calls of fn take, with queued device work drained at both ends."""
        sync, clock = self.sync, self.clock
        if sync is not None:
            sync()
        t0 = clock()
        for _ in range(loops):
            fn()
        if sync is not None:
            sync()
        return max(0.0, clock() - t0)

    def probe_all(self) -> None:
        """Time one call of every candidate, in declaration order, before calibrating any.

        A probe still starts while elapsed < budget + the longest probe so far: a candidate
        whose single call outlasts the whole budget must not hide the ones declared after it,
        and this keeps the pass's overrun to that probe plus one more.
        """
        grace = 0.0
        for name in self.order:
            if self.budget is not None and self.clock() - self.start >= self.budget + grace:
                break
            grace = max(grace, self.probe(name))

    def probe(self, name: str) -> float:
        """Time a candidate's first call; return the seconds it took, even if it raised."""
        sync, clock = self.sync, self.clock
        if sync is not None:
            sync()
        t0 = clock()
        try:
            self.fns[name]()
            if sync is not None:
                sync()
        except Exception as e:
            self.errors[name] = error_text(e)
            return max(0.0, clock() - t0)
        took = max(0.0, clock() - t0)
        self.probes[name] = took
        return took

    def calibrate(self, name: str) -> None:
        """Finish a probed candidate's warm-up, then find how many calls make one sample last
        sample_time, starting from the probe's time. A candidate the budget cuts off before its
        first calibration batch stays out of sampling and falls back on its probe."""
        fn = self.fns[name]
        took, loops, batches = self.probes[name], 1, 0
        try:
            for _ in range(self.warmup - 1):  # the probe was the first warm-up call
                if self.spent():
                    return
                fn()
            while took < self.sample_time and loops < _MAX_LOOPS:
                if self.spent():
                    if batches == 0:
                        return
                    break
                loops = _next_loops(loops, took, self.sample_time)
                took = self.timed(fn, loops)
                batches += 1
        except Exception as e:
            self.errors[name] = error_text(e)
            return
        self.loops[name] = loops
        # The last batch (or the probe, if it already lasted sample_time) is a real measurement
        # at the final loop count: kept only as the fallback sample for a candidate the budget
        # cuts off before its first round.
        self.spare[name] = took / loops
        self.active.append(name)

    def sample(self, name: str) -> bool:
        """Take one sample of a candidate; on an exception record it and drop the candidate."""
        loops = self.loops[name]
        try:
            took = self.timed(self.fns[name], loops)
        except Exception as e:
            self.errors[name] = error_text(e)
            self.active.remove(name)
            return False
        self.samples[name].append(took / loops)
        return True

    def median(self, name: str) -> float:
        """A sampled candidate's median seconds per call."""
        return float(statistics.median(self.samples[name]))

    def reached(self, name: str, limit: float) -> bool:
        """True if the candidate's median over at least 2 samples is within the bound's limit."""
        return len(self.samples[name]) >= 2 and self.median(name) <= limit

    def leader(self) -> str:
        """The active candidate with the lowest median (the earlier one on a tie)."""
        return min(self.active, key=self.median)

    def prune(self, drop_ratio: float) -> None:
        """Drop active candidates whose median exceeds drop_ratio x the leader's."""
        cut = self.median(self.leader()) * drop_ratio
        for name in list(self.active):
            if self.median(name) > cut:
                self.active.remove(name)
                self.pruned.append(name)

    def settled(self) -> bool:
        """True if the leader's high quantile is within INDIFFERENCE of every rival's low one."""
        leader = self.leader()
        high = _quantiles(self.samples[leader])[1]
        return all(
            high <= _quantiles(self.samples[name])[0] * (1.0 + INDIFFERENCE)
            for name in self.active
            if name != leader
        )

    def fill_fallbacks(self) -> None:
        """Give a candidate the budget cut off before any sample one fallback sample: its last
        calibration batch if it was calibrated, else its probe; the best is then decided on
        every candidate that was at least probed."""
        for name in self.order:
            if self.samples[name] or name in self.errors:
                continue
            if name in self.spare:
                self.samples[name].append(self.spare[name])
            elif name in self.probes:
                self.samples[name].append(self.probes[name])

    def complete(self, stopped: Stopped, min_samples: int) -> bool:
        """Whether the evidence is complete (see BenchResult.complete)."""
        return _is_complete(
            stopped,
            (
                (name in self.errors, name in self.pruned, len(self.samples[name]))
                for name in self.order
            ),
            min_samples,
        )

    def result(
        self, stopped: Stopped, elapsed: float, settings: dict[str, codec.Scalar]
    ) -> BenchResult:
        """Freeze what was measured into a record and the decision read from it."""
        pruned = set(self.pruned)
        timings = tuple(
            codec.CandidateTiming(
                name=name,
                samples=tuple(self.samples[name]),
                inner_loops=self.loops.get(name, 1),
                error=self.errors.get(name),
                pruned=name in pruned,
            )
            for name in self.order
        )
        record = codec.TimingRecord(candidates=timings, settings=settings, env=environment())
        medians = {c.name: float(statistics.median(c.samples)) for c in timings if c.samples}
        index = {name: i for i, name in enumerate(self.order)}
        ranking = tuple(
            sorted(
                (c.name for c in timings if c.samples and c.error is None),
                key=lambda n: (medians[n], index[n]),
            )
        )
        best = next((n for n in ranking if n not in pruned), None)
        return BenchResult(
            record=record,
            best=best,
            ranking=ranking,
            medians=MappingProxyType(medians),
            errors=MappingProxyType(dict(self.errors)),
            pruned=tuple(n for n in self.order if n in pruned),
            stopped=stopped,
            elapsed=elapsed,
        )


# --- helpers ---------------------------------------------------------------------------------


def _next_loops(loops: int, took: float, sample_time: float) -> int:
    """The next calibration batch's loop count, after `loops` calls took `took` seconds."""
    # Aim a little past the target so the next batch usually ends calibration.
    grow = 1.2 * sample_time / took if took > 0 else _MAX_GROWTH
    return min(_MAX_LOOPS, math.ceil(loops * min(_MAX_GROWTH, max(2.0, grow))))


def _is_complete(
    stopped: str, candidates: Iterable[tuple[bool, bool, int]], min_samples: int
) -> bool:
    """True if a stopping rule decided, or every candidate that did not raise has min_samples
    samples or was pruned; `candidates` gives (raised, pruned, samples) for each."""
    if stopped in _DECIDED:
        return True
    return all(raised or pruned or n >= min_samples for raised, pruned, n in candidates)


def _quantiles(samples: list[float]) -> tuple[float, float]:
    """A low and a high quantile: min and max up to 4 samples, then one more trimmed per 4."""
    ordered = sorted(samples)
    trim = (len(ordered) - 1) // 4
    return ordered[trim], ordered[-1 - trim]


@functools.cache
def settings_defaults() -> MappingProxyType[str, Any]:
    """Every keyword option of `bench` with its default, read from its signature."""
    parameters = inspect.signature(bench).parameters.values()
    return MappingProxyType({p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY})


def _check_candidates(candidates: object) -> None:
    """Refuse candidates that are not a non-empty mapping of names to callables."""
    if not isinstance(candidates, Mapping) or not candidates:
        raise BadArgumentError("candidates must be a non-empty mapping of name -> callable")
    for name, fn in candidates.items():
        if not isinstance(name, str) or not name:
            raise BadArgumentError(f"candidate names must be non-empty str, got {name!r}")
        if not callable(fn):
            raise BadArgumentError(f"candidate {name!r} is not callable")


def check_settings(**settings: Any) -> None:
    """Refuse settings `bench` cannot honour, with one line that names the option.

    `settings` are keyword options of `bench`; those not given take its defaults, and a name
    it does not know is refused too. `bench` calls it first; a caller that passes settings on
    to `bench` later (the tuner) calls it up front, so a bad option is refused before anything
    runs.
    """
    defaults = settings_defaults()
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise BadArgumentError(f"unknown bench options {unknown}; known: {sorted(defaults)}")
    values = {**defaults, **settings}
    min_samples, max_samples = values["min_samples"], values["max_samples"]
    drop_ratio, lower_bound = values["drop_ratio"], values["lower_bound"]
    bound_threshold, budget = values["bound_threshold"], values["budget"]
    sample_time, warmup = values["sample_time"], values["warmup"]
    sync, clock = values["sync"], values["clock"]
    # The annotations say what is meant; callers without a type checker pass anything, so
    # every check is made at run time too.
    if not is_int(min_samples) or min_samples < 1:
        raise BadArgumentError(f"min_samples must be an int >= 1, got {min_samples!r}")
    if not is_int(max_samples) or max_samples < min_samples:
        raise BadArgumentError(
            f"max_samples must be an int >= min_samples ({min_samples}), got {max_samples!r}"
        )
    if not is_finite(drop_ratio) or not drop_ratio > 1.0:
        raise BadArgumentError(f"drop_ratio must be a number > 1, got {drop_ratio!r}")
    if lower_bound is not None and (not is_finite(lower_bound) or not lower_bound > 0):
        raise BadArgumentError(f"lower_bound must be a number > 0 or None, got {lower_bound!r}")
    if not is_finite(bound_threshold) or not 0 < bound_threshold <= 1:
        raise BadArgumentError(f"bound_threshold must be in (0, 1], got {bound_threshold!r}")
    if budget is not None and (not is_finite(budget) or not budget > 0):
        raise BadArgumentError(f"budget must be a number of seconds > 0 or None, got {budget!r}")
    if not is_finite(sample_time) or not sample_time > 0:
        raise BadArgumentError(f"sample_time must be a number of seconds > 0, got {sample_time!r}")
    if not is_int(warmup) or warmup < 0:
        raise BadArgumentError(f"warmup must be an int >= 0, got {warmup!r}")
    if sync is not None and not callable(sync):
        raise BadArgumentError("sync must be a callable or None")
    if not callable(clock):
        raise BadArgumentError("clock must be a callable returning seconds")
