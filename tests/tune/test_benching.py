"""Steps 4 and 5 (tunecache.tune.benching): bench a key, try its survivors through whole-model
runs, and write what wins, or the evidence where nothing does. On tiny real numpy models
(tests/tune_models.py): what is written, never how fast it ran.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import tunecache
from tests import tune_models as tm
from tests.tune.support import (
    NORM,
    NORM_NAMES,
    TOTAL,
    TOTAL_NAMES,
    Clock,
    borrowing_op,
    matrix_op,
    read_only,
    verdict,
)
from tunecache import tune
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError
from tunecache.keys import make_key
from tunecache.resolve import Table


def test_tune_writes_accepted_entry_evidence_verdict_and_run(cache: Cache) -> None:
    report = tune.tune(tm.ENCODER, cache=cache)

    outcomes = {k.key: k for k in report.keys}
    norm = outcomes[NORM.text]
    assert norm.action == "accepted" and norm.choice == "vectorized"
    assert norm.verdict is not None and norm.verdict.accepted
    assert norm.verdict.confirmations == norm.verdict.needed
    entry = cache.get(NORM, candidates=NORM_NAMES)
    assert entry is not None and entry.choice == "vectorized" and entry.status == "accepted"
    assert entry.heuristic == "loop" and entry.speedup is not None and entry.speedup > 1
    # The evidence: every candidate's raw samples, as the isolated bench took them.
    record = cache.record(entry)
    assert record is not None
    assert {c.name for c in record.candidates} == set(NORM_NAMES)
    assert all(len(c.samples) >= 3 for c in record.candidates)
    # This model's verdict, with the paired statistics that decided it.
    assert verdict(cache, "encoder", entry.id) == "validated"
    with read_only(cache) as db:
        gain, rounds, confirmations = db.execute(
            "select gain, rounds, confirmations from validations where entry_id = ?", (entry.id,)
        ).fetchone()
        assert gain == pytest.approx(norm.verdict.speedup)
        assert (rounds, confirmations) == (norm.verdict.rounds, norm.verdict.confirmations)
        kind, status = db.execute(
            "select kind, status from runs where id = ?", (report.run_id,)
        ).fetchone()
    assert (kind, status) == ("tune", "finished")
    assert report.guard is not None and report.guard.accepted
    assert report.kept == (entry.id,)
    # Once the norm is fast, the bias becomes heavy enough to try (a second pass); whatever
    # this model masked is an entry it rejected itself, never the norm's.
    rejected = {k.entry_id for k in report.keys if k.action == "rejected"}
    assert set(report.masked) == rejected and entry.id not in rejected


def test_tune_keeps_the_heuristic_where_nothing_beats_it(cache: Cache) -> None:
    report = tune.tune(tm.ENCODER, cache=cache, share=0.0)

    total = {k.key: k for k in report.keys}[TOTAL.text]
    assert total.action in ("kept", "rejected")
    assert total.choice == "numpy_sum"
    # The evidence stays, in an entry the model's table never serves: "kept" where the bench
    # found nothing faster (unvalidated), "rejected" where whole-model runs said no.
    entry = cache.get(TOTAL, candidates=TOTAL_NAMES)
    assert entry is not None
    assert entry.status == {"kept": "unvalidated", "rejected": "rejected"}[total.action]
    record = cache.record(entry)
    assert record is not None
    broken = record.candidate("broken")
    assert broken.error is not None and "never works" in broken.error and not broken.samples
    table = Table.open(path=cache.path, device=cache.device, model="encoder")
    assert table.resolve(TOTAL, TOTAL_NAMES, "numpy_sum").source == "heuristic"


def test_a_second_session_reuses_decisions_and_evidence(cache: Cache) -> None:
    first = tune.tune(tm.ENCODER, cache=cache, share=0.0)
    before = {e.id: e.updated_at for e in cache.entries()}

    second = tune.tune(tm.ENCODER, cache=cache, share=0.0)

    outcomes = {k.key: k for k in second.keys}
    assert outcomes[NORM.text].action == "known"
    # The sum's record is reused, not benched again.
    assert outcomes[TOTAL.text].bench_stopped == "stored"
    assert {e.id: e.updated_at for e in cache.entries()}.keys() >= before.keys()
    norm_id = {k.key: k for k in first.keys}[NORM.text].entry_id
    assert norm_id is not None
    assert {e.id: e.updated_at for e in cache.entries()}[norm_id] == before[norm_id]


def test_a_declared_bound_stops_the_bench_and_sync_brackets_every_timing(cache: Cache) -> None:
    # A bound no candidate can miss (1 s a call): the bench stops as soon as one candidate has
    # two samples. The model's sync hook is called around every timed run and sample.
    op = matrix_op(
        "ttbound_F64",
        ("m", "n"),
        {"loop": tm.loop.functions["loop"], "vectorized": tm.vectorized},
        "loop",
        bound=lambda m, n: 1.0,
    )
    syncs = []
    model = tune.Model("bounded", lambda: op(tm.X), sync=lambda: syncs.append(1))

    report = tune.tune(model, cache=cache)

    (outcome,) = report.keys
    assert outcome.bench_stopped == "bound" and outcome.action == "accepted"
    record = cache.record(outcome.entry_id)  # type: ignore[arg-type]
    assert record is not None and record.settings["lower_bound"] == 1.0
    assert record.settings["sync"] is True
    assert outcome.verdict is not None
    # Two reads of the clock per timed run, each after a sync; the bench syncs too.
    assert len(syncs) >= 2 * (len(outcome.verdict.a) + len(outcome.verdict.b))
    with pytest.raises(BadArgumentError, match="bound"):
        tunecache.Tunable(
            "ttbadbound",
            dims=("n",),
            shape=len,
            candidates={"a": len},
            heuristic="a",
            bound=3,  # type: ignore[arg-type]
            register=False,
        )


def test_a_choice_that_breaks_the_model_is_rejected_not_fatal(cache: Cache) -> None:
    inside = {"model": False}

    def fragile(x: np.ndarray) -> np.ndarray:
        # Fast in isolation, where the bench calls it; raises inside the model.
        if inside["model"]:
            raise RuntimeError("only works alone")
        return tm.vectorized(x)

    op = matrix_op(
        "ttfragile_F64", ("m", "n"), {"loop": tm.loop.functions["loop"], "fragile": fragile}, "loop"
    )

    def model() -> object:
        inside["model"] = True
        try:
            return op(tm.X)
        finally:
            inside["model"] = False

    report = tune.tune(tune.Model("fragile", model), cache=cache)

    (outcome,) = report.keys
    assert outcome.action == "rejected" and outcome.choice == "loop"
    assert outcome.tried == ("fragile",) and "only works alone" in outcome.note
    entry = cache.get(outcome.key, candidates=op.candidates)
    assert entry is not None and entry.status == "rejected"
    assert verdict(cache, "fragile", entry.id) == "masked"


def test_one_model_never_rewrites_another_models_decision(cache: Cache) -> None:
    # m1 accepts "fast" row norms at m=600. m2 meets that entry twice: borrowed at m=400, where
    # "fast" is slow (it sleeps), and exact at m=600. Whatever m2 decides for itself, m1's
    # entry keeps its choice, status and evidence, and m1 keeps running it.
    x400, x600 = tm.X[:400], tm.X

    def fast(x: np.ndarray) -> np.ndarray:
        if x.shape[0] == 400:
            time.sleep(0.02)
        return tm.vectorized(x)

    op = matrix_op(
        "ttshared_F64", ("m",), {"base": tm.loop.functions["loop"], "fast": fast}, "base"
    )
    key600 = op.key(x600)
    m1 = tune.Model("m1", lambda: op(x600))

    def m2_run() -> None:
        op(x400)
        for _ in range(10):
            op(x600)

    first = tune.tune(m1, cache=cache)
    (accepted,) = first.keys
    assert accepted.action == "accepted"
    before = cache.get(key600, candidates=op.candidates)
    assert before is not None and before.choice == "fast"

    second = tune.tune(tune.Model("m2", m2_run), cache=cache)

    after = cache.get(key600, candidates=op.candidates)
    assert after == before  # same choice, status and updated_at: untouched
    assert cache.record(after) == cache.record(before)
    assert cache.verdicts_on(after)["m1"] == "validated"
    assert cache.verdicts_on(after)["m2"] in ("validated", "masked")
    assert all(k.entry_id != after.id or k.action != "rejected" for k in second.keys)
    mine = Table.open(path=cache.path, device=cache.device, model="m1")
    assert mine.resolve(key600, op.candidates, "base").choice == "fast"


def test_a_budget_that_stops_short_of_an_answer_remembers_no_no(cache: Cache) -> None:
    # "tricky" is fastest alone but raises inside the model; "fast" works. A budget spent
    # after tricky's trial leaves fast untried: no verdict may be kept, and the next session
    # takes the key up again and accepts fast. The session's clock runs out at the very moment
    # tricky raises inside the model, so the budget ends between the two trials on any machine.
    session_clock = Clock()
    op, options = borrowing_op("ttbudget_F64", on_tricky_inside=session_clock.spend)
    model = tune.Model("budgeted", lambda: op(1))

    first = tune.tune(model, cache=cache, budget=1.0, clock=session_clock, **options)

    (outcome,) = first.keys
    assert outcome.action == "skipped"
    assert outcome.tried == ("tricky",) and "fast" in outcome.note
    assert cache.verdicts("budgeted") == {}
    second = tune.tune(model, cache=cache, **options)
    (outcome,) = second.keys
    assert outcome.action == "accepted" and outcome.choice == "fast"
    assert outcome.tried == ("tricky", "fast") and "cannot run inside" in outcome.note


def test_a_neighbour_choice_nothing_beats_is_tried_at_the_key_and_becomes_its_own(
    cache: Cache,
) -> None:
    # Model one accepts fast at n=100. Model two runs n=110: it borrows fast from the
    # neighbour and validates it, then tries tricky at its own key, which loses. Rejecting
    # tricky would mask the key down to base; instead fast is tried at n=110 against base.
    op, keep_fast = borrowing_op("ttborrow_F64")
    one = tune.tune(tune.Model("one", lambda: op(100)), cache=cache, **keep_fast)
    assert [(k.action, k.choice) for k in one.keys] == [("accepted", "fast")]

    two = tune.tune(tune.Model("two", lambda: op(110)), cache=cache, **keep_fast)

    assert [(k.action, k.choice) for k in two.keys] == [("validated", "fast"), ("accepted", "fast")]
    own = two.keys[1]
    assert own.tried == ("tricky",) and "won here against the heuristic" in own.note
    # Its evidence is a trial at this very key: base here against fast here.
    assert own.verdict is not None and own.verdict.accepted
    assert own.verdict is not two.keys[0].verdict
    key = make_key("ttborrow_F64", [("n", 110)])
    entry = cache.get(key, candidates=op.candidates)
    assert entry is not None and (entry.choice, entry.status) == ("fast", "accepted")
    assert own.entry_id == entry.id and cache.verdicts_on(entry) == {"two": "validated"}
    table = Table.open(path=cache.path, device=cache.device, model="two")
    answer = table.resolve(key, op.candidates, "base")
    assert (answer.choice, answer.source) == ("fast", "exact")
    # Nothing is left to decide: a second session writes nothing.
    again = tune.tune(tune.Model("two", lambda: op(110)), cache=cache, **keep_fast)
    assert {k.action for k in again.keys} == {"known"}


def test_a_neighbour_this_session_accepted_is_kept_at_a_key_nothing_beats_it(
    cache: Cache,
) -> None:
    # One model, two shapes: fast is accepted at n=100 first (the heavier key), then n=110
    # borrows it, tricky loses there, and n=110 keeps fast instead of falling to base.
    op, keep_fast = borrowing_op("ttborrow2_F64")

    def run() -> None:
        op(100)
        op(100)
        op(110)

    report = tune.tune(tune.Model("both", run), cache=cache, **keep_fast)

    table = Table.open(path=cache.path, device=cache.device, model="both")
    for n in (100, 110):
        answer = table.resolve(make_key("ttborrow2_F64", [("n", n)]), op.candidates, "base")
        assert (answer.choice, answer.source) == ("fast", "exact"), (n, report.keys)
    assert not report.masked
