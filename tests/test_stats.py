"""Tests for tunecache.stats: exact signed-rank p-values, the matched interval, noise, classify."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunecache import stats
from tunecache.errors import BadArgumentError
from tunecache.stats import Comparison, classify, compare


def _pairs(ratios: list[float]) -> tuple[list[float], list[float]]:
    """A all 1.0 s and B = ratio x A: the log ratios are exactly log(ratio)."""
    return [1.0] * len(ratios), list(ratios)


# --- exact p-values against hand-counted cases ----------------------------------------------


def test_every_pair_faster_gives_the_smallest_p_value() -> None:
    # W+ = 0: only the empty subset of {1, 2, 3} sums to 0, so P = 1/8.
    c = compare(*_pairs([0.5, 0.8, 0.9]))
    assert c.p_faster == pytest.approx(1 / 8)
    assert c.p_slower == pytest.approx(1.0)


def test_one_small_loss_among_three() -> None:
    # |log| ranks: 1.1 -> 1, 0.8 -> 2, 0.5 -> 3; W+ = 1. Subsets summing <= 1: {}, {1} of 8.
    c = compare(*_pairs([0.5, 0.8, 1.1]))
    assert c.p_faster == pytest.approx(2 / 8)
    assert c.p_slower == pytest.approx(7 / 8)


def test_tied_magnitudes_use_midranks() -> None:
    # |log 2| = |log 0.5|: three ties at midrank 2, W+ = 2 x (number positive) ~ 2 x Bin(3, 1/2).
    c = compare(*_pairs([2.0, 0.5, 0.5]))
    assert c.p_faster == pytest.approx(4 / 8)  # at most one positive
    assert c.p_slower == pytest.approx(7 / 8)  # at least one positive


def test_zero_differences_are_dropped() -> None:
    with_zero = compare(*_pairs([1.0, 0.5, 0.8, 1.1]))
    without = compare(*_pairs([0.5, 0.8, 1.1]))
    assert with_zero.p_faster == without.p_faster
    assert with_zero.pairs == 4


def test_all_ties_at_zero_mean_no_evidence() -> None:
    c = compare([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert (c.p_faster, c.p_slower, c.speedup, c.noise) == (1.0, 1.0, 1.0, 0.0)


def test_ten_wins_in_ten() -> None:
    c = compare(*_pairs([0.9 - 0.01 * i for i in range(10)]))
    assert c.p_faster == pytest.approx(2.0**-10)


def test_normal_approximation_is_close_to_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    ratios = list(np.exp(rng.normal(-0.03, 0.1, 60)))
    exact = compare(*_pairs(ratios))
    monkeypatch.setattr(stats, "EXACT_LIMIT", 10)
    stats._critical_count.cache_clear()
    approx = compare(*_pairs(ratios))
    stats._critical_count.cache_clear()
    assert approx.p_faster == pytest.approx(exact.p_faster, abs=0.005)
    assert approx.p_slower == pytest.approx(exact.p_slower, abs=0.005)
    assert approx.low == pytest.approx(exact.low, rel=0.01)


# --- estimate, interval, noise -------------------------------------------------------------


def test_speedup_is_the_hodges_lehmann_centre() -> None:
    # log ratios -a, -b, -c with Walsh averages whose median is log(0.8): speedup 1.25.
    c = compare(*_pairs([0.8, 0.8, 0.8, 0.5, 2.0]))
    assert c.speedup == pytest.approx(1.25)
    assert c.pairs == 5


def test_two_pairs_cannot_bound_the_speedup() -> None:
    c = compare(*_pairs([0.5, 0.5]))
    assert (c.low, c.high) == (0.0, math.inf)


def test_interval_brackets_the_estimate_and_narrows_with_more_pairs() -> None:
    rng = np.random.default_rng(3)
    small = compare(*_pairs(list(0.9 * rng.uniform(0.9, 1.1, 10) / rng.uniform(0.9, 1.1, 10))))
    large = compare(*_pairs(list(0.9 * rng.uniform(0.9, 1.1, 80) / rng.uniform(0.9, 1.1, 80))))
    for c in (small, large):
        assert c.low < c.speedup < c.high
    assert large.high / large.low < small.high / small.low


def test_interval_covers_the_true_speedup_at_its_level() -> None:
    rng = np.random.default_rng(11)
    true = 1 / 0.9
    trials = 400
    covered = 0
    for _ in range(trials):
        a = rng.uniform(0.9, 1.1, 15)
        b = 0.9 * rng.uniform(0.9, 1.1, 15)
        c = compare(list(a), list(b), alpha=0.1)
        covered += c.low <= true <= c.high
    # Nominal 90%, exact for symmetric noise; binomial sd over 400 trials is 1.5 points.
    assert 0.85 <= covered / trials <= 0.95


def test_noise_is_the_scaled_mad_of_the_log_ratios() -> None:
    logs = [0.0, 0.1, -0.1, 0.2, -0.2]
    c = compare(*_pairs([math.exp(x) for x in logs]))
    assert c.noise == pytest.approx(math.expm1(1.4826 * 0.1))


# --- classify --------------------------------------------------------------------------------


def _comparison(speedup: float, p_faster: float, p_slower: float) -> Comparison:
    return Comparison(speedup, speedup * 0.9, speedup * 1.1, 0.05, p_faster, p_slower, 10)


@pytest.mark.parametrize(
    ("c", "min_change", "expected"),
    [
        (_comparison(1.2, 0.001, 0.999), 0.0, "improved"),
        (_comparison(1.2, 0.001, 0.999), 0.25, "neutral"),
        (_comparison(1.2, 0.02, 0.98), 0.0, "neutral"),
        (_comparison(0.8, 0.999, 0.001), 0.0, "regressed"),
        (_comparison(0.8, 0.999, 0.001), 0.3, "neutral"),
        (_comparison(1.0, 0.5, 0.5), 0.0, "neutral"),
    ],
)
def test_classify(c: Comparison, min_change: float, expected: str) -> None:
    assert classify(c, alpha=0.01, min_change=min_change) == expected


def test_classify_real_comparisons() -> None:
    assert classify(compare(*_pairs([0.8 + 0.001 * i for i in range(12)]))) == "improved"
    assert classify(compare(*_pairs([1.3 + 0.001 * i for i in range(12)]))) == "regressed"
    assert classify(compare(*_pairs([0.9, 1.1, 0.95, 1.05, 1.0, 0.97, 1.02]))) == "neutral"


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([1.0, 2.0], [1.0], "equal lengths"),
        ([1.0], [1.0], "at least 2 pairs"),
        ([], [], "at least 2 pairs"),
        ([1.0, 0.0], [1.0, 1.0], r"a\[1\] = 0.0"),
        ([1.0, 1.0], [1.0, -2.0], r"b\[1\] = -2.0"),
        ([1.0, math.nan], [1.0, 1.0], "positive and finite"),
        ([1.0, 1.0], [math.inf, 1.0], "positive and finite"),
        (["x", "y"], [1.0, 1.0], "must be numbers"),
    ],
)
def test_bad_times_are_refused_in_one_line(a: list[float], b: list[float], message: str) -> None:
    with pytest.raises(BadArgumentError, match=message) as info:
        compare(a, b)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, math.nan])
def test_bad_alpha_is_refused(alpha: float) -> None:
    with pytest.raises(BadArgumentError, match="alpha"):
        compare([1.0, 1.0], [1.0, 1.0], alpha=alpha)
    with pytest.raises(BadArgumentError, match="alpha"):
        classify(_comparison(1.0, 0.5, 0.5), alpha=alpha)


def test_bad_min_change_is_refused() -> None:
    with pytest.raises(BadArgumentError, match="min_change"):
        classify(_comparison(1.0, 0.5, 0.5), min_change=-0.1)


# --- properties ------------------------------------------------------------------------------

times = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
paired = st.integers(min_value=2, max_value=25).flatmap(
    lambda n: st.tuples(
        st.lists(times, min_size=n, max_size=n), st.lists(times, min_size=n, max_size=n)
    )
)


@settings(deadline=None, max_examples=150)
@given(paired)
def test_swapping_sides_mirrors_the_comparison(ab: tuple[list[float], list[float]]) -> None:
    a, b = ab
    forward, backward = compare(a, b), compare(b, a)
    assert backward.speedup == pytest.approx(1 / forward.speedup, rel=1e-9)
    assert backward.p_faster == pytest.approx(forward.p_slower, rel=1e-9)
    assert backward.p_slower == pytest.approx(forward.p_faster, rel=1e-9)
    if math.isfinite(forward.high):
        assert backward.low == pytest.approx(1 / forward.high, rel=1e-9)
    else:
        assert backward.low == 0.0


@settings(deadline=None, max_examples=150)
@given(paired, st.integers(min_value=-20, max_value=20))
def test_scaling_both_sides_changes_nothing(
    ab: tuple[list[float], list[float]], power: int
) -> None:
    # A power of two scales exactly, so the log ratios are bit for bit the same.
    a, b = ab
    scale = 2.0**power
    before = compare(a, b)
    after = compare([x * scale for x in a], [x * scale for x in b])
    assert after == before
    assert classify(after) == classify(before)


@settings(deadline=None, max_examples=100)
@given(paired)
def test_p_values_are_probabilities_that_cover_every_outcome(
    ab: tuple[list[float], list[float]],
) -> None:
    c = compare(*ab)
    assert 0.0 < c.p_faster <= 1.0 and 0.0 < c.p_slower <= 1.0
    # P(W+ <= w) + P(W+ >= w) = 1 + P(W+ = w) >= 1.
    assert c.p_faster + c.p_slower >= 1.0 - 1e-12
    assert c.low <= c.speedup <= c.high
