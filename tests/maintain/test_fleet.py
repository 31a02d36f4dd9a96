"""Prune and doctor on a cache of thousands of entries, against a plain reading of the file.

The selection is SQL's (tunecache.store.queries); here the same rules are applied in Python to
every row read with the stdlib sqlite3 module, the way prune worked before, and the two must
agree entry for entry, reason for reason, in the same order, with the same orphans. The file is
filled in bulk with shared keys, two candidate lists per signature, two devices, entries
updated at the same moment, verdicts and runs still open: every case a rule has to tell apart.
"""

from __future__ import annotations

import random
import sqlite3
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.store_helpers import NAMES, sql
from tunecache import codec, maintain
from tunecache.cache import Cache
from tunecache.candidates import checksum

KEYS = 1500
SIGNATURES = 12
MODELS = ("bert", "gpt", "llama", "resnet")
LISTS = (NAMES, NAMES[:2])
START = datetime(2024, 1, 1, tzinfo=UTC)


def _stamp(when: datetime) -> str:
    """A time as the store keeps it (UTC, no zone, microseconds)."""
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


@dataclass
class Fleet:
    """A cache and its twin (another device in the same file), filled in bulk."""

    cache: Cache
    mine: int
    theirs: int

    @property
    def path(self) -> Path:
        return self.cache.path


def _fill(cache: Cache, twin: Cache, seed: int) -> Fleet:
    """About 2,500 entries of two devices, their keys, sets, records, verdicts and runs."""
    ids = []
    for each in (cache, twin):
        with each.transaction(write=True) as tx:
            ids.append(tx.device_row())
    rng = random.Random(seed)
    # Few distinct moments, so entries updated at the same one are common.
    moments = [_stamp(START + timedelta(days=d)) for d in range(0, 400, 8)]
    blob = codec.encode(codec.TimingRecord((codec.CandidateTiming("direct", (1e-5, 2e-5)),)))
    conn = sqlite3.connect(cache.path)
    conn.execute("PRAGMA foreign_keys = ON")
    with conn:
        now = moments[-1]
        sets = {}
        for s in range(SIGNATURES):
            for names in LISTS:
                cur = conn.execute(
                    "INSERT INTO candidate_sets (signature, checksum, size, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (f"op{s}_F32", checksum(names), len(names), now),
                )
                sets[s, len(names)] = cur.lastrowid
                conn.executemany(
                    "INSERT INTO candidates VALUES (?, ?, ?)",
                    [(cur.lastrowid, i, n) for i, n in enumerate(names)],
                )
        conn.executemany(
            "INSERT INTO runs (kind, status, device_id, tool_version, hostname, platform,"
            " python_version, pid, started_at) VALUES ('tune', ?, ?, '0', 'h', 'p', '3', ?, ?)",
            [("finished", ids[0], 1, now), ("running", ids[0], 2, now)],
        )
        conn.executemany(
            "INSERT INTO models (name, fingerprint, created_at) VALUES (?, ?, ?)",
            [(m, m[0], now) for m in MODELS],
        )
        entry_id = 0
        for k in range(KEYS):
            s = k % SIGNATURES
            conn.execute(
                "INSERT INTO keys (id, text, signature, dims) VALUES (?, ?, ?, ?)",
                (k + 1, f"op{s}_F32_m{k}", f"op{s}_F32", f"m={k}"),
            )
            # Each key has one to three entries: of either device, against either list; the
            # last two signatures are this device's alone, so their sets can be orphaned.
            devices = ids[:1] if s >= SIGNATURES - 2 else ids
            pairs = [(d, n) for d in devices for n in (3, 2)]
            pairs = rng.sample(pairs, min(len(pairs), rng.choice((1, 1, 2, 3))))
            for device, size in pairs:
                entry_id += 1
                run = rng.choices((None, 1, 2), (5, 5, 1))[0]
                status = rng.choice(("unvalidated", "accepted", "rejected"))
                conn.execute(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, 'direct', NULL, ?, NULL, ?, ?, ?)",
                    (entry_id, device, k + 1, sets[s, size], status, run, now, rng.choice(moments)),
                )
                conn.execute(
                    "INSERT INTO timing_records (entry_id, format_version, candidates_count,"
                    " samples_count, failures_count, created_at, data)"
                    " VALUES (?, 1, 1, 2, 0, ?, ?)",
                    (entry_id, now, blob),
                )
                for m in range(len(MODELS)):
                    if rng.random() < 0.3:
                        verdict = rng.choice(("validated", "masked", "masked"))
                        judge = rng.choices((1, 2), (20, 1))[0]
                        conn.execute(
                            "INSERT INTO validations (model_id, entry_id, verdict, rounds,"
                            " confirmations, run_id, created_at, updated_at)"
                            " VALUES (?, ?, ?, 3, 3, ?, ?, ?)",
                            (m + 1, entry_id, verdict, judge, now, now),
                        )
    conn.close()
    return Fleet(cache, ids[0], ids[1])


@pytest.fixture(params=[5, 6], ids=lambda seed: f"seed{seed}")
def fleet(request: pytest.FixtureRequest, cache: Cache, twin: Cache) -> Fleet:
    """A filled cache (see `_fill`), two different fillings."""
    return _fill(cache, twin, request.param)


def _expected(
    path: Path,
    device: int,
    *,
    stale: bool = False,
    current: Mapping[str, Sequence[str]] | None = None,
    unvalidated: bool = False,
    older_than: datetime | None = None,
    masked: bool = False,
) -> tuple[list[tuple[int, tuple[str, ...]]], dict[str, int], int]:
    """What prune selects, by reading every row: (entry id, reasons) in report order, the
    orphans it leaves, and how many it spares."""
    rows = sql(
        path,
        "SELECT e.id, k.signature, cs.checksum, e.updated_at, e.run_id FROM entries e"
        " JOIN keys k ON k.id = e.key_id JOIN candidate_sets cs ON cs.id = e.candidate_set_id"
        " WHERE e.device_id = ? ORDER BY k.text, cs.checksum",
        device,
    )
    said: dict[int, list[str]] = defaultdict(list)
    for entry, verdict in sql(
        path, "SELECT v.entry_id, v.verdict FROM validations v JOIN models m ON m.id = v.model_id"
    ):
        said[entry].append(verdict)
    running = {run for (run,) in sql(path, "SELECT id FROM runs WHERE status = 'running'")}
    active = {entry for entry, _, _, _, run in rows if run in running}
    active |= {e for e, r in sql(path, "SELECT entry_id, run_id FROM validations") if r in running}
    sets: dict[str, str] = {}
    if current is not None:
        sets = {sig: checksum(names) for sig, names in current.items()}
    else:
        latest: dict[str, tuple[str, int, str]] = {}
        for entry, sig, sum_, updated, _ in rows:
            latest[sig] = max(latest.get(sig, ("", 0, "")), (updated, entry, sum_))
        sets = {sig: value[2] for sig, value in latest.items()}
    cutoff = None if older_than is None else _stamp(older_than)
    chosen, spared = [], 0
    for entry, sig, sum_, updated, _ in rows:
        reasons = []
        if stale and sig in sets and sets[sig] != sum_:
            reasons.append("stale")
        if unvalidated and "validated" not in said[entry]:
            reasons.append("unvalidated")
        if cutoff is not None and updated < cutoff:
            reasons.append("older")
        if masked and said[entry] and all(v == "masked" for v in said[entry]):
            reasons.append("masked")
        if reasons and entry in active:
            spared += 1
        elif reasons:
            chosen.append((entry, tuple(reasons)))
    gone = {entry for entry, _ in chosen}
    keys: dict[int, bool] = {}
    kept_sets: dict[int, bool] = {}
    for entry, key, set_id in sql(path, "SELECT id, key_id, candidate_set_id FROM entries"):
        keys[key] = keys.get(key, False) or entry not in gone
        kept_sets[set_id] = kept_sets.get(set_id, False) or entry not in gone
    orphans = {
        "keys": sum(not kept for kept in keys.values()),
        "candidate_sets": sum(not kept for kept in kept_sets.values()),
    }
    return chosen, orphans, spared


def _found(report: maintain.PruneReport) -> tuple[list[tuple[int, tuple[str, ...]]], Any, int]:
    return [(e.id, e.reasons) for e in report.entries], dict(report.orphans), report.spared_active


CUT = START + timedelta(days=150)
SELECTIONS: list[dict[str, Any]] = [
    {"stale": True},
    {"stale": True, "current": {"op1_F32": NAMES[:2], "op2_F32": NAMES, "gone_F32": NAMES}},
    {"unvalidated": True},
    {"older_than": CUT},
    {"masked": True},
    {"stale": True, "unvalidated": True, "older_than": CUT, "masked": True},
]


@pytest.mark.parametrize("kinds", SELECTIONS, ids=lambda k: "+".join(k))
def test_prune_selects_what_every_row_read_by_hand_says(
    fleet: Fleet, kinds: dict[str, Any]
) -> None:
    expected = _expected(fleet.path, fleet.mine, **kinds)
    assert expected[0] and expected[2]  # the filling has entries to prune and to spare
    assert _found(maintain.prune(fleet.cache, dry_run=True, **kinds)) == expected


def test_a_real_prune_removes_exactly_what_its_dry_run_reported(fleet: Fleet) -> None:
    kinds = SELECTIONS[-1]
    theirs = "SELECT * FROM entries WHERE device_id = ? ORDER BY id"
    before = {table: sql(fleet.path, f"SELECT id FROM {table}") for table in ("keys", "entries")}
    others = sql(fleet.path, theirs, fleet.theirs)
    dry = maintain.prune(fleet.cache, dry_run=True, **kinds)
    real = maintain.prune(fleet.cache, **kinds)
    assert _found(real) == _found(dry)
    assert len(real.entries) > 500
    gone = {e.id for e in real.entries}
    assert sql(fleet.path, "SELECT id FROM entries") == [
        row for row in before["entries"] if row[0] not in gone
    ]
    assert len(before["keys"]) - len(sql(fleet.path, "SELECT id FROM keys")) == real.orphans["keys"]
    assert sql(fleet.path, theirs, fleet.theirs) == others
    # Nothing was left without an entry.
    found = {p.kind for p in maintain.doctor(fleet.cache).problems}
    assert not found & {"orphaned-keys", "orphaned-candidate-sets"}


def test_doctor_finds_each_damaged_row_among_thousands(fleet: Fleet) -> None:
    rng = random.Random(3)
    records = {r for (r,) in sql(fleet.path, "SELECT id FROM timing_records")}
    entries = [e for (e,) in sql(fleet.path, "SELECT id FROM entries")]
    [(blob,)] = sql(fleet.path, "SELECT data FROM timing_records LIMIT 1")
    damaged = rng.sample(sorted(records), 120)
    cut, garbage, text = damaged[:40], damaged[40:80], damaged[80:]
    illegal = rng.sample(entries, 25)
    conn = sqlite3.connect(fleet.path)
    with conn:
        conn.executemany(
            "UPDATE timing_records SET data = ? WHERE id = ?",
            [(blob[: len(blob) // 2], r) for r in cut]
            + [(b"\xff" + blob, r) for r in garbage]
            + [("not bytes", r) for r in text],
        )
        conn.executemany("UPDATE entries SET choice = 'gone' WHERE id = ?", [(e,) for e in illegal])
    conn.close()
    found = {p.kind: p.count for p in maintain.doctor(fleet.cache).problems}
    assert found == {"unreadable-records": len(damaged), "illegal-choices": len(illegal)}
    # Repairing deletes the damaged records, and the illegal entries with their own records.
    theirs = {
        r
        for (r,) in sql(
            fleet.path,
            f"SELECT id FROM timing_records WHERE entry_id IN ({','.join(map(str, illegal))})",
        )
    }
    assert maintain.doctor(fleet.cache, repair=True).healthy
    assert maintain.doctor(fleet.cache).problems == ()
    left = {r for (r,) in sql(fleet.path, "SELECT id FROM timing_records")}
    assert left == records - set(damaged) - theirs
