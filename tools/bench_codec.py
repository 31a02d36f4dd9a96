"""How fast and how small hostile timing-record blobs are refused, beside a valid decode.

    python tools/bench_codec.py

Prints, for each hostile case, the time to refuse it and the peak memory Python allocated
meanwhile (tracemalloc), and the same for decoding a valid record of similar size, with the
ratio between them. Timings are medians of repeated runs in this one process.
"""

from __future__ import annotations

import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunecache.codec import CandidateTiming, TimingRecord, decode, encode
from tunecache.errors import CodecError


def _valid(candidates: int, samples: int) -> bytes:
    return encode(
        TimingRecord(
            candidates=tuple(
                CandidateTiming(f"cand{i}", tuple(1e-5 * (1 + j % 7) for j in range(samples)), 8)
                for i in range(candidates)
            ),
            settings={"max_samples": samples},
        )
    )


def _measure(fn: Callable[[], object], repeat: int = 7) -> tuple[float, int]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(times), peak


def _refuse(blob: bytes) -> Callable[[], object]:
    def run() -> object:
        try:
            decode(blob)
        except CodecError as error:
            return error
        raise AssertionError("hostile blob was accepted")

    return run


def main() -> None:
    """Print the table."""
    valid = _valid(candidates=12, samples=1000)  # a generous real record: 12 x 1000 samples
    truncated_big = _valid(candidates=12, samples=100_000)
    cases = {
        "nested arrays, depth 100k": b"\x81" * 100_000 + b"\x00",
        "bstr declaring 2^64-1 bytes": b"\x5b" + b"\xff" * 8,
        "array declaring 2^64-1 items": b"\x9b" + b"\xff" * 8,
        "map declaring 2^64-1 pairs": b"\xbb" + b"\xff" * 8,
        "tag chain x 10k (shared refs)": b"\xd8\x1c" * 10_000 + b"\x00",
        "indefinite-length array": b"\x9f" + b"\x01" * 1000 + b"\xff",
        "valid record, truncated by 1 byte": valid[:-1],
        "9.6 MB record, truncated by 1 byte": truncated_big[:-1],
        "valid record + trailing byte": valid + b"\x00",
    }
    base_t, base_m = _measure(lambda: decode(valid))
    print(
        f"valid record ({len(valid)} bytes): decode {base_t * 1e3:.3f} ms, "
        f"peak {base_m / 1024:.0f} KiB"
    )
    print(f"{'hostile case':<38} {'bytes':>9} {'refused in':>11} {'x valid':>8} {'peak KiB':>9}")
    for name, blob in cases.items():
        t, m = _measure(_refuse(blob))
        print(f"{name:<38} {len(blob):>9} {t * 1e3:>8.3f} ms {t / base_t:>8.2f} {m / 1024:>9.0f}")


if __name__ == "__main__":
    main()
