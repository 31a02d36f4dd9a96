"""The batch write API of tunecache.cache (`put_many`, `NewEntry`, `NewVerdict`), on real files:
a batch equals one put after another in one transaction, and is written whole or not at all.

`put` itself is tested in tests/test_cache.py, the rows underneath in tests/store/test_bulk.py,
and many processes writing batches at once in tests/reliability/test_batches.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.store_helpers import (
    MMM,
    RFC_TEXT,
    all_rows,
    decisions,
    mmm_record,
    put_one_by_one,
    snapshot,
    sql,
    timeless_rows,
)
from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.errors import BadKeyError, BadRecordError, StoreError
from tunecache.keys import make_key

NAMES = list(MMM)
OTHER = ["mmm_4x4", "mmm_16x16"]


def _record(scale: float) -> TimingRecord:
    """A record of MMM whose samples are scaled by `scale`: another measurement."""
    return TimingRecord(
        candidates=tuple(
            CandidateTiming(c.name, tuple(x * scale for x in c.samples), c.inner_loops, c.error)
            for c in mmm_record().candidates
        ),
        settings={"scale": scale},
    )


def _key(i: int) -> str:
    return make_key("einsum_F32", m=i + 1).text


def _fill(cache: Cache) -> None:
    """What both caches of a comparison hold before the batch: three entries, two judged."""
    a = cache.put(_key(0), choice="mmm_8x8", candidates=NAMES, record=_record(1.0))
    b = cache.put(_key(1), choice="mmm_4x4", candidates=NAMES)
    cache.put(_key(2), choice="mmm_8x8", candidates=NAMES, record=_record(2.0))
    cache.validate(a, model="m", fingerprint="f", verdict="validated", rounds=3, confirmations=3)
    cache.validate(b, model="m", fingerprint="f", verdict="masked", rounds=3, confirmations=0)


def _batch(run_id: int | None = None) -> list[NewEntry]:
    """A batch that touches every rule of `put`, each key once."""
    judged = NewVerdict("m2", "g", "validated", gain=1.2, rounds=3, confirmations=3)
    return [
        # the same choice again, with new evidence: m's verdict stands
        NewEntry(_key(0), "mmm_8x8", NAMES, heuristic="mmm_4x4", record=_record(3.0)),
        # another choice: m judged the old one, so its verdict goes
        NewEntry(_key(1), "mmm_8x8", NAMES, speedup=1.5, status="rejected", run_id=run_id),
        # no record this time: the old one goes
        NewEntry(_key(2), "mmm_8x8", NAMES),
        # a new entry, accepted with a verdict
        NewEntry(
            _key(3), "mmm_8x8", NAMES, record=_record(4.0), status="accepted", verdicts=(judged,)
        ),
        # a key already there, against another candidate list: an entry of its own
        NewEntry(_key(0), "mmm_16x16", OTHER, record=TimingRecord()),
    ]


@pytest.fixture
def pair(cache_at: Callable[..., Cache]) -> tuple[Cache, Cache]:
    """Two caches with the same content: one takes puts, the other a batch."""
    one, many = cache_at("one.db"), cache_at("many.db")
    _fill(one)
    _fill(many)
    return one, many


def test_a_batch_leaves_exactly_the_rows_of_one_put_after_another(
    pair: tuple[Cache, Cache],
) -> None:
    one, many = pair
    with one.run("tune") as run_one:
        want = put_one_by_one(one, _batch(run_one))
    with many.run("tune") as run_many:
        got = many.put_many(_batch(run_many))
    assert got == want
    # Every row of every table, ids and record bytes included; only the times differ.
    assert timeless_rows(many.path) == timeless_rows(one.path)
    assert many.verdicts_on(got[0]) == {"m": "validated"}
    assert many.verdicts_on(got[1]) == {}
    assert many.record(got[2]) is None
    assert many.record(got[3]) == _record(4.0)
    assert many.verdicts_on(got[3]) == {"m2": "validated"}


def test_an_entry_twice_in_a_batch_ends_as_the_later_one_leaves_it(
    pair: tuple[Cache, Cache],
) -> None:
    one, many = pair
    judged = NewVerdict("m2", "g", "masked", rounds=2)
    batch = [
        NewEntry(_key(5), "mmm_8x8", NAMES, record=_record(5.0), verdicts=(judged,)),
        NewEntry(_key(0), "mmm_4x4", NAMES),  # changes the choice: m's verdict goes
        NewEntry(_key(6), "mmm_8x8", NAMES, record=_record(6.0), verdicts=(judged,)),
        NewEntry(_key(5), "mmm_4x4", NAMES, record=_record(7.0)),  # the first one's mask goes
        NewEntry(_key(0), "mmm_8x8", NAMES, record=_record(8.0)),  # and back: no verdict
        NewEntry(_key(6), "mmm_8x8", NAMES, status="accepted"),  # same choice: the mask stays
    ]
    want = put_one_by_one(one, batch)
    got = many.put_many(batch)
    assert got == want
    assert got[0] == got[3] and got[1] == got[4] and got[2] == got[5]
    assert decisions(many.path) == decisions(one.path)
    assert many.count() == 5
    assert many.get(_key(5), candidates=NAMES).choice == "mmm_4x4"  # type: ignore[union-attr]
    assert many.record(got[3]) == _record(7.0)
    assert many.record(got[5]) is None
    assert many.verdicts_on(got[0]) == {} and many.verdicts_on(got[1]) == {}
    assert many.verdicts_on(got[2]) == {"m2": "masked"}


def test_a_verdict_in_a_batch_replaces_the_models_earlier_one(cache: Cache) -> None:
    entry = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    cache.validate(entry, model="m", fingerprint="f", verdict="masked", rounds=5)
    (created,) = sql(cache.path, "SELECT created_at FROM validations")[0]
    (same,) = cache.put_many(
        [
            NewEntry(
                RFC_TEXT,
                "mmm_8x8",
                NAMES,
                status="accepted",
                verdicts=(
                    NewVerdict("m", "f", "validated", rounds=3, confirmations=3),
                    NewVerdict("n", "f", "validated"),
                ),
            )
        ]
    )
    assert same == entry.id
    assert cache.verdicts_on(entry) == {"m": "validated", "n": "validated"}
    assert sql(cache.path, "SELECT rounds, created_at FROM validations WHERE model_id = 1") == [
        (3, created)
    ]
    stored = cache.get(RFC_TEXT, candidates=NAMES)
    assert stored is not None and (stored.status, stored.created_at) == (
        "accepted",
        entry.created_at,
    )


def test_put_returns_the_entry_as_stored_without_reading_it_back(cache: Cache) -> None:
    first = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=mmm_record())
    again = cache.put(RFC_TEXT, choice="mmm_4x4", candidates=NAMES, speedup=2.0)
    assert again.id == first.id and again.created_at == first.created_at
    assert again.updated_at > first.updated_at
    assert cache.get(RFC_TEXT, candidates=NAMES) == again


def test_an_empty_batch_writes_nothing(cache: Cache) -> None:
    assert cache.put_many([]) == []
    assert cache.put_many(iter([])) == []
    assert sql(cache.path, "SELECT count(*) FROM devices") == [(0,)]


def test_a_batch_may_be_any_iterable(cache: Cache) -> None:
    ids = cache.put_many(NewEntry(_key(i), "mmm_8x8", NAMES) for i in range(3))
    assert len(set(ids)) == 3 and cache.count() == 3


# --- all or nothing ----------------------------------------------------------------------------

GHOST = TimingRecord(candidates=(CandidateTiming("ghost", (1.0,)),))
NAN = TimingRecord(candidates=(CandidateTiming("mmm_8x8", (float("nan"),)),))


@pytest.mark.parametrize(
    ("bad", "error", "says"),
    [
        ({"key": "einsum_F32_aconst_m4"}, BadKeyError, "einsum_F32_aconst_m4"),
        ({"key": "einsum__m4"}, BadKeyError, "einsum__m4"),
        ({"key": 42}, BadRecordError, "a key must be"),
        ({"choice": "nope"}, BadRecordError, "choice 'nope'"),
        ({"heuristic": "nope"}, BadRecordError, "heuristic"),
        ({"status": "great"}, BadRecordError, "status"),
        ({"speedup": float("nan")}, BadRecordError, "speedup"),
        ({"speedup": "2"}, BadRecordError, "speedup"),
        ({"candidates": ["mmm_8x8", "mmm_8x8"]}, BadRecordError, "twice"),
        ({"candidates": "mmm_8x8"}, BadRecordError, "not one string"),
        ({"record": GHOST}, BadRecordError, "unknown candidates"),
        ({"record": {"c": []}}, BadRecordError, "TimingRecord"),
        ({"record": NAN}, BadRecordError, "finite"),
        ({"run_id": "3"}, BadRecordError, "run_id"),
        ({"run_id": 99}, BadRecordError, "no run 99"),  # asked inside the transaction
        ({"verdicts": (NewVerdict("m", "f", "maybe"),)}, BadRecordError, "verdict"),
        ({"verdicts": (NewVerdict("m", "f", "masked", 0.0),)}, BadRecordError, "gain"),
        ({"verdicts": (NewVerdict("", "f", "masked"),)}, BadRecordError, "model"),
        ({"verdicts": (NewVerdict("m", "f", "masked", None, 1, 2),)}, BadRecordError, "exceed"),
        ({"verdicts": (NewVerdict("m", "f", "masked", run_id=99),)}, BadRecordError, "no run"),
        ({"verdicts": NewVerdict("m", "f", "masked")}, BadRecordError, "sequence of NewVerdict"),
        ({"verdicts": ("validated",)}, BadRecordError, "NewVerdict"),
    ],
)
def test_one_bad_entry_writes_nothing_and_the_error_names_its_position_and_key(
    cache: Cache, bad: dict[str, Any], error: type[Exception], says: str
) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=mmm_record())
    before = snapshot(cache.path)  # every row, and the database and WAL bytes
    fields: dict[str, Any] = {"key": _key(3), "choice": "mmm_8x8", "candidates": NAMES, **bad}
    batch = [NewEntry(_key(i), "mmm_4x4", NAMES, record=mmm_record()) for i in range(5)]
    batch[3] = NewEntry(**fields)
    with pytest.raises(error) as raised:
        cache.put_many(batch)
    message = str(raised.value)
    assert message.startswith("entry 3 (") and says in message
    assert str(fields["key"]) in message or isinstance(fields["key"], int)
    assert "\n" not in message
    assert snapshot(cache.path) == before


def test_what_is_not_an_entry_is_refused_by_its_position(cache: Cache) -> None:
    good = NewEntry(RFC_TEXT, "mmm_8x8", NAMES)
    with pytest.raises(BadRecordError, match=r"^entry 1 is a dict, not a NewEntry$"):
        cache.put_many([good, {"key": RFC_TEXT}])  # type: ignore[list-item]
    with pytest.raises(BadRecordError, match="a batch is a sequence of NewEntry"):
        cache.put_many(good)  # type: ignore[arg-type]
    assert cache.count() == 0


def test_a_long_key_is_named_on_one_short_line(cache: Cache) -> None:
    key = "einsum_" + "x" * 300 + "\n_m4"
    with pytest.raises(BadKeyError) as raised:
        cache.put_many([NewEntry(key, "mmm_8x8", NAMES)])
    first = str(raised.value).split(": ")[0]
    assert "\n" not in str(raised.value) and len(first) < 100


def test_a_failure_inside_the_transaction_rolls_the_whole_batch_back(cache: Cache) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=mmm_record())
    # The database itself refuses the last entry's record, after every other row of the batch
    # has been written inside the transaction.
    sql(
        cache.path,
        "CREATE TRIGGER refuse BEFORE INSERT ON candidate_timings WHEN NEW.median_s > 1"
        " BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END",
    )
    before = all_rows(cache.path)
    batch = [NewEntry(_key(i), "mmm_4x4", NAMES, record=mmm_record()) for i in range(4)]
    batch.append(NewEntry(RFC_TEXT, "mmm_4x4", NAMES, record=_record(1e6)))
    with pytest.raises(StoreError, match="refused by a trigger"):
        cache.put_many(batch)
    assert all_rows(cache.path) == before
    # The write lock went with the transaction: the next write goes through at once.
    sql(cache.path, "DROP TRIGGER refuse")
    assert len(cache.put_many(batch)) == 5 and cache.count() == 5
