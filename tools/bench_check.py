"""Correctness before speed (issue 18, item 5): a faster but wrong candidate is never accepted,
and checking outputs costs little of the example workload's tuning time.

    python tools/bench_check.py [--quick] [--trials N] [--repeats N]

1. Planted wrong candidates. Each trial tunes, in a fresh cache, a model made of one op whose
   heuristic sums columns a row at a time, and whose other candidates are a far faster, correct
   one (einsum) and a faster still, wrong one (numpy's sum, then spoilt). The wrong one is, in
   turn: off by 0.1% everywhere (float64), wrong in one element of the 300, off by one in one
   element of an integer result, or right in values but of another dtype. The same trials run
   with the check taken out (its function replaced by one that finds nothing), to show what it
   stops. Target: the wrong
   candidate accepted in 0 of 100 trials with the check.
2. Its cost on the example workload (`tunecache.examples`, what `tunecache demo` tunes): every
   example model tuned into a fresh cache, with the time spent checking outputs measured
   inside the run (comparing outputs and copying the reference's, in the bench's probes, and
   the checks made outside a bench, calls included), beside the same tuning with the check
   taken out, alternating which goes first. Target: the check at most 5% of the tuning time.
   The side-by-side totals swing with the machine (a shared 2-core one swings +-10%); the time
   measured inside the run is the figure to hold to the target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tunecache
from tunecache import compare as comparing
from tunecache import evidence, sampling, tune
from tunecache.dispatch import Tunable
from tunecache.tune import benching, checking, tuner

TARGET_ACCEPTED = 0
TARGET_COST = 0.05

_rng = np.random.default_rng(5)
X = _rng.standard_normal((300, 300))
INTS = _rng.integers(0, 1000, (300, 300))


def _slow_sum(x: np.ndarray) -> np.ndarray:
    """Column sums one row at a time: the heuristic, and slow."""
    total = np.zeros(x.shape[1], dtype=x.dtype)
    for row in x:
        total = total + row
    return total


def _fast_sum(x: np.ndarray) -> np.ndarray:
    """Correct and far faster than the heuristic, though not the fastest."""
    return np.einsum("ij->j", x)


WRONGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "0.1% off": lambda x: x.sum(axis=0) * 1.001,
    "one element": lambda x: np.concatenate([x[:, :-1].sum(axis=0), x[:1, -1]]),
    "off by one": lambda x: x.sum(axis=0) + (np.arange(x.shape[1]) == 7),
    "another dtype": lambda x: x.sum(axis=0).astype(np.float32),
}


def planted(kind: str, trial: int) -> tuple[tune.Model, tunecache.Tunable[..., Any]]:
    """A model of one op whose `wrong` candidate is the fastest and wrong by `kind`."""
    wrong = WRONGS[kind]
    data = INTS if kind == "off by one" else X

    op = tunecache.Tunable(
        f"bc_colsum_{trial}_{'I64' if data is INTS else 'F64'}",
        dims=("m", "n"),
        shape=lambda x: x.shape,
        candidates={"rows": _slow_sum, "axis": _fast_sum, "wrong": wrong},
        heuristic="rows",
        register=False,
    )
    return tune.Model(f"planted{trial}", lambda: op(data)), op


_DIFFERS = (checking, benching, tuner)  # the modules that call checking.outputs_differ
_ORIGINAL = (checking.outputs_differ, Tunable.compare, comparing.snapshot)


def _install(differs: Any, compare: Any, snapshot: Any) -> None:
    """Put these in place of the check's three functions, wherever they are called from."""
    for module in _DIFFERS:
        module.outputs_differ = differs  # type: ignore[attr-defined]
    Tunable.compare = compare  # type: ignore[method-assign]
    sampling.snapshot = snapshot  # type: ignore[attr-defined]


@contextmanager
def without_check() -> Iterator[None]:
    """The output check taken out: nothing differs, and no reference is copied."""
    _install(lambda *a, **k: {}, lambda self, expected, actual: None, lambda value: value)
    try:
        yield
    finally:
        _install(*_ORIGINAL)


class Timed:
    """The output check, timed wherever it runs (a call inside another counted once)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.depth = 0

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, adding the time of each outermost call to `seconds`."""

        def call(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1
                if not self.depth:
                    self.seconds += time.perf_counter() - started

        return call

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The check, timed, in every module that calls it."""
        _install(*(self.timed(function) for function in _ORIGINAL))
        try:
            yield
        finally:
            _install(*_ORIGINAL)


def planted_trials(trials: int, checked: bool) -> tuple[int, int, dict[str, int]]:
    """(wrong accepted, the right faster one accepted, refusals by kind) over `trials`."""
    accepted_wrong = accepted_right = 0
    refused: dict[str, int] = dict.fromkeys(WRONGS, 0)
    kinds = list(WRONGS)
    for trial in range(trials):
        kind = kinds[trial % len(kinds)]
        model, op = planted(kind, trial)
        with tempfile.TemporaryDirectory(prefix="bench-check-") as root:
            if checked:
                report = tune.tune(model, root=root)
            else:
                with without_check():
                    report = tune.tune(model, root=root)
            table = tunecache.Table.open(root=root, model=model.name)
            data = INTS if kind == "off by one" else X
            choice = table.resolve(op.key(data), op.candidates, "rows").choice
            table.close()
        accepted_wrong += choice == "wrong"
        accepted_right += choice == "axis"
        refused[kind] += any("wrong" in k.wrong for k in report.keys)
    return accepted_wrong, accepted_right, refused


def tune_examples(checked: bool) -> tuple[float, float, int, int, float]:
    """(tuning seconds, seconds checking outputs, wrong refusals, survivors tried in trials,
    the fraction of the time this process waited for a CPU) of every example model, tuned into
    a fresh cache."""
    from tunecache import examples

    timed = Timed()
    refusals = tried = 0
    with tempfile.TemporaryDirectory(prefix="bench-check-examples-") as root:
        waited = evidence.cpu_wait()
        started = time.perf_counter()
        with timed.installed() if checked else without_check():
            for model in examples.MODELS:
                report = tune.tune(model, root=root)
                refusals += sum(len(k.wrong) for k in report.keys)
                tried += sum(len(k.tried) for k in report.keys)
        total = time.perf_counter() - started
        busy = evidence.waited(waited, evidence.cpu_wait(), total) or 0.0
    return total, timed.seconds, refusals, tried, busy


def main() -> None:
    """Print both parts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 trials, one repeat")
    parser.add_argument("--trials", type=int, help="planted trials with the check (100)")
    parser.add_argument("--repeats", type=int, help="example tunings of each kind (3)")
    args = parser.parse_args()
    trials = args.trials or (20 if args.quick else 100)
    repeats = args.repeats or (1 if args.quick else 3)

    print(f"1. planted wrong candidates ({', '.join(WRONGS)}, in turn)")
    print(f"  {'':<22} {'trials':>6} {'wrong accepted':>15} {'right accepted':>15}   refused")
    for checked, count in ((True, trials), (False, max(4, trials // 5))):
        wrong, right, refused = planted_trials(count, checked)
        label = "with the check" if checked else "check taken out"
        target = ""
        if checked:
            met = wrong <= TARGET_ACCEPTED
            target = f"   target {TARGET_ACCEPTED}: {'met' if met else 'MISSED'}"
        spread = ", ".join(f"{kind} {n}" for kind, n in refused.items())
        print(f"  {label:<22} {count:>6} {wrong:>15} {right:>15}   {spread}{target}")

    print(f"\n2. the example workload, tuned {repeats} time(s) each way into fresh caches")
    totals: dict[bool, list[float]] = {True: [], False: []}
    inside = []
    for repeat in range(repeats):
        for checked in (True, False) if repeat % 2 == 0 else (False, True):
            total, checking_seconds, refusals, tried, busy = tune_examples(checked)
            totals[checked].append(total)
            said = f"{total:6.2f} s, waited {busy:4.0%} for a CPU, {tried:3} survivors tried"
            if checked:
                inside.append(checking_seconds / total)
                print(
                    f"  with the check:  {said}, {checking_seconds * 1e3:6.1f} ms checking "
                    f"({checking_seconds / total:.2%}), {refusals} refused as wrong"
                )
            else:
                print(f"  check taken out: {said}")
    worst = max(inside)
    fastest = min(totals[True]) / min(totals[False])
    middle = statistics.median(totals[True]) / statistics.median(totals[False])
    print(
        f"  check's share of the tuning time, measured inside the run: worst {worst:.2%} "
        f"(target <= {TARGET_COST:.0%}: {'met' if worst <= TARGET_COST else 'MISSED'})"
    )
    print(
        f"  side by side, with / without: fastest runs {fastest:.3f}x, medians {middle:.3f}x "
        "(whole-model trials dominate, and how many a run tries moves with the machine)"
    )


if __name__ == "__main__":
    main()
