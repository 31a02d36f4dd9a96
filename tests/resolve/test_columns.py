"""The bulk loader: a signature's entries read as columns, answering as row by row did."""

from __future__ import annotations

import random
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.resolve.conftest import CANDS, OTHER_CANDS, SIG, brute_force, mm, put, put_many, table
from tunecache import Key, make_key
from tunecache.cache import Cache, Entry
from tunecache.device import Device
from tunecache.errors import TunecacheWarning
from tunecache.keys import MAX_DIM
from tunecache.resolve import Answer, columns
from tunecache.resolve.columns import Columns, from_texts
from tunecache.resolve.lookup import Rules

SIZES = [16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 1024]


def _refuse_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make reading row by row an error: the test's signature must load in bulk."""

    def refuse(rows: object) -> list[Columns]:
        raise AssertionError("read row by row")

    monkeypatch.setattr(columns, "from_rows", refuse)


def _texts(
    dims: list[str], choices: list[str] | None = None, words: list[int] | None = None
) -> list[Any]:
    """The texts of the reader's bulk query for entries 1, 2, ... with these dims: accepted
    unless `words` packs them otherwise (id * 4 + status)."""
    count = len(dims)
    packed = words if words is not None else [(i + 1) * 4 for i in range(count)]
    chosen = choices if choices is not None else ["blas"] * count
    return [
        count,
        ",".join(map(str, packed)),
        " ".join(dims),
        columns.CHOICE_SEPARATOR.join(chosen),
    ]


# -- many entries, in bulk -------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [columns.CHUNK, 40], ids=["one-piece", "many-pieces"])
def test_many_entries_load_in_bulk_and_answer_as_the_definition_says(
    store: Cache, db: Path, device: Device, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    rng = random.Random(3)
    shapes = [(m, k, n) for m in SIZES for k in SIZES[::3] for n in SIZES[::4]]
    rng.shuffle(shapes)  # keys written in any order
    tuned = {shape: rng.choice(CANDS) for shape in shapes}
    ids = put_many(store, db, [(mm(*shape), choice, "accepted") for shape, choice in tuned.items()])
    _refuse_rows(monkeypatch)
    monkeypatch.setattr(columns, "CHUNK", chunk)
    t = table(db, device)
    queries = [tuple(rng.randint(8, 2048) for _ in range(3)) for _ in range(150)]
    for query in [*queries, *shapes[:20]]:
        answer = t.resolve(mm(*query), CANDS, "blas")
        expected = brute_force(dict(tuned), query, 1.0, set())
        if query in tuned:
            assert answer == Answer(tuned[query], "exact", ids[mm(*query)], 0.0)
        elif expected is None:
            assert answer == Answer("blas", "heuristic")
        else:
            assert (answer.choice, answer.borrowed_from) == (expected[0], mm(*expected[1]))
            assert answer.entry_id == ids[mm(*expected[1])]


def test_dims_of_several_names_load_in_bulk(
    store: Cache, db: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    def key(b: int, m: int, k: int, n: int) -> Key:
        return make_key("einsum_F32", b=b, m=m, k=k, n=n)

    decisions = [
        (key(b, m, 96, n), CANDS[(b + m + n) % 3], "accepted")
        for b in (1, 8)
        for m in (64, 288, 1024)
        for n in (32, 64)
    ]
    ids = put_many(store, db, decisions)
    _refuse_rows(monkeypatch)
    t = table(db, device)
    assert t.resolve(key(1, 300, 96, 64), CANDS, "blas") == Answer(
        CANDS[(1 + 288 + 64) % 3],
        "nearest",
        ids[key(1, 288, 96, 64)],
        pytest.approx(np.log2(300 / 288)),
        key(1, 288, 96, 64),
    )
    assert t.resolve(key(8, 1024, 96, 32), CANDS, "blas").source == "exact"
    # b=3 is 1.58 octaves from b=1 and 1.42 from b=8: beyond the cap whatever the rest.
    assert t.resolve(key(3, 64, 96, 32), CANDS, "blas").source == "heuristic"


def test_ties_go_to_the_smallest_shape_whatever_order_the_keys_were_written_in(
    store: Cache, db: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 256 is one octave from each of 128 and 512, in m or in n: four tied shapes.
    tied = [
        (mm(512), "blas", "accepted"),
        (mm(256, 256, 512), "blocked", "accepted"),
        (mm(128), "naive", "accepted"),
        (mm(256, 256, 128), "blocked", "accepted"),
    ]
    put_many(store, db, tied)
    _refuse_rows(monkeypatch)
    answer = table(db, device).resolve(mm(256), CANDS, "blas")
    assert answer.borrowed_from == mm(128) and answer.choice == "naive"
    assert answer.distance == 1.0


def test_rows_of_other_devices_and_other_candidate_lists_in_the_file_are_not_loaded(
    store: Cache, db: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = put_many(store, db, [(mm(m), "blocked", "accepted") for m in (64, 1024)])
    put_many(
        store, db, [(mm(m), "strassen", "accepted") for m in (128, 256)], candidates=(OTHER_CANDS)
    )
    with Cache.open(path=db, device=device.with_threads(8)) as other:
        put_many(other, db, [(mm(m), "naive", "accepted") for m in (128, 256, 512)])
    _refuse_rows(monkeypatch)
    t = table(db, device)
    # 200 is nearest 256 in both other sets, and 1.36 octaves from ours: beyond the cap.
    assert t.resolve(mm(200), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(1000), CANDS, "blas").entry_id == ours[mm(1024)]
    assert t.resolve(mm(200), OTHER_CANDS, "blas").choice == "strassen"
    assert table(db, device.with_threads(8)).resolve(mm(200), CANDS, "blas").choice == "naive"


def test_entries_of_statuses_the_table_does_not_serve_are_left_out(
    store: Cache, db: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = put_many(
        store,
        db,
        [
            (mm(64), "naive", "accepted"),
            (mm(256), "blocked", "unvalidated"),
            (mm(1024), "naive", "rejected"),
        ],
    )
    with sqlite3.connect(db) as conn:
        # A status this version does not know (a newer tunecache's, or a hand edit).
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE entries SET status = 'retired' WHERE id = ?", (ids[mm(1024)],))
    conn.close()
    _refuse_rows(monkeypatch)
    default, everything = table(db, device), table(db, device, use="all")
    assert default.resolve(mm(250), CANDS, "blas") == Answer("blas", "heuristic")
    assert default.resolve(mm(70), CANDS, "blas").entry_id == ids[mm(64)]
    assert default.resolve(mm(1000), CANDS, "blas").source == "heuristic"
    assert everything.resolve(mm(250), CANDS, "blas").entry_id == ids[mm(256)]
    # Not rejected: served under use="all", as the rules read any status but rejected.
    assert everything.resolve(mm(1000), CANDS, "blas").entry_id == ids[mm(1024)]


def test_an_in_memory_decision_stands_in_for_the_stored_one_of_its_shape(
    store: Cache, db: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = put_many(store, db, [(mm(m), "blocked", "accepted") for m in (64, 256, 1024)])
    _refuse_rows(monkeypatch)
    t = table(db, device, model="gpt").derive(
        add=[(mm(256), CANDS, "naive"), (mm(4096), CANDS, "naive")], mask=[ids[mm(1024)]]
    )
    assert t.resolve(mm(300), CANDS, "blas") == Answer(
        "naive", "nearest", None, pytest.approx(np.log2(300 / 256)), mm(256)
    )
    assert t.resolve(mm(70), CANDS, "blas").entry_id == ids[mm(64)]
    # A masked entry lends nothing: 1100 borrows from no one, and 1024 itself is masked.
    assert t.resolve(mm(1100), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(1024), CANDS, "blas") == Answer("blas", "masked", ids[mm(1024)], 0.0)
    assert t.resolve(mm(4000), CANDS, "blas").borrowed_from == mm(4096)


@pytest.mark.parametrize(
    ("others", "filler"), [(8, 0), (1, 40)], ids=["through-the-entries", "every-verdict"]
)
def test_every_rule_judges_alike_before_and_after_the_signature_is_loaded(
    judged: dict[str, Entry], store: Cache, db: Path, device: Device, others: int, filler: int
) -> None:
    # Verdicts on other signatures' entries must not count. With more verdicts in the file than
    # twice the signature's entries, the reader finds them through the signature's entries;
    # with fewer, it reads every verdict of the file.
    for c in range(1, others + 1):
        other = put(store, make_key("conv_F32", c=c), "blocked", status="unvalidated")
        store.validate(other, model="gpt", fingerprint="g1", verdict="validated", gain=1.2)
    if filler:
        put_many(store, db, [(mm(m, 7), "naive", "unvalidated") for m in range(1, filler)])
    shapes = (16, 256, 4096)
    for model, fingerprint, use in [
        (None, None, "validated"),
        (None, None, "all"),
        ("gpt", None, "validated"),
        ("gpt", "g1", "all"),
        ("gpt", "g2", "validated"),
        ("bert", None, "own"),
        ("bert", "b2", "own"),
        ("t5", None, "own"),
    ]:
        options = {"model": model, "fingerprint": fingerprint, "use": use}
        point = table(db, device, **options)
        before = [point.resolve(mm(m), CANDS, "naive") for m in shapes]
        loaded = table(db, device, **options)
        loaded.resolve(mm(100_000), CANDS, "naive")  # a miss: loads the signature
        assert [loaded.resolve(mm(m), CANDS, "naive") for m in shapes] == before, options


# -- what is not in the bulk form is read row by row ---------------------------------------------


def test_keys_of_one_signature_with_other_dim_names_are_read_row_by_row(
    store: Cache, db: Path, device: Device
) -> None:
    two = make_key(SIG, m=256, k=256)
    swapped = make_key(SIG, k=256, m=300, n=256)  # the same names in another order
    ids = put_many(store, db, [(mm(256), "blocked", "accepted"), (two, "naive", "accepted")])
    put(store, swapped, "naive")
    t = table(db, device)
    assert t.resolve(mm(300), CANDS, "blas").entry_id == ids[mm(256)]
    assert t.resolve(make_key(SIG, m=300, k=256), CANDS, "blas").entry_id == ids[two]
    answer = t.resolve(make_key(SIG, k=256, m=256, n=256), CANDS, "blas")
    assert (answer.source, answer.borrowed_from) == ("nearest", swapped)


@pytest.mark.parametrize(
    "dims",
    [
        ["m=1 k=2", "m=3 n=4"],  # other names
        ["m=1 k=2", "k=3 m=4"],  # the same names, in another order
        ["m=1 k=2", "m=3"],
        ["m=1 k=2", ""],
        ["m=1x k=2", "m=3 k=4"],
        ["m= k=2", "m=3 k=4"],
        ["m=-1 k=2", "m=3 k=4"],
        ["m=1.5 k=2", "m=3 k=4"],
        ["m=1 k=2 7", "m=3 k=4"],
        ["m=1 x k=2", "m=3 k=4"],
        ["m=1 m k=2", "m=3 k=4"],
        ["m=99999999999999999999 k=2", "m=3 k=4"],
        [f"m={MAX_DIM} k=2", "m=3 k=4"],  # the largest dim: exact only row by row
        ["m=\u0661 k=2", "m=3 k=4"],
        ["M=1 K=2", "M=3 K=4"],
    ],
)
def test_texts_not_in_the_bulk_form_are_left_to_the_row_by_row_reader(dims: list[str]) -> None:
    assert from_texts(_texts(dims)) is None


@pytest.mark.parametrize(
    "texts",
    [
        [2, "4", "m=1 m=2", "a\x1fb"],  # too few entries
        [2, "4,-8", "m=1 m=2", "a\x1fb"],  # a negative id
        [2, "4,3.7e+19", "m=1 m=2", "a\x1fb"],  # an id too large to pack, made a float
        [2, "4,8", "m=1 m=2", "a"],  # too few choices (a NULL is left out)
        [2, "4,8", "m=1 m=2", "a\x1fb\x1fc"],  # a separator inside a choice
        [2, "4,8", None, "a\x1fb"],
        [2, None, "m=1 m=2", "a\x1fb"],
    ],
)
def test_texts_that_do_not_count_the_same_rows_are_left_to_the_row_by_row_reader(
    texts: list[Any],
) -> None:
    assert from_texts(texts) is None


@pytest.mark.parametrize("chunk", [columns.CHUNK, 1, 9])
def test_the_bulk_form_parses_into_columns(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(columns, "CHUNK", chunk)
    rows = [f"bm={i} m={i * 7} k={2**40 + i}" for i in range(50)]
    statuses = [0, 1, 2, 3] * 12 + [0, 1]
    words = [(i + 1) * 4 + statuses[i] for i in range(50)]
    texts = _texts(rows, ["naive", "x,y z", "naive"] * 16 + ["blas", "naïve"], words)
    [parsed] = from_texts(texts) or []
    assert texts == []  # each text is taken out of the list as it is read
    assert parsed.names == ("bm", "m", "k")
    assert parsed.ids.tolist() == list(range(1, 51))
    assert parsed.values.tolist() == [[i, i * 7, 2**40 + i] for i in range(50)]
    assert parsed.status.tolist() == statuses
    assert parsed.flags.tolist() == [0] * 50
    assert [parsed.choices[c] for c in parsed.codes] == ["naive", "x,y z", "naive"] * 16 + [
        "blas",
        "naïve",
    ]
    assert from_texts([0, None, None, None]) == []


@pytest.mark.parametrize("base", [0, 10**12], ids=["dense-ids", "sparse-ids"])
def test_verdicts_merge_into_the_flags_of_their_entries(base: int) -> None:
    ids = [base + i for i in (1, 2, 3, 4)]
    texts = _texts(["m=1", "m=2", "m=3", "m=4"], words=[i * 4 for i in ids])
    [parsed] = from_texts(texts) or []
    # Entry 2: validated by a model and masked by ours; entry 4: validated by ours; entry 9 is
    # not among these entries.
    words = [(base + 2) * 8 + 1, (base + 4) * 8 + 4, (base + 2) * 8 + 2, (base + 9) * 8 + 1]
    verdicts = columns.verdicts_from_text(",".join(map(str, words)))
    assert verdicts is not None
    assert [a.tolist() for a in verdicts] == [[w >> 3 for w in words], [w & 7 for w in words]]
    rows = columns.verdicts_from_rows([(w >> 3, w & 7) for w in words])
    assert [a.tolist() for a in rows] == [a.tolist() for a in verdicts]
    [flagged] = columns.with_verdicts([parsed], *verdicts)
    assert flagged.flags.tolist() == [0, 3, 0, 4]
    assert flagged.values.tolist() == parsed.values.tolist()
    assert columns.verdicts_from_text("16,-8") is None  # a hostile id: read row by row
    nothing = columns.verdicts_from_text(None)
    assert nothing is not None and columns.with_verdicts([parsed], *nothing) == [parsed]


def test_keys_without_dims_load_in_bulk() -> None:
    [parsed] = from_texts(_texts(["", "", ""])) or []
    assert parsed.names == () and parsed.values.shape == (3, 0)


def test_the_largest_dim_value_is_read_exactly(store: Cache, db: Path, device: Device) -> None:
    top = put(store, mm(MAX_DIM), "naive")
    t = table(db, device)
    assert t.resolve(mm(MAX_DIM - 1), CANDS, "blas").borrowed_from == mm(MAX_DIM)
    assert t.resolve(mm(MAX_DIM), CANDS, "blas") == Answer("naive", "exact", top.id, 0.0)


# -- a damaged file ------------------------------------------------------------------------------


def test_a_dims_value_beyond_64_bits_is_damage_not_a_crash(
    store: Cache, db: Path, device: Device
) -> None:
    put_many(store, db, [(mm(256), "blocked", "accepted"), (mm(512), "naive", "accepted")])
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE keys SET dims = 'm=99999999999999999999 k=256 n=256' WHERE id = 2")
    conn.close()
    with pytest.warns(TunecacheWarning, match="every answer is the heuristic"):
        assert table(db, device).resolve(mm(300), CANDS, "blas") == Answer("blas", "heuristic")


def test_a_file_damaged_mid_load_answers_the_heuristic_everywhere_with_one_warning(
    store: Cache, db: Path, device: Device
) -> None:
    shapes = [(m, k, 256) for m in range(100, 1100) for k in (128, 256)]
    put_many(store, db, [(mm(*shape), "blocked", "accepted") for shape in shapes])
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    # The keys table's page that holds a key from the middle: its dims are stored nowhere else.
    content = bytearray(db.read_bytes())
    page = content.index(b"m=600 k=128 n=256") // page_size
    assert 1 < page < len(content) // page_size - 1
    content[page * page_size : (page + 1) * page_size] = b"\xa5" * page_size
    db.write_bytes(bytes(content))
    t = table(db, device)
    # An exact key is one indexed query, which never reads that page: it answers.
    assert t.resolve(mm(100, 128), CANDS, "blas").source == "exact"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # The first miss loads the signature and meets the damage half-way.
        assert t.resolve(mm(101, 100), CANDS, "blas") == Answer("blas", "heuristic")
        # Nothing that was read before the damage showed is served: not the exact answer
        # given before, not any neighbour of a page that did read.
        assert t.resolve(mm(100, 128), CANDS, "blas") == Answer("blas", "heuristic")
        assert t.resolve(mm(1000, 256), CANDS, "blas") == Answer("blas", "heuristic")
        assert t.resolve(mm(102, 100), CANDS, "blas") == Answer("blas", "heuristic")
    mine = [w for w in caught if issubclass(w.category, TunecacheWarning)]
    assert len(mine) == 1, [str(w.message) for w in mine]
    assert "every answer is the heuristic" in str(mine[0].message)


# -- the rules, for whole columns ------------------------------------------------------------------

_ids = st.frozensets(st.integers(1, 8), max_size=4)


@settings(max_examples=200, deadline=None)
@given(
    use=st.sampled_from(["validated", "own", "all"]),
    include=_ids,
    exclude=_ids,
    mask=_ids,
    status=st.lists(st.integers(0, 3), min_size=8, max_size=8),
    flags=st.lists(st.integers(0, 7), min_size=8, max_size=8),
)
def test_judging_columns_agrees_with_judging_each_entry(
    use: str,
    include: frozenset[int],
    exclude: frozenset[int],
    mask: frozenset[int],
    status: list[int],
    flags: list[int],
) -> None:
    rules = Rules("bert", None, use, include, exclude, mask, 1.0, frozenset())
    ids = np.arange(1, 9, dtype=np.int64)
    served, masked = rules.judge_columns(ids, np.array(status, np.uint8), np.array(flags, np.uint8))
    names = ["accepted", "unvalidated", "rejected", "retired"]
    for i, entry_id in enumerate(ids.tolist()):
        judged = rules.judge(
            entry_id,
            names[status[i]],
            bool(flags[i] & columns.MASKED_BY_US),
            bool(flags[i] & columns.VALIDATED_BY_US),
            bool(flags[i] & columns.VALIDATED_BY_ANY),
        )
        assert (bool(served[i]), bool(masked[i])) == (judged == "use", judged == "masked")


def test_forced_entries_are_found_in_columns_as_in_a_set() -> None:
    # Whatever `entry_id in include` finds, the columns find: numpy integers, equal floats.
    odd: frozenset[Any] = frozenset({np.int64(2), 3.0, 4.5, "5", 2**70})
    rules = Rules(None, None, "all", odd, frozenset(), frozenset(), 1.0, frozenset())
    ids = np.arange(1, 7, dtype=np.int32)
    served, _ = rules.judge_columns(
        ids, np.full(6, columns.REJECTED, np.uint8), np.zeros(6, np.uint8)
    )
    assert served.tolist() == [
        rules.judge(i, "rejected", False, False, False) == "use" for i in range(1, 7)
    ]
    assert served.tolist() == [False, True, True, False, False, False]
