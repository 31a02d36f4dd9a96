"""What opening a cache costs, and the part of it the schema check takes.

    python tools/bench_open.py [--entries 1000] [--opens 200] [--rounds 5] [--base PATH]

Each round runs a fresh process that opens and closes the cache at tunecache's own location
`--opens` times (the look through a read-only connection, the quick check, the schema check, the
engine and its pragmas; then one `count` so a connection is used) and prints the median of one
open. In the same process it times the schema check alone: `schema.drift` of the file's rows the
first time the process meets that schema (the canonical form of every object, about 30), and
again (remembered). With `--base PATH`, a checkout of another tunecache (the commit before the
check: `mkdir /tmp/base && git archive cddcb34 | tar -x -C /tmp/base`), the rounds alternate
between the two on the same file, and the ratio of their medians is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sqlite3, statistics, sys, time
from tunecache.cache import Cache
from tunecache.device import Device

device = Device("bench-cpu", 1, None, "benchrt", "1.0")
opens = int(sys.argv[2])
times = []
for _ in range(opens + 10):
    start = time.perf_counter()
    with Cache.open(device=device, root=sys.argv[1]) as cache:
        cache.count()
    times.append(time.perf_counter() - start)
out = {"open_us": statistics.median(times[10:]) * 1e6}
try:
    from tunecache.store import schema
except ImportError:
    schema = None
if schema is not None:
    conn = sqlite3.connect(f"file:{cache.path}?mode=ro", uri=True)
    rows = conn.execute(schema.SCHEMA_QUERY).fetchall()
    renamed = [(t, n, tb, None if s is None else s + " ") for t, n, tb, s in rows]
    start = time.perf_counter()
    schema.drift(renamed, "0004")  # a schema this process has not met: compared in full
    out["first_check_us"] = (time.perf_counter() - start) * 1e6
    again = conn.execute(schema.SCHEMA_QUERY).fetchall()
    start = time.perf_counter()
    schema.drift(again, "0004")
    out["remembered_check_us"] = (time.perf_counter() - start) * 1e6
print(json.dumps(out))
"""


def _round(checkout: Path, root: Path, opens: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(opens)],
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,
        env=env,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Make the cache, run the rounds, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--opens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", type=Path, help="another checkout to compare with")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tunecache.cache import Cache, NewEntry
    from tunecache.device import Device

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        device = Device("bench-cpu", 1, None, "benchrt", "1.0")
        with Cache.open(device=device, root=root) as cache:
            cache.put_many(
                NewEntry(f"conv_F32_h{i + 1}", "a", ("a", "b")) for i in range(args.entries)
            )
        sides = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, checkout in sides.items():
                figures[name].append(_round(checkout, root, args.opens))
    print(f"Cache.open + count + close, {args.entries} entries, median of {args.opens} opens")
    medians = {}
    for name, rounds in figures.items():
        opens = [r["open_us"] for r in rounds]
        medians[name] = statistics.median(opens)
        line = f"  {name}: {medians[name]:.0f} us (rounds {min(opens):.0f}-{max(opens):.0f})"
        if "first_check_us" in rounds[0]:
            first = statistics.median(r["first_check_us"] for r in rounds)
            again = statistics.median(r["remembered_check_us"] for r in rounds)
            line += (
                f"; schema check: {first:.0f} us the first time a process meets a schema "
                f"({first / medians[name]:.1%} of one open), {again:.1f} us after"
            )
        print(line)
    if "base" in medians:
        print(f"  this / base: {medians['this'] / medians['base']:.3f}")


if __name__ == "__main__":
    main()
