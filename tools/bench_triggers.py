"""What the change-number triggers (revision 0006, docs/fleet.md) cost a write: put_many of
20,000 entries with records into a local cache, with the triggers and with them dropped, side
by side, alternating, several rounds:

    python tools/bench_triggers.py

Three cases: new entries, new entries with a model's verdict each (two triggers an entry), and
every entry written again with another choice. Printed: the median of the pairwise ratios
(with / without), and what that is an entry. Figures on a shared machine swing by about 10%:
read the medians, and repeat.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.store.changes import SQLITE_TRIGGERS

DEVICE = Device("benchbox", 8, None, "tunecache", "0.1.0")
NAMES = ("a", "b", "c")
COUNT = 20_000
ROUNDS = 6
RECORD = TimingRecord(
    candidates=tuple(CandidateTiming(n, (1e-5 * (3 - i),) * 3) for i, n in enumerate(NAMES))
)
VERDICT = NewVerdict("net", "f1", "validated", gain=1.2, rounds=3, confirmations=3)


def _entry(i: int, choice: str = "c", verdict: bool = False) -> NewEntry:
    verdicts = [VERDICT] if verdict else []
    return NewEntry(f"op_F32_m{i}", choice, NAMES, "a", RECORD, verdicts=verdicts)


def _timed(path: Path, first: list[NewEntry], batch: list[NewEntry], triggers: bool) -> float:
    """Seconds of put_many(batch) into a cache holding `first`."""
    with Cache.open(device=DEVICE, path=path) as cache:
        cache.put_many(first or [_entry(COUNT + 1)])
        if not triggers:
            # Dropped once the cache is open and written, so no schema mend puts them back.
            with sqlite3.connect(path) as conn:
                for name in SQLITE_TRIGGERS:
                    conn.execute(f"DROP TRIGGER {name}")
            conn.close()
        start = time.perf_counter()
        cache.put_many(batch)
        return time.perf_counter() - start


def main() -> int:
    """Run the three cases; print each one's median ratio."""
    cases = {
        "new entries": ([], [_entry(i) for i in range(COUNT)]),
        "new entries, a verdict each": ([], [_entry(i, verdict=True) for i in range(COUNT)]),
        "written again": (
            [_entry(i) for i in range(COUNT)],
            [_entry(i, "b") for i in range(COUNT)],
        ),
    }
    with tempfile.TemporaryDirectory() as scratch:
        for c, (name, (first, batch)) in enumerate(cases.items()):
            ratios, without = [], []
            for r in range(ROUNDS):
                order = (True, False) if r % 2 == 0 else (False, True)
                took = {
                    t: _timed(Path(scratch) / f"{c}-{r}-{t}.db", first, batch, t) for t in order
                }
                ratios.append(took[True] / took[False])
                without.append(took[False])
            ratio = statistics.median(ratios)
            per = (ratio - 1) * statistics.median(without) / COUNT
            print(
                f"{name}: with the triggers / without, median of {ROUNDS} pairs {ratio:.3f}x "
                f"({per * 1e6:+.1f} µs an entry; pairs {' '.join(f'{x:.2f}' for x in ratios)})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
