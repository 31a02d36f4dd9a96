"""What the tests of the store layer share: a cache's rows read (and changed) by hand, timing
records to store, and the verdicts whole models give.

The fixtures built from these live in tests/conftest.py and the conftest.py of each folder.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tunecache.cache import Cache, Entry, NewEntry
from tunecache.codec import CandidateTiming, TimingRecord

#: the candidate list of the exchange, maintenance and store-seam tests
NAMES = ("direct", "im2col", "winograd")
#: the candidate list of the RFC example's einsum, which the store API tests write
MMM = ("mmm_4x4", "mmm_8x8", "mmv_serial")
RFC_TEXT = "einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided"

#: a whole model's verdict as the tests give it: (model, verdict, gain, rounds, confirmations)
Judgement = tuple[str, str, float | None, int, int]
#: the verdict of the model that validates the accepted entry of every filled cache
RESNET: Judgement = ("resnet", "validated", 1.2, 3, 3)


# --- a cache file, read and changed without tunecache ------------------------------------------


def sql(path: Path, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """Run one statement on a cache file through the stdlib driver, as a person with the
    sqlite3 shell would, commit, and return its rows."""
    conn = sqlite3.connect(path)
    try:
        found = conn.execute(statement, params).fetchall()
        conn.commit()
        return found
    finally:
        conn.close()


def all_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted, read through a read-only connection."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }
    finally:
        conn.close()


#: the columns that hold when a row was written: two runs of the same writes differ only there
#: (revision 0006's change numbers say in what order, its store id in which database)
TIMES = frozenset(
    {"created_at", "updated_at", "started_at", "finished_at", "synced_at", "seq", "store_id"}
)


def timeless_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the schema stamp, sorted, with every time column read as
    None: equal for the same writes made at other times (ids and bytes compared as they are)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version'"
            )
        ]
        out = {}
        for t in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            listed = ", ".join("NULL" if c in TIMES else f'"{c}"' for c in columns)
            out[t] = sorted(conn.execute(f'SELECT {listed} FROM "{t}"').fetchall(), key=repr)
        return out
    finally:
        conn.close()


def snapshot(path: Path) -> dict[str, Any]:
    """Every row of every table, read without writing, plus the database and WAL bytes."""
    wal = Path(f"{path}-wal")
    return {
        "rows": all_rows(path),
        "db": path.read_bytes(),
        "wal": wal.read_bytes() if wal.exists() else b"",
    }


def backdate(cache: Cache, entry: Entry | int, when: datetime) -> None:
    """Set an entry's last update, written as the store writes it: UTC without a zone (as
    UTCDateTime keeps it) and with microseconds, which the text comparisons of the age filters
    rely on."""
    entry_id = entry.id if isinstance(entry, Entry) else entry
    stamp = when.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    sql(cache.path, "UPDATE entries SET updated_at = ? WHERE id = ?", stamp, entry_id)


# --- timing records ----------------------------------------------------------------------------


def timing(*medians: float, samples: int = 3) -> TimingRecord:
    """A record of the first len(medians) of NAMES, `samples` samples each around its median."""
    return TimingRecord(
        candidates=tuple(
            CandidateTiming(name, tuple(m * (1 + i / 100) for i in range(samples)))
            for name, m in zip(NAMES, medians, strict=False)
        ),
        settings={"min_time": 0.01, "rounds": samples},
        env={"python": "3.11"},
    )


def conv_record() -> TimingRecord:
    """A record of NAMES with known samples: im2col fastest, direct slower, winograd failed."""
    return TimingRecord(
        candidates=(
            CandidateTiming("direct", (3e-5, 3.2e-5, 2.9e-5), inner_loops=10),
            CandidateTiming("im2col", (1e-5, 1.5e-5, 1.1e-5)),
            CandidateTiming("winograd", error="RuntimeError: unsupported stride"),
        ),
        settings={"min_time": 0.01},
        env={"python": "3.11"},
    )


def mmm_record() -> TimingRecord:
    """A record of MMM: mmm_8x8 fastest, mmm_4x4 slower, mmv_serial failed."""
    return TimingRecord(
        candidates=(
            CandidateTiming("mmm_4x4", (2.0e-5, 2.1e-5, 1.9e-5), inner_loops=64),
            CandidateTiming("mmm_8x8", (1.0e-5, 1.1e-5, 1.2e-5), inner_loops=64),
            CandidateTiming("mmv_serial", (), inner_loops=1, error="ValueError: no"),
        ),
        settings={"max_samples": 30, "prune_ratio": 1.5},
        env={"numpy": "2.4.6"},
    )


# --- verdicts ----------------------------------------------------------------------------------


def judge(cache: Cache, entry: Entry, *judgements: Judgement) -> None:
    """Record each model's verdict on `entry`, in order; a model's fingerprint is its initial
    followed by 1 ("resnet" is "r1")."""
    for model, verdict, gain, rounds, confirmations in judgements:
        cache.validate(
            entry,
            model=model,
            fingerprint=f"{model[0]}1",
            verdict=verdict,
            gain=gain,
            rounds=rounds,
            confirmations=confirmations,
        )


def accepted(
    cache: Cache, key: str, choice: str, record: TimingRecord, speedup: float, *by: Judgement
) -> Entry:
    """An entry of NAMES as a finished tuning run leaves it once models judged it: accepted,
    with heuristic "direct", its timing record and speedup, linked to the run, and `by`'s
    verdicts."""
    with cache.run("tune") as run_id:
        entry = cache.put(
            key,
            choice=choice,
            candidates=NAMES,
            heuristic="direct",
            record=record,
            speedup=speedup,
            status="accepted",
            run_id=run_id,
        )
    judge(cache, entry, *by)
    return entry


# --- writes --------------------------------------------------------------------------------------


def put_one_by_one(cache: Cache, batch: list[NewEntry]) -> list[int]:
    """What `cache.put_many(batch)` promises to equal: a `put` of each entry, in order, then a
    `validate` for each of its verdicts; the entry ids."""
    ids = []
    for e in batch:
        entry = cache.put(
            e.key,
            choice=e.choice,
            candidates=e.candidates,
            heuristic=e.heuristic,
            record=e.record,
            speedup=e.speedup,
            status=e.status,
            run_id=e.run_id,
        )
        for v in e.verdicts:
            cache.validate(
                entry,
                model=v.model,
                fingerprint=v.fingerprint,
                verdict=v.verdict,
                gain=v.gain,
                rounds=v.rounds,
                confirmations=v.confirmations,
                run_id=v.run_id,
            )
        ids.append(entry.id)
    return ids


def decisions(path: Path) -> list[tuple[Any, ...]]:
    """Every entry as a reader sees it, ids and times left out: key, list, choice, heuristic,
    status, speedup, run, record bytes and summary, and the verdicts on it, sorted."""
    return sql(
        path,
        "SELECT k.text, s.checksum, e.choice, e.heuristic, e.status, e.speedup, e.run_id,"
        " t.data, t.best, t.best_median_s, t.heuristic_median_s, t.samples_count,"
        " (SELECT group_concat(c.name || '=' || c.median_s, ',') FROM"
        "  (SELECT * FROM candidate_timings c WHERE c.record_id = t.id ORDER BY c.name) c),"
        " (SELECT group_concat(m.name || ':' || v.verdict || ':' || v.rounds, ',') FROM"
        "  (SELECT * FROM validations v WHERE v.entry_id = e.id ORDER BY v.model_id) v"
        "  JOIN models m ON m.id = v.model_id)"
        " FROM entries e JOIN keys k ON k.id = e.key_id"
        " JOIN candidate_sets s ON s.id = e.candidate_set_id"
        " LEFT JOIN timing_records t ON t.entry_id = e.id ORDER BY k.text, s.checksum",
    )
