"""Issue 7's reliability tests at full size: many writers, and 100 SIGKILLs of each kind.

    python tools/bench_reliability.py                  # 2, 8, 32 writers x 1000 puts; 100 trials
    python tools/bench_reliability.py --quick          # a minute's worth, to try it out
    python tools/bench_reliability.py --writers 8 --puts 2000 --trials 200 --seed 7

Runs the same scenarios as tests/reliability (the CI runs them small) and prints, for each, its
figures and every check with PASS or FAIL: writes per second and the p99 time of one put (call to
commit returned) for each number of writers, where each kind of SIGKILL landed, and what the
checks found. Exits 1 if any check failed. Work happens in a temporary folder, removed after.
"""

from __future__ import annotations

import argparse
import collections
import sqlite3
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability import harness
from tunecache.store import migrate

_checks = harness.Checks()
_check = _checks.check


def concurrency(scratch: Path, writers: list[int], puts: int, readers: int) -> None:
    """Issue 7, test 1: N writer processes on overlapping keys while readers read."""
    print(f"\n== concurrent writers ({puts} puts each, half on keys all writers share)")
    for n in writers:
        db = scratch / f"writers-{n}.db"
        result = harness.concurrent_writers(db, writers=n, puts=puts, readers=readers)
        print(
            f"{n:>3} writers, {readers} readers: {result.writes_per_s:7.0f} writes/s   "
            f"p99 commit {result.p99_ms:8.1f} ms   median "
            f"{sorted(result.latencies)[len(result.latencies) // 2] * 1000:6.1f} ms   "
            f"max {max(result.latencies, default=0) * 1000:8.1f} ms   "
            f"({result.acked} acknowledged in {result.seconds:.1f} s, {result.reads} reads)"
        )
        for check, found in result.checks.items():
            _check(check, found)
        harness.remove_database(db)


def lock_discipline(scratch: Path) -> None:
    """Issue 7, test 2: a second writer with a zero busy timeout is refused at once."""
    print("\n== lock discipline")
    got, seconds = harness.second_writer_refused(scratch / "lock.db")
    print(
        f"second writer, busy_timeout=0, while a write transaction holds nothing yet: {got} "
        f"after {seconds * 1000:.2f} ms"
    )
    _check("refused with StoreBusyError", [] if got == "StoreBusyError" else [got])


def _trials(label: str, trials: list[harness.Trial]) -> None:
    phases = collections.Counter(t.phase for t in trials)
    print(
        f"{label}: {len(trials)} trials, {sum(t.acked for t in trials)} acknowledged entries "
        f"checked; kills landed {dict(sorted(phases.items()))}"
    )
    _check(
        f"{label}: integrity ok, acknowledged entries byte-equal, nothing half-written, "
        "old or new revision only, reopens and takes a write",
        [f"seed {t.seed}: {v}" for t in trials for v in t.violations],
    )


def crashes(scratch: Path, trials: int, seed: int, import_entries: int) -> None:
    """Issue 7, test 3: SIGKILL at random points, seeded."""
    print(f"\n== SIGKILL trials (seeds {seed}..{seed + trials - 1})")
    seeds = range(seed, seed + trials)
    db = scratch / "crash.db"

    def fresh() -> Path:
        harness.remove_database(db)
        return db

    _trials("tuning writes", [harness.crash_writes(fresh(), s) for s in seeds])
    _trials("WAL checkpoint", [harness.crash_checkpoint(fresh(), s) for s in seeds])
    olds = [g for g in harness.goldens() if harness.golden_revision(g) != migrate.HEAD]
    migration: list[harness.Trial] = []
    for i, golden in enumerate(olds):
        facts = harness.golden_facts(golden, scratch)
        window = harness.migration_window(facts, fresh())
        share = range(seed + i * trials // len(olds), seed + (i + 1) * trials // len(olds))
        migration += [harness.crash_migration(fresh(), facts, s, window) for s in share]
    _trials(f"schema migration to {migrate.HEAD} ({', '.join(g.name for g in olds)})", migration)
    try:
        import tunecache.exchange  # noqa: F401
    except ImportError:
        print("import: tunecache.exchange is missing, no trials")
        return
    source = harness.import_source(scratch, import_entries)
    window = harness.import_window(source, fresh())
    _trials(
        f"import of {import_entries} entries",
        [harness.crash_import(fresh(), source, s, window) for s in seeds],
    )


def main() -> None:
    """Run every scenario at the size the arguments ask for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="2,8,32", help="writer counts, comma-separated")
    parser.add_argument("--puts", type=int, default=1000, help="puts per writer")
    parser.add_argument("--readers", type=int, default=2, help="reader processes")
    parser.add_argument("--trials", type=int, default=100, help="SIGKILL trials of each kind")
    parser.add_argument("--seed", type=int, default=0, help="first seed of the trials")
    parser.add_argument("--import-entries", type=int, default=200, help="entries per import")
    parser.add_argument("--quick", action="store_true", help="small sizes, to try it out")
    args = parser.parse_args()
    if args.quick:
        args.writers, args.puts, args.trials, args.import_entries = "2,8", 100, 10, 60
    writers = [int(n) for n in args.writers.split(",")]
    print(
        f"tunecache reliability, SQLite {sqlite3.sqlite_version}, Python "
        f"{sys.version.split()[0]}, schema head {migrate.HEAD}"
    )
    # The SQLite defect warning is printed once by the writers' processes; not again here.
    warnings.simplefilter("ignore")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-reliability-") as folder:
        scratch = Path(folder)
        concurrency(scratch, writers, args.puts, args.readers)
        lock_discipline(scratch)
        crashes(scratch, args.trials, args.seed, args.import_entries)
    print(f"\n{_checks.failures} checks failed; {time.monotonic() - start:.0f} s in all")
    sys.exit(1 if _checks.failures else 0)


if __name__ == "__main__":
    main()
