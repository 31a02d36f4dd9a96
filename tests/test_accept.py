"""Tests for tunecache.accept: the paired whole-model rule, on a fake clock and seeded run times."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tunecache import accept as _accept
from tunecache.accept import Verdict
from tunecache.errors import BadArgumentError


def accept(*args: Any, seed: int | None = 0, **kwargs: Any) -> Verdict:
    """accept() with its order coin seeded, so every test here is deterministic."""
    return _accept.accept(*args, seed=seed, **kwargs)


def measure(*args: Any, seed: int | None = 0, **kwargs: Any) -> tuple[list[float], list[float]]:
    return _accept.measure(*args, seed=seed, **kwargs)


class FakeModel:
    """Two 'whole-model runs' that advance a fake clock by seeded synthetic times.

    Each run of A takes base x U(0.9, 1.1) seconds and each run of B ratio x base x U(0.9, 1.1):
    +-10% run-to-run noise, as measured on real machines. Every call is logged.
    """

    def __init__(self, ratio: float, seed: int, noise: float = 0.1, base: float = 0.01) -> None:
        self.now = 0.0
        self.ratio, self.noise, self.base = ratio, noise, base
        self.rng = np.random.default_rng(seed)
        self.log: list[str] = []

    def clock(self) -> float:
        self.log.append("clock")
        return self.now

    def sync(self) -> None:
        self.log.append("sync")

    def _advance(self, scale: float) -> None:
        self.now += self.base * scale * self.rng.uniform(1 - self.noise, 1 + self.noise)

    def run_a(self) -> None:
        self.log.append("A")
        self._advance(1.0)

    def run_b(self) -> None:
        self.log.append("B")
        self._advance(self.ratio)

    def runs(self) -> list[str]:
        return [x for x in self.log if x in ("A", "B")]


class Scripted:
    """Runs whose durations come from fixed lists, to steer a block's outcome exactly."""

    def __init__(self, a: list[float], b: list[float]) -> None:
        self.now = 0.0
        self.a: Iterator[float] = iter(a)
        self.b: Iterator[float] = iter(b)
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def run_a(self) -> None:
        self.calls += 1
        self.now += next(self.a)

    def run_b(self) -> None:
        self.calls += 1
        self.now += next(self.b)


def _accepts(ratio: float, trials: int, seed: int) -> int:
    count = 0
    for i in range(trials):
        m = FakeModel(ratio, seed=seed * 100_000 + i)
        count += accept(m.run_a, m.run_b, clock=m.clock).accepted
    return count


# --- the targets, on seeded batches ----------------------------------------------------------


def test_a_a_runs_are_almost_never_accepted() -> None:
    # Target: at most 1 false accept in 100. The exact test bounds it by alpha/2 = 0.5%.
    assert _accepts(1.0, trials=400, seed=1) <= 4


def test_a_10_percent_faster_b_is_accepted_at_least_95_percent_of_the_time() -> None:
    assert _accepts(0.9, trials=300, seed=2) >= 285


def test_a_slower_b_is_never_accepted() -> None:
    assert _accepts(1.1, trials=100, seed=3) == 0


def test_a_clear_30_percent_win_is_accepted_with_the_evidence() -> None:
    m = FakeModel(0.7, seed=4)
    v = accept(m.run_a, m.run_b, clock=m.clock, confirmations=3, pairs=6)
    assert v.accepted
    assert v.reason.startswith("accepted")
    assert (v.confirmations, v.needed, v.rounds) == (3, 3, 18)
    assert len(v.a) == len(v.b) == 18
    assert 1.3 < v.speedup < 1.55
    assert 1.0 < v.low < v.speedup < v.high
    assert v.p_value < 0.001
    assert 0.0 < v.noise < 0.2


# --- the rule, step by step ------------------------------------------------------------------


def test_a_lost_first_block_stops_at_once() -> None:
    m = FakeModel(1.2, seed=5, noise=0.0)
    v = accept(m.run_a, m.run_b, clock=m.clock, confirmations=3, pairs=5, warmup=1)
    assert not v.accepted
    assert (v.rounds, v.confirmations) == (5, 0)
    assert len(m.runs()) == 2 + 2 * 5  # warm-up pair, then one block only
    assert "lost confirmation block 1 of 3" in v.reason


def test_a_block_lost_after_wins_stops_there_and_is_not_accepted() -> None:
    # Block 1: B faster in every pair; block 2: B slower in every pair; block 3 never runs.
    a = [1.0] * 2 + [1.0] * 8
    b = [1.0] * 2 + [0.8] * 4 + [1.2] * 4
    s = Scripted(a + [1.0] * 10, b + [1.0] * 10)
    v = accept(s.run_a, s.run_b, clock=s.clock, confirmations=3, pairs=4, warmup=2)
    assert not v.accepted
    assert (v.rounds, v.confirmations) == (8, 1)
    assert s.calls == 4 + 16
    assert "block 2 of 3" in v.reason
    # The overall estimate is still reported, on everything measured.
    assert v.speedup == pytest.approx(1.0, abs=0.05)


def test_winning_every_block_is_not_enough_without_significance() -> None:
    # B wins each block by a hair in its median, but loses big in the other pair of each.
    s = Scripted([1.0] * 6, [0.99, 0.99, 1.5] * 2)
    v = accept(s.run_a, s.run_b, clock=s.clock, confirmations=2, pairs=3, warmup=0)
    assert v.confirmations == 2
    assert not v.accepted
    assert v.reason.startswith("not accepted: not significant")


def test_min_speedup_is_enforced() -> None:
    m = FakeModel(1 / 1.1, seed=6, noise=0.01)
    v = accept(m.run_a, m.run_b, clock=m.clock, min_speedup=1.2)
    assert v.confirmations == 3 and v.low > 1.0
    assert not v.accepted
    assert "min_speedup 1.2" in v.reason
    m = FakeModel(1 / 1.1, seed=6, noise=0.01)
    assert accept(m.run_a, m.run_b, clock=m.clock, min_speedup=1.05).accepted


def test_each_pair_runs_both_sides_back_to_back_in_random_order() -> None:
    m = FakeModel(0.5, seed=7, noise=0.0)
    v = accept(m.run_a, m.run_b, clock=m.clock, confirmations=2, pairs=6, warmup=0, seed=3)
    runs = m.runs()
    pairs = ["".join(runs[i : i + 2]) for i in range(0, len(runs), 2)]
    assert len(pairs) == 12 and set(pairs) == {"AB", "BA"}
    # Each side's timing is its own whichever went first: A takes 10 ms, B 5 ms.
    assert v.a == pytest.approx([0.01] * 12) and v.b == pytest.approx([0.005] * 12)
    # The same seed gives the same order; the coin, not a fixed pattern, decides it.
    again = FakeModel(0.5, seed=7, noise=0.0)
    accept(again.run_a, again.run_b, clock=again.clock, confirmations=2, pairs=6, warmup=0, seed=3)
    assert again.runs() == runs
    other = FakeModel(0.5, seed=7, noise=0.0)
    accept(other.run_a, other.run_b, clock=other.clock, confirmations=2, pairs=6, warmup=0, seed=4)
    assert other.runs() != runs


def test_randomised_order_keeps_a_first_run_advantage_from_faking_a_win() -> None:
    # Whichever runs second in a pair is 20% faster (a warm cache), and B does nothing: with a
    # fixed AB order B would always win; with random order it must not be accepted.
    class Warm:
        def __init__(self) -> None:
            self.now, self.last = 0.0, ""

        def clock(self) -> float:
            return self.now

        def run(self, side: str) -> None:
            self.now += 0.008 if self.last and self.last != side else 0.01
            self.last = side

    accepted = 0
    for seed in range(50):
        w = Warm()
        run_a, run_b = functools.partial(w.run, "A"), functools.partial(w.run, "B")
        accepted += accept(run_a, run_b, clock=w.clock, seed=seed).accepted
    assert accepted == 0


def test_warmup_runs_are_untimed() -> None:
    # The two warm-up runs of each side take 100 s; no timing may include them.
    s = Scripted([100.0, 100.0] + [1.0] * 6, [100.0, 100.0] + [0.5] * 6)
    a, b = measure(s.run_a, s.run_b, pairs=6, warmup=2, clock=s.clock)
    assert a == [1.0] * 6 and b == [0.5] * 6
    assert s.calls == 4 + 12


def test_sync_is_called_before_every_clock_read() -> None:
    m = FakeModel(0.8, seed=8)
    a, b = measure(m.run_a, m.run_b, pairs=3, warmup=1, clock=m.clock, sync=m.sync)
    assert len(a) == len(b) == 3
    reads = [i for i, x in enumerate(m.log) if x == "clock"]
    assert len(reads) == 2 * 6
    assert all(m.log[i - 1] == "sync" for i in reads)
    # Each timed run sits between two clock reads: sync, clock, run, sync, clock.
    assert m.log[:2] == ["A", "B"]  # the untimed warm-up
    assert m.log[2:4] == ["sync", "clock"] and m.log[4] in ("A", "B")
    assert m.log[5:7] == ["sync", "clock"]


def test_accept_syncs_too() -> None:
    m = FakeModel(0.7, seed=9)
    v = accept(m.run_a, m.run_b, clock=m.clock, sync=m.sync)
    assert m.log.count("sync") == 2 * (len(v.a) + len(v.b))


def test_budget_running_out_means_not_accepted() -> None:
    m = FakeModel(0.7, seed=10, base=1.0)
    v = accept(m.run_a, m.run_b, clock=m.clock, budget=9.0, warmup=1)
    assert not v.accepted
    assert "budget of 9 s ran out" in v.reason
    # Warm-up (~2 s) and pairs (~1.7 s each) until the clock passes 9 s: a few pairs, not 18.
    assert 3 <= v.rounds <= 6
    assert len(m.runs()) == 2 + 2 * v.rounds


def test_budget_spent_in_warmup_reports_no_estimate_and_stays_json_safe() -> None:
    m = FakeModel(0.7, seed=11, base=1.0)
    v = accept(m.run_a, m.run_b, clock=m.clock, budget=0.5, warmup=3)
    assert not v.accepted and v.rounds == 0 and math.isnan(v.speedup)
    assert len(m.runs()) == 2  # the budget is checked before each warm-up round
    d = json.loads(json.dumps(v.as_dict(), allow_nan=False))
    assert d["speedup"] is None and d["a"] == [] and d["accepted"] is False


def test_a_generous_budget_changes_nothing() -> None:
    m1, m2 = FakeModel(0.8, seed=12), FakeModel(0.8, seed=12)
    assert accept(m1.run_a, m1.run_b, clock=m1.clock, budget=1e6) == accept(
        m2.run_a, m2.run_b, clock=m2.clock
    )


def test_verdict_as_dict_round_trips_through_json() -> None:
    m = FakeModel(0.7, seed=13)
    v = accept(m.run_a, m.run_b, clock=m.clock)
    d: dict[str, Any] = json.loads(json.dumps(v.as_dict(), allow_nan=False))
    fields: dict[str, Any] = {k: tuple(x) if isinstance(x, list) else x for k, x in d.items()}
    assert Verdict(**fields) == v


# --- failures and bad arguments --------------------------------------------------------------


def test_a_run_that_raises_propagates() -> None:
    m = FakeModel(1.0, seed=14)

    def broken() -> None:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError, match="model failed"):
        accept(m.run_a, broken, clock=m.clock)


def test_keyboard_interrupt_propagates() -> None:
    m = FakeModel(1.0, seed=15)
    calls = 0

    def interrupted() -> None:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise KeyboardInterrupt
        m.run_b()

    with pytest.raises(KeyboardInterrupt):
        accept(m.run_a, interrupted, clock=m.clock)


def test_a_clock_that_does_not_advance_is_refused() -> None:
    with pytest.raises(BadArgumentError, match="clock did not advance"):
        accept(lambda: None, lambda: None, clock=lambda: 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"confirmations": 0}, "confirmations"),
        ({"pairs": 0}, "pairs"),
        ({"pairs": True}, "pairs"),
        ({"pairs": 2.0}, "pairs"),
        ({"warmup": -1}, "warmup"),
        ({"confirmations": 1, "pairs": 1}, "at least 2 pairs"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"min_speedup": 0.0}, "min_speedup"),
        ({"min_speedup": math.inf}, "min_speedup"),
        ({"budget": 0.0}, "budget"),
        ({"budget": math.nan}, "budget"),
        ({"sync": 3}, "sync"),
        ({"clock": None}, "clock"),
    ],
)
def test_bad_arguments_are_refused_before_any_run(kwargs: dict[str, object], message: str) -> None:
    m = FakeModel(1.0, seed=16)
    with pytest.raises(BadArgumentError, match=message) as info:
        accept(m.run_a, m.run_b, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    assert m.runs() == []


def test_measure_refuses_bad_arguments() -> None:
    m = FakeModel(1.0, seed=17)
    with pytest.raises(BadArgumentError, match="pairs"):
        measure(m.run_a, m.run_b, pairs=0)
    with pytest.raises(BadArgumentError, match="run_b"):
        measure(m.run_a, "not callable", pairs=2)
    assert m.runs() == []
