"""The store on PostgreSQL: the same API, models and migrations as the SQLite cache, run against
the real server of tools/pg_test_server.sh (each test in a schema of its own)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.pool import NullPool

from tests.conftest import PgSchema
from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.store import bulk, migrate, queries
from tunecache.store.models import READ_VIEWS

CANDIDATES = ["direct", "im2col", "fft"]


@pytest.fixture
def fleet(pg: PgSchema, device: Device) -> Iterator[Callable[..., Cache]]:
    """Open the test's fleet store: `fleet(**open_args)`, as the writer unless `url` says
    otherwise, for `device` unless `device` says otherwise; each one closed at the end."""
    opened: list[Cache] = []

    def open_store(**open_args: Any) -> Cache:
        open_args.setdefault("url", pg.url)
        open_args.setdefault("device", device)
        opened.append(Cache.open(**open_args))
        return opened[-1]

    try:
        yield open_store
    finally:
        for each in opened:
            each.close()


def _record(names: list[str]) -> TimingRecord:
    timings = tuple(
        CandidateTiming(name, (1e-3 * (i + 1), 1.1e-3 * (i + 1)), inner_loops=2)
        for i, name in enumerate(names)
    )
    return TimingRecord(candidates=timings)


def _batch(count: int) -> list[NewEntry]:
    return [
        NewEntry(
            f"conv_F32_m{m}_k3",
            CANDIDATES[m % 3],
            CANDIDATES,
            heuristic="direct",
            record=_record(CANDIDATES),
            speedup=1.5,
            status="accepted" if m % 2 else "unvalidated",
            verdicts=(NewVerdict("cnn", "fp1", "validated", gain=1.2, rounds=3),),
        )
        for m in range(1, count + 1)
    ]


def test_open_creates_the_schema_once_and_the_read_contract_is_there(
    fleet: Callable[..., Cache], pg: PgSchema
) -> None:
    first = fleet()
    assert first.outcome is migrate.Outcome.CREATED
    assert first.revision() == migrate.HEAD
    assert fleet().outcome is migrate.Outcome.CURRENT
    engine = create_engine(pg.url, poolclass=NullPool)
    try:
        views = set(inspect(engine).get_view_names())
    finally:
        engine.dispose()
    assert views == {"decisions", *READ_VIEWS, "read_entry_origins_v1"}


def test_the_store_api_works_the_same(fleet: Callable[..., Cache], pg: PgSchema) -> None:
    cache = fleet()
    entry = cache.put(
        "conv_F32_m64_k3",
        choice="im2col",
        candidates=CANDIDATES,
        heuristic="direct",
        record=_record(CANDIDATES),
        status="unvalidated",
    )
    assert cache.get("conv_F32_m64_k3") == entry
    assert entry.created_at.tzinfo is not None
    record = cache.record(entry)
    assert record is not None and [c.name for c in record.candidates] == CANDIDATES
    with cache.run("tune") as run_id:
        cache.validate(entry, model="cnn", fingerprint="fp", verdict="validated", run_id=run_id)
    cache.set_status(entry, "accepted")
    assert cache.verdicts("cnn") == {entry.id: "validated"}
    assert cache.verdicts_on(entry) == {"cnn": "validated"}
    assert cache.get("conv_F32_m64_k3").status == "accepted"  # type: ignore[union-attr]
    assert cache.runs_noted("", status="finished") == []
    engine = create_engine(pg.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT key, choice, validated_by FROM decisions")).one()
    finally:
        engine.dispose()
    assert tuple(row) == ("conv_F32_m64_k3", "im2col", "cnn")


def test_put_many_writes_the_rows_sqlite_writes(fleet: Callable[..., Cache], cache: Cache) -> None:
    store = fleet()
    batch = _batch(120)
    # Twice: the second replaces every entry, as a second put would.
    for target in (store, cache):
        target.put_many(batch)
        target.put_many(batch[::-1])

    def stored(c: Cache) -> list[tuple[Any, ...]]:
        with c.transaction() as t:
            device = t.device_id()
            assert device is not None
            keys = [e.key.text for e in c.entries()]  # type: ignore[union-attr]
            found = bulk.entries_of_keys(t.conn, device, sorted(keys))
            verdicts = queries.verdicts(t.conn, device, model="cnn", order="updated")
        # Ids and times belong to each store; everything else must match.
        return [(e.key, e.checksum, e.choice, e.status, e.speedup, e.data) for e in found] + [
            (v.model, v.verdict, v.gain, v.rounds) for v in verdicts
        ]

    assert stored(store) == stored(cache)
    assert store.count() == cache.count() == 120


def test_every_revision_migrates_on_postgresql_to_what_create_all_makes(
    pg: PgSchema, device: Device
) -> None:
    engine = create_engine(pg.url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            command.upgrade(migrate.alembic_config(conn), "0001")
        with Cache.open(url=pg.url, device=device) as cache:
            assert cache.outcome is migrate.Outcome.UPGRADED
            cache.put("conv_F32_m1_k3", choice="fft", candidates=CANDIDATES)
        migrated = _schema(engine)
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {pg.schema} CASCADE"))
            conn.execute(text(f"CREATE SCHEMA {pg.schema}"))
        with Cache.open(url=pg.url, device=device) as cache:
            assert cache.outcome is migrate.Outcome.CREATED
        assert _schema(engine) == migrated
    finally:
        engine.dispose()


def _schema(engine: Any) -> dict[str, object]:
    """What code can depend on in a PostgreSQL schema: each table's columns, keys and indexes,
    and each view's columns in order."""
    found = inspect(engine)
    out: dict[str, object] = {}
    for table in found.get_table_names():
        out[table] = (
            [(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(table)],
            found.get_pk_constraint(table)["constrained_columns"],
            sorted(
                (f["name"], tuple(f["constrained_columns"]), f["referred_table"])
                for f in found.get_foreign_keys(table)
            ),
            sorted((i["name"], tuple(i["column_names"])) for i in found.get_indexes(table)),
            sorted(tuple(u["column_names"]) for u in found.get_unique_constraints(table)),
        )
    for view in found.get_view_names():
        out[view] = [c["name"] for c in found.get_columns(view)]
    return out


def _open_once(url: str, device: Device, go: Any, results: Any) -> None:
    go.wait()
    with Cache.open(url=url, device=device) as cache:
        results.put(cache.outcome.value if cache.outcome else None)


def test_hosts_opening_a_new_store_at_once_create_it_once(pg: PgSchema, device: Device) -> None:
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    hosts = [ctx.Process(target=_open_once, args=(pg.url, device, go, results)) for _ in range(4)]
    for p in hosts:
        p.start()
    go.set()
    outcomes = sorted(results.get(timeout=120) for _ in hosts)
    for p in hosts:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert outcomes == ["created", "current", "current", "current"]


def test_the_default_stays_the_local_sqlite_file(device: Device, tmp_path: Path) -> None:
    with Cache.open(device=device) as cache:
        assert cache.url is None
        assert cache.path.suffix == ".db"
        assert cache.engine.dialect.name == "sqlite"
