"""Issue 16's quarantine figures: a cache moved aside while writers write, seeded many times, and
what the salvage of a cache with one garbage page keeps.

    python tools/bench_quarantine.py                 # 100 seeded runs; salvage of 30,000 entries
    python tools/bench_quarantine.py --quick         # 10 runs; salvage of 3,000 entries
    python tools/bench_quarantine.py --runs 300 --seed 7 --entries 100000

Runs the scenarios of tests/reliability/damage.py (the tests run them small) and prints:

- "moved aside while writers write": for each seeded run, 1 to 3 writer processes keep putting
  into a cache at tunecache's own location; a page of it (of an index, or of the entries table)
  gets random bytes; another process opens it, finds the damage, salvages it and moves it aside;
  the writers go on. Printed: runs, writes acknowledged, puts that failed (not acknowledged:
  nothing is owed for them), and acknowledged writes missing from the live cache afterwards,
  which must be 0.
- "SIGKILL during a salvage": the same runs again, each killing the process that salvages at a
  random instant: the damaged file must be at its place or in quarantine, byte for byte, and at
  the cache's place nothing or the whole replacement; the next open goes on from there.
- "salvage": a cache of N entries gets random bytes in one page (a leaf of the entries table,
  then of an index, then of the other tables), and is opened: the entries kept and lost, the
  rows the page held, and how long the open took.

Exits 1 if any check failed. Work happens in a temporary folder, removed after.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability import damage, harness

_checks = harness.Checks()
_check = _checks.check

#: the pages the salvage section damages, one at a time: what, and the table or index
SALVAGE_PAGES = (
    ("a table page (entries)", damage.ENTRIES_TABLE),
    ("an index page (ix_entries_key_id)", damage.KEY_ID_INDEX),
    ("an index page (keys' unique index)", "sqlite_autoindex_keys_1"),
    ("a table page (keys)", "keys"),
    ("a table page (timing_records)", "timing_records"),
    ("a table page (candidate_timings)", "candidate_timings"),
)


def moved_aside(scratch: Path, runs: int, seed: int, entries: int) -> None:
    """Move the cache aside while writers write, `runs` seeded times."""
    print(f"\n== moved aside while writers write ({runs} runs, seeds {seed}..{seed + runs - 1})")
    template = scratch / "move-template.db"
    damage.fill(template, entries)
    acked = failed = after = base = base_kept = 0
    lost: list[str] = []
    violations: list[str] = []
    by_page: dict[str, int] = {}
    start = time.monotonic()
    for s in range(seed, seed + runs):
        root = scratch / f"move-{s}"
        trial = damage.move_while_writing(root, s, template=template)
        shutil.rmtree(root)
        acked += trial.acked
        failed += trial.failed
        after += trial.after_move
        base += trial.base
        base_kept += trial.base_kept
        lost += [f"seed {s}: {x}" for x in trial.lost]
        violations += [f"seed {s}: {v}" for v in trial.violations]
        kind = trial.damaged.split(" page ")[0] + " page of " + trial.damaged.split(" of ")[-1]
        by_page[kind] = by_page.get(kind, 0) + 1
    print(
        f"runs: {runs} ({', '.join(f'{n} {k}' for k, n in sorted(by_page.items()))}), "
        f"{entries:,} entries each   ({time.monotonic() - start:.0f} s)"
    )
    print(
        f"acknowledged writes: {acked:,} ({after:,} after the move); puts that failed: "
        f"{failed:,}; acknowledged writes lost: {len(lost)}"
    )
    print(f"entries there before the writers began: {base:,}, kept whole: {base_kept:,}")
    _check("every acknowledged write in the live cache, byte for byte", lost)
    _check(
        "the damage moved aside, the entries there before kept (all but the damaged page's "
        "rows), the live cache whole, no process crashed",
        violations,
    )


def crashes(scratch: Path, runs: int, seed: int, entries: int) -> None:
    """SIGKILL the salvaging process at a random instant, `runs` seeded times."""
    print(f"\n== SIGKILL during a salvage ({runs} runs, seeds {seed}..{seed + runs - 1})")
    template = scratch / "crash-template.db"
    damage.fill(template, entries)
    window = damage.salvage_window(scratch / "crash-window", template)
    trials = []
    for s in range(seed, seed + runs):
        root = scratch / f"crash-{s}"
        trials.append(damage.crash_salvage(root, template, s, window))
        shutil.rmtree(root)
    phases: dict[str, int] = {}
    for t in trials:
        phases[t.phase] = phases.get(t.phase, 0) + 1
    print(
        f"{entries:,} entries, salvage and move {window * 1000:.0f} ms; kills landed "
        f"{dict(sorted(phases.items()))}"
    )
    _check(
        "the damaged file kept byte for byte, no half-written cache, the next open goes on",
        [f"seed {t.seed}: {v}" for t in trials for v in t.violations],
    )


def salvage(scratch: Path, entries: int, seed: int) -> None:
    """One garbage page in a cache of `entries` entries: what opening it keeps."""
    print(f"\n== salvage of a {entries:,}-entry cache with one garbage page")
    template = scratch / "salvage-template.db"
    damage.fill(template, entries)
    print(f"{'damaged':<36} {'page':>24} {'rows on it':>10} {'kept':>8} {'lost':>6} {'open':>7}")
    for what, name in SALVAGE_PAGES:
        root = scratch / f"salvage-{name}"
        started = time.perf_counter()
        trial = damage.salvage_page(root, template, name, seed)
        seconds = time.perf_counter() - started
        shutil.rmtree(root)
        page = trial.damaged.split(" of ")[0]
        print(
            f"{what:<36} {page:>24} {trial.cells:>10,} {trial.kept:>8,} {trial.lost:>6,} "
            f"{seconds:>6.2f}s"
        )
        problems = [v for v in trial.violations if "without their timing record" not in v]
        if name in ("timing_records", "candidate_timings"):
            # The entries keep their decisions; what is lost is evidence, counted in the warning.
            problems = [v for v in problems if "kept but changed" not in v]
        if trial.kept + trial.lost != trial.entries:
            problems.append(f"kept {trial.kept} + lost {trial.lost} != {trial.entries}")
        if "index" in trial.damaged and trial.lost:
            problems.append(f"an index page lost {trial.lost} entries")
        if name == damage.ENTRIES_TABLE and trial.lost > trial.cells:
            problems.append(f"a page of {trial.cells} rows lost {trial.lost} entries")
        _check(f"{what}: kept entries whole, at most the page's rows lost", problems)


def main() -> None:
    """Run every section at the size the arguments ask for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="seeded move-aside runs")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--entries", type=int, default=30_000, help="entries of the salvage cache")
    parser.add_argument(
        "--move-entries", type=int, default=3000, help="entries of the move-aside cache"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, to try it out")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.entries = 10, 3000
    print(f"tunecache quarantine, SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}")
    # The open's own warnings are what the scenarios read; the SQLite defect warning is not.
    warnings.simplefilter("ignore")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-quarantine-") as folder:
        scratch = Path(folder)
        moved_aside(scratch, args.runs, args.seed, args.move_entries)
        crashes(scratch, args.runs, args.seed, args.move_entries)
        salvage(scratch, args.entries, args.seed)
    print(f"\n{_checks.failures} checks failed; {time.monotonic() - start:.0f} s in all")
    sys.exit(1 if _checks.failures else 0)


if __name__ == "__main__":
    main()
