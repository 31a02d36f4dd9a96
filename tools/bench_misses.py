"""What recording misses costs, each figure measured side by side in this one run:

    python tools/bench_misses.py [--repeat 7]

- a tunable op's call on a hit, with `tunecache.record_misses()` active and without, beside an
  `functools.lru_cache` hit (a hit never reaches the recorder: the ratio should be ~1.0x);
- the first asking of a key without an entry (a table's slow path: the point query that finds
  nothing) with the recorder and without: what noting the miss adds to a miss;
- the writer's batch: seconds to write N noted keys as pending keys through stdlib sqlite3.

Each timing is the best of `--repeat` runs of many calls, recording on and off interleaved.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

import tunecache
from tunecache.resolve import misses


@tunecache.tunable("benchmiss", dims=("m",), shape=lambda x: (x.shape[0],))
def op(x: np.ndarray) -> np.ndarray:
    """The heuristic: returns its argument."""
    return x


op.add("other", lambda x: x)


def _hit_ns(number: int, repeat: int) -> tuple[float, float, float]:
    """ns per call: the op on a hit without recording, with recording, and an lru_cache hit."""
    x = np.ones(4)

    @functools.cache
    def cached(a: int, b: int, c: int) -> int:
        return a

    op(x)
    off, on, lru = [], [], []
    for _ in range(repeat):
        off.append(timeit.timeit(lambda: op(x), number=number))
        with misses.record_misses():
            op(x)
            on.append(timeit.timeit(lambda: op(x), number=number))
        lru.append(timeit.timeit(lambda: cached(1, 2, 3), number=number))
    return tuple(min(t) / number * 1e9 for t in (off, on, lru))  # type: ignore[return-value]


def _miss_us(table_of: object, keys: int, repeat: int) -> tuple[float, float]:
    """us per first asking of a missing key, without and with recording (fresh tables)."""
    off, on = [], []
    names = op.candidates
    for turn in range(repeat):
        for recording, out in ((False, off), (True, on)):
            table = table_of()  # type: ignore[operator]
            asked = [tunecache.make_key("benchmiss", m=turn * keys + i + 1) for i in range(keys)]
            block = misses.record_misses() if recording else None
            if block is not None:
                block.__enter__()
            start = time.perf_counter()
            for key in asked:
                table.resolve(key, names, "op")
            out.append(time.perf_counter() - start)
            if block is not None:
                # The write happens here, outside the timed part (as the writer's thread would).
                block.__exit__(None, None, None)
            table.close()
    return min(off) / keys * 1e6, min(on) / keys * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "cache.db"
        device = tunecache.Device("bench-cpu", 1, None, "bench", "1")
        tunecache.open(path=db, device=device).close()
        tunecache.set_default(tunecache.Table.open(path=db, device=device))
        off, on, lru = _hit_ns(200_000, args.repeat)
        print(f"hit, not recording: {off:.0f} ns ({off / lru:.2f}x an lru_cache hit, {lru:.0f} ns)")
        print(f"hit, recording:     {on:.0f} ns ({on / lru:.2f}x; {on / off:.2f}x not recording)")
        miss_off, miss_on = _miss_us(
            lambda: tunecache.Table.open(path=db, device=device), 500, args.repeat
        )
        print(
            f"first asking of a missing key: {miss_off:.1f} us, recording {miss_on:.1f} us "
            f"({miss_on / miss_off:.2f}x)"
        )
        recorder = misses.Recorder()
        for m in range(1, 1001):
            recorder.note(
                db,
                device.fingerprint,
                tunecache.make_key("benchmiss", m=10**6 + m),
                op.candidates,
                "op",
            )
        start = time.perf_counter()
        written = recorder.flush()
        took = time.perf_counter() - start
        recorder.close()
        print(f"writer: {written} pending keys in one batch, {took * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
