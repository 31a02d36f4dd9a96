"""Maintenance at fleet size: doctor and prune of a cache of N entries, each figure printed.

    python tools/bench_maintain.py [--entries 100000] [--rounds 3] [--base PATH]

- `doctor` of the whole file (target: at most 2 s for 100,000 entries);
- `prune --dry-run` choosing every kind at once (stale, unvalidated, older, masked: most of
  the entries), and choosing `masked` alone (about a tenth): the time to select and report;
- the peak of traced memory of each of those calls, in one more round;
- with `--base PATH`, a checkout of another tunecache (the commit before maintenance was
  decided in SQL: `mkdir /tmp/base && git archive 6e22301 | tar -x -C /tmp/base`), the same
  calls by that code on a file of the same rows made by that code, in the same rounds, each
  call in a fresh process: the figures side by side, their ratio, and whether both found and
  selected exactly the same.

The cache is a real SQLite file: the schema and device row come from `tunecache.open`, the N
entries (keys, old and current candidate sets, entries, timing records that all differ,
candidate timings, verdicts of five models, a finished run and one still open) are then
inserted in bulk with sqlite3; putting 100,000 entries one by one through the library would
take minutes and measure nothing maintenance does.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

CLIENT = {"client": "benchrt", "client_version": "1.0", "threads": 1}
SIGNATURES = 20
#: the current candidate list of every signature, and the older one some entries were tuned on
CURRENT = ("blas", "blocked4x4", "blocked8x8", "naive")
OLDER = ("blas", "blocked4x4", "naive")
MODELS = ("bert", "gpt", "llama", "resnet", "whisper")
#: when the newest entry was last updated; the others go back two years from it
NEWEST = datetime(2026, 11, 30, tzinfo=UTC)
#: prune --older-than in the benchmark: about a third of the entries are older
CUTOFF = NEWEST - timedelta(days=480)
#: distinct timing records encoded (reused in turn: decoding cost does not depend on sameness)
DISTINCT_RECORDS = 512

# What one timed call prints, as JSON on one line: run here and in a child of the --base code.
# One round of timed calls, printed as JSON on one line: run by this code and by --base's.
PROBE = r"""
import json, os, sys, time, tracemalloc
from datetime import datetime
sys.path.insert(0, sys.argv[1])
os.environ["TUNECACHE_DIR"] = sys.argv[2]
import tunecache
from tunecache import maintain
cutoff = datetime.fromisoformat(sys.argv[3])
memory = sys.argv[4] == "memory"  # peak memory instead of time (tracemalloc slows it)
out = {}
def timed(name, call):
    if memory:
        tracemalloc.start()
    t = time.perf_counter()
    result = call()
    out[name + "_s"] = time.perf_counter() - t
    if memory:
        out[name + "_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return result
with tunecache.open(client="benchrt", client_version="1.0", threads=1) as cache:
    report = timed("doctor", lambda: maintain.doctor(cache))
    pruned = timed("prune", lambda: maintain.prune(
        cache, stale=True, unvalidated=True, older_than=cutoff, masked=True, dry_run=True
    ))
    masked = timed("masked", lambda: maintain.prune(cache, masked=True, dry_run=True))
reasons = {}
for e in pruned.entries:
    for r in e.reasons:
        reasons[r] = reasons.get(r, 0) + 1
out.update(
    healthy=report.healthy, problems={p.kind: p.count for p in report.problems},
    entries=report.entries, pruned=len(pruned.entries), reasons=reasons,
    orphans=dict(pruned.orphans), spared=pruned.spared_active,
    masked=[e.id for e in masked.entries], masked_orphans=dict(masked.orphans),
)
print(json.dumps(out))
"""

#: what the probe times, as the report names it
TIMED = {
    "doctor": "doctor, whole file",
    "prune": "prune --dry-run, every kind",
    "masked": "prune --dry-run --masked",
}


def _stamp(when: datetime) -> str:
    """A time as the store writes it: UTC, no zone, microseconds."""
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


#: the stamp of every row's creation, and the ids of the two runs
NOW = _stamp(NEWEST)
FINISHED, OPEN = 1, 2


#: one encoded record: its bytes, where its first sample's bytes start, its candidate timing
#: rows (without their record id), its best candidate and that one's median
Template = tuple[bytes, int, list[tuple[object, ...]], str, float]


def _records(rng: random.Random) -> list[Template]:
    """DISTINCT_RECORDS encoded records of CURRENT, 10 samples each."""
    from tunecache.codec import CandidateTiming, TimingRecord, encode

    out = []
    for _ in range(DISTINCT_RECORDS):
        cands = tuple(
            CandidateTiming(name, tuple(rng.uniform(1e-5, 4e-5) for _ in range(10)), inner_loops=16)
            for name in CURRENT
        )
        record = TimingRecord(cands, settings={"max_samples": 30}, env={"numpy": "2.4.6"})
        best = record.best()
        assert best is not None and best.median is not None
        timings: list[tuple[object, ...]] = [
            (c.name, c.median, c.min, c.max, len(c.samples), c.inner_loops, 0, None) for c in cands
        ]
        blob = encode(record)
        first = blob.index(struct.pack("<d", cands[0].samples[0]))  # samples are float64 LE
        out.append((blob, first, timings, best.name, best.median))
    return out


def _vary(template: Template, i: int) -> bytes:
    """The template's bytes with the two lowest mantissa bytes of its first sample set from
    `i`: every stored record differs, and each still decodes (a finite sample >= 0)."""
    blob, at = template[0], template[1]
    return blob[:at] + bytes((i & 0xFF, (i >> 8) & 0xFF)) + blob[at + 2 :]


def build(root: Path, entries: int, pid: int) -> Path:
    """A cache of `entries` entries, 2% of them another device's; returns its path. The run
    left open is process `pid`'s (one that stays alive while the benchmark runs)."""
    import tunecache

    os.environ["TUNECACHE_DIR"] = str(root)
    with tunecache.open(**CLIENT) as cache, cache.transaction(write=True) as tx:
        tx.device_row()
        path = cache.path
    rng = random.Random(7)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    with conn:
        conn.execute(
            "INSERT INTO devices (fingerprint, cpu, threads, accelerator, client, client_version,"
            " created_at) VALUES ('fp-other', 'other-cpu', 8, NULL, 'benchrt', '1.0', ?)",
            (NOW,),
        )
        sets = _candidate_sets(conn)
        host = socket.gethostname()
        conn.executemany(
            "INSERT INTO runs (id, kind, status, device_id, tool_version, hostname, platform,"
            " python_version, pid, started_at, finished_at)"
            " VALUES (?, 'tune', ?, 1, '1.0', ?, 'bench', '3.11', ?, ?, ?)",
            [(FINISHED, "finished", host, 1, NOW, NOW), (OPEN, "running", host, pid, NOW, None)],
        )
        conn.executemany(
            "INSERT INTO models (id, name, fingerprint, created_at) VALUES (?, ?, ?, ?)",
            [(i + 1, m, f"{m}-fp", NOW) for i, m in enumerate(MODELS)],
        )
        _entries(conn, rng, entries, sets)
        _records_of(conn, rng, entries)
        _verdicts(conn, rng, entries)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _candidate_sets(conn: sqlite3.Connection) -> dict[tuple[str, bool], int]:
    """Each signature's older and current list; their ids by (signature, whether current)."""
    from tunecache.candidates import checksum

    sets = {}
    for s in range(SIGNATURES):
        for names in (OLDER, CURRENT):
            cur = conn.execute(
                "INSERT INTO candidate_sets (signature, checksum, size, created_at)"
                " VALUES (?, ?, ?, ?)",
                (f"matmul_F32_s{s}", checksum(names), len(names), NOW),
            )
            assert cur.lastrowid is not None
            sets[f"matmul_F32_s{s}", names == CURRENT] = cur.lastrowid
            conn.executemany(
                "INSERT INTO candidates (set_id, position, name) VALUES (?, ?, ?)",
                [(cur.lastrowid, i, n) for i, n in enumerate(names)],
            )
    return sets


def _entries(
    conn: sqlite3.Connection, rng: random.Random, n: int, sets: dict[tuple[str, bool], int]
) -> None:
    """`n` entries with their keys: a tenth tuned against the older list, updated over two
    years, every 50th of the other device (id 2), every 1000th written by the open run."""
    keys, rows = [], []
    for i in range(n):
        sig = f"matmul_F32_s{i % SIGNATURES}"
        m, k = 16 + i // SIGNATURES, 8 + i % 7
        keys.append((i + 1, f"{sig}_m{m}_n{k}", sig, f"m={m} n={k}"))
        current = rng.random() >= 0.1
        status = rng.choices(("accepted", "unvalidated", "rejected"), (3, 6, 1))[0]
        updated = _stamp(NEWEST - timedelta(seconds=rng.uniform(0, 730 * 86400)))
        run_id = OPEN if i % 1000 == 0 else FINISHED if i % 2 else None
        choice = rng.choice(CURRENT if current else OLDER)
        device = 1 if i % 50 else 2
        rows.append(
            (i + 1, device, i + 1, sets[sig, current], choice, status, run_id, NOW, updated)
        )
    conn.executemany("INSERT INTO keys (id, text, signature, dims) VALUES (?, ?, ?, ?)", keys)
    conn.executemany(
        "INSERT INTO entries (id, device_id, key_id, candidate_set_id, choice, heuristic,"
        " status, speedup, run_id, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, 'blas', ?, 1.2, ?, ?, ?)",
        rows,
    )


def _records_of(conn: sqlite3.Connection, rng: random.Random, n: int) -> None:
    """A timing record of 4 candidates x 10 samples for each of the `n` entries, each record's
    bytes its own, with its candidate timing rows."""
    templates = _records(rng)
    records, timings = [], []
    for i in range(n):
        template = templates[i % DISTINCT_RECORDS]
        _, _, rows, best, median = template
        blob = _vary(template, i)
        records.append((i + 1, i + 1, best, median, NOW, blob))
        timings += [(i + 1, *row) for row in rows]
    conn.executemany(
        "INSERT INTO timing_records (id, entry_id, format_version, best, best_median_s,"
        " heuristic_median_s, candidates_count, samples_count, failures_count, created_at,"
        " data) VALUES (?, ?, 1, ?, ?, 2e-5, 4, 40, 0, ?, ?)",
        records,
    )
    conn.executemany(
        "INSERT INTO candidate_timings (record_id, name, median_s, min_s, max_s, samples,"
        " inner_loops, pruned, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        timings,
    )


def _verdicts(conn: sqlite3.Connection, rng: random.Random, n: int) -> None:
    """Verdicts on 45% of the `n` entries: validated by one or two models, masked by every
    model that judged it, or both; every 997th entry's given by the open run."""
    rows = []
    for i in range(n):
        draw = rng.random()
        if draw < 0.3:
            judged = [(m, "validated") for m in rng.sample(MODELS, rng.randint(1, 2))]
        elif draw < 0.4:
            judged = [(m, "masked") for m in rng.sample(MODELS, rng.randint(1, 3))]
        elif draw < 0.45:
            a, b = rng.sample(MODELS, 2)
            judged = [(a, "validated"), (b, "masked")]
        else:
            continue
        run_id = OPEN if i % 997 == 0 else FINISHED
        rows += [(MODELS.index(m) + 1, i + 1, v, run_id, NOW, NOW) for m, v in judged]
    conn.executemany(
        "INSERT INTO validations (model_id, entry_id, verdict, gain, rounds, confirmations,"
        " run_id, created_at, updated_at) VALUES (?, ?, ?, 1.05, 3, 3, ?, ?, ?)",
        rows,
    )


def _probe(code_root: Path, cache_root: Path, memory: bool = False) -> dict[str, object]:
    """The calls TIMED names on the cache under `cache_root`, by the tunecache at `code_root`,
    in a fresh process (so neither side keeps the other's warm state); with `memory`, each
    call's peak of traced memory too."""
    mode = "memory" if memory else "time"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(code_root), str(cache_root), CUTOFF.isoformat(), mode],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _build_in_child(code_root: Path, cache_root: Path, entries: int) -> Path:
    """`build` run by the tunecache at `code_root`, so the file has that code's schema."""
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--build",
            str(cache_root),
            "--code",
            str(code_root),
            "--entries",
            str(entries),
            "--pid",
            str(os.getpid()),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build is not None:  # the child of _build_in_child
        sys.path.insert(0, str(args.code))
        print(build(args.build, args.entries, args.pid))
        return 0
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "new"
        t = time.perf_counter()
        path = _build_in_child(here, root, args.entries)
        took = time.perf_counter() - t
        size = path.stat().st_size / 2**20
        print(f"built {args.entries:,} entries in {took:.1f} s ({size:.0f} MB)")
        base_root = Path(tmp) / "base"
        if args.base is not None:
            _build_in_child(args.base.resolve(), base_root, args.entries)
        ours: list[dict[str, object]] = []
        theirs: list[dict[str, object]] = []
        for _ in range(args.rounds):
            ours.append(_probe(here, root))
            if args.base is not None:
                theirs.append(_probe(args.base.resolve(), base_root))
        memory = [_probe(here, root, memory=True)]
        if args.base is not None:
            memory.append(_probe(args.base.resolve(), base_root, memory=True))
    ok = _report(args.entries, ours, theirs)
    _report_memory(*memory)
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")
    return 0 if ok else 1


def _report(n: int, ours: list[dict[str, object]], theirs: list[dict[str, object]]) -> bool:
    def median(runs: list[dict[str, object]], key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]

    target = 2.0 * n / 100_000
    doctor_s = median(ours, "doctor_s")
    ok = doctor_s <= target
    print(f"\nmaintenance of {n:,} entries, median of {len(ours)} rounds, each in a fresh process")
    if theirs:
        print(f"  {'':<30} {'before (--base)':>16} {'after':>10} {'after/before':>13}")
    for key, name in TIMED.items():
        after = median(ours, f"{key}_s")
        line = f"  {name:<30} "
        if theirs:
            before = median(theirs, f"{key}_s")
            line += f"{before:>14.2f} s {after:>8.2f} s {after / before:>12.3f}x"
        else:
            line += f"{after:>8.2f} s"
        if key == "doctor":
            line += f"   target <= {target:.1f} s {'ok' if ok else 'MISSED'}"
        print(line)
    last = ours[-1]
    print(f"  doctor found {last['problems'] or 'nothing'}; healthy: {last['healthy']}")
    print(
        f"  every kind: {last['pruned']:,} entries {last['reasons']}, orphans "
        f"{last['orphans']}, spared {last['spared']}"
    )
    print(f"  --masked: {len(last['masked']):,} entries, orphans {last['masked_orphans']}")  # type: ignore[arg-type]
    if theirs:
        same = all(
            {k: v for k, v in a.items() if not k.endswith(("_s", "_mib"))}
            == {k: v for k, v in b.items() if not k.endswith(("_s", "_mib"))}
            for a, b in zip(ours, theirs, strict=True)
        )
        print(f"  same findings and the same entries selected: {'yes' if same else 'NO'}")
        ok = ok and same
    return ok


def _report_memory(ours: dict[str, object], theirs: dict[str, object] | None = None) -> None:
    print("\n  peak traced memory of each call (tracemalloc), one more round")
    for key, name in TIMED.items():
        after = float(ours[f"{key}_mib"])  # type: ignore[arg-type]
        line = f"  {name:<30} "
        if theirs is not None:
            before = float(theirs[f"{key}_mib"])  # type: ignore[arg-type]
            line += f"{before:>12.1f} MiB {after:>6.1f} MiB {after / before:>12.3f}x"
        else:
            line += f"{after:>6.1f} MiB"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
