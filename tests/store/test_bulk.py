"""tunecache.store.bulk: many entries written at once, straight on the rows, as the callers that
write in bulk (the store API, an import) use it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.store_helpers import NAMES, RESNET, judge, sql, timing
from tunecache import codec
from tunecache.cache import Cache
from tunecache.candidates import checksum
from tunecache.keys import make_key, parse
from tunecache.store import bulk, queries
from tunecache.store.models import utcnow
from tunecache.store.prepared import Lookup, Prepared

SUM = checksum(NAMES)


def _write(
    key: str, choice: str = "direct", *, record: codec.TimingRecord | None = None, **more: object
) -> bulk.EntryWrite:
    """An entry of `key` against NAMES, as an import would hand it over."""
    rows = None if record is None else bulk.record_row(record, codec.encode(record), "direct")
    values: dict[str, object] = {
        "heuristic": "direct",
        "status": "unvalidated",
        "speedup": None,
        "run_id": None,
        "updated_at": utcnow(),
        **more,
    }
    return bulk.EntryWrite(
        key=parse(key),
        names=NAMES,
        checksum=SUM,
        choice=choice,
        record=rows,
        **values,  # type: ignore[arg-type]
    )


def _apply(cache: Cache, writes: list[bulk.EntryWrite]) -> list[bulk.Written]:
    with cache.transaction(write=True) as tx:
        return bulk.write_entries(tx.conn, tx.device_row(), writes)


# --- records -----------------------------------------------------------------------------------

samples = st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), max_size=7)
candidates = st.lists(
    st.tuples(samples, st.booleans(), st.none() | st.just("RuntimeError: no")),
    min_size=0,
    max_size=len(NAMES),
)


@given(candidates, st.sampled_from([None, *NAMES]))
def test_a_record_row_summarises_as_the_record_itself_does(
    found: list[tuple[list[float], bool, str | None]], heuristic: str | None
) -> None:
    record = codec.TimingRecord(
        candidates=tuple(
            codec.CandidateTiming(name, tuple(s), pruned=pruned, error=error)
            for name, (s, pruned, error) in zip(NAMES, found, strict=False)
        )
    )
    row = bulk.record_row(record, b"cbor", heuristic)
    best = record.best()
    assert (row.best, row.best_median_s) == (
        (None, None) if best is None else (best.name, best.median)
    )
    medians = {c.name: c.median for c in record.candidates}
    assert row.heuristic_median_s == (medians.get(heuristic) if heuristic else None)
    assert row.timings == tuple(
        bulk.TimingRow(
            name=c.name,
            samples=len(c.samples),
            inner_loops=c.inner_loops,
            median_s=c.median,
            min_s=c.min,
            max_s=c.max,
            pruned=c.pruned,
            error=c.error,
        )
        for c in record.candidates
    )
    assert row.candidates_count == len(record.candidates)
    assert row.samples_count == sum(len(c.samples) for c in record.candidates)
    assert row.failures_count == sum(1 for c in record.candidates if c.error)
    assert (row.data, row.format_version) == (b"cbor", codec.FORMAT_VERSION)


def test_records_are_inserted_with_their_rows_for_entries_that_have_none(cache: Cache) -> None:
    a = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    b = cache.put("conv_F32_m2", choice="im2col", candidates=NAMES)
    when = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    record = timing(3e-5, 1e-5)
    rows = bulk.record_row(record, codec.encode(record), "direct")
    empty = bulk.record_row(codec.TimingRecord(), codec.encode(codec.TimingRecord()), None)
    with cache.transaction(write=True) as tx:
        bulk.insert_records(tx.conn, [(a.id, rows, when), (b.id, empty, when)])
    assert cache.record(a) == record and cache.record(b) == codec.TimingRecord()
    assert sql(cache.path, "SELECT entry_id, created_at FROM timing_records ORDER BY id") == [
        (a.id, "2030-01-02 03:04:05.000006"),
        (b.id, "2030-01-02 03:04:05.000006"),
    ]
    assert sql(cache.path, "SELECT count(*) FROM candidate_timings") == [(2,)]


# --- entries -----------------------------------------------------------------------------------


def test_an_import_replaces_an_entry_with_its_own_times_and_verdicts(cache: Cache) -> None:
    old = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES, record=timing(2e-5, 1e-5))
    judge(cache, old, RESNET)
    then = datetime(2020, 5, 6, 7, 8, 9, tzinfo=UTC)
    verdict = bulk.VerdictWrite("bert", "b1", "masked", 0.9, 3, 0, None, then, created_at=then)
    write = _write(
        "conv_F32_m1",
        "im2col",
        record=timing(4e-5, 3e-5),
        created_at=then,
        updated_at=then,
        verdicts=(verdict,),
        keep_verdicts=False,
    )
    (written,) = _apply(cache, [write])
    # The same choice, yet resnet's verdict went: an import brings the verdicts that stand.
    assert written == bulk.Written(old.id, then)
    assert cache.verdicts_on(old) == {"bert": "masked"}
    assert cache.record(old) == timing(4e-5, 3e-5)
    got = cache.get("conv_F32_m1")
    assert got is not None and (got.created_at, got.updated_at) == (then, then)
    assert sql(cache.path, "SELECT created_at, updated_at FROM validations") == [
        ("2020-05-06 07:08:09.000000", "2020-05-06 07:08:09.000000")
    ]


def test_a_put_style_write_keeps_the_creation_time_and_the_verdicts_of_the_same_choice(
    cache: Cache,
) -> None:
    old = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    judge(cache, old, RESNET)
    (written,) = _apply(cache, [_write("conv_F32_m1", "im2col", status="accepted")])
    assert written == bulk.Written(old.id, old.created_at)
    assert cache.verdicts_on(old) == {"resnet": "validated"}


def test_a_batch_larger_than_a_lookup_chunk_lands_in_order(cache: Cache) -> None:
    many = 2 * queries.CHUNK + 7
    keys = [make_key("conv_F32", m=i + 1).text for i in range(many)]
    first = _apply(cache, [_write(k) for k in keys])
    assert [w.id for w in first] == sorted(w.id for w in first)
    # Again, every other one with another choice: the same rows, replaced in place.
    again = _apply(
        cache, [_write(k, "winograd" if i % 2 else "direct") for i, k in enumerate(keys)]
    )
    assert [w.id for w in again] == [w.id for w in first]
    assert cache.count() == many
    assert sql(cache.path, "SELECT count(*) FROM keys") == [(many,)]
    assert sql(cache.path, "SELECT count(*), sum(choice = 'winograd') FROM entries") == [
        (many, many // 2)
    ]


def test_keys_sets_and_models_are_found_before_they_are_made(cache: Cache) -> None:
    judged = bulk.VerdictWrite("bert", "b1", "validated", None, 1, 1, None, utcnow())
    _apply(cache, [_write("conv_F32_m1", verdicts=(judged,))])
    _apply(cache, [_write("conv_F32_m1"), _write("conv_F32_m2", verdicts=(judged,))])
    counts = {
        t: sql(cache.path, f"SELECT count(*) FROM {t}")[0][0]
        for t in ("keys", "candidate_sets", "candidates", "models", "validations", "entries")
    }
    assert counts == {
        "keys": 2,
        "candidate_sets": 1,
        "candidates": len(NAMES),
        "models": 1,
        "validations": 2,
        "entries": 2,
    }


@pytest.mark.parametrize("dims", [{"m": 1}, {"b": 1, "m": 288, "k": 96, "n": 64}])
def test_a_key_row_keeps_its_dims_as_text(dims: dict[str, int]) -> None:
    key = make_key("mm_F32", **dims)
    assert bulk.dims_text(key) == " ".join(f"{k}={v}" for k, v in dims.items())


def test_every_statement_of_a_batch_finds_its_rows_by_an_index(cache: Cache) -> None:
    # A batch looks rows up by the thousand: a full scan of a fleet-size table in any of them
    # would cost more than the whole batch.
    statements = [s for s in vars(bulk).values() if isinstance(s, Prepared)]
    statements += [s.prepared(4) for s in vars(bulk).values() if isinstance(s, Lookup)]
    assert len(statements) > 20
    dialect = cache.engine.dialect
    with cache.transaction() as tx:
        for statement in statements:
            text = statement.text(dialect)
            if text.startswith("INSERT"):
                continue
            plan = tx.conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {text}", (None,) * text.count("?"))
            steps = [str(row[-1]) for row in plan]
            assert all(step.startswith("SEARCH") for step in steps), (text, steps)
