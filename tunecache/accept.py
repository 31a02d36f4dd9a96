"""Whole-model acceptance: keep a change only if the whole model gets faster with it.

Isolated op benches only prune candidates; this is the guard. A runs the model with the current
table, B with the table plus the candidate entry (or, for the final guard, no table against the
finished table). They run in interleaved back-to-back pairs, and a coin flip (`seed`) decides
which side goes first in each pair, so that drift, load and "the second run is warmer" hit both
sides alike. A fixed alternation (AB, BA, AB, ...) is not enough: measured here, interference
that recurs every few runs can lock onto its period and favour one side for many pairs in a row.
With random order the sign of each pair's difference is a fair coin when B changes nothing,
whatever the noise does, so the signed-rank test below is exact by design (randomisation
inference), not by an assumption about the noise.

The rule (DESIGN.md, "Acceptance"), in order:

1. `confirmations` blocks of `pairs` pairs; B wins a block when the median log ratio of its pairs
   is below zero. The first block B does not win stops at once, not accepted: disagreement means
   "not accepted", never "accepted". Most A/A trials end after one or two blocks, which keeps
   rejecting a useless entry cheap.
2. After k of k blocks, all pairs together (stats.compare): the one-sided signed-rank p-value
   must be <= alpha, the lower end of the (1 - alpha) interval on the speedup must be above 1
   (the gain is larger than what the measured noise explains) and the speedup estimate must
   exceed min_speedup.
3. A budget (seconds of the injected clock) that runs out before a decision: not accepted.

Without ties the interval rule is the signed-rank test at alpha/2 and implies the p-value rule;
they part only with tied or zero ratios (a coarse clock), where checking both keeps the stricter.

Under "B changes nothing" the test is exact, so false accepts are at most alpha/2 whatever the
noise's shape. The defaults, 3 blocks of 8 pairs at alpha 0.01, accept a B really 10% faster (B's
time 0.9x A's) at least 95% of the time both under simulated +-10% run-to-run noise and under the
noise measured on this shared 2-core machine (heavier tailed: bursts of 1.5x hit single runs).
3 x 6 pairs is enough for the simulation (98%) but not for the real noise (94% when replayed
from 12,000 recorded runs): a block is lost, or the test falls short, when two bursts land on
the wrong side. tools/bench_accept.py measures both targets.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunecache import stats
from tunecache.checks import is_int
from tunecache.errors import BadArgumentError

__all__ = ["Verdict", "accept", "measure"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of accept(): the decision, the paired statistics and every timed run."""

    accepted: bool
    speedup: float  # A time over B time, paired (> 1: B faster); nan with fewer than 2 pairs
    low: float  # lower end of the (1 - alpha) interval on speedup
    high: float
    noise: float  # spread of one pair's ratio, as a fraction
    p_value: float  # one-sided, against "B is not faster"
    rounds: int  # pairs measured (each pair = one run of A and one of B, back to back)
    confirmations: int  # confirmation blocks B won
    needed: int  # confirmation blocks required (k)
    a: tuple[float, ...]  # every timed run of A, seconds, in pair order
    b: tuple[float, ...]
    reason: str  # one line saying why (accepted / which rule rejected)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values; a non-finite number (an unbounded interval) becomes None."""
        return {
            "accepted": self.accepted,
            "speedup": _finite(self.speedup),
            "low": _finite(self.low),
            "high": _finite(self.high),
            "noise": _finite(self.noise),
            "p_value": _finite(self.p_value),
            "rounds": self.rounds,
            "confirmations": self.confirmations,
            "needed": self.needed,
            "a": list(self.a),
            "b": list(self.b),
            "reason": self.reason,
        }


def measure(
    run_a: Callable[[], object],
    run_b: Callable[[], object],
    *,
    pairs: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], object] | None = None,
    seed: int | None = None,
) -> tuple[list[float], list[float]]:
    """Time `pairs` back-to-back pairs of runs, each in random order; (A times, B times).

    `warmup` untimed runs of each side come first; `seed` seeds the coin that orders each pair
    (None: fresh entropy). `sync` (GPU: torch.cuda.synchronize) is
    called before every clock read, so queued work is inside the run that queued it. An
    exception from a run propagates: the caller decides what a failing model means.
    """
    _check_count("pairs", pairs, 1)
    _check_count("warmup", warmup, 0)
    _check_callables(run_a, run_b, clock, sync)
    timer = _Timer(run_a, run_b, clock, sync, None, seed)
    timer.warm(warmup)
    for _ in range(pairs):
        timer.pair()
    return list(timer.a), list(timer.b)


def accept(
    run_a: Callable[[], object],
    run_b: Callable[[], object],
    *,
    confirmations: int = 3,
    pairs: int = 8,
    alpha: float = 0.01,
    min_speedup: float = 1.0,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], object] | None = None,
    budget: float | None = None,
    seed: int | None = None,
) -> Verdict:
    """Decide whether B (the model with the change) is faster than A, in paired whole-model runs.

    run_a / run_b: one whole-model run each, with the current table and with the change.
    confirmations: k; B must win k of k blocks. pairs: pairs per block.
    alpha: false-accept level of the signed-rank test and of the (1 - alpha) interval.
    min_speedup: the speedup estimate must also exceed this (1.0: any real gain).
    budget: seconds of `clock` for the whole decision, warm-up included; when it runs out
    before a decision the verdict is "not accepted" and says so. A pair already started is
    finished, so the budget can be overrun by at most one pair.
    seed: seeds the coin that orders each pair (None: fresh entropy); tests fix it.

    A run that raises propagates (after whatever was timed is lost): the tuner treats a model
    that fails with the change as a rejected change. KeyboardInterrupt propagates too.
    """
    _check_count("confirmations", confirmations, 1)
    _check_count("pairs", pairs, 1)
    _check_count("warmup", warmup, 0)
    if confirmations * pairs < 2:
        raise BadArgumentError("accept needs at least 2 pairs in all (confirmations x pairs)")
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise BadArgumentError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}")
    if not (isinstance(min_speedup, int | float) and 0.0 < min_speedup < math.inf):
        raise BadArgumentError(f"min_speedup must be a positive finite number, got {min_speedup!r}")
    if budget is not None and not (isinstance(budget, int | float) and 0.0 < budget < math.inf):
        raise BadArgumentError(f"budget must be a positive number of seconds, got {budget!r}")
    _check_callables(run_a, run_b, clock, sync)

    deadline = None if budget is None else clock() + budget
    timer = _Timer(run_a, run_b, clock, sync, deadline, seed)
    won = 0
    if not timer.warm(warmup):
        return _verdict(timer, won, confirmations, alpha, None, _out_of_time(budget, timer))
    for block in range(confirmations):
        for _ in range(pairs):
            if not timer.pair():
                return _verdict(timer, won, confirmations, alpha, None, _out_of_time(budget, timer))
        ratios = np.log(np.asarray(timer.b[-pairs:]) / np.asarray(timer.a[-pairs:]))
        if not float(np.median(ratios)) < 0.0:
            return _verdict(
                timer,
                won,
                confirmations,
                alpha,
                None,
                f"not accepted: B lost confirmation block {block + 1} of {confirmations} "
                f"(median B/A {math.exp(float(np.median(ratios))):.4f})",
            )
        won += 1
    c = stats.compare(timer.a, timer.b, alpha=alpha)
    accepted, reason = _decide(c, alpha, min_speedup)
    return _verdict(timer, won, confirmations, alpha, c, reason, accepted=accepted)


# --- helpers ----------------------------------------------------------------------------------


class _Timer:
    """Runs and times A and B in pairs of random order, keeping every timing, within a deadline."""

    def __init__(
        self,
        run_a: Callable[[], object],
        run_b: Callable[[], object],
        clock: Callable[[], float],
        sync: Callable[[], object] | None,
        deadline: float | None,
        seed: int | None,
    ) -> None:
        self.run_a, self.run_b, self.clock, self.sync = run_a, run_b, clock, sync
        self.deadline = deadline
        self.coin = random.Random(seed)
        self.a: list[float] = []
        self.b: list[float] = []
        #: which side ran first in each pair ("A" or "B"), for tests and reports
        self.first: list[str] = []

    def _expired(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def warm(self, count: int) -> bool:
        """Untimed runs of each side; False if the deadline passed first."""
        for _ in range(count):
            if self._expired():
                return False
            self.run_a()
            self.run_b()
        return True

    def pair(self) -> bool:
        """One timed pair, which side first decided by a coin flip; False if out of time."""
        if self._expired():
            return False
        if self.coin.random() < 0.5:
            self.first.append("A")
            ta = self._time(self.run_a)
            tb = self._time(self.run_b)
        else:
            self.first.append("B")
            tb = self._time(self.run_b)
            ta = self._time(self.run_a)
        self.a.append(ta)
        self.b.append(tb)
        return True

    def _time(self, run: Callable[[], object]) -> float:
        if self.sync is not None:
            self.sync()
        start = self.clock()
        run()
        if self.sync is not None:
            self.sync()
        elapsed = self.clock() - start
        if not (elapsed > 0.0 and math.isfinite(elapsed)):
            raise BadArgumentError(
                f"the clock did not advance over a whole-model run ({elapsed!r} s): "
                "use a finer clock"
            )
        return elapsed


def _decide(c: stats.Comparison, alpha: float, min_speedup: float) -> tuple[bool, str]:
    """The all-pairs rule: (accepted, the reason line naming the first test that failed)."""
    summary = f"speedup {c.speedup:.4f} ({1 - alpha:.0%} CI {c.low:.4f}-{c.high:.4f}), " + (
        f"p {c.p_faster:.2g}, noise {c.noise:.1%}"
    )
    if c.p_faster > alpha:
        return (
            False,
            f"not accepted: not significant (p {c.p_faster:.2g} > alpha {alpha:g}); {summary}",
        )
    if not c.low > 1.0:
        return (
            False,
            f"not accepted: the gain is within the noise (CI low {c.low:.4f} <= 1); {summary}",
        )
    if not c.speedup > min_speedup:
        return (
            False,
            f"not accepted: speedup {c.speedup:.4f} <= min_speedup {min_speedup:g}; {summary}",
        )
    return True, f"accepted: {summary}"


def _verdict(
    timer: _Timer,
    won: int,
    needed: int,
    alpha: float,
    c: stats.Comparison | None,
    reason: str,
    *,
    accepted: bool = False,
) -> Verdict:
    if c is None and len(timer.a) >= 2:
        c = stats.compare(timer.a, timer.b, alpha=alpha)
    nan = math.nan
    return Verdict(
        accepted=accepted,
        speedup=c.speedup if c else nan,
        low=c.low if c else nan,
        high=c.high if c else nan,
        noise=c.noise if c else nan,
        p_value=c.p_faster if c else 1.0,
        rounds=len(timer.a),
        confirmations=won,
        needed=needed,
        a=tuple(timer.a),
        b=tuple(timer.b),
        reason=reason,
    )


def _out_of_time(budget: float | None, timer: _Timer) -> str:
    return f"not accepted: the budget of {budget:g} s ran out after {len(timer.a)} pairs"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _check_count(name: str, value: object, least: int) -> None:
    if not is_int(value) or value < least:
        raise BadArgumentError(f"{name} must be an integer >= {least}, got {value!r}")


def _check_callables(*fns: object) -> None:
    names = ("run_a", "run_b", "clock", "sync")
    for name, fn in zip(names, fns, strict=True):
        if not (callable(fn) or (name == "sync" and fn is None)):
            raise BadArgumentError(f"{name} must be callable, got {type(fn).__name__}")
