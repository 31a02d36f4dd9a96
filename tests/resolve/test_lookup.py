"""The steps of resolution: exact, nearest, heuristic; legality; which entries a model sees."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from tests.resolve.conftest import CANDS, OTHER_CANDS, SIG, mm, put, table
from tunecache import make_key
from tunecache.cache import Cache, Entry
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.resolve import Answer
from tunecache.resolve.lookup import Rules

# -- resolution, step by step ------------------------------------------------------------------


def test_the_nearest_tuned_shape_is_borrowed_with_its_distance(
    store: Cache, db: Path, device: Device
) -> None:
    near = put(store, mm(256), "blocked")
    put(store, mm(1024), "naive")
    answer = table(db, device).resolve(mm(300), CANDS, "blas")
    assert answer.choice == "blocked"
    assert answer.source == "nearest"
    assert answer.entry_id == near.id
    assert answer.borrowed_from == mm(256)
    assert answer.distance == pytest.approx(math.log2(300 / 256))


def test_the_distance_sums_log_ratios_over_every_dim(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256, 256, 256), "blocked")
    answer = table(db, device).resolve(mm(300, 200, 256), CANDS, "blas")
    assert answer.source == "nearest"
    assert answer.distance == pytest.approx(math.log2(300 / 256) + math.log2(256 / 200))


def test_the_default_cap_never_borrows_across_more_than_a_factor_of_two(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    assert t.resolve(mm(512), CANDS, "blas").source == "nearest"  # exactly 2x: distance 1
    assert t.resolve(mm(513), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(127), CANDS, "blas") == Answer("blas", "heuristic")
    # 1.5x on two dims is within 2x on each, but 2.25x in total: not borrowed either.
    assert t.resolve(mm(384, 384), CANDS, "blas").source == "heuristic"


def test_ties_are_broken_by_the_smallest_shape_whatever_the_insertion_order(
    tmp_path: Path, device: Device
) -> None:
    answers = []
    for order in ([(128, "naive"), (512, "blocked")], [(512, "blocked"), (128, "naive")]):
        path = tmp_path / f"{order[0][0]}.db"
        with Cache.open(path=path, device=device) as c:
            for m, choice in order:
                put(c, mm(m), choice)
        # 256 is exactly one octave from both.
        answers.append(table(path, device).resolve(mm(256), CANDS, "blas"))
    assert [a.choice for a in answers] == ["naive", "naive"]
    assert answers[0].borrowed_from == answers[1].borrowed_from == mm(128)
    assert answers[0].distance == answers[1].distance == 1.0


def test_no_usable_entry_answers_the_heuristic(store: Cache, db: Path, device: Device) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    assert t.resolve(make_key("conv_F32", c=3), CANDS, "naive") == Answer("naive", "heuristic")
    assert t.resolve(make_key(SIG, m=256, k=256), CANDS, "naive").source == "heuristic"


# -- legality ----------------------------------------------------------------------------------


def test_another_candidate_list_never_answers(store: Cache, db: Path, device: Device) -> None:
    put(store, mm(256), "strassen", candidates=OTHER_CANDS)
    t = table(db, device)
    assert t.resolve(mm(256), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(300), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(256), OTHER_CANDS, "blas").choice == "strassen"


def test_a_stored_choice_that_is_no_longer_legal_is_never_returned(
    store: Cache, db: Path, device: Device
) -> None:
    entry = put(store, mm(256), "blocked")
    # A database edited by hand (or by a buggy tool) names a candidate that does not exist.
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE entries SET choice = 'gone' WHERE id = ?", (entry.id,))
    t = table(db, device)
    assert t.resolve(mm(256), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(300), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.reload().resolve(mm(300), CANDS, "blas").choice == "blas"


def test_entries_of_another_device_in_the_same_file_never_answer(
    store: Cache, db: Path, device: Device
) -> None:
    with Cache.open(path=db, device=device.with_threads(8)) as other:
        put(other, mm(256), "blocked")
    assert table(db, device).resolve(mm(256), CANDS, "blas").source == "heuristic"
    assert table(db, device.with_threads(8)).resolve(mm(256), CANDS, "blas").source == "exact"


# -- which entries a model sees -----------------------------------------------------------------


def test_a_model_that_masked_an_entry_gets_the_heuristic_and_others_keep_it(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    shared = judged["shared"].id
    assert table(db, device, model="gpt").resolve(mm(256), CANDS, "naive") == Answer(
        "naive", "masked", shared, 0.0
    )
    # The mask does not leak into borrowing either: gpt gets no nearest answer from it.
    assert table(db, device, model="gpt").resolve(mm(300), CANDS, "naive").source == "heuristic"
    # bert validated it; t5 has no verdict and takes bert's as a prior; so does no model.
    for model in ("bert", "t5", None):
        assert table(db, device, model=model).resolve(mm(256), CANDS, "naive").choice == "blocked"


def test_a_mask_applies_whether_or_not_the_signature_is_loaded(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    t = table(db, device, model="gpt")
    t.resolve(mm(100_000), CANDS, "naive")  # a miss: loads the signature
    assert t.resolve(mm(256), CANDS, "naive").source == "masked"


def test_use_own_serves_only_what_this_model_validated(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    assert table(db, device, model="bert", use="own").resolve(mm(256), CANDS, "naive").source == (
        "exact"
    )
    assert table(db, device, model="t5", use="own").resolve(mm(256), CANDS, "naive").source == (
        "heuristic"
    )
    with pytest.raises(BadArgumentError, match="needs a model"):
        table(db, device, use="own")


def test_unvalidated_entries_serve_only_under_use_all_and_rejected_ones_never(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    default, everything = table(db, device), table(db, device, use="all")
    assert default.resolve(mm(4096), CANDS, "blas").source == "heuristic"
    assert everything.resolve(mm(4096), CANDS, "blas").choice == "naive"
    for t in (default, everything):
        assert t.resolve(mm(16), CANDS, "blas") == Answer("blas", "heuristic")


def test_a_model_fingerprint_narrows_whose_masks_apply(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    assert table(db, device, model="gpt", fingerprint="g1").resolve(
        mm(256), CANDS, "blas"
    ).source == ("masked")
    # A new version of gpt (another fingerprint) has not masked it: bert's verdict stands.
    assert table(db, device, model="gpt", fingerprint="g2").resolve(
        mm(256), CANDS, "blas"
    ).source == ("exact")


def _rules(
    use: str = "validated", fingerprint: str | None = None, **forced: frozenset[int]
) -> Rules:
    return Rules(
        "bert",
        fingerprint,
        use,
        include=forced.get("include", frozenset()),
        exclude=forced.get("exclude", frozenset()),
        mask=forced.get("mask", frozenset()),
        max_distance=1.0,
        symbolic=frozenset(),
    )


def test_the_rules_judge_an_entry_forced_entries_first_then_verdicts_then_status() -> None:
    # judge(entry_id, status, masked by us, validated by us, validated by any model)
    plain = _rules()
    assert plain.judge(1, "accepted", False, False, False) == "use"
    assert plain.judge(1, "unvalidated", False, False, False) is None
    assert plain.judge(1, "unvalidated", False, False, True) == "use"  # another model's prior
    assert plain.judge(1, "accepted", True, False, False) == "masked"
    assert plain.judge(1, "rejected", False, False, True) is None
    assert _rules("own").judge(1, "accepted", False, False, True) is None
    assert _rules("own").judge(1, "unvalidated", False, True, True) == "use"
    assert _rules("all").judge(1, "unvalidated", False, False, False) == "use"
    # exclude beats mask beats include beats everything stored.
    forced = _rules(exclude=frozenset({1}), mask=frozenset({1, 2}), include=frozenset({2, 3}))
    assert forced.judge(1, "accepted", False, False, False) is None
    assert forced.judge(2, "accepted", False, False, False) == "masked"
    assert forced.judge(3, "rejected", True, False, False) == "use"


def test_the_rules_count_a_verdict_as_ours_by_model_and_fingerprint_if_given() -> None:
    assert _rules().mine("bert", "any")
    assert not _rules().mine("gpt", "any")
    pinned = _rules(fingerprint="b1")
    assert pinned.mine("bert", "b1")
    assert not pinned.mine("bert", "b2")
