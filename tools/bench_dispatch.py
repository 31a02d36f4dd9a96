"""The dispatch figures of tools/bench_resolve.py, which prints them (`--dispatch`: these alone).

    python tools/bench_dispatch.py [--entries 10000] [--quick]

- a tunable op's call on a hit, its shape function included, through the default table, beside
  an `lru_cache` hit taking the op's own arguments and a plain call of the candidate, each timed
  as a lambda of the call (target: at most 3x the lru_cache hit); and the same call inside a
  `using` block, and through the default table once a `using` block has been entered;
- the lazily opened default table: a fresh interpreter's first call of a tunable op, its
  identity in the environment (TUNECACHE_CLIENT...), beside one that calls `Table.open` and
  `resolve` for the same key, each timed from its first import to its answer (target: at most
  1.5x).

The cache and the helpers (interleaved timing, the lines printed, the children's environment)
are tools/bench_resolve.py's.
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_resolve
from bench_resolve import (
    CANDIDATES,
    CLIENT,
    HEURISTIC,
    SIGNATURE,
    child_env,
    key_of,
    line,
    side_by_side,
)

import tunecache
from tunecache.keys import format_key
from tunecache.resolve import Table


def _tunable(blas: Any) -> Any:
    """The op the dispatch figures call: three int dims, the shape function a lambda."""
    return tunecache.Tunable(
        SIGNATURE,
        dims=("m", "k", "n"),
        shape=lambda m, k, n: (m, k, n),
        candidates={name: blas for name in CANDIDATES},
        heuristic=HEURISTIC,
        register=False,
    )


def dispatch_hit(table: Table, m: int, k: int, n: int) -> dict[str, float]:
    """A tunable op's call on a hit (its shape function included) through the default table,
    first in a process that never entered a `using` block, then inside one, then through the
    default table again; beside an lru_cache hit on the same arguments and a plain call of the
    candidate, each timed the same way (a lambda of the call), interleaved."""
    from tunecache.resolve import contexts

    def blas(m: int, k: int, n: int) -> int:
        return m

    @functools.cache
    def cached(m: int, k: int, n: int) -> int:
        return m

    op = _tunable(blas)
    cached(m, k, n)
    previous = tunecache.set_default(table)
    got: dict[str, float] = {}
    try:
        op(m, k, n)
        assert op.resolve(m, k, n).source == "exact"
        if not contexts.hot.scoped:
            got["default"], got["lru"] = side_by_side(
                lambda: op(m, k, n), lambda: cached(m, k, n), 200_000
            )
        with tunecache.using(table):
            op(m, k, n)
            got["using"], got["plain"] = side_by_side(
                lambda: op(m, k, n), lambda: blas(m, k, n), 200_000
            )
        got["after"], lru = side_by_side(lambda: op(m, k, n), lambda: cached(m, k, n), 200_000)
        got.setdefault("lru", lru)
    finally:
        tunecache.set_default(previous)
    return got


def bench_dispatch(path: Path, shapes: list[tuple[int, int, int]]) -> bool:
    table = Table.open(path=path, **CLIENT)
    got = dispatch_hit(table, *shapes[len(shapes) // 2])
    lru = got["lru"]
    print("dispatch: a tunable op's call on a hit, its shape function included")
    if "default" in got:
        line("through the default table", f"{got['default'] * 1e9:.0f} ns", "", True)
    line("inside a using() block", f"{got['using'] * 1e9:.0f} ns", "", True)
    line("the default table, after a using() block", f"{got['after'] * 1e9:.0f} ns", "", True)
    line("lru_cache hit, the same arguments", f"{lru * 1e9:.0f} ns", "", True)
    line("plain call of the candidate", f"{got['plain'] * 1e9:.0f} ns", "", True)
    ratio = got.get("default", got["after"]) / lru
    line("ratio to the lru_cache hit", f"{ratio:.2f}x", "<= 3x", ratio <= 3)
    for name, what in (("using", "inside using()"), ("after", "after a using() block")):
        line(f"ratio, {what}", f"{got[name] / lru:.2f}x", "", True)
    return ratio <= 3


LAZY_OURS = """
import time
t = time.perf_counter()
import tunecache
op = tunecache.Tunable(
    "{sig}", dims=("m", "k", "n"), shape=lambda m, k, n: (m, k, n),
    candidates={{name: (lambda m, k, n, name=name: name) for name in {cands!r}}},
    heuristic="{heur}", register=False,
)
chosen = op({m}, {k}, {n})
took = time.perf_counter() - t
assert chosen == "{choice}" and op.resolve({m}, {k}, {n}).source == "exact", chosen
print(took)
"""

LAZY_EXPLICIT = """
import time
t = time.perf_counter()
from tunecache.resolve import Table
from tunecache.keys import Key
table = Table.open(client="benchrt", client_version="1.0", threads=1)
answer = table.resolve(Key("{sig}", (("m", {m}), ("k", {k}), ("n", {n}))), {cands!r}, "{heur}")
took = time.perf_counter() - t
assert answer.source == "exact" and answer.choice == "{choice}", answer
print(took)
"""


def bench_lazy(root: Path, path: Path, shapes: list[tuple[int, int, int]], runs: int) -> bool:
    """The first call of a tunable op through the lazily opened default table (the identity
    in the environment), beside an explicit Table.open plus resolve of the same key: whole
    fresh interpreters, alternately, and each one's own time from its first import to its
    answer."""
    m, k, n = shapes[len(shapes) // 3]
    conn = sqlite3.connect(path)
    (choice,) = conn.execute(
        "SELECT choice FROM read_entries_v1 WHERE key = ?", (format_key(key_of(m, k, n)),)
    ).fetchone()
    conn.close()
    fields = {"sig": SIGNATURE, "m": m, "k": k, "n": n, "cands": CANDIDATES, "heur": HEURISTIC}
    lazy = LAZY_OURS.format(choice=choice, **fields)
    explicit = LAZY_EXPLICIT.format(choice=choice, **fields)
    env = child_env(root)
    configured = {**env, "TUNECACHE_CLIENT": "benchrt", "TUNECACHE_CLIENT_VERSION": "1.0"}
    configured["TUNECACHE_THREADS"] = "1"

    def run(code: str, environ: dict[str, str]) -> tuple[float, float]:
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code], env=environ, check=True, capture_output=True, text=True
        )
        return time.perf_counter() - t, float(done.stdout)

    run(lazy, configured), run(explicit, env)  # write the bytecode, warm the page cache
    a, b = [], []
    for _ in range(runs):
        a.append(run(lazy, configured))
        b.append(run(explicit, env))
    whole = statistics.median(x[0] for x in a) / statistics.median(x[0] for x in b)
    inside = statistics.median(x[1] for x in a) / statistics.median(x[1] for x in b)
    print("the lazily opened default table: a fresh process's first call of a tunable op")
    line(
        "first call (identity from the environment)",
        f"{statistics.median(x[1] for x in a) * 1e3:.1f} ms",
        "",
        True,
    )
    line(
        "explicit Table.open + resolve, same key",
        f"{statistics.median(x[1] for x in b) * 1e3:.1f} ms",
        "",
        True,
    )
    line("ratio, import to answer", f"{inside:.2f}x", "<= 1.5x", inside <= 1.5)
    line("ratio, whole processes", f"{whole:.2f}x", "", True)
    return inside <= 1.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path, shapes = bench_resolve.build(root, args.entries)
        ok = bench_dispatch(path, shapes)
        ok &= bench_lazy(root, path, shapes, 5 if args.quick else 15)
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
