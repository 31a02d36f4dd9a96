"""Shared fixtures and helpers of the resolver's tests: a store in `tmp_path`, tables over it."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tunecache import Key, make_key
from tunecache.cache import Cache, Entry
from tunecache.device import Device
from tunecache.resolve import Answer, Table

SIG = "matmul_F32"
CANDS = ("blas", "blocked", "naive")
OTHER_CANDS = ("blas", "blocked", "naive", "strassen")


def mm(m: int, k: int = 256, n: int = 256) -> Key:
    """A key of the tests' matmul signature."""
    return make_key(SIG, m=m, k=k, n=n)


def put(
    store: Cache,
    key: Key,
    choice: str,
    *,
    candidates: tuple[str, ...] = CANDS,
    status: str = "accepted",
) -> Entry:
    """Store a decision with the heuristic "blas"."""
    return store.put(key, choice=choice, candidates=candidates, heuristic="blas", status=status)


def put_many(
    store: Cache,
    db: Path,
    decisions: list[tuple[Key, str, str]],
    *,
    candidates: tuple[str, ...] = CANDS,
) -> dict[Key, int]:
    """Store many decisions (key, choice, status) fast, in the order given; returns their ids.

    The first goes through the store (its device and candidate list rows with it); the rest are
    inserted with sqlite3 as the store would write them: thousands of puts would take seconds.
    """
    key, choice, status = decisions[0]
    first = put(store, key, choice, candidates=candidates, status=status)
    ids = {key: first.id}
    with sqlite3.connect(db) as conn:
        device_id, set_id = conn.execute(
            "SELECT device_id, candidate_set_id FROM entries WHERE id = ?", (first.id,)
        ).fetchone()
        now = "2026-12-01 00:00:00.000000"
        for key, choice, status in decisions[1:]:
            dims = " ".join(f"{name}={value}" for name, value in key.dims)
            conn.execute(
                "INSERT OR IGNORE INTO keys (text, signature, dims) VALUES (?, ?, ?)",
                (key.text, key.signature, dims),
            )
            (key_id,) = conn.execute("SELECT id FROM keys WHERE text = ?", (key.text,)).fetchone()
            ids[key] = conn.execute(
                "INSERT INTO entries (device_id, key_id, candidate_set_id, choice, heuristic,"
                " status, created_at, updated_at) VALUES (?, ?, ?, ?, 'blas', ?, ?, ?)",
                (device_id, key_id, set_id, choice, status, now, now),
            ).lastrowid
    conn.close()
    return ids


def table(db: Path, device: Device, **options: object) -> Table:
    """A table over the test database."""
    return Table.open(path=db, device=device, **options)  # type: ignore[arg-type]


def resolve_all(t: Table) -> list[Answer]:
    """The answers for four shapes: tuned in some tests, near, far."""
    return [t.resolve(mm(m), CANDS, "blas") for m in (16, 256, 300, 4096)]


def brute_force(
    tuned: dict[tuple[int, ...], str],
    query: tuple[int, ...],
    cap: float,
    symbolic: set[int],
) -> tuple[str, tuple[int, ...]] | None:
    """The nearest tuned shape's choice and shape, by the definition: every shape, in order."""

    def log(v: int) -> float:
        return math.log2(v) if v > 0 else -1.0

    best: tuple[float, tuple[int, ...]] | None = None
    for shape in sorted(tuned):
        capped = sum(
            abs(log(a) - log(b))
            for i, (a, b) in enumerate(zip(shape, query, strict=True))
            if i not in symbolic
        )
        total = sum(abs(log(a) - log(b)) for a, b in zip(shape, query, strict=True))
        if capped <= cap + 1e-9 and (best is None or total < best[0] - 1e-9):
            best = (total, shape)
    return None if best is None else (tuned[best[1]], best[1])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Where the test's cache database lives."""
    return tmp_path / "cache.db"


@pytest.fixture
def store(db: Path, device: Device) -> Iterator[Cache]:
    """A store over `db`, for writing the decisions a test resolves."""
    c = Cache.open(path=db, device=device)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def judged(store: Cache) -> dict[str, Entry]:
    """Entries with verdicts: validated by bert and masked by gpt; unvalidated; rejected."""
    shared = put(store, mm(256), "blocked", status="unvalidated")
    store.validate(shared, model="bert", fingerprint="b1", verdict="validated", gain=1.2)
    store.validate(shared, model="gpt", fingerprint="g1", verdict="masked", gain=0.97)
    fresh = put(store, mm(4096), "naive", status="unvalidated")
    rejected = put(store, mm(16), "naive", status="rejected")
    return {"shared": shared, "fresh": fresh, "rejected": rejected}


@pytest.fixture
def locked(store: Cache, db: Path) -> Iterator[Callable[[], object]]:
    """`db` with one decision (mm(256) -> blocked) under an exclusive lock; the test calls the
    function it gets to release the lock (or the lock ends with the test)."""
    put(store, mm(256), "blocked")
    store.close()
    # WAL readers never wait for a writer; a rollback-journal file with an exclusive lock held
    # is how a reader meets a busy database.
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        yield lambda: locker.execute("COMMIT")
    finally:
        if locker.in_transaction:
            locker.execute("COMMIT")
        locker.close()
