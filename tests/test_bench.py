"""Adaptive benching, driven by a fake clock and candidates that advance it by scripted amounts.

Times are whole numbers of fake seconds so every sum is exact and every stopping decision is
deterministic; only the last test touches the real clock, and it asserts no speed.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tunecache import codec
from tunecache.bench import INDIFFERENCE, BenchResult, bench
from tunecache.errors import BadArgumentError
from tunecache.evidence import TOO_SLOW, WRONG, refusal


class Clock:
    """A clock that moves only when a fake candidate runs, logging every read and call."""

    def __init__(self) -> None:
        self.now = 0
        self.events: list[str] = []

    def __call__(self) -> float:
        self.events.append("clock")
        return float(self.now)

    def sync(self) -> None:
        self.events.append("sync")

    def op(
        self,
        name: str,
        times: Sequence[int],
        *,
        cycle: bool = False,
        fail_at: int | None = None,
    ) -> Callable[[], None]:
        """A candidate whose n-th call takes times[n] (the last repeats, or all cycle), and
        raises from call number fail_at on (1-based)."""
        source = (
            itertools.cycle(times) if cycle else itertools.chain(times, itertools.repeat(times[-1]))
        )
        calls = 0

        def call() -> None:
            nonlocal calls
            calls += 1
            if fail_at is not None and calls >= fail_at:
                raise ValueError(f"{name} failed\non call {calls}")
            self.events.append(name)
            self.now += next(source)

        return call

    def calls(self, after: int = 0) -> list[str]:
        """The candidate calls logged, from the after-th event on."""
        return [e for e in self.events[after:] if e not in ("clock", "sync")]


def run(clock: Clock, candidates: dict[str, Callable[[], None]], **options: Any) -> BenchResult:
    """bench() with one call per sample (sample_time far below any call), no warm-up, no budget."""
    options.setdefault("sample_time", 1.0)
    options.setdefault("warmup", 0)
    options.setdefault("budget", None)
    return bench(candidates, clock=clock, **options)


def samples(result: BenchResult, name: str) -> tuple[float, ...]:
    return result.record.candidate(name).samples


# --- samples: calibration, warm-up, interleaving ---------------------------------------------


def test_inner_loop_is_calibrated_so_a_sample_lasts_sample_time() -> None:
    clock = Clock()
    result = bench(
        {
            "fast": clock.op("fast", [1]),
            "mid": clock.op("mid", [10]),
            "slow": clock.op("slow", [300]),
        },
        sample_time=100.0,
        budget=None,
        clock=clock,
    )
    loops = {c.name: c.inner_loops for c in result.record.candidates}
    assert loops == {"fast": 100, "mid": 10, "slow": 1}
    # Samples are seconds per call, not per sample.
    assert set(samples(result, "fast")) == {1.0}
    assert set(samples(result, "mid")) == {10.0}
    assert set(samples(result, "slow")) == {300.0}


def test_calibration_never_grows_the_loop_more_than_tenfold_a_step() -> None:
    clock = Clock()
    result = bench({"tiny": clock.op("tiny", [1])}, sample_time=5000.0, budget=None, clock=clock)
    # 1 -> 10 -> 100 -> 1000 -> 6000 (1.2 x 5000 / 1000 x 1000): never a 5000x jump at once.
    assert result.record.candidates[0].inner_loops == 6000


def test_warmup_calls_come_first_and_only_the_probe_is_timed() -> None:
    clock = Clock()
    result = bench(
        {"a": clock.op("a", [70, 50])}, warmup=2, sample_time=10.0, budget=None, clock=clock
    )
    # The start-of-bench read, the probe (the first warm-up call, timed), the second warm-up
    # call untimed, then the first sample: the probe already lasted sample_time, so no
    # calibration call is needed.
    assert clock.events[:8] == ["clock", "clock", "a", "clock", "a", "clock", "a", "clock"]
    # The cold probe (70) is not a sample.
    assert set(samples(result, "a")) == {50.0}


def test_every_candidate_is_probed_before_any_is_warmed_up_or_calibrated() -> None:
    clock = Clock()
    bench(
        {"a": clock.op("a", [1]), "b": clock.op("b", [1])},
        warmup=2,
        sample_time=4.0,
        max_samples=3,
        budget=None,
        clock=clock,
    )
    # Probes a, b; then a's second warm-up call and one calibration batch of 5 calls (grown
    # from the probe's 1), then b's.
    assert clock.calls()[:2] == ["a", "b"]
    assert clock.calls()[2:14] == ["a"] * 6 + ["b"] * 6


def test_candidates_are_interleaved_round_robin() -> None:
    clock = Clock()
    noisy = [100, 140]  # every range overlaps: nothing converges before max_samples
    result = run(
        clock,
        {name: clock.op(name, noisy, cycle=True) for name in ("a", "b", "c")},
        max_samples=5,
    )
    # One probe each (already past sample_time: no calibration), then one sample per candidate
    # per round.
    assert clock.calls() == ["a", "b", "c"] + ["a", "b", "c"] * 5
    assert result.stopped == "max_samples"
    assert result.record.settings["rounds"] == 5


@pytest.mark.parametrize("max_samples", [3, 4, 7])
def test_never_more_than_max_samples(max_samples: int) -> None:
    clock = Clock()
    result = run(
        clock,
        {"a": clock.op("a", [100, 140], cycle=True), "b": clock.op("b", [140, 100], cycle=True)},
        max_samples=max_samples,
    )
    assert [len(c.samples) for c in result.record.candidates] == [max_samples, max_samples]
    assert result.stopped == "max_samples"


@pytest.mark.parametrize("min_samples", [1, 3, 5])
def test_a_clear_leader_stops_exactly_at_min_samples(min_samples: int) -> None:
    clock = Clock()
    result = run(
        clock, {"a": clock.op("a", [100]), "b": clock.op("b", [120])}, min_samples=min_samples
    )
    assert result.stopped == "converged"
    assert [len(c.samples) for c in result.record.candidates] == [min_samples, min_samples]
    assert result.best == "a"
    assert result.ranking == ("a", "b")
    assert result.pruned == ()


# --- stopping rules --------------------------------------------------------------------------


def test_a_candidate_beyond_drop_ratio_is_pruned_after_min_samples() -> None:
    clock = Clock()
    noisy = [100, 140]
    result = run(
        clock,
        {
            "a": clock.op("a", noisy, cycle=True),
            "slow": clock.op("slow", [200]),  # > 1.5 x a's median of 120 (or 100 after 3)
            "b": clock.op("b", noisy[::-1], cycle=True),
        },
        max_samples=6,
    )
    assert result.pruned == ("slow",)
    assert result.record.candidate("slow").pruned is True
    assert len(samples(result, "slow")) == 3
    assert len(samples(result, "a")) == len(samples(result, "b")) == 6
    assert result.ranking[-1] == "slow"
    assert result.best in ("a", "b")
    assert "slow" not in result.survivors(keep=5)


def test_drop_ratio_is_configurable() -> None:
    noisy = [100, 140]  # a's probe takes the 100: its samples are 140, 100, 140, ...
    clock = Clock()
    candidates = {"a": clock.op("a", noisy, cycle=True), "b": clock.op("b", [250])}
    kept = run(clock, candidates, max_samples=4, drop_ratio=2.5)
    assert kept.pruned == ()
    clock2 = Clock()
    candidates = {"a": clock2.op("a", noisy, cycle=True), "b": clock2.op("b", [250])}
    dropped = run(clock2, candidates, max_samples=4, drop_ratio=1.5)
    assert dropped.pruned == ("b",)


def test_pruning_waits_for_min_samples() -> None:
    clock = Clock()
    noisy = [100, 140]
    result = run(
        clock,
        {"a": clock.op("a", noisy, cycle=True), "slow": clock.op("slow", [500])},
        min_samples=4,
        max_samples=8,
    )
    assert result.pruned == ("slow",)
    assert len(samples(result, "slow")) == 4


def test_reaching_the_lower_bound_short_circuits() -> None:
    clock = Clock()
    result = run(
        clock,
        {"a": clock.op("a", [100]), "b": clock.op("b", [150])},
        lower_bound=80.0,  # limit: 80 / 0.8 = 100
        min_samples=5,
    )
    assert result.stopped == "bound"
    # The bound needs two samples: a's second one, before b's second.
    assert len(samples(result, "a")) == 2
    assert len(samples(result, "b")) == 1
    assert result.best == "a"
    assert result.record.settings["lower_bound"] == 80.0


def test_one_sample_under_the_bound_is_not_enough() -> None:
    clock = Clock()
    result = run(
        clock,
        {"a": clock.op("a", [100, 100, 300, 300, 300]), "b": clock.op("b", [290])},
        lower_bound=80.0,
        max_samples=6,
    )
    # a's samples are 100, 300, 300...: its median over 2 samples is 200, above the limit.
    assert result.stopped != "bound"


def test_bound_threshold_scales_the_limit() -> None:
    clock = Clock()
    candidates = {"a": clock.op("a", [100]), "b": clock.op("b", [104])}
    result = run(clock, candidates, lower_bound=80.0, bound_threshold=0.5, min_samples=5)
    assert result.stopped == "bound"  # 100 <= 80 / 0.5
    clock2 = Clock()
    candidates = {"a": clock2.op("a", [100]), "b": clock2.op("b", [104])}
    strict = run(clock2, candidates, lower_bound=80.0, bound_threshold=1.0, min_samples=5)
    assert strict.stopped == "converged"  # 100 > 80 / 1.0: no short-circuit


def test_tight_rivals_within_the_indifference_zone_converge() -> None:
    clock = Clock()
    # b is 2% slower and both are tight: more samples could at best save 2%.
    result = run(clock, {"a": clock.op("a", [100, 101, 100]), "b": clock.op("b", [102])})
    assert result.stopped == "converged"
    assert result.record.settings["rounds"] == 3
    assert result.best == "a"


def test_overlapping_rivals_are_sampled_until_max_samples() -> None:
    clock = Clock()
    # a is 10% faster by median but the spreads overlap: the rule must not call it yet.
    a = [100, 125, 95, 120]
    b = [112, 130, 106, 116]
    result = run(clock, {"a": clock.op("a", a, cycle=True), "b": clock.op("b", b, cycle=True)})
    assert result.stopped == "max_samples"
    assert len(samples(result, "a")) == 10


def test_convergence_trims_an_outlier_once_there_are_enough_samples() -> None:
    clock = Clock()
    # One spike of a (a shared machine's hiccup) blocks min/max separation at 3-4 samples;
    # from 5 samples on one value is trimmed at each end and the clear gap decides.
    result = run(
        clock,
        {"a": clock.op("a", [100, 100, 300, 100, 100]), "b": clock.op("b", [130])},
        max_samples=10,
    )
    assert result.stopped == "converged"
    assert result.record.settings["rounds"] == 5
    assert result.best == "a"


def test_indifference_is_recorded() -> None:
    clock = Clock()
    result = run(clock, {"a": clock.op("a", [100])})
    assert result.record.settings["indifference"] == INDIFFERENCE


# --- budget ----------------------------------------------------------------------------------


def test_budget_stops_sampling_and_decides_from_what_was_measured() -> None:
    clock = Clock()
    result = run(
        clock,
        {"a": clock.op("a", [100, 140], cycle=True), "b": clock.op("b", [115])},
        budget=1000.0,
    )
    assert result.stopped == "budget"
    # Two probes (215) and three rounds (725): a's next sample (140, as its last) does not fit
    # in the 60 seconds left, so the bench ends there, within its budget.
    assert result.elapsed == 940.0 <= 1000.0
    assert [len(c.samples) for c in result.record.candidates] == [3, 3]
    assert result.record.settings["rounds"] == 3
    assert result.best == "b"
    assert result.complete is True


def test_the_first_step_that_does_not_fit_ends_the_bench() -> None:
    clock = Clock()
    result = run(
        clock,
        {"a": clock.op("a", [100]), "b": clock.op("b", [90]), "c": clock.op("c", [10])},
        budget=250.0,
    )
    # The probes (200) fit; a's first sample (100) does not fit in the 50 left, so no candidate
    # is called again, though c's (10) would have: round-robin cannot go on fairly without a.
    assert clock.calls() == ["a", "b", "c"]
    assert result.stopped == "budget" and result.elapsed == 200.0
    assert [samples(result, n) for n in "abc"] == [(100.0,), (90.0,), (10.0,)]
    assert result.ranking == ("c", "b", "a") and result.best == "c"
    assert result.complete is False and result.too_slow == ()


def test_budget_counts_warmup_and_calibration() -> None:
    clock = Clock()
    result = bench(
        {"a": clock.op("a", [40]), "b": clock.op("b", [30])},
        sample_time=100.0,
        warmup=3,
        budget=100.0,
        clock=clock,
    )
    # Both probes (70); a's second warm-up call, expected to take as long as its probe (40),
    # does not fit in the 30 left: nothing more runs. Each keeps its probe as its one sample.
    assert clock.calls() == ["a", "b"]
    assert result.elapsed == 70.0
    assert result.stopped == "budget"
    assert samples(result, "a") == (40.0,)
    assert samples(result, "b") == (30.0,)
    assert result.best == "b"
    assert result.complete is False


def test_a_call_longer_than_what_is_left_is_too_slow_and_ends_the_bench() -> None:
    # Fake units of 0.1 ms: slow takes 5 s a call, fast 0.1 ms; the budget is 1 s.
    clock = Clock()
    result = bench(
        {"fast": clock.op("fast", [1]), "slow": clock.op("slow", [50_000])},
        sample_time=20.0,
        budget=10_000.0,
        clock=clock,
    )
    # slow's first call took 5 s with ~1 s left: the one call the budget cannot bound. It is
    # recorded as too slow with that call as its sample, and nothing runs after it.
    assert clock.calls() == ["fast", "slow"]
    assert result.elapsed == 50_001.0 < 10_000 + 50_000 + 1
    assert result.too_slow == ("slow",)
    error = result.errors["slow"]
    assert refusal(error) == TOO_SLOW
    assert error == "too slow: one call took 5e+04 s with 1e+04 s of the key's 1e+04 s budget left"
    assert samples(result, "slow") == (50_000.0,)
    assert result.ranking == ("fast",) and result.best == "fast"
    assert "slow" not in result.survivors()
    assert result.stopped == "budget"
    assert result.complete is False
    assert result.record.settings["complete"] is False
    assert codec.decode(codec.encode(result.record)) == result.record


def test_a_first_call_that_outlasts_the_budget_hides_the_rest_until_it_is_refused() -> None:
    clock = Clock()
    first = bench(
        {"slow": clock.op("slow", [500]), "fast": clock.op("fast", [1])},
        sample_time=5.0,
        budget=100.0,
        clock=clock,
    )
    # No probe starts once the budget is spent: fast is never called.
    assert clock.calls() == ["slow"] and first.elapsed == 500.0
    assert first.ranking == () and samples(first, "fast") == ()
    # A later bench that refuses slow, with its recorded timing, measures fast in full; slow's
    # one call is far beyond drop_ratio of fast's, so the evidence is complete.
    clock = Clock()
    second = bench(
        {"slow": clock.op("slow", [500]), "fast": clock.op("fast", [1])},
        sample_time=5.0,
        budget=100.0,
        clock=clock,
        refused={"slow": first.record.candidate("slow")},
    )
    assert "slow" not in clock.calls()
    assert second.record.candidate("slow") == first.record.candidate("slow")
    assert second.best == "fast" and second.stopped == "single" and second.complete is True
    assert [c.name for c in second.record.candidates] == ["slow", "fast"]


def test_a_too_slow_candidate_within_drop_ratio_leaves_the_evidence_incomplete() -> None:
    clock = Clock()
    too_slow = codec.CandidateTiming("b", (120.0,), error="too slow: one call took 120 s")
    result = run(
        clock, {"a": clock.op("a", [100]), "b": clock.op("b", [120])}, refused={"b": too_slow}
    )
    # a alone converges, but b's one call (120) is within 1.5x of a's: b might have won.
    assert result.stopped == "single" and result.best == "a"
    assert result.complete is False


def test_every_later_step_fits_in_what_is_left() -> None:
    clock = Clock()
    result = bench(
        {"a": clock.op("a", [3]), "b": clock.op("b", [5])},
        sample_time=30.0,
        budget=200.0,
        clock=clock,
    )
    # After the probes, every step is predicted from the candidate's last time per call: the
    # bench stops before b's next batch (8 calls, 40) would overrun the 22 left.
    assert result.stopped == "budget"
    assert result.elapsed == 178.0 <= 200.0
    assert result.best == "a"


def test_a_step_slower_than_predicted_overruns_by_that_step_only() -> None:
    clock = Clock()
    # b's calls take 100 until one takes 400 (a neighbour's burst), with 100 left: the bench
    # stops at that step, b recorded too slow, having overrun the budget by that one call.
    result = run(
        clock,
        {"b": clock.op("b", [100, 100, 400]), "a": clock.op("a", [100])},
        budget=500.0,
        max_samples=5,
    )
    assert clock.calls() == ["b", "a", "b", "a", "b"]
    assert result.stopped == "budget"
    assert result.too_slow == ("b",)
    assert samples(result, "b") == (100.0, 400.0)
    assert 500.0 < result.elapsed == 800.0 < 500.0 + 400.0


def test_a_candidate_calibrated_but_never_sampled_keeps_its_last_batch_not_its_probe() -> None:
    clock = Clock()
    result = bench(
        # a's probe is cold (10, slower than b); warm, a call takes 1.
        {"a": clock.op("a", [10, 1]), "b": clock.op("b", [5])},
        sample_time=20.0,
        warmup=1,
        budget=60.0,
        clock=clock,
    )
    # Probes: a 10, b 5 (15). a's calibration: 3 calls (18), then 24 (42); b's first batch
    # (5 calls, 25 by its probe) does not fit in the 18 left, and the bench ends.
    assert clock.calls() == ["a", "b"] + ["a"] * 27
    assert result.stopped == "budget"
    assert samples(result, "a") == (1.0,)  # the warm batch, not the cold probe
    assert result.record.candidate("a").inner_loops == 24
    assert samples(result, "b") == (5.0,)  # never calibrated: its probe
    assert result.best == "a"


def test_complete_when_every_candidate_has_min_samples_or_a_rule_decided() -> None:
    clock = Clock()
    converged = run(clock, {"a": clock.op("a", [100]), "b": clock.op("b", [200])})
    assert converged.stopped == "converged"
    assert converged.complete is True
    assert converged.record.settings["complete"] is True
    assert codec.decode(codec.encode(converged.record)).settings["complete"] is True

    # The budget ends sampling after min_samples rounds: the evidence is still complete.
    clock = Clock()
    late = run(
        clock,
        {"a": clock.op("a", [100, 140], cycle=True), "b": clock.op("b", [140, 100], cycle=True)},
        budget=1000.0,
    )
    assert late.stopped == "budget"
    assert [len(c.samples) for c in late.record.candidates] == [3, 3]
    assert late.complete is True
    assert late.record.settings["complete"] is True

    # ... but not before min_samples rounds.
    clock = Clock()
    early = run(
        clock,
        {"a": clock.op("a", [100, 140], cycle=True), "b": clock.op("b", [140, 100], cycle=True)},
        budget=500.0,
    )
    assert early.stopped == "budget"
    assert early.complete is False
    assert early.record.settings["complete"] is False

    # A candidate that raised does not make the record incomplete.
    clock = Clock()
    failed = run(clock, {"a": clock.op("a", [100]), "bad": clock.op("bad", [1], fail_at=1)})
    assert failed.complete is True


def test_the_bound_rule_ignores_a_candidate_that_just_raised() -> None:
    clock = Clock()
    result = run(
        clock,
        {
            # Under the bound's limit (100) but raises on its second sample (call 3).
            "flaky": clock.op("flaky", [50], fail_at=3),
            "a": clock.op("a", [120, 140], cycle=True),
            "b": clock.op("b", [140, 120], cycle=True),
        },
        lower_bound=80.0,
        max_samples=4,
    )
    assert result.errors["flaky"].startswith("ValueError: flaky failed")
    assert samples(result, "flaky") == (50.0,)
    assert result.stopped == "max_samples"
    assert result.best in ("a", "b")


# --- failures --------------------------------------------------------------------------------


def test_a_candidate_raising_in_its_probe_is_recorded_and_skipped() -> None:
    clock = Clock()
    result = run(
        clock,
        {"bad": clock.op("bad", [100], fail_at=1), "a": clock.op("a", [100])},
        min_samples=3,
    )
    assert result.errors == {"bad": "ValueError: bad failed on call 1"}
    assert result.record.candidate("bad").error == "ValueError: bad failed on call 1"
    assert samples(result, "bad") == ()
    assert result.best == "a"
    assert result.ranking == ("a",)
    assert result.stopped == "single"


def test_a_candidate_raising_mid_sampling_keeps_its_samples_but_loses_its_rank() -> None:
    clock = Clock()
    result = run(
        clock,
        {
            "flaky": clock.op("flaky", [50], fail_at=4),  # probe, 2 samples, then raises
            "a": clock.op("a", [100, 140], cycle=True),
            "b": clock.op("b", [140, 100], cycle=True),
        },
        max_samples=5,
    )
    assert result.errors["flaky"].startswith("ValueError: flaky failed")
    assert samples(result, "flaky") == (50.0, 50.0)
    assert result.medians["flaky"] == 50.0
    assert "flaky" not in result.ranking
    assert result.best in ("a", "b")
    assert "flaky" not in result.survivors()
    assert result.stopped == "max_samples"


def test_all_candidates_failing_gives_no_best() -> None:
    clock = Clock()
    result = run(clock, {"x": clock.op("x", [1], fail_at=1), "y": clock.op("y", [1], fail_at=3)})
    assert result.best is None
    assert result.ranking == ()
    assert result.stopped == "failed"
    assert set(result.errors) == {"x", "y"}
    assert result.survivors() == ()
    codec.encode(result.record)  # the failures are evidence too


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupts_propagate(exc: type[BaseException]) -> None:
    def stop() -> None:
        raise exc

    with pytest.raises(exc):
        bench({"a": stop}, clock=Clock())


# --- async devices ---------------------------------------------------------------------------


def test_sync_is_called_right_before_every_clock_read_of_a_timed_region() -> None:
    clock = Clock()
    result = run(
        clock,
        {"a": clock.op("a", [100, 140], cycle=True), "b": clock.op("b", [120])},
        sync=clock.sync,
        max_samples=4,
    )
    events = clock.events
    # With no budget, every read but the first (bench's start) and last (its end) opens or
    # closes a timed region.
    timed_reads = [i for i, e in enumerate(events) if e == "clock"][1:-1]
    assert timed_reads
    assert all(events[i - 1] == "sync" for i in timed_reads)
    assert events.count("sync") == len(timed_reads)
    regions = sum(len(c.samples) for c in result.record.candidates) + 2  # + 1 probe each
    assert len(timed_reads) == 2 * regions
    assert result.record.settings["sync"] is True


# --- options and the result ------------------------------------------------------------------


def _noop() -> None:
    pass


@pytest.mark.parametrize(
    ("candidates", "options"),
    [
        ({}, {}),
        ({"": _noop}, {}),
        ({"a": 1}, {}),
        ({"a": _noop}, {"min_samples": 0}),
        ({"a": _noop}, {"min_samples": True}),
        ({"a": _noop}, {"min_samples": 2.0}),
        ({"a": _noop}, {"min_samples": 5, "max_samples": 4}),
        ({"a": _noop}, {"drop_ratio": 1.0}),
        ({"a": _noop}, {"drop_ratio": math.nan}),
        ({"a": _noop}, {"lower_bound": 0.0}),
        ({"a": _noop}, {"lower_bound": math.inf}),
        ({"a": _noop}, {"bound_threshold": 0.0}),
        ({"a": _noop}, {"bound_threshold": 1.5}),
        ({"a": _noop}, {"budget": 0.0}),
        ({"a": _noop}, {"budget": -1.0}),
        ({"a": _noop}, {"budget": math.inf}),
        ({"a": _noop}, {"sample_time": 0.0}),
        ({"a": _noop}, {"sample_time": "1"}),
        ({"a": _noop}, {"warmup": -1}),
        ({"a": _noop}, {"sync": 3}),
        ({"a": _noop}, {"clock": None}),
    ],
)
def test_bad_options_are_refused(candidates: Any, options: dict[str, Any]) -> None:
    with pytest.raises(BadArgumentError):
        bench(candidates, **options)


def test_survivors_keep_the_best_few_within_the_ratio() -> None:
    clock = Clock()
    result = run(
        clock,
        {
            "a": clock.op("a", [100]),
            "b": clock.op("b", [110]),
            "c": clock.op("c", [140]),
            "d": clock.op("d", [200]),
            "e": clock.op("e", [10], fail_at=1),
        },
    )
    assert result.ranking == ("a", "b", "c", "d")
    assert result.pruned == ("d",)
    assert result.survivors() == ("a", "b", "c")  # within drop_ratio 1.5
    assert result.survivors(keep=2) == ("a", "b")
    assert result.survivors(within=1.2) == ("a", "b")
    assert result.survivors(keep=1, within=1.0) == ("a",)
    with pytest.raises(BadArgumentError):
        result.survivors(keep=0)
    with pytest.raises(BadArgumentError):
        result.survivors(within=0.5)


def test_one_candidate_still_gets_min_samples() -> None:
    clock = Clock()
    result = run(clock, {"only": clock.op("only", [100])}, min_samples=4)
    assert result.stopped == "single"
    assert samples(result, "only") == (100.0,) * 4
    assert result.best == "only"


def test_the_record_round_trips_and_says_how_it_was_made() -> None:
    clock = Clock()
    result = run(clock, {"a": clock.op("a", [100]), "b": clock.op("b", [130])}, lower_bound=10.0)
    record = result.record
    assert codec.decode(codec.encode(record)) == record
    assert [c.name for c in record.candidates] == ["a", "b"]
    assert record.best() is not None and record.best().name == result.best  # type: ignore[union-attr]
    assert record.settings["stopped"] == result.stopped == "converged"
    assert record.settings["elapsed"] == result.elapsed == clock.now
    for option in ("min_samples", "max_samples", "drop_ratio", "budget", "sample_time", "warmup"):
        assert option in record.settings
    assert {"python", "numpy", "machine", "cpu_count"} <= set(record.env)
    assert isinstance(record.env["numpy"], str)


def test_result_mappings_are_read_only() -> None:
    clock = Clock()
    result = run(clock, {"a": clock.op("a", [100]), "b": clock.op("b", [1], fail_at=1)})
    with pytest.raises(TypeError):
        result.medians["a"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        result.errors["b"] = "x"  # type: ignore[index]


# --- properties ------------------------------------------------------------------------------

_times = st.lists(st.integers(min_value=50, max_value=400), min_size=1, max_size=6)


@settings(max_examples=150)
@given(
    scripts=st.lists(_times, min_size=1, max_size=5),
    min_samples=st.integers(1, 4),
    extra=st.integers(0, 6),
    drop_ratio=st.sampled_from([1.2, 1.5, 3.0]),
    lower_bound=st.one_of(st.none(), st.integers(20, 200)),
)
def test_decision_invariants(
    scripts: list[list[int]],
    min_samples: int,
    extra: int,
    drop_ratio: float,
    lower_bound: int | None,
) -> None:
    clock = Clock()
    names = [f"c{i}" for i in range(len(scripts))]
    candidates = {n: clock.op(n, s, cycle=True) for n, s in zip(names, scripts, strict=True)}
    max_samples = min_samples + extra
    result = run(
        clock,
        candidates,
        min_samples=min_samples,
        max_samples=max_samples,
        drop_ratio=drop_ratio,
        lower_bound=None if lower_bound is None else float(lower_bound),
    )
    record = result.record
    counts = {c.name: len(c.samples) for c in record.candidates}
    assert all(1 <= n <= max_samples for n in counts.values())
    medians = {c.name: statistics.median(c.samples) for c in record.candidates}
    live = [n for n in names if n not in result.pruned]
    # The best is the lowest median of those not pruned, the first one on a tie.
    assert result.best == min(live, key=lambda n: medians[n])
    assert result.ranking == tuple(sorted(names, key=lambda n: (medians[n], names.index(n))))
    # A pruned candidate was dropped after min_samples, its median then beyond drop_ratio x
    # another candidate's median over the same number of rounds.
    for name in result.pruned:
        k = counts[name]
        assert k >= min_samples
        assert any(
            statistics.median(c.samples[:k]) * drop_ratio < medians[name]
            for c in record.candidates
            if c.name != name and len(c.samples) >= k
        )
    if result.stopped in ("converged", "max_samples", "single"):
        assert all(counts[n] >= min_samples for n in names)
    if result.stopped == "max_samples":
        assert all(counts[n] == max_samples for n in live)
    if result.stopped == "bound":
        assert lower_bound is not None
        assert any(counts[n] >= 2 and medians[n] <= lower_bound / 0.8 for n in names)
    assert codec.decode(codec.encode(record)) == record


# --- the real clock --------------------------------------------------------------------------


def test_smoke_on_real_numpy_ops() -> None:
    a = np.random.default_rng(0).standard_normal(2000)
    result = bench(
        {"sort": lambda: np.sort(a), "argsort": lambda: a[np.argsort(a)]},
        sample_time=2e-4,
        budget=0.5,
    )
    assert result.best in ("sort", "argsort")
    assert set(result.medians) == {"sort", "argsort"}
    assert all(s > 0 for c in result.record.candidates for s in c.samples)
    assert all(c.inner_loops >= 1 for c in result.record.candidates)
    assert result.record.settings["clock"] == "perf_counter"
    assert result.elapsed > 0


_budget_scripts = st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=4)


@settings(max_examples=150)
@given(
    scripts=st.lists(_budget_scripts, min_size=1, max_size=4),
    budget=st.integers(1, 3000),
    sample_time=st.sampled_from([1.0, 50.0, 500.0]),
    warmup=st.integers(0, 3),
)
# The budget ended by c1's one call, which its time rules out anyway: complete all the same.
@example(scripts=[[1, 53], [50, 51]], budget=1282, sample_time=50.0, warmup=0)
def test_the_budget_is_overrun_by_one_step_at_most(
    scripts: list[list[int]], budget: int, sample_time: float, warmup: int
) -> None:
    clock = Clock()
    names = [f"c{i}" for i in range(len(scripts))]
    result = bench(
        {n: clock.op(n, s, cycle=True) for n, s in zip(names, scripts, strict=True)},
        budget=float(budget),
        sample_time=sample_time,
        warmup=warmup,
        clock=clock,
    )
    # Every step begins with budget left, so the bench ends before budget + one step: one call
    # of a candidate, or one batch of its calls (calibration grows a batch at most tenfold
    # past one that lasted under sample_time).
    longest_step = max(max(s) * (10 * math.ceil(sample_time / min(s)) + 2) for s in scripts)
    assert result.elapsed < budget + longest_step
    if result.elapsed > budget:
        assert result.stopped == "budget"
        # The evidence is complete all the same only where the budget cut nothing short: each
        # candidate it recorded too slow is ruled out by its one call (beyond drop_ratio of
        # the best measured), and each other one was measured min_samples times or pruned.
        settings_ = result.record.settings
        timings = result.record.candidates
        medians = [c.median for c in timings if c.error is None and not c.pruned and c.samples]
        best = min((m for m in medians if m is not None), default=None)
        ruled_out = all(
            best is not None and min(c.samples) > best * float(settings_["drop_ratio"])
            for c in timings
            if c.name in result.too_slow
        )
        measured = all(
            c.error is not None or c.pruned or len(c.samples) >= int(settings_["min_samples"])
            for c in timings
        )
        assert result.complete is (ruled_out and measured)
    for name in result.too_slow:
        assert refusal(result.errors[name]) == TOO_SLOW
        assert len(samples(result, name)) >= 1 and name not in result.ranking


def test_the_bench_records_how_long_it_waited_for_a_cpu() -> None:
    clock = Clock()
    waits = iter([10.0, 10.0])
    quiet = run(clock, {"a": clock.op("a", [100])}, cpu_wait=lambda: next(waits))
    assert quiet.record.settings["waited"] == 0.0
    unknown = run(clock, {"a": clock.op("a", [100])}, cpu_wait=lambda: None)
    assert unknown.record.settings["waited"] is None
    # The fraction of the bench's wall time: a bench that waited "an hour" waited >100%.
    waits = iter([0.0, 3600.0])
    busy = run(clock, {"a": clock.op("a", [100])}, cpu_wait=lambda: next(waits))
    waited = busy.record.settings["waited"]
    assert isinstance(waited, float) and waited > 1.0


@pytest.mark.parametrize(
    ("refused", "message"),
    [
        ({"z": codec.CandidateTiming("z", error="x")}, "not one of the candidates"),
        ({"a": codec.CandidateTiming("b", error="x")}, "needs its CandidateTiming"),
        ({"a": codec.CandidateTiming("a")}, "needs an error"),
        ({"a": "slow"}, "needs its CandidateTiming"),
    ],
)
def test_refused_candidates_must_say_why(refused: dict[str, Any], message: str) -> None:
    with pytest.raises(BadArgumentError, match=message):
        bench({"a": _noop, "b": _noop}, refused=refused)
    with pytest.raises(BadArgumentError, match="refused must map"):
        bench({"a": _noop}, refused=["a"])  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="cpu_wait"):
        bench({"a": _noop}, cpu_wait=3)  # type: ignore[arg-type]


def test_a_refused_candidate_is_recorded_as_given_and_never_called() -> None:
    clock = Clock()
    wrong = codec.CandidateTiming("b", error="wrong output: largest difference 1")
    result = run(clock, {"a": clock.op("a", [100]), "b": clock.op("b", [1])}, refused={"b": wrong})
    assert clock.calls() == ["a"] * 4  # the probe and three samples: b never ran
    assert result.record.candidate("b") == wrong
    assert result.errors == {"b": "wrong output: largest difference 1"}
    assert result.best == "a" and result.stopped == "single" and result.complete is True


def test_the_probes_check_every_output_against_the_reference() -> None:
    clock = Clock()
    outputs = {"a": 1.0, "ref": 1.0, "off": 2.0}

    def op(name: str, time: int) -> Callable[[], float]:
        call = clock.op(name, [time])

        def run() -> float:
            call()
            return outputs[name]

        return run

    def compare(expected: float, actual: float) -> str | None:
        return None if expected == actual else f"{actual} is not {expected}"

    result = run(
        clock,
        {"a": op("a", 100), "ref": op("ref", 120), "off": op("off", 10)},
        reference="ref",
        compare=compare,
    )
    # The reference is probed first; off, the fastest, differs: refused after its probe.
    assert clock.calls()[:3] == ["ref", "a", "off"]
    assert "off" not in clock.calls()[3:]
    assert result.errors == {"off": "wrong output: 2.0 is not 1.0"}
    assert refusal(result.errors["off"]) == WRONG and samples(result, "off") == ()
    assert result.best == "a" and result.record.settings["checked"] is True
    # A reference that raises leaves nothing to compare with: the record says so.
    clock = Clock()
    unchecked = run(
        clock,
        {"ref": clock.op("ref", [1], fail_at=1), "a": clock.op("a", [100])},
        reference="ref",
        compare=compare,
    )
    assert unchecked.record.settings["checked"] is False and unchecked.best == "a"
    for bad in ({"reference": "ref"}, {"compare": compare}, {"reference": "z", "compare": compare}):
        with pytest.raises(BadArgumentError, match="compare needs a reference"):
            bench({"ref": _noop}, **bad)  # type: ignore[arg-type]
