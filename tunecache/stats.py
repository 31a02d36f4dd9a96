"""Paired statistics on whole-model run times: is B faster than A, by how much, how sure.

Whole-model runs swing about +-10% from one run to the next, so a decision never rests on one
timing. A and B are run in back-to-back pairs and each pair gives one log ratio log(b/a): drift
and load that hit both runs of a pair cancel in it. On those ratios:

- the speedup is exp(-HL), HL the Hodges-Lehmann centre (median of the Walsh averages), robust
  to the odd slow run;
- the (1 - alpha) confidence interval is the one matched to the Wilcoxon signed-rank test
  (order statistics of the Walsh averages);
- the p-values are one-sided Wilcoxon signed-rank tests, exact (a dynamic program over the
  ranks, ties as midranks) up to `EXACT_LIMIT` pairs and a normal approximation beyond;
- the noise is 1.4826 x MAD of the log ratios: the spread of one pair's ratio, as a fraction.

Only numpy and the standard library: the tuner imports this, the resolver never does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tunecache.errors import BadArgumentError

__all__ = ["EXACT_LIMIT", "Comparison", "classify", "compare", "log_ratios"]

#: up to this many nonzero pairs the signed-rank distribution is computed exactly
EXACT_LIMIT = 200

# Log ratios closer than this to each other (or to zero) are ties: far below any clock's
# resolution, and it keeps a verdict from hanging on the last bit of a float division.
_DECIMALS = 12

# 1 / Phi^-1(3/4): scales a normal distribution's MAD to its standard deviation.
_MAD_SCALE = 1.4826

FloatArray = npt.NDArray[np.float64]


class Comparison(NamedTuple):
    """What paired runs of A and B say about B's speed relative to A."""

    speedup: float  # paired estimate of A's time over B's (> 1: B is faster)
    low: float  # lower end of the (1 - alpha) confidence interval on speedup
    high: float  # upper end
    noise: float  # spread of one pair's ratio, as a fraction (1.4826 * MAD of log ratios)
    p_faster: float  # one-sided p-value against "B is not faster"
    p_slower: float  # one-sided p-value against "B is not slower"
    pairs: int


def log_ratios(a: Sequence[float], b: Sequence[float]) -> FloatArray:
    """log(b_i / a_i) for paired times, checked; negative means B's run was faster."""
    if len(a) != len(b):
        raise BadArgumentError(f"paired times need equal lengths, got {len(a)} and {len(b)}")
    if len(a) < 2:
        raise BadArgumentError(f"paired comparison needs at least 2 pairs, got {len(a)}")
    try:
        xa = np.asarray(a, dtype=np.float64)
        xb = np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise BadArgumentError(f"times must be numbers: {error}") from None
    if xa.ndim != 1 or xb.ndim != 1:
        raise BadArgumentError("times must be flat sequences of numbers")
    for name, x in (("a", xa), ("b", xb)):
        bad = ~np.isfinite(x) | (x <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            value = float(x[i])
            raise BadArgumentError(f"times must be positive and finite: {name}[{i}] = {value!r}")
    # The larger time over the smaller, then the sign: swapping A and B negates d bit for bit,
    # and scaling both by a power of two leaves it unchanged.
    d: FloatArray = np.where(xb >= xa, np.log(xb / xa), -np.log(xa / xb))
    return np.round(d, _DECIMALS)


def compare(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.01) -> Comparison:
    """Compare paired run times of A and B (a[i] and b[i] ran back to back)."""
    _check_alpha(alpha)
    d = log_ratios(a, b)
    n = len(d)
    walsh = _walsh_averages(d)
    centre = float(np.median(walsh))
    lo_log, hi_log = _interval(walsh, n, alpha)
    p_faster, p_slower = _signed_rank_p(d)
    mad = float(np.median(np.abs(d - np.median(d))))
    return Comparison(
        speedup=math.exp(-centre),
        low=_exp_neg(hi_log),
        high=_exp_neg(lo_log),
        noise=math.expm1(_MAD_SCALE * mad),
        p_faster=p_faster,
        p_slower=p_slower,
        pairs=n,
    )


def classify(c: Comparison, *, alpha: float = 0.01, min_change: float = 0.0) -> str:
    """ "improved", "regressed" or "neutral": significant at alpha one way and beyond min_change.

    min_change is a fraction, applied symmetrically in ratio: 0.05 means B must be more than
    1.05x faster to count as improved, or more than 1.05x slower to count as regressed.
    """
    _check_alpha(alpha)
    if not (math.isfinite(min_change) and min_change >= 0):
        raise BadArgumentError(f"min_change must be a finite fraction >= 0, got {min_change!r}")
    threshold = 1.0 + min_change
    if c.p_faster <= alpha and c.speedup > threshold:
        return "improved"
    if c.p_slower <= alpha and c.speedup * threshold < 1.0:
        return "regressed"
    return "neutral"


# --- helpers ----------------------------------------------------------------------------------


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise BadArgumentError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}")


def _exp_neg(x: float) -> float:
    """exp(-x), with an unbounded end of the interval (+-inf) mapped to 0 or inf."""
    return math.exp(-x) if math.isfinite(x) else (0.0 if x > 0 else math.inf)


def _walsh_averages(d: FloatArray) -> FloatArray:
    """Sorted (d_i + d_j) / 2 for i <= j: the n(n+1)/2 values HL and its interval use."""
    i, j = np.triu_indices(len(d))
    w: FloatArray = np.sort((d[i] + d[j]) / 2.0)
    return w


def _interval(walsh: FloatArray, n: int, alpha: float) -> tuple[float, float]:
    """(1 - alpha) interval on the centre of the log ratios, from the signed-rank test.

    The centre theta is inside when the test of "centre = theta" does not reject at alpha/2 on
    either side; that is the c-th smallest and c-th largest Walsh average, c the largest count
    with P(W+ <= c - 1) <= alpha / 2. Too few pairs to reach that level: unbounded.
    """
    m = len(walsh)
    c = _critical_count(n, alpha / 2.0)
    if c < 1:
        return -math.inf, math.inf
    return float(walsh[c - 1]), float(walsh[m - c])


@lru_cache(maxsize=256)
def _critical_count(n: int, tail: float) -> int:
    """Largest c with P(W+ <= c - 1) <= tail for n untied pairs (0 if even c = 1 fails)."""
    if n <= EXACT_LIMIT:
        cdf = np.cumsum(_null_pmf(tuple(range(2, 2 * n + 1, 2))))
        # cdf index is the doubled statistic; W+ <= c - 1 is doubled index 2(c - 1).
        ok = np.nonzero(cdf[::2] <= tail)[0]
        return int(ok[-1]) + 1 if len(ok) else 0
    mean = n * (n + 1) / 4.0
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    return max(0, math.floor(mean - _normal_quantile(1.0 - tail) * sd + 0.5))


def _signed_rank_p(d: FloatArray) -> tuple[float, float]:
    """(P(W+ <= observed), P(W+ >= observed)) under "no difference"; zeros are dropped.

    Midranks are doubled so that tied ranks stay integers and the exact dynamic program still
    applies: the distribution is exact conditional on the observed ties.
    """
    nz = d[d != 0.0]
    if len(nz) == 0:
        return 1.0, 1.0
    ranks2 = _doubled_midranks(np.abs(nz))
    observed = int(ranks2[nz > 0].sum())
    if len(nz) <= EXACT_LIMIT:
        pmf = _null_pmf(tuple(int(r) for r in ranks2))
        return min(1.0, float(pmf[: observed + 1].sum())), min(1.0, float(pmf[observed:].sum()))
    mean = float(ranks2.sum()) / 2.0
    sd = math.sqrt(float((ranks2.astype(np.float64) ** 2).sum()) / 4.0)
    # Continuity correction of one doubled unit (half a rank).
    lower = _normal_cdf((observed - mean + 1.0) / sd)
    upper = _normal_cdf((mean - observed + 1.0) / sd)
    return min(1.0, lower), min(1.0, upper)


def _doubled_midranks(x: FloatArray) -> npt.NDArray[np.int64]:
    """2 x the midranks of x (1-based), integers even when values tie."""
    order = np.argsort(x, kind="stable")
    sx = x[order]
    ranks2 = np.empty(len(x), dtype=np.int64)
    start = 0
    while start < len(sx):
        stop = start + 1
        while stop < len(sx) and sx[stop] == sx[start]:
            stop += 1
        ranks2[order[start:stop]] = start + 1 + stop  # (start+1 + stop) / 2, doubled
        start = stop
    return ranks2


@lru_cache(maxsize=256)
def _null_pmf(ranks2: tuple[int, ...]) -> FloatArray:
    """Distribution of the sum of a random subset of ranks2 (each in with probability 1/2)."""
    pmf = np.zeros(sum(ranks2) + 1, dtype=np.float64)
    pmf[0] = 1.0
    top = 0
    for r in ranks2:
        # Halving at every step keeps these probabilities, never counts that overflow.
        pmf[r : top + r + 1] = 0.5 * pmf[r : top + r + 1] + 0.5 * pmf[: top + 1]
        pmf[:r] *= 0.5
        top += r
    return pmf


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF by bisection: called rarely, no scipy needed."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _normal_cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
