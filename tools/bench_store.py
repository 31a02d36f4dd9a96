"""The store's speed targets (issue 15), each measured side by side with its reference in one run.

    python tools/bench_store.py            # full size
    python tools/bench_store.py --quick    # a smoke run: small sizes, one repeat, the same targets

Each target is one function of SECTIONS: it takes the scratch folder and the options, measures,
prints what it saw, and returns its Results (a figure, its target, met or not). The table of
every Result is printed at the end; the exit status is 1 if any target was not met. Figures on
a shared machine swing by about 10%: compare the ratios, measured in the same run, and repeat.

Sections: put_many against raw sqlite3 executemany of the same rows; one put; several processes
writing batches at once; `tunecache export` and `import` of N entries (100,000) as whole
processes, import beside raw sqlite3 executemany of the same rows, with the peak memory of the
import and of its checking worker; `doctor` of that cache; the read commands as a user starts
them (tools/bench_cli.py's cases: `where` and `list` of 1,000 entries against
`python -c 'import sqlite3'`, `list --json` of N to a file, the first row of `list` on a
terminal); and the resolver's first nearest miss of a fresh process (tools/bench_resolve.py's:
N entries of one signature beside a plain sqlite3 + numpy load, then 1,000,000 entries alone).
tools/bench_cli.py, tools/bench_maintain.py and tools/bench_resolve.py print more of each.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cli
import bench_resolve

from tests.reliability import batches, harness
from tunecache.cache import Cache, NewEntry
from tunecache.candidates import checksum
from tunecache.codec import encode
from tunecache.device import Device
from tunecache.keys import make_key
from tunecache.store.engine import file_identity
from tunecache.store.models import utcnow


@dataclass(frozen=True)
class Options:
    """How big each section runs."""

    quick: bool
    #: entries of the put_many section
    entries: int
    #: puts of the one-put section
    puts: int
    #: how many times each side of a comparison runs (the best run of each counts)
    repeat: int
    #: entries of the cache that export, import, doctor and list --json run on
    fleet: int
    #: entries of the resolver's fleet-size first miss (0: skipped)
    huge: int


@dataclass(frozen=True)
class Result:
    """One target: what was measured, the figure, the target, and whether it was met."""

    name: str
    figure: str
    target: str
    ok: bool


Section = Callable[[Path, Options], list[Result]]


# --- the entries every write section writes ----------------------------------------------------


def entries(count: int, tag: str) -> list[NewEntry]:
    """`count` entries of four candidates with 10-sample records, on keys named by `tag`."""
    return [
        batches.as_new_entry(
            harness.write_for(
                i % 7, i, make_key(f"conv_F32_{tag}", h=i // 1000 + 1, w=i % 1000 + 1), 10
            )
        )
        for i in range(count)
    ]


def _best(runs: Sequence[float]) -> float:
    return min(runs)


# --- put_many against raw sqlite3 --------------------------------------------------------------


@dataclass
class RawRows:
    """The rows of a batch as plain tuples, ids counted from 1, for a fresh cache."""

    stamp: str
    signature: str
    keys: list[tuple[object, ...]]
    entries: list[tuple[object, ...]]
    records: list[tuple[object, ...]]
    timings: list[tuple[object, ...]]


def raw_rows(batch: Sequence[NewEntry]) -> RawRows:
    """The rows `put_many` writes for `batch`, built in plain Python: each record encoded by
    `codec.encode`, its summary from the record's own properties."""
    stamp = utcnow().replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    first = batch[0].key
    assert not isinstance(first, str)
    rows = RawRows(stamp, first.signature, [], [], [], [])
    for i, e in enumerate(batch, 1):
        key, record = e.key, e.record
        assert not isinstance(key, str) and record is not None
        rows.keys.append((i, key.text, key.signature, " ".join(f"{n}={v}" for n, v in key.dims)))
        rows.entries.append(
            (i, 1, i, 1, e.choice, e.heuristic, e.status, e.speedup, None, stamp, stamp)
        )
        best = record.best()
        assert best is not None
        heuristic = record.candidate(e.heuristic).median if e.heuristic else None
        count = sum(len(c.samples) for c in record.candidates)
        summary = (best.name, best.median, heuristic, len(record.candidates), count, 0)
        rows.records.append((i, i, 1, *summary, stamp, encode(record)))
        rows.timings += [
            (i, c.name, c.median, c.min, c.max, len(c.samples), c.inner_loops, c.pruned, c.error)
            for c in record.candidates
        ]
    return rows


def raw_insert(db: Path, rows: RawRows) -> None:
    """Insert `rows` with the stdlib driver's executemany into the fresh cache `db`, in one
    transaction, with the pragmas every tunecache connection has."""
    names = harness.NAMES
    device = harness.DEVICE
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO devices (id, fingerprint, cpu, threads, accelerator, client,"
            " client_version, created_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
            (device.fingerprint, *device.as_dict().values(), rows.stamp),
        )
        conn.execute(
            "INSERT INTO candidate_sets (id, signature, checksum, size, created_at)"
            " VALUES (1, ?, ?, ?, ?)",
            (rows.signature, checksum(names), len(names), rows.stamp),
        )
        conn.executemany(
            "INSERT INTO candidates (set_id, position, name) VALUES (1, ?, ?)", enumerate(names)
        )
        conn.executemany(
            "INSERT INTO keys (id, text, signature, dims) VALUES (?, ?, ?, ?)", rows.keys
        )
        conn.executemany(
            "INSERT INTO entries (id, device_id, key_id, candidate_set_id, choice, heuristic,"
            " status, speedup, run_id, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows.entries,
        )
        conn.executemany(
            "INSERT INTO timing_records (id, entry_id, format_version, best, best_median_s,"
            " heuristic_median_s, candidates_count, samples_count, failures_count, created_at,"
            " data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows.records,
        )
        conn.executemany(
            "INSERT INTO candidate_timings (record_id, name, median_s, min_s, max_s, samples,"
            " inner_loops, pruned, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows.timings,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def raw_executemany(db: Path, batch: Sequence[NewEntry]) -> None:
    """The reference: the rows of `batch` built in plain Python and inserted with the stdlib
    driver's executemany into a fresh cache of the same schema."""
    raw_insert(db, raw_rows(batch))


def _content(db: Path) -> list[tuple[object, ...]]:
    """What a reader sees of every entry, times and ids left out: equal for equal writes."""
    conn = harness.connect_ro(db)
    try:
        return conn.execute(
            "SELECT k.text, k.signature, k.dims, s.checksum, e.choice, e.heuristic, e.status,"
            " e.speedup, t.format_version, t.best, t.best_median_s, t.heuristic_median_s,"
            " t.candidates_count, t.samples_count, t.failures_count, t.data,"
            " (SELECT group_concat(c.name || ':' || c.median_s || ':' || c.min_s || ':' ||"
            "  c.max_s || ':' || c.samples || ':' || c.inner_loops || ':' || c.pruned, ',')"
            "  FROM candidate_timings c WHERE c.record_id = t.id)"
            " FROM entries e JOIN keys k ON k.id = e.key_id"
            " JOIN candidate_sets s ON s.id = e.candidate_set_id"
            " LEFT JOIN timing_records t ON t.entry_id = e.id ORDER BY k.text"
        ).fetchall()
    finally:
        conn.close()


def bench_put_many(scratch: Path, options: Options) -> list[Result]:
    """`put_many` of N entries with 4 x 10-sample records, beside raw sqlite3 executemany of
    the same rows into the same schema: each on a fresh cache, alternately, best of each."""
    batch = entries(options.entries, "many")
    ours: list[float] = []
    raw: list[float] = []
    for run in range(options.repeat):
        for side, times in (("raw", raw), ("ours", ours)):
            db = scratch / f"many-{side}-{run}.db"
            harness.new_cache(db)
            with Cache.open(device=harness.DEVICE, path=db) as cache:
                start = time.perf_counter()
                if side == "raw":
                    raw_executemany(db, batch)
                else:
                    cache.put_many(batch)
                times.append(time.perf_counter() - start)
    same = _content(scratch / "many-raw-0.db") == _content(scratch / "many-ours-0.db")
    # Where the reference's time goes: encoding the records, and SQLite with every row built.
    start = time.perf_counter()
    for e in batch:
        assert e.record is not None
        encode(e.record)
    encoding = time.perf_counter() - start
    prebuilt = raw_rows(batch)
    db = scratch / "many-prebuilt.db"
    harness.new_cache(db)
    start = time.perf_counter()
    raw_insert(db, prebuilt)
    ceiling = time.perf_counter() - start
    n = len(batch)
    per_s, raw_per_s = n / _best(ours), n / _best(raw)
    ratio = per_s / raw_per_s
    print(
        f"put_many of {n:,} entries: {per_s:,.0f}/s (runs {_runs(ours)} s); raw sqlite3 "
        f"executemany of the same rows: {raw_per_s:,.0f}/s (runs {_runs(raw)} s); "
        f"ratio {ratio:.2f}; the same rows stored: {'yes' if same else 'NO'}"
    )
    print(
        f"  for reference: codec.encode alone {n / encoding:,.0f} records/s "
        f"({encoding / n * 1e6:.0f} us each); raw sqlite3 with every row prebuilt "
        f"{n / ceiling:,.0f}/s"
    )
    return [
        Result("put_many / raw sqlite3 executemany", f"{ratio:.2f}x", ">= 0.5x", ratio >= 0.5),
        Result("put_many entries/s", f"{per_s:,.0f}", ">= 20,000", per_s >= 20_000),
        Result("put_many stores the raw rows", "yes" if same else "no", "yes", same),
    ]


# --- one put -----------------------------------------------------------------------------------


def bench_put(scratch: Path, options: Options) -> list[Result]:
    """`put` of one entry with a 4 x 10-sample record, N times, each its own transaction, beside
    `put_many` of one entry each time."""
    work = entries(options.puts, "one")
    per_call: dict[str, list[float]] = {"put": [], "put_many([one])": []}
    for run in range(options.repeat):
        for number, (side, times) in enumerate(per_call.items()):
            db = scratch / f"one-{number}-{run}.db"
            harness.new_cache(db)
            with Cache.open(device=harness.DEVICE, path=db) as cache:
                start = time.perf_counter()
                if side == "put":
                    for e in work:
                        cache.put(
                            e.key,
                            choice=e.choice,
                            candidates=e.candidates,
                            heuristic=e.heuristic,
                            record=e.record,
                            speedup=e.speedup,
                        )
                else:
                    for e in work:
                        cache.put_many([e])
                times.append(time.perf_counter() - start)
    put_s = len(work) / _best(per_call["put"])
    many_s = len(work) / _best(per_call["put_many([one])"])
    print(
        f"{len(work):,} puts, one transaction each: put {put_s:,.0f}/s, put_many([one]) "
        f"{many_s:,.0f}/s (ratio {put_s / many_s:.2f})"
    )
    # What every transaction pays to know its file is still the cache (issue 16): one stat of
    # the path, compared with what the connection opened.
    db = scratch / "one-0-0.db"
    rounds = 20_000
    start = time.perf_counter()
    for _ in range(rounds):
        file_identity(db)
    check_s = (time.perf_counter() - start) / rounds
    print(
        f"  the live-file check of each transaction: {check_s * 1e6:.2f} us, "
        f"{check_s * put_s * 100:.2f}% of one put"
    )
    return [Result("one put with a record, /s", f"{put_s:,.0f}", ">= 2,000", put_s >= 2000)]


# --- writers at once ---------------------------------------------------------------------------


def bench_writers(scratch: Path, options: Options) -> list[Result]:
    """4 processes writing batches of 100 at once, beside 1 process writing as many batches."""
    count = 5 if options.quick else 25
    found = {}
    for writers, each in ((1, 4 * count), (4, count)):
        db = scratch / f"writers-{writers}.db"
        found[writers] = batches.batch_writers(db, writers=writers, batches=each, size=100)
        harness.remove_database(db)
    one, four = found[1], found[4]
    lost = four.writers * four.batches * four.size - four.acked + len(four.violations)
    print(
        f"4 processes x {four.batches} batches of 100: {four.entries_per_s:,.0f} entries/s "
        f"together ({four.acked:,} acknowledged in {four.seconds:.2f} s, "
        f"{len(four.caller_errors)} errors, {len(four.violations)} violations); 1 process "
        f"writing the same {one.acked:,}: {one.entries_per_s:,.0f}/s "
        f"(ratio {four.entries_per_s / max(one.entries_per_s, 1):.2f})"
    )
    for problem in (four.caller_errors + four.violations)[:5]:
        print(f"  {problem}")
    return [
        Result(
            "4 processes, batches of 100: entries/s",
            f"{four.entries_per_s:,.0f}",
            ">= 10,000",
            four.entries_per_s >= 10_000,
        ),
        Result("4 processes, batches of 100: lost or wrong", str(lost), "0", lost == 0),
    ]


# --- export, import and doctor of a fleet's cache --------------------------------------------


#: the device of the fleet's cache: harness.DEVICE's, with a CPU name the command line keeps as
#: it is (it drops a "cpu" word from a model name, as from "Intel(R) Xeon(R) CPU")
FLEET = Device(
    cpu="bench-9000", threads=4, accelerator=None, client="tunecache", client_version="0.1.0"
)


def _flags(db: Path) -> list[str]:
    """The command line's options naming FLEET's cache at `db`."""
    device = FLEET
    return [
        *("--db", str(db), "--cpu", device.cpu, "--threads", str(device.threads)),
        *("--client", device.client or "", "--client-version", device.client_version or ""),
    ]


def _tunecache() -> str:
    return str(Path(sys.executable).with_name("tunecache"))


def _run(argv: Sequence[str], out: Path) -> bench_cli.Timed:
    return bench_cli.run(argv, bench_cli.env_for(out.parent), out)


def bench_exchange(scratch: Path, options: Options) -> list[Result]:
    """`tunecache export` and `import` of N entries with 4 x 10-sample records, each a whole
    process; the import into a fresh cache beside raw sqlite3 executemany of the same rows,
    alternately, best of each; then `doctor` of the source cache."""
    n = options.fleet
    batch = entries(n, "fleet")
    source = scratch / "fleet-source.db"
    harness.new_cache(source)
    with Cache.open(device=FLEET, path=source) as cache:
        for start in range(0, n, 10_000):
            cache.put_many(batch[start : start + 10_000])
    document = scratch / "fleet.cbor"
    exports: list[bench_cli.Timed] = []
    imports: list[bench_cli.Timed] = []
    raw: list[float] = []
    doctors: list[bench_cli.Timed] = []
    for run in range(options.repeat):
        document.unlink(missing_ok=True)
        argv = [_tunecache(), "export", *_flags(source), "-o", str(document)]
        exports.append(_run(argv, scratch / "export.out"))
        target = scratch / f"fleet-import-{run}.db"
        harness.new_cache(target)
        imports.append(
            _run([_tunecache(), "import", *_flags(target), str(document)], scratch / "i.out")
        )
        reference = scratch / f"fleet-raw-{run}.db"
        harness.new_cache(reference)
        start = time.perf_counter()
        raw_executemany(reference, batch)
        raw.append(time.perf_counter() - start)
        doctors.append(_run([_tunecache(), "doctor", *_flags(source)], scratch / "d.out"))
    same = _content(source) == _content(scratch / "fleet-import-0.db")
    for run in range(options.repeat):
        harness.remove_database(scratch / f"fleet-import-{run}.db")
        harness.remove_database(scratch / f"fleet-raw-{run}.db")
    export_s = min(t.seconds for t in exports)
    import_s = min(t.seconds for t in imports)
    raw_s = _best(raw)
    # The median run's peaks: the first run of a checkout also compiles its bytecode, which
    # an installed package never does (tools/bench_cli.py warms each command up for that).
    main_mib = statistics.median(t.rss_mib for t in imports)
    worker_mib = statistics.median(max(t.children_mib, default=0.0) for t in imports)
    both = [t.rss_mib + sum(t.children_mib) for t in imports]
    both_mib = statistics.median(both)
    doctor_s = min(t.seconds for t in doctors)
    size = document.stat().st_size / 2**20
    print(
        f"export of {n:,} entries ({size:.1f} MiB): {export_s:.2f} s (runs "
        f"{_runs([t.seconds for t in exports])}), peak RSS {exports[0].rss_mib:.0f} MiB"
    )
    print(
        f"import of it into a fresh cache: {import_s:.2f} s (runs "
        f"{_runs([t.seconds for t in imports])}); raw sqlite3 executemany of the same rows "
        f"{raw_s:.2f} s (runs {_runs(raw)}); ratio {import_s / raw_s:.2f}; peak RSS "
        f"{main_mib:.0f} MiB, its checking worker {worker_mib:.0f} MiB, all its processes at once "
        f"at most {both_mib:.0f} MiB (median run; runs {'/'.join(f'{b:.0f}' for b in both)}); "
        f"the same entries stored: {'yes' if same else 'NO'}"
    )
    print(f"doctor of {n:,} entries: {doctor_s:.2f} s (runs {_runs([t.seconds for t in doctors])})")
    return [
        Result(f"export of {n:,}, s", f"{export_s:.2f}", "<= 2", export_s <= 2),
        Result(f"import of {n:,}, s", f"{import_s:.2f}", "<= 10", import_s <= 10),
        Result("import / raw sqlite3 executemany", f"{import_s / raw_s:.2f}x", "(reported)", True),
        Result(
            "import peak RSS (with its worker), MiB",
            f"{both_mib:.0f}",
            "<= 150",
            both_mib <= 150,
        ),
        Result("import stores the exported entries", "yes" if same else "no", "yes", same),
        Result(f"doctor of {n:,}, s", f"{doctor_s:.2f}", "<= 2", doctor_s <= 2),
    ]


# --- the read commands, as whole processes ---------------------------------------------------


def bench_reads(scratch: Path, options: Options) -> list[Result]:
    """tools/bench_cli.py's targets, by the `tunecache` script beside this interpreter, with
    bytecode written as an install has it: where and list on 1,000 entries against
    `python -c 'import sqlite3'`, list --json of N to a file, list's first row on a terminal."""
    small, large = scratch / "reads-small", scratch / "reads-large"
    bench_cli.fill(small, 1000)
    bench_cli.fill(large, options.fleet)
    code = bench_cli.Code("dev", sys.executable, (_tunecache(),))
    rounds = 5 if options.quick else 15
    quick = bench_cli.interleaved(bench_cli.quick_cases(code, small, scratch), rounds)

    def median(name: str) -> float:
        return bench_cli.median([t.seconds for t in quick[f"dev: {name}"]])

    base = median("python -c 'import sqlite3'")
    where, listed = (
        median("tunecache where") / base,
        median("tunecache list (1k, to a file)") / base,
    )
    out = scratch / "reads.out"
    heavy = bench_cli.interleaved(
        {
            "json": lambda: bench_cli.run(
                [*code.argv, "list", "--json"], bench_cli.env_for(large), out
            ),
            "small": lambda: bench_cli.run_on_terminal(
                [*code.argv, "list"], bench_cli.env_for(small)
            ),
            "large": lambda: bench_cli.run_on_terminal(
                [*code.argv, "list"], bench_cli.env_for(large)
            ),
        },
        1 if options.quick else 3,
    )
    json_s = bench_cli.median([t.seconds for t in heavy["json"]])
    first = max(
        bench_cli.median([t.first_row_s or 0.0 for t in heavy[size]]) for size in ("small", "large")
    )
    print(
        f"{rounds} rounds of 1,000 entries: python -c 'import sqlite3' {base * 1e3:.1f} ms; "
        f"where {where:.2f}x, list {listed:.2f}x (medians); list --json of {options.fleet:,} to a "
        f"file {json_s:.2f} s, peak RSS {max(t.rss_mib for t in heavy['json']):.0f} MiB; first "
        f"row on a terminal {first * 1e3:.0f} ms (the slower of 1,000 and {options.fleet:,})"
    )
    return [
        Result("where on 1k / import sqlite3", f"{where:.2f}x", "<= 3x", where <= 3),
        Result("list on 1k / import sqlite3", f"{listed:.2f}x", "<= 3x", listed <= 3),
        Result(
            f"list --json of {options.fleet:,}, s",
            f"{json_s:.2f}",
            "<= 3",
            json_s <= 3,
        ),
        Result("list's first row on a terminal, s", f"{first:.3f}", "<= 0.3", first <= 0.3),
    ]


# --- the resolver's first miss -----------------------------------------------------------------


def bench_first_miss(scratch: Path, options: Options) -> list[Result]:
    """tools/bench_resolve.py's first nearest miss of a fresh process: N entries of one
    signature beside the plain sqlite3 + numpy load, then the fleet-size load alone."""
    root = scratch / "resolve"
    path, shapes = bench_resolve.build(root, options.fleet)
    runs = 3 if options.quick else 9
    ours, plain, _, _ = bench_resolve.first_miss(root, path, len(shapes), runs, memory=False)
    print(
        f"first nearest miss, {len(shapes):,}-entry signature: {ours * 1e3:.0f} ms; plain "
        f"sqlite3 + numpy load {plain * 1e3:.0f} ms; ratio {ours / plain:.2f}"
    )
    results = [
        Result(
            "first nearest miss / plain load",
            f"{ours / plain:.2f}x",
            "<= 1.2x",
            ours <= 1.2 * plain,
        )
    ]
    if options.huge:
        root = scratch / "resolve-huge"
        path, shapes = bench_resolve.build(root, options.huge)
        ours, _, (grew, _, _), _ = bench_resolve.first_miss(root, path, len(shapes), 3, memory=True)
        mb = grew / 2**20
        print(f"first nearest miss, {len(shapes):,} entries: {ours:.2f} s, {mb:.0f} MB more")
        results += [
            Result(f"index load of {len(shapes):,}, s", f"{ours:.2f}", "<= 1.5", ours <= 1.5),
            Result(f"index load of {len(shapes):,}, MB more", f"{mb:.0f}", "<= 150", mb <= 150),
        ]
    return results


#: every section, in the order they run
SECTIONS: list[Section] = [
    bench_put_many,
    bench_put,
    bench_writers,
    bench_exchange,
    bench_reads,
    bench_first_miss,
]


def _runs(times: Sequence[float]) -> str:
    return "/".join(f"{t:.2f}" for t in times)


def table(results: Sequence[Result]) -> str:
    """The results as an aligned table, one target a line."""
    width = max(len(r.name) for r in results)
    fig = max(len(r.figure) for r in results)
    tgt = max(len(r.target) for r in results)
    lines = [f"{'target':<{width}}  {'measured':>{fig}}  {'wanted':<{tgt}}  "]
    lines += [
        f"{r.name:<{width}}  {r.figure:>{fig}}  {r.target:<{tgt}}  {'ok' if r.ok else 'NOT MET'}"
        for r in results
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument(
        "--only",
        action="append",
        choices=[s.__name__.removeprefix("bench_") for s in SECTIONS],
        help="run this section only (may be given more than once)",
    )
    args = parser.parse_args()
    options = (
        Options(quick=True, entries=1000, puts=200, repeat=1, fleet=5000, huge=0)
        if args.quick
        else Options(quick=False, entries=10_000, puts=2000, repeat=3, fleet=100_000, huge=10**6)
    )
    # tunecache's warnings (a cache reopened, say) would interleave with the figures.
    warnings.simplefilter("ignore")
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        for section in SECTIONS:
            if args.only and section.__name__.removeprefix("bench_") not in args.only:
                continue
            print(f"== {section.__name__}")
            results += section(Path(tmp), options)
    print()
    print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
