"""The example ops' crossovers, measured side by side on this machine.

    python tools/bench_ops.py [--quick]

For each op of tunecache.examples (and for einsum, which is not shipped: see below) this times
every candidate at the shapes issue 5 names and at the shapes the example models use, with
`tunecache.bench.bench` (candidates interleaved round-robin, so drift hits them alike), and
prints one row per key: each candidate's median ms, the winner, and the heuristic's time over
the winner's (1.00: the heuristic is already best). A row the issue made a claim about shows the
claim and whether the winner here matches it.

The machine is shared: two BLAS threads against a busy core turn a 0.3 ms product into tens of
milliseconds, so the load average is printed before and after, and the thread rows mean
something only beside it. Einsum is measured to back the decision to leave it out of the
package: if no row shows einsum (either mode) winning by more than noise at a shape that
carries time, the op has no crossover worth a cache.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunecache.bench import bench
from tunecache.dispatch import Tunable
from tunecache.examples import ops

Array = Any
F32 = np.float32


class Row:
    """One key: its candidates as zero-argument calls, the heuristic, and the issue's claim."""

    def __init__(
        self,
        key: str,
        candidates: dict[str, Callable[[], object]],
        heuristic: str,
        claim: str = "",
        claimed_winner: str = "",
    ) -> None:
        self.key = key
        self.candidates = candidates
        self.heuristic = heuristic
        self.claim = claim
        self.claimed_winner = claimed_winner


def _bound(function: Callable[..., object], *args: Array) -> Callable[[], object]:
    def call() -> object:
        return function(*args)

    return call


def _op_row(op: Tunable[Any, Any], *args: Array, claim: str = "", winner: str = "") -> Row:
    """A row for one call of a shipped op: every candidate, on these very arguments."""
    key = op.key(*args)
    functions = {name: _bound(f, *args) for name, f in op.functions.items()}
    return Row(key.text, functions, op.heuristic_for(key), claim, winner)


def _rng() -> np.random.Generator:
    return np.random.default_rng(20261130)


def conv_rows(quick: bool) -> list[Row]:
    rng = _rng()

    def row(ci: int, co: int, h: int, k: int, claim: str = "", winner: str = "") -> Row:
        x = rng.standard_normal((ci, h, h), dtype=F32)
        w = rng.standard_normal((co, ci, k, k), dtype=F32)
        return _op_row(ops.conv2d, x, w, claim=claim, winner=winner)

    rows = [
        row(16, 16, 64, 3, "direct wins by 1.6x", "direct"),
        row(16, 16, 32, 3, "im2col wins by 2.2x", "im2col"),
        row(1, 1, 128, 31, "FFT wins by 34x", "fft"),
        row(1, 1, 64, 31),
    ]
    if not quick:
        # A kernel-size sweep on one channel: im2col -> direct -> FFT as the kernel grows.
        rows += [row(1, 1, 64, k) for k in (3, 5, 7, 9, 15)]
    # The example models' shapes.
    rows += [
        row(1, 8, 128, 31),  # filterbank
        row(1, 4, 128, 31),  # edges
        row(1, 1, 64, 7),  # separable's depthwise
        row(3, 16, 64, 7),  # cnn's stem
        row(16, 32, 32, 5),  # cnn
    ]
    if not quick:
        rows += [row(32, 32, 16, 3), row(32, 32, 32, 1), row(3, 6, 128, 3)]
        x = rng.standard_normal((1, 255, 256), dtype=F32)
        w = np.full((1, 1, 9, 9), 1 / 81, dtype=F32)
        rows.append(_op_row(ops.conv2d, x, w))  # the denoiser's smoothing
    return rows


def chain_rows(quick: bool) -> list[Row]:
    rng = _rng()

    def mats(*sizes: int) -> list[Array]:
        return [rng.standard_normal((a, b), dtype=F32) for a, b in itertools.pairwise(sizes)]

    rows = [
        _op_row(ops.chain3, *mats(1500, 32, 1500, 32), claim="17 us vs 1200 us", winner="right"),
        _op_row(ops.chain3, *mats(32, 1500, 32, 1500), claim="and the reverse", winner="left"),
        _op_row(ops.chain4, *mats(2000, 32, 32, 2000, 8)),  # regression: the fitted values
        _op_row(ops.chain3, *mats(32, 32, 2000, 8)),  # regression: the coefficients
        _op_row(ops.chain3, *mats(1, 2000, 32, 32)),  # regression: left is right here
    ]
    if not quick:
        rows += [
            _op_row(ops.chain4, *mats(64, 64, 64, 64, 64)),  # square: every order costs alike
            _op_row(ops.chain4, *mats(8, 512, 8, 512, 8)),
        ]
    return rows


def matmul_rows(quick: bool) -> list[Row]:
    rng = _rng()

    def row(m: int, k: int, n: int, claim: str = "", winner: str = "") -> Row:
        a = rng.standard_normal((m, k), dtype=F32)
        b = rng.standard_normal((k, n), dtype=F32)
        return _op_row(ops.matmul, a, b, claim=claim, winner=winner)

    sizes = (64, 128, 192, 256, 384) if quick else (64, 96, 128, 160, 192, 256, 320, 384, 512)
    rows = [
        row(n, n, n, "2 threads win 1.5-2.1x", "all_threads")
        if n >= 192
        else row(n, n, n, "below 192^3: noise")
        for n in sizes
    ]
    # The example models' shapes: mlp, attention at s = 1 and 1024, the denoiser, the gram.
    shapes = [(256, 512, 512), (256, 128, 512), (1, 128, 128), (1024, 64, 1024), (255, 256, 256)]
    if not quick:
        shapes += [(1024, 1024, 64), (1024, 128, 128), (64, 128, 128), (32, 2000, 32)]
    rows += [row(*s) for s in shapes]
    return rows


def einsum_rows(quick: bool) -> list[Row]:
    """Einsum contractions, optimize=False (numpy's default) against greedy and a BLAS rewrite.

    Not shipped as an op: these rows are the evidence for leaving it out.
    """
    rng = _rng()

    def row(spec: str, shapes: list[tuple[int, ...]], blas: Callable[..., Array]) -> Row:
        args = [rng.standard_normal(s, dtype=F32) for s in shapes]
        want = np.einsum(spec, *args)
        got = blas(*args)
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3 * (1 + np.abs(want).max())), spec
        dims = "_".join("x".join(map(str, s)) for s in shapes)
        return Row(
            f"einsum {spec} {dims}",
            {
                "noopt": lambda: np.einsum(spec, *args, optimize=False),
                "greedy": lambda: np.einsum(spec, *args, optimize="greedy"),
                "blas": lambda: blas(*args),
            },
            "noopt",
        )

    def scores(q: Array, k: Array) -> Array:
        return q @ k.transpose(0, 2, 1)

    def values(p: Array, v: Array) -> Array:
        return p @ v

    def chain(a: Array, b: Array, c: Array) -> Array:
        return a @ b @ c

    def mid(x: Array, v: Array) -> Array:
        return np.matmul(v, x)

    rows = []
    for s in (1, 64, 256) if quick else (1, 8, 64, 256, 1024):
        rows.append(row("hqd,hkd->hqk", [(2, s, 64), (2, s, 64)], scores))
        rows.append(row("hqk,hkd->hqd", [(2, s, s), (2, s, 64)], values))
    rows.append(row("bij,bjk->bik", [(256, 4, 4), (256, 4, 4)], values))
    rows.append(row("ij,jk,kl->il", [(64, 64), (64, 64), (64, 64)], chain))
    # A weighted sum over a middle axis: einsum's own loop needs no copy.
    for c in (3, 16) if quick else (3, 8, 16, 64):
        rows.append(row("hcw,c->hw", [(128, c, 128), (c,)], mid))
    return rows


SECTIONS: list[tuple[str, Callable[[bool], list[Row]]]] = [
    ("conv2d: im2col (heuristic) / direct / fft", conv_rows),
    ("matrix chains: left (heuristic) / right / multi_dot", chain_rows),
    ("matmul: all BLAS threads (heuristic) / one thread", matmul_rows),
    ("einsum (not shipped): optimize=False (numpy's default) / greedy / BLAS rewrite", einsum_rows),
]


def measure(row: Row, quick: bool) -> dict[str, float]:
    """Median seconds per call of each candidate."""
    result = bench(
        row.candidates,
        min_samples=3 if quick else 10,
        max_samples=8 if quick else 30,
        budget=1.0 if quick else 4.0,
        # Keep measuring the slow ones too: the table shows every candidate's time.
        drop_ratio=1e6,
    )
    if result.errors:
        raise SystemExit(f"{row.key}: a candidate raised: {dict(result.errors)}")
    return dict(result.medians)


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes, shorter benches")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, {os.cpu_count()} cores, BLAS pools:", end=" ")
    pools = ops.blas_controller().info()
    print(", ".join(f"{p['internal_api']} {p['version']} x{p['num_threads']}" for p in pools))
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    started = time.perf_counter()
    claims = []
    for title, build in SECTIONS:
        rows = build(args.quick)
        names = list(rows[0].candidates)
        width = max(len(r.key) for r in rows)
        print(f"\n{title}")
        header = f"{'key':<{width}}  " + "  ".join(f"{n:>11}" for n in names)
        print(header + f"  {'winner':>11}  {'heur/win':>8}  claim (issue 5)")
        for row in rows:
            medians = measure(row, args.quick)
            winner = min(medians, key=lambda n: medians[n])
            ratio = medians[row.heuristic] / medians[winner]
            cells = "  ".join(f"{_ms(medians[n]):>11}" for n in names)
            claim = row.claim
            if row.claimed_winner:
                matches = "yes" if winner == row.claimed_winner else "NO"
                claim = f"{claim}: here {matches}"
                claims.append(winner == row.claimed_winner)
            print(f"{row.key:<{width}}  {cells}  {winner:>11}  {ratio:>8.2f}  {claim}", flush=True)
    print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"issue 5's claimed winners reproduced here: {sum(claims)} of {len(claims)} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
