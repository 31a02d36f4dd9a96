"""The tuning-cost target: adaptive `bench` against fixed-sample benching on real numpy ops.

    python tools/bench_tuning.py [--quick] [--trials N]

Every figure is measured side by side in this one run (the machine is shared and noisy):

- fixed-sample benching as Triton's `do_bench` does it: one call, a 5-call estimate, 25 ms of
  warm-up calls and 100 ms of individually timed calls per candidate, the pick being the lowest
  median per call (no cache flush: these are CPU ops);
- `tunecache.bench.bench` with its defaults;
- a long interleaved reference measurement of every candidate, taken in slices before the trials
  and after each one, whose pooled medians are the "true" times.

Each trial benches every key with both methods, alternating which goes first. Targets (issue 4):
the adaptive method takes at least 3x less wall time over all keys, and its regret (true time of
the pick over true time of the true best) is at most 1.10 in at least 90% of the trials of keys
whose true gap between best and second best is 10% or more.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# BLAS threads busy-wait: on a small machine shared with other work, two of them against a busy
# core turn a 0.3 ms product into 60 ms at random. One thread gives times that mean something;
# --threads N (read before numpy loads) measures another setting.
if __name__ == "__main__":
    _threads = "1"
    if "--threads" in sys.argv[:-1]:
        _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunecache.bench import bench

Candidates = dict[str, Callable[[], object]]

TARGET_SPEEDUP = 3.0
TARGET_REGRET = 1.10
TARGET_FRACTION = 0.90
CLEAR_GAP = 1.10
# Reference: each slice takes this many interleaved rounds of ~REF_SAMPLE seconds per candidate.
REF_SAMPLE = 5e-3


# --- the ops: genuine alternatives, sized so one call takes ~0.05-20 ms on 2 cores -----------


def _rng() -> np.random.Generator:
    return np.random.default_rng(20240604)


def chain(shape_a: tuple[int, int], inner: int, last: int) -> Candidates:
    """A matrix chain A B C: the cheap order depends on the shapes; multi_dot finds it itself."""
    rng = _rng()
    a = rng.standard_normal(shape_a)
    b = rng.standard_normal((shape_a[1], inner))
    c = rng.standard_normal((inner, last))
    return {
        "ab_c": lambda: (a @ b) @ c,
        "a_bc": lambda: a @ (b @ c),
        "multi_dot": lambda: np.linalg.multi_dot([a, b, c]),
    }


def einsum_batched() -> Candidates:
    """Many small matrix products: einsum's C loop against BLAS-backed alternatives."""
    rng = _rng()
    x = rng.standard_normal((256, 24, 24))
    y = rng.standard_normal((256, 24, 24))
    return {
        "einsum": lambda: np.einsum("bij,bjk->bik", x, y, optimize=False),
        "einsum_greedy": lambda: np.einsum("bij,bjk->bik", x, y, optimize="greedy"),
        "matmul": lambda: np.matmul(x, y),
    }


def einsum_contract() -> Candidates:
    """A contraction over the last axis: einsum, optimised einsum, or one reshaped GEMM."""
    rng = _rng()
    x = rng.standard_normal((48, 48, 96))
    w = rng.standard_normal((96, 64))
    return {
        "einsum": lambda: np.einsum("ijk,kl->ijl", x, w, optimize=False),
        "einsum_greedy": lambda: np.einsum("ijk,kl->ijl", x, w, optimize="greedy"),
        "reshape_matmul": lambda: (x.reshape(-1, 96) @ w).reshape(48, 48, 64),
    }


def _fft_convolve(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    n = len(x) + len(k) - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(k, size), size)[:n]


def convolve(length: int, taps: int) -> Candidates:
    """Full 1-D convolution: direct wins for short kernels, FFT for long ones."""
    rng = _rng()
    x = rng.standard_normal(length)
    k = rng.standard_normal(taps)
    return {"direct": lambda: np.convolve(x, k), "fft": lambda: _fft_convolve(x, k)}


def sort(nearly_sorted: bool) -> Candidates:
    """np.sort's kinds: which wins depends on the data's order."""
    rng = _rng()
    if nearly_sorted:
        x = np.arange(200_000, dtype=np.int64)
        swaps = rng.integers(0, len(x), size=(50, 2))
        x[swaps[:, 0]], x[swaps[:, 1]] = x[swaps[:, 1]], x[swaps[:, 0]]
    else:
        x = rng.standard_normal(200_000)
    return {
        kind: (lambda kind=kind: np.sort(x, kind=kind))
        for kind in ("quicksort", "stable", "heapsort")
    }


def matmul_precision(n: int) -> Candidates:
    """A float64 product, or in float32 and cast back: a win only when the GEMM dominates."""
    rng = _rng()
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n))
    return {
        "f64": lambda: a @ b,
        "f32": lambda: (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64),
    }


def row_norms() -> Candidates:
    """The Euclidean norm of each row, three ways."""
    x = _rng().standard_normal((4000, 128))
    return {
        "linalg_norm": lambda: np.linalg.norm(x, axis=1),
        "einsum": lambda: np.sqrt(np.einsum("ij,ij->i", x, x)),
        "square_sum": lambda: np.sqrt((x * x).sum(axis=1)),
    }


def pairwise(dim: int) -> Candidates:
    """Squared distances between two point sets: broadcasting, or the |a|^2 + |b|^2 - 2ab GEMM."""
    rng = _rng()
    a = rng.standard_normal((400, dim))
    b = rng.standard_normal((300, dim))

    def gemm() -> np.ndarray:
        sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :]
        return sq - 2.0 * (a @ b.T)

    return {"broadcast": lambda: ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), "gemm": gemm}


KEYS: dict[str, Callable[[], Candidates]] = {
    "chain_tall": lambda: chain((1500, 32), 1500, 32),
    "chain_wide": lambda: chain((32, 1500), 32, 1500),
    "einsum_batched": einsum_batched,
    "einsum_contract": einsum_contract,
    "conv_short": lambda: convolve(20_000, 16),
    "conv_long": lambda: convolve(20_000, 4_000),
    "sort_random": lambda: sort(nearly_sorted=False),
    "sort_nearly": lambda: sort(nearly_sorted=True),
    "matmul_f32_big": lambda: matmul_precision(400),
    "matmul_f32_small": lambda: matmul_precision(64),
    "row_norms": row_norms,
    "pairwise_d8": lambda: pairwise(8),
}


# --- the two methods and the reference -------------------------------------------------------


def fixed_sample(candidates: Candidates, warmup: float = 25e-3, rep: float = 100e-3) -> str:
    """Triton's do_bench on each candidate in turn; the pick is the lowest median per call."""
    clock = time.perf_counter
    medians = {}
    for name, fn in candidates.items():
        fn()
        t0 = clock()
        for _ in range(5):
            fn()
        estimate = max((clock() - t0) / 5, 1e-9)
        for _ in range(max(1, int(warmup / estimate))):
            fn()
        times = []
        for _ in range(max(1, int(rep / estimate))):
            t0 = clock()
            fn()
            times.append(clock() - t0)
        medians[name] = statistics.median(times)
    return min(medians, key=medians.__getitem__)


class Reference:
    """Long interleaved measurements of every candidate, pooled over slices of the run."""

    def __init__(self, keys: dict[str, Candidates]) -> None:
        self.keys = keys
        self.loops = {k: {n: _loops_for(fn) for n, fn in c.items()} for k, c in keys.items()}
        self.samples: dict[str, dict[str, list[float]]] = {
            k: {n: [] for n in c} for k, c in keys.items()
        }

    def slice(self, rounds: int) -> None:
        """Take `rounds` interleaved samples of every candidate of every key."""
        for key, candidates in self.keys.items():
            for _ in range(rounds):
                for name, fn in candidates.items():
                    loops = self.loops[key][name]
                    t0 = time.perf_counter()
                    for _ in range(loops):
                        fn()
                    self.samples[key][name].append((time.perf_counter() - t0) / loops)

    def true(self, key: str) -> dict[str, float]:
        """The pooled median per call of each candidate of a key."""
        return {n: statistics.median(s) for n, s in self.samples[key].items()}


def _loops_for(fn: Callable[[], object]) -> int:
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    return max(1, round(REF_SAMPLE / once))


# --- the run ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 trials, short reference")
    parser.add_argument("--trials", type=int, default=None, help="trials (default 10, quick 2)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    args = parser.parse_args()
    trials = args.trials or (2 if args.quick else 10)
    ref_first, ref_each = (6, 2) if args.quick else (12, 4)

    keys = {name: make() for name, make in KEYS.items()}
    reference = Reference(keys)
    reference.slice(ref_first)
    wall = {"fixed": 0.0, "adaptive": 0.0}
    picks: dict[str, dict[str, list[str]]] = {k: {"fixed": [], "adaptive": []} for k in keys}
    stops: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in keys}
    for trial in range(trials):
        order = ("fixed", "adaptive") if trial % 2 == 0 else ("adaptive", "fixed")
        for key, candidates in keys.items():
            for method in order:
                t0 = time.perf_counter()
                if method == "fixed":
                    pick = fixed_sample(candidates)
                else:
                    result = bench(candidates)
                    assert result.best is not None, result.errors
                    pick = result.best
                    stops[key][result.stopped] += 1
                wall[method] += time.perf_counter() - t0
                picks[key][method].append(pick)
        reference.slice(ref_each)
        print(f"  trial {trial + 1}/{trials} done", file=sys.stderr)
    return report(keys, reference, wall, picks, stops, trials)


def report(
    keys: dict[str, Candidates],
    reference: Reference,
    wall: dict[str, float],
    picks: dict[str, dict[str, list[str]]],
    stops: dict[str, collections.Counter[str]],
    trials: int,
) -> int:
    """Print the per-key table and the targets."""
    good = {m: [0, 0, 0, 0] for m in ("fixed", "adaptive")}  # clear ok, clear n, all ok, all n
    print(
        f"tuning cost: {len(keys)} keys, {trials} trials, BLAS threads "
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}, true times from an interleaved reference"
    )
    print(
        f"  {'key':<17} {'true times, ms (best first)':<52} {'gap':>6} "
        f"{'fixed ok':>8} {'adapt ok':>8}  adaptive stops"
    )
    for key in keys:
        true = reference.true(key)
        ordered = sorted(true, key=true.__getitem__)
        best = true[ordered[0]]
        gap = true[ordered[1]] / best
        clear = gap >= CLEAR_GAP
        cells = []
        for method in ("fixed", "adaptive"):
            ok = sum(true[p] / best <= TARGET_REGRET for p in picks[key][method])
            good[method][2] += ok
            good[method][3] += len(picks[key][method])
            if clear:
                good[method][0] += ok
                good[method][1] += len(picks[key][method])
            cells.append(f"{ok}/{len(picks[key][method])}")
        times = " ".join(f"{n}={true[n] * 1e3:.3g}" for n in ordered)
        stopped = ", ".join(f"{s} {c}" for s, c in stops[key].most_common())
        print(
            f"  {key:<17} {times:<52} {gap:>5.2f}{'*' if clear else ' '} "
            f"{cells[0]:>8} {cells[1]:>8}  {stopped}"
        )
    print("  (* true gap >= 10%; ok = regret <= 1.10)")
    print()
    ratio = wall["fixed"] / wall["adaptive"]
    print(f"  wall time, fixed-sample (do_bench)   {wall['fixed']:8.2f} s")
    print(f"  wall time, adaptive bench()          {wall['adaptive']:8.2f} s")
    for method in ("fixed", "adaptive"):
        clear_ok, clear_n, all_ok, all_n = good[method]
        print(
            f"  regret <= {TARGET_REGRET:.2f}, {method:<8}            "
            f"{_pct(clear_ok, clear_n)} of {clear_n} clear-gap trials, "
            f"{_pct(all_ok, all_n)} of all {all_n}"
        )
    print()
    clear_ok, clear_n, _, _ = good["adaptive"]
    fraction = clear_ok / clear_n if clear_n else 0.0
    _line("wall time, fixed / adaptive", f"{ratio:.1f}x", f">= {TARGET_SPEEDUP:.0f}x",
          ratio >= TARGET_SPEEDUP)  # fmt: skip
    _line("adaptive picks with regret <= 1.10 (gap >= 10%)", _pct(clear_ok, clear_n),
          f">= {TARGET_FRACTION:.0%}", clear_n > 0 and fraction >= TARGET_FRACTION)  # fmt: skip
    return 0


def _pct(ok: int, n: int) -> str:
    return f"{ok / n:6.1%}" if n else "   n/a"


def _line(name: str, value: str, target: str, ok: bool) -> None:
    print(f"  {name:<50} {value:<8} target {target:<8} {'ok' if ok else 'MISSED'}")


if __name__ == "__main__":
    raise SystemExit(main())
