"""Shared fixtures and helpers of the resolver's tests: a store in `tmp_path`, tables over it."""

from __future__ import annotations

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


def table(db: Path, device: Device, **options: object) -> Table:
    """A table over the test database."""
    return Table.open(path=db, device=device, **options)  # type: ignore[arg-type]


def resolve_all(t: Table) -> list[Answer]:
    """The answers for four shapes: tuned in some tests, near, far."""
    return [t.resolve(mm(m), CANDS, "blas") for m in (16, 256, 300, 4096)]


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
