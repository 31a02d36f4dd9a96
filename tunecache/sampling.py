"""The state of one `tunecache.bench.bench` call: what was probed, calibrated, sampled, pruned,
what raised, and what the key's budget stopped. `tunecache.bench` states the rules; this module
carries them out, one step at a time.

A step is one call or one batch of calls of one candidate: a probe, an untimed warm-up call, a
calibration batch, a sample. The budget is read before every step. A probe (a first call, whose
time nothing predicts) starts only while the budget lasts; any later step starts only if its
expected time, from the candidate's last measured time per call, fits in what is left, and the
first step that does not fit ends the bench (`Sampler.cut`): round-robin sampling cannot go on
fairly without it. A candidate one call of which took longer than what was left when it began
is recorded as too slow, with that call as its sample, and ends the bench too.

With a `compare`, the probes double as the output check: the reference candidate is probed
first and its output kept (a copy of its arrays), every other probe's output is compared with
it, and a candidate that differs is refused as wrong (`tunecache.evidence.WRONG`) before it is
calibrated or sampled: it keeps no sample. The check costs no call of its own, and stays within
the key's budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from tunecache import codec
from tunecache.compare import snapshot
from tunecache.evidence import TOO_SLOW, WRONG, environment, error_text, refusal, refusal_text

if TYPE_CHECKING:
    from tunecache.bench import BenchResult

__all__ = ["DECIDED", "Sampler", "Stopped", "is_complete", "next_loops", "quantiles"]

#: why `bench` stopped sampling
Stopped = Literal["converged", "bound", "budget", "max_samples", "single", "failed"]
#: stopping rules that decide on purpose: whatever they leave unmeasured was not needed
DECIDED: frozenset[str] = frozenset({"converged", "bound", "single", "max_samples"})

# Calibration grows the inner loop at most this much per step, so one noisy, short first batch
# cannot make the next batch run for a thousand times too long.
_MAX_GROWTH = 10.0
# More calls per sample than this means the candidate does (almost) nothing; stop growing.
_MAX_LOOPS = 2**40


class Sampler:
    """The state of one `bench` call; its methods are the steps `bench` takes."""

    def __init__(
        self,
        candidates: Mapping[str, Callable[[], object]],
        refused: Mapping[str, codec.CandidateTiming],
        sample_time: float,
        warmup: int,
        budget: float | None,
        sync: Callable[[], object] | None,
        clock: Callable[[], float],
        compare: tuple[str, Callable[[object, object], str | None]] | None = None,
    ) -> None:
        self.fns = dict(candidates)
        #: (the reference candidate, how an output is compared with its output), if checked
        self.compare = compare
        #: whether the reference's output was had, so that the other outputs were checked
        self.checked = False
        self.expected: object = None
        self.order = list(candidates)
        #: candidates never called here: the timing that says why, recorded as given
        self.refused = dict(refused)
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
        #: whether the budget ended the bench (a step that did not fit, or a call too slow)
        self.cut = False
        self.start = clock()

    # -- the budget ----------------------------------------------------------------------------

    def left(self) -> float:
        """Seconds of the budget left (negative once overrun; infinite without a budget)."""
        if self.budget is None:
            return math.inf
        return self.budget - (self.clock() - self.start)

    def fits(self, expected: float) -> tuple[bool, float]:
        """Whether a step expected to take `expected` seconds fits in what is left, and what is
        left; a step that does not fit ends the bench."""
        if self.cut:
            return False, self.left()
        left = self.left()
        if not (left > 0 and expected <= left):
            self.cut = True
        return not self.cut, left

    def too_slow(self, name: str, per_call: float, left: float) -> None:
        """Record that one call of `name` took longer than the `left` seconds of the budget
        it began with: it keeps that call as its sample, and the bench ends."""
        budget = self.budget if self.budget is not None else math.inf
        self.errors[name] = refusal_text(
            TOO_SLOW,
            f"one call took {per_call:.3g} s with {max(left, 0.0):.3g} s of the key's "
            f"{budget:.3g} s budget left",
        )
        if not self.samples[name]:
            self.samples[name].append(per_call)
        if name in self.active:
            self.active.remove(name)
        self.cut = True

    # -- the steps -----------------------------------------------------------------------------

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
        """Time one call of every candidate before calibrating any: the reference first when
        outputs are compared, then the rest in declaration order. A probe starts only while
        the budget lasts, so the pass overruns it by one call at most."""
        order = self.order
        if self.compare is not None:
            first = self.compare[0]
            order = [first, *(name for name in order if name != first)]
        for name in order:
            if name in self.refused:
                continue
            fits, left = self.fits(0.0)
            if not fits:
                break
            took, output = self.probe(name)
            if name in self.errors:
                continue
            self.check(name, output)
            if took > left:
                if name in self.errors:
                    self.cut = True
                else:
                    self.too_slow(name, took, left)

    def probe(self, name: str) -> tuple[float, object]:
        """Time a candidate's first call: the seconds it took, even if it raised, and what it
        returned (None if it raised)."""
        sync, clock = self.sync, self.clock
        if sync is not None:
            sync()
        t0 = clock()
        try:
            output = self.fns[name]()
            if sync is not None:
                sync()
        except Exception as e:
            self.errors[name] = error_text(e)
            return max(0.0, clock() - t0), None
        took = max(0.0, clock() - t0)
        self.probes[name] = took
        return took, output

    def check(self, name: str, output: object) -> None:
        """Keep the reference's output, or compare another candidate's with it: one that
        differs is refused as wrong, with no sample. An exception the comparison raises is the
        caller's (its check hook), not the candidate's, and propagates."""
        if self.compare is None:
            return
        reference, compare = self.compare
        if name == reference:
            self.expected, self.checked = snapshot(output), True
            return
        if not self.checked:
            return
        differs = compare(self.expected, output)
        if differs is not None:
            self.errors[name] = refusal_text(WRONG, differs)
            del self.probes[name]

    def calibrate(self, name: str) -> None:
        """Finish a probed candidate's warm-up, then find how many calls make one sample last
        sample_time, starting from the probe's time. A candidate the budget stops before its
        first calibration batch stays out of sampling and falls back on its probe."""
        fn = self.fns[name]
        took, loops, batches = self.probes[name], 1, 0
        try:
            for _ in range(self.warmup - 1):  # the probe was the first warm-up call
                fits, left = self.fits(self.probes[name])
                if not fits:
                    return
                fn()
                if self.budget is not None and (call := left - self.left()) > left:
                    self.too_slow(name, call, left)
                    return
            while took < self.sample_time and loops < _MAX_LOOPS:
                more = next_loops(loops, took, self.sample_time)
                fits, left = self.fits(more * took / loops)
                if not fits:
                    if batches == 0:
                        return
                    break
                loops, took = more, self.timed(fn, more)
                batches += 1
                if took / loops > left:
                    self.too_slow(name, took / loops, left)
                    return
        except Exception as e:
            self.errors[name] = error_text(e)
            return
        self.loops[name] = loops
        # The last batch (or the probe, if it already lasted sample_time) is a real measurement
        # at the final loop count: kept only as the fallback sample for a candidate the budget
        # stops before its first round.
        self.spare[name] = took / loops
        self.active.append(name)

    def sample(self, name: str) -> bool:
        """Take one sample of a candidate, if it fits in the budget (else the bench ends); a
        candidate that raises is recorded and dropped."""
        loops = self.loops[name]
        measured = self.samples[name]
        per_call = measured[-1] if measured else self.spare[name]
        fits, left = self.fits(loops * per_call)
        if not fits:
            return False
        try:
            took = self.timed(self.fns[name], loops)
        except Exception as e:
            self.errors[name] = error_text(e)
            self.active.remove(name)
            return False
        measured.append(took / loops)
        if took / loops > left:
            self.too_slow(name, took / loops, left)
        return True

    # -- reading the samples -------------------------------------------------------------------

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

    def settled(self, indifference: float) -> bool:
        """True if the leader's high quantile is within `indifference` of every rival's low."""
        leader = self.leader()
        high = quantiles(self.samples[leader])[1]
        return all(
            high <= quantiles(self.samples[name])[0] * (1.0 + indifference)
            for name in self.active
            if name != leader
        )

    def fill_fallbacks(self) -> None:
        """Give a candidate the budget stopped before any sample one fallback sample: its last
        calibration batch if it was calibrated, else its probe; the best is then decided on
        every candidate that was at least probed."""
        for name in self.order:
            if self.samples[name] or name in self.errors or name in self.refused:
                continue
            if name in self.spare:
                self.samples[name].append(self.spare[name])
            elif name in self.probes:
                self.samples[name].append(self.probes[name])

    def timings(self) -> tuple[codec.CandidateTiming, ...]:
        """Every candidate's timing, in declaration order: the refused ones as given."""
        pruned = set(self.pruned)
        return tuple(
            self.refused.get(name)
            or codec.CandidateTiming(
                name=name,
                samples=tuple(self.samples[name]),
                inner_loops=self.loops.get(name, 1),
                error=self.errors.get(name),
                pruned=name in pruned,
            )
            for name in self.order
        )

    def result(
        self,
        stopped: Stopped,
        elapsed: float,
        settings: dict[str, codec.Scalar],
        min_samples: int,
        drop_ratio: float,
    ) -> BenchResult:
        """Freeze what was measured into a record and the decision read from it; `settings`
        gains whether the evidence is complete."""
        from tunecache.bench import BenchResult

        timings = self.timings()
        medians = {c.name: float(statistics.median(c.samples)) for c in timings if c.samples}
        index = {name: i for i, name in enumerate(self.order)}
        ranking = tuple(
            sorted(
                (c.name for c in timings if c.samples and c.error is None),
                key=lambda n: (medians[n], index[n]),
            )
        )
        pruned = tuple(c.name for c in timings if c.pruned)
        best = next((n for n in ranking if n not in pruned), None)
        settings["complete"] = is_complete(stopped, timings, min_samples, drop_ratio)
        record = codec.TimingRecord(candidates=timings, settings=settings, env=environment())
        errors = {c.name: c.error for c in timings if c.error is not None}
        return BenchResult(
            record=record,
            best=best,
            ranking=ranking,
            medians=MappingProxyType(medians),
            errors=MappingProxyType(errors),
            pruned=pruned,
            stopped=stopped,
            elapsed=elapsed,
        )


# --- helpers ---------------------------------------------------------------------------------


def next_loops(loops: int, took: float, sample_time: float) -> int:
    """The next calibration batch's loop count, after `loops` calls took `took` seconds."""
    # Aim a little past the target so the next batch usually ends calibration.
    grow = 1.2 * sample_time / took if took > 0 else _MAX_GROWTH
    return min(_MAX_LOOPS, math.ceil(loops * min(_MAX_GROWTH, max(2.0, grow))))


def is_complete(
    stopped: str,
    candidates: Iterable[codec.CandidateTiming],
    min_samples: int,
    drop_ratio: float | None,
) -> bool:
    """Whether a bench's evidence is complete: no candidate recorded too slow could still be
    within `drop_ratio` of the best, and a stopping rule decided, or every candidate that did
    not raise has min_samples samples or was pruned."""
    timings = list(candidates)
    ran = [c.median for c in timings if c.error is None and not c.pruned and c.samples]
    best = min((m for m in ran if m is not None), default=None)
    for c in timings:
        if refusal(c.error) == TOO_SLOW:
            # Too slow for the budget: decided only if its one call rules it out anyway.
            if best is None or drop_ratio is None or not c.samples:
                return False
            if min(c.samples) <= best * drop_ratio:
                return False
    if stopped in DECIDED:
        return True
    return all(c.error is not None or c.pruned or len(c.samples) >= min_samples for c in timings)


def quantiles(samples: list[float]) -> tuple[float, float]:
    """A low and a high quantile: min and max up to 4 samples, then one more trimmed per 4."""
    ordered = sorted(samples)
    trim = (len(ordered) - 1) // 4
    return ordered[trim], ordered[-1 - trim]
