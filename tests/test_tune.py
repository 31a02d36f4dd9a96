"""The tuner end to end, on tiny real numpy models: what it writes, never how fast it ran.

The models (tests/tune_models.py) are built so the right answers are not in doubt: the row-norm
key's alternative is about 20x faster and carries most of a run, the sum's alternatives are far
slower or raise, and the bias op is too light to confirm anything about.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunecache
from tests import tune_models as tm
from tunecache import cli, tune
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.keys import make_key
from tunecache.resolve import Table, _current, using

NORM = make_key("ttrownorm_F64", [("m", 600), ("n", 48)])
TOTAL = make_key("tttotal_F64", [("n", 20_000)])
NORM_NAMES = tm.loop.candidates
TOTAL_NAMES = tm.numpy_sum.candidates


def _db(cache: Cache) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{cache.path}?mode=ro", uri=True)


def _verdict(cache: Cache, model: str, entry_id: int) -> str | None:
    return cache.verdicts(model).get(entry_id)


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
    assert _verdict(cache, "encoder", entry.id) == "validated"
    with _db(cache) as db:
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


def test_light_keys_are_screened_and_never_written(cache: Cache) -> None:
    report = tune.tune(tm.ENCODER, cache=cache, share=0.5)

    assert [k.key for k in report.keys] == [NORM.text]
    assert report.screened == 2  # the sum and the bias: each far under half of a run
    written = {e.key.signature for e in cache.entries()}
    assert written == {"ttrownorm_F64"}


def test_the_tuned_table_serves_the_model(cache: Cache) -> None:
    tune.tune(tm.ENCODER, cache=cache, share=0.5)

    table = Table.open(path=cache.path, device=cache.device, model="encoder")
    answer = table.resolve(NORM, NORM_NAMES, "loop")
    assert (answer.source, answer.choice) == ("exact", "vectorized")
    with using(table), tunecache.profile() as p:
        tm.encoder()
    served = {row.key: row.choice for row in p.rows()}
    assert served[NORM] == "vectorized"


def test_a_key_made_heavy_by_a_faster_table_is_tried_in_the_same_session(
    cache: Cache,
) -> None:
    # Before tuning, the bias is far below 1% of the encoder's run (the Python-loop row norm
    # carries it); once the norm is 20x faster it is not, and the session profiles again.
    # share 0.5%: the bias is about 0.1% of the heuristic's run and about 3% of the tuned
    # one, so a noisy single profile cannot put it on the wrong side of the line.
    bias = make_key("ttbias_F64", [("n", 3)])
    first = tune.tune(tm.ENCODER, cache=cache, share=0.005)

    actions = {k.key: k.action for k in first.keys}
    assert actions[NORM.text] == "accepted" and bias.text in actions
    entries = {e.id: e.updated_at for e in cache.entries()}
    # Nothing is left for a second session: it writes nothing and finds every key decided.
    second = tune.tune(tm.ENCODER, cache=cache, share=0.005)
    assert {k.action for k in second.keys} <= {"known", "kept"}
    assert {k.key for k in second.keys} == set(actions)
    assert {e.id: e.updated_at for e in cache.entries()} == entries
    assert second.guard_skipped


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


def test_another_model_validates_a_shared_entry_for_itself(cache: Cache) -> None:
    tune.tune(tm.ENCODER, cache=cache, share=0.5)
    entry = cache.get(NORM, candidates=NORM_NAMES)
    assert entry is not None

    report = tune.validate(tm.SCORER, cache=cache)

    (norm,) = [k for k in report.keys if k.key == NORM.text]
    assert norm.action == "validated" and norm.entry_id == entry.id
    assert _verdict(cache, "scorer", entry.id) == "validated"
    with _db(cache) as db:
        assert db.execute("select kind from runs where id = ?", (report.run_id,)).fetchone() == (
            "validate",
        )


def test_an_entry_that_hurts_a_model_is_masked_for_it_only(cache: Cache) -> None:
    # Another model's "decision" that is really the slow loop, at the scaled model's shape.
    key = make_key("ttrownorm_F64", [("m", 600), ("n", 48)])
    entry = cache.put(
        key, choice="loop", candidates=NORM_NAMES, heuristic="vectorized", status="accepted"
    )
    cache.validate(entry, model="other", fingerprint="x", verdict="validated")
    slow = tunecache.Tunable(
        "ttrownorm_F64",
        dims=("m", "n"),
        shape=lambda x: x.shape,
        candidates={"loop": tm.loop.functions["loop"], "vectorized": tm._vectorized},
        heuristic="vectorized",
        register=False,
    )
    model = tune.Model("fastnorm", lambda: slow(tm.X))

    report = tune.validate(model, cache=cache)

    (outcome,) = report.keys
    assert outcome.action == "masked" and outcome.choice == "vectorized"
    assert _verdict(cache, "fastnorm", entry.id) == "masked"
    mine = Table.open(path=cache.path, device=cache.device, model="fastnorm")
    assert mine.resolve(key, slow.candidates, "vectorized").source == "masked"
    theirs = Table.open(path=cache.path, device=cache.device, model="other")
    assert theirs.resolve(key, slow.candidates, "vectorized").choice == "loop"


def test_the_final_guard_drops_a_table_that_does_not_beat_no_table(cache: Cache) -> None:
    # Another model's accepted entry that makes this model far slower (Python's sum of 20,000
    # floats), on a key too light to be judged on its own (share 0.5): the finished table
    # loses to no table end to end, so the guard masks it for this model.
    entry = cache.put(TOTAL, choice="pysum", candidates=TOTAL_NAMES, status="accepted")
    cache.validate(entry, model="other", fingerprint="o", verdict="validated")

    report = tune.tune(tm.ENCODER, cache=cache, share=0.5, budget=0)

    assert report.guard is not None and not report.guard.accepted
    assert report.masked == (entry.id,) and report.kept == ()
    assert _verdict(cache, "encoder", entry.id) == "masked"
    table = Table.open(path=cache.path, device=cache.device, model="encoder")
    assert table.resolve(TOTAL, TOTAL_NAMES, "numpy_sum").source == "masked"
    # It stays the other model's decision: masked for this model only.
    assert cache.get(TOTAL, candidates=TOTAL_NAMES).status == "accepted"  # type: ignore[union-attr]
    assert cache.verdicts_on(entry) == {"other": "validated", "encoder": "masked"}


def test_a_failed_guard_rejects_what_no_other_model_vouches_for(cache: Cache) -> None:
    # The same slow entry, accepted but validated by nobody: once this model masks it, no
    # model stands behind it, so it stops being served to anyone, in the same commit.
    entry = cache.put(TOTAL, choice="pysum", candidates=TOTAL_NAMES, status="accepted")

    report = tune.tune(tm.ENCODER, cache=cache, share=0.5, budget=0)

    assert report.guard is not None and not report.guard.accepted
    assert cache.get(TOTAL, candidates=TOTAL_NAMES).status == "rejected"  # type: ignore[union-attr]
    anyone = Table.open(path=cache.path, device=cache.device)
    assert anyone.resolve(TOTAL, TOTAL_NAMES, "numpy_sum").source == "heuristic"
    assert cache.verdicts_on(entry) == {"encoder": "masked"}


def test_a_declared_bound_stops_the_bench_and_sync_brackets_every_timing(cache: Cache) -> None:
    # A bound no candidate can miss (1 s a call): the bench stops as soon as one candidate has
    # two samples. The model's sync hook is called around every timed run and sample.
    op = tunecache.Tunable(
        "ttbound_F64",
        dims=("m", "n"),
        shape=lambda x: x.shape,
        candidates={"loop": tm.loop.functions["loop"], "vectorized": tm._vectorized},
        heuristic="loop",
        bound=lambda m, n: 1.0,
        register=False,
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


def test_progress_is_reported_key_by_key_to_the_end(cache: Cache) -> None:
    seen: list[tuple[str, int, int]] = []
    report = tune.tune(tm.ENCODER, cache=cache, share=0.0, progress=lambda *a: seen.append(a))
    total = len({k.key for k in report.keys})
    assert seen[0] == ("tuning encoder", 0, total)
    assert seen[-1] == ("tuning encoder", total, total)
    assert [done for _, done, _ in seen] == sorted(done for _, done, _ in seen)


def test_budget_spent_skips_keys_and_writes_no_entry(cache: Cache) -> None:
    report = tune.tune(tm.ENCODER, cache=cache, budget=0)

    assert report.budget_spent
    assert report.keys and all(k.action == "skipped" for k in report.keys)
    assert cache.count() == 0
    assert report.guard is None


def test_scenarios_tune_each_size_of_a_symbolic_dim(cache: Cache) -> None:
    report = tune.tune(tm.SCALED, cache=cache)

    assert report.scenarios == ("s=150", "s=600")
    tuned = {e.key.text: e.choice for e in cache.entries() if e.status == "accepted"}
    assert tuned == {
        "ttrownorm_F64_m150_n48": "vectorized",
        "ttrownorm_F64_m600_n48": "vectorized",
    }


def test_ctrl_c_keeps_what_was_accepted(cache: Cache) -> None:
    calls = {"n": 0}

    def interrupting(x: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        raise KeyboardInterrupt

    op = tunecache.Tunable(
        "ttcumsum_F64",
        dims=("n",),
        shape=lambda x: (x.size,),
        candidates={"cumsum": np.cumsum, "interrupting": interrupting},
        heuristic="cumsum",
        register=False,
    )
    data = np.ones(30_000)

    def model() -> object:
        # The row norms weigh most, so they are tuned (and accepted) first.
        tm.scorer()
        return op(data)

    with pytest.raises(tune.TuneInterrupted) as stop:
        tune.tune(tune.Model("interrupted", model), cache=cache, share=0.0)

    assert calls["n"] == 1
    report = stop.value.report
    assert report.interrupted
    assert [k.action for k in report.keys] == ["accepted"]
    entry = cache.get(NORM, candidates=NORM_NAMES)
    assert entry is not None and entry.status == "accepted"
    with _db(cache) as db:
        status = db.execute("select status from runs where id = ?", (report.run_id,)).fetchone()
    assert status == ("interrupted",)


def test_a_choice_that_breaks_the_model_is_rejected_not_fatal(cache: Cache) -> None:
    inside = {"model": False}

    def fragile(x: np.ndarray) -> np.ndarray:
        # Fast in isolation, where the bench calls it; raises inside the model.
        if inside["model"]:
            raise RuntimeError("only works alone")
        return tm._vectorized(x)

    op = tunecache.Tunable(
        "ttfragile_F64",
        dims=("m", "n"),
        shape=lambda x: x.shape,
        candidates={"loop": tm.loop.functions["loop"], "fragile": fragile},
        heuristic="loop",
        register=False,
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
    assert _verdict(cache, "fragile", entry.id) == "masked"


def test_evaluate_reports_tuned_and_held_out_models(cache: Cache) -> None:
    result = tune.evaluate([tm.ENCODER], [tm.SCORER, tm.PROJECTOR], cache=cache, pairs=8)

    rows = {r.model: r for r in result.rows}
    assert [(r.model, r.group) for r in result.rows] == [
        ("encoder", "tuned"),
        ("scorer", "held-out"),
        ("projector", "held-out"),
    ]
    # The scorer shares the heavy row-norm key (about 20x faster tuned): served, and measured.
    assert rows["scorer"].entries == 1 and rows["scorer"].pairs == 8
    assert rows["scorer"].outcome == "improved" and rows["scorer"].speedup > 1
    assert rows["encoder"].outcome == "improved"
    assert rows["scorer"].heuristic_ms is not None and rows["scorer"].cached_ms is not None
    # The projector's keys have no served entry: both sides would run the same code.
    assert rows["projector"].entries == 0 and rows["projector"].outcome == "neutral"
    assert result.counts("held-out")["neutral"] >= 1
    # Held-out models are applied as they are, not validated.
    assert cache.verdicts("scorer") == {}
    json.dumps(result.as_dict())


def test_one_model_never_rewrites_another_models_decision(cache: Cache) -> None:
    # m1 accepts "fast" row norms at m=600. m2 meets that entry twice: borrowed at m=400, where
    # "fast" is slow (it sleeps), and exact at m=600. Whatever m2 decides for itself, m1's
    # entry keeps its choice, status and evidence, and m1 keeps running it.
    x400, x600 = tm.X[:400], tm.X

    def fast(x: np.ndarray) -> np.ndarray:
        if x.shape[0] == 400:
            time.sleep(0.02)
        return tm._vectorized(x)

    op = tunecache.Tunable(
        "ttshared_F64",
        dims=("m",),
        shape=lambda x: (x.shape[0],),
        candidates={"base": tm.loop.functions["loop"], "fast": fast},
        heuristic="base",
        register=False,
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


def test_the_budget_stops_new_keys_but_never_cuts_a_started_trial(cache: Cache) -> None:
    op = tunecache.Tunable(
        "ttsleep_F64",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"slow": lambda n: time.sleep(0.02), "quick": lambda n: time.sleep(0.005)},
        heuristic="slow",
        register=False,
    )
    model = tune.Model("sleeper", lambda: op(1))

    # The trial alone takes ~50 runs of 5-20 ms, far past a 0.15 s budget.
    report = tune.tune(model, cache=cache, budget=0.15, key_budget=0.05)

    (outcome,) = report.keys
    assert outcome.action == "accepted"
    assert outcome.verdict is not None and outcome.verdict.rounds == 24
    assert "budget" not in outcome.verdict.reason


def _sleeper(name: str, seconds: float, *, inside_raises: bool = False) -> Any:
    def candidate(n: int) -> None:
        if inside_raises and _current.get() is not None:
            raise RuntimeError(f"{name} cannot run inside the model")
        time.sleep(seconds)

    return candidate


def test_a_budget_that_stops_short_of_an_answer_remembers_no_no(cache: Cache) -> None:
    # "tricky" is fastest alone but raises inside the model; "fast" works. A budget spent
    # after tricky's trial leaves fast untried: no verdict may be kept, and the next session
    # takes the key up again and accepts fast.
    op = _borrowing_op("ttbudget_F64")
    model = tune.Model("budgeted", lambda: op(1))

    # drop_ratio 10: "fast" (4x tricky's time) survives the bench to be tried after it.
    options: dict[str, Any] = {"key_budget": 0.1, "bench_options": {"drop_ratio": 10.0}}
    first = tune.tune(model, cache=cache, budget=0.12, **options)

    (outcome,) = first.keys
    assert outcome.action == "skipped"
    assert cache.verdicts("budgeted") == {}
    second = tune.tune(model, cache=cache, **options)
    (outcome,) = second.keys
    assert outcome.action == "accepted" and outcome.choice == "fast"
    assert outcome.tried == ("tricky", "fast") and "cannot run inside" in outcome.note


def test_a_choice_that_breaks_another_scenario_is_masked_by_the_guard(cache: Cache) -> None:
    # "fast" needs m divisible by 8. It wins at m=600; m=620, in another scenario, is too light
    # to be judged on its own (under share=0.5) and borrows it as its nearest shape, where it
    # raises. The guard
    # runs every scenario: the table raises, so everything it served is masked, and the
    # session ends normally with the model on its heuristic.
    def fast(x: np.ndarray) -> np.ndarray:
        if x.shape[0] % 8:
            raise ValueError("fast needs m % 8 == 0")
        return tm._vectorized(x)

    op = tunecache.Tunable(
        "ttmod8_F64",
        dims=("m",),
        shape=lambda x: (x.shape[0],),
        candidates={"base": tm.loop.functions["loop"], "fast": fast},
        heuristic="base",
        register=False,
    )
    data = {600: tm.X, 620: np.vstack([tm.X, tm.X[:20]])}

    def run(s: int) -> None:
        op(data[s])
        if s == 620:
            time.sleep(0.2)  # other work: the op is a few % of this scenario

    model = tune.Model("mod8", run, scenarios={"s": (600, 620)})

    report = tune.tune(model, cache=cache, share=0.5)

    assert [k.action for k in report.keys] == ["accepted"]
    assert report.guard_error.startswith("ValueError: fast needs m % 8 == 0")
    entry_id = report.keys[0].entry_id
    assert entry_id is not None and report.masked == (entry_id,) and report.kept == ()
    entry = cache.get(op.key(data[600]), candidates=op.candidates)
    assert entry is not None and entry.status == "rejected"
    assert cache.verdicts("mod8") == {entry_id: "masked"}
    tune.tune(model, cache=cache, share=0.5)  # and the next session runs
    table = Table.open(path=cache.path, device=cache.device, model="mod8")
    assert table.resolve(op.key(data[620]), op.candidates, "base").choice == "base"


def test_the_guard_is_skipped_only_over_a_table_a_finished_guard_passed(cache: Cache) -> None:
    def stop_before_the_guard(what: str, done: int, total: int) -> None:
        if done == total:
            raise KeyboardInterrupt

    with pytest.raises(tune.TuneInterrupted) as stop:
        tune.tune(tm.SCORER, cache=cache, progress=stop_before_the_guard)
    assert stop.value.report.guard is None and not stop.value.report.guard_skipped

    # The entry is accepted and validated, but no guard ever passed over it: this session
    # writes nothing, and still runs the guard.
    second = tune.tune(tm.SCORER, cache=cache)
    assert [k.action for k in second.keys] == ["known"]
    assert second.guard is not None and second.guard.accepted and not second.guard_skipped
    # Now one has: the next session over the same table skips it, and says so.
    third = tune.tune(tm.SCORER, cache=cache)
    assert third.guard is None and third.guard_skipped and third.kept == second.kept


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"alpha": 5.0}, "alpha"),
        ({"alpha": 0}, "alpha"),
        ({"pairs": 0}, "pairs"),
        ({"confirmations": 0}, "confirmations"),
        ({"confirmations": 1, "pairs": 1}, "at least 7 pairs"),
        # 3 x 2 pairs: the smallest p-value is 1/64, above 0.01; every key would be rejected
        ({"pairs": 2}, "can never reach alpha 0.01"),
        ({"confirmations": 1, "pairs": 3, "alpha": 0.1}, "at least 4 pairs"),
        ({"key_budget": 0}, "key_budget"),
        ({"bench_options": {"bogus": 1}}, "unknown bench options"),
        ({"share": True}, "share"),
    ],
)
def test_bad_acceptance_options_are_refused_before_anything_runs(
    cache: Cache, options: dict[str, object], message: str
) -> None:
    ran = []
    model = tune.Model("never", lambda: ran.append(1))
    with pytest.raises(BadArgumentError, match=message):
        tune.tune(model, cache=cache, **options)  # type: ignore[arg-type]
    assert ran == [] and cache.count() == 0
    with _db(cache) as db:
        assert db.execute("select count(*) from runs").fetchone() == (0,)


def test_model_arguments_are_checked() -> None:
    with pytest.raises(BadArgumentError, match="non-empty"):
        tune.Model("", tm.encoder)
    with pytest.raises(BadArgumentError, match="not callable"):
        tune.Model("x", 3)  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="positive integer sizes"):
        tune.Model("x", tm.scaled, scenarios={"s": (0, 4)})
    with pytest.raises(BadArgumentError, match="Model or a callable"):
        tune.as_model(42)
    with pytest.raises(BadArgumentError, match="scenarios map"):
        tune.Model("x", tm.scaled, scenarios=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="cannot take its scenario dims"):
        tune.Model("x", tm.encoder, scenarios={"s": (1,)})
    two = tune.Model("x", lambda s, b: None, scenarios={"s": (1, 2), "b": (3,)})
    assert two.cases() == [
        {"s": 1, "b": 3},
        {"s": 2, "b": 3},
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"share": 1.5}, "share"), ({"keep": 0}, "keep"), ({"budget": -1}, "budget")],
)
def test_bad_options_are_one_line_errors_and_write_nothing(
    cache: Cache, options: dict[str, float], message: str
) -> None:
    with pytest.raises(BadArgumentError, match=message):
        tune.tune(tm.ENCODER, cache=cache, **options)  # type: ignore[arg-type]
    assert cache.count() == 0


# --- the command line ---------------------------------------------------------------------------

MODELS_FILE = str(Path(tm.__file__))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:  # argparse's usage errors
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_tune_prints_and_writes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, device: Device
) -> None:
    db = str(tmp_path / "cli.db")
    code, out, err = _cli(capsys, "tune", f"{MODELS_FILE}:ENCODER", "--db", db, "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["model"] == "encoder"
    actions = {k["key"]: k["action"] for k in report["keys"]}
    assert actions[NORM.text] == "accepted"
    code, out, err = _cli(capsys, "tune", "tests.tune_models:MODELS", "--db", db)
    assert code == 0, err
    assert "encoder" in out and "scorer" in out and "final guard" in out
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select choice, status from decisions").fetchall()
    assert ("vectorized", "accepted") in rows


def test_cli_evaluate_reports_every_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "eval.db")
    code, out, err = _cli(
        capsys,
        "evaluate",
        "--tune", "tests.tune_models:ENCODER",
        "--held-out", "tests.tune_models:SCORER",
        "--held-out", "tests.tune_models:PROJECTOR",
        "--measure-pairs", "7",
        "--db", db,
        "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert [r["model"] for r in result["rows"]] == ["encoder", "scorer", "projector"]
    assert sum(result["counts"]["held-out"].values()) == 2
    code, out, err = _cli(
        capsys, "evaluate", "--tune", "tests.tune_models:ENCODER", "--measure-pairs", "2",
        "--db", db,
    )  # fmt: skip
    # Two pairs can never reach alpha 0.01: refused up front, before any tuning.
    assert code == 2 and "at least 7" in err, err
    code, out, err = _cli(
        capsys, "evaluate", "--tune", "tests.tune_models:ENCODER", "--measure-pairs", "7",
        "--db", db,
    )  # fmt: skip
    assert code == 0, err
    assert "held-out evaluation" in out and "tuned:" in out


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("nocolon", cli.EXIT_USAGE, "MODULE:ATTR"),
        ("no.such.module:x", 2, "cannot import"),
        ("tests.tune_models:NOPE", 2, "no attribute"),
        ("/no/such/file.py:x", 2, "no file"),
        ("tests.tune_models:X", 2, "Model or a callable"),
    ],
)
def test_cli_bad_model_specs_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, code: int, message: str
) -> None:
    code_, _, err = _cli(capsys, "tune", spec, "--db", str(tmp_path / "bad.db"))
    assert code_ == code
    # One line says what is wrong (after argparse's usage lines, for a usage error).
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err
    if code != cli.EXIT_USAGE:
        assert len(err.strip().splitlines()) == 1


def test_sigint_to_a_tuning_process_keeps_what_was_accepted(tmp_path: Path) -> None:
    db = tmp_path / "sigint.db"
    env = {**os.environ, "PYTHONPATH": str(Path(tm.__file__).resolve().parent.parent)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tunecache",
            "tune",
            "tests.tune_models:INTERRUPTIBLE",
            "--db",
            str(db),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        # Wait for the row norms' entry to be committed, then interrupt the bench that follows.
        while time.monotonic() < deadline and process.poll() is None:
            if db.exists() and _accepted(db):
                break
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == cli.EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err
    assert "interrupted: what was accepted before is stored" in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("select status from runs").fetchall() == [("interrupted",)]
        assert ("vectorized", "accepted") in conn.execute(
            "select choice, status from decisions"
        ).fetchall()
        assert conn.execute("pragma integrity_check").fetchone() == ("ok",)


def _accepted(db: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1) as conn:
            return bool(conn.execute("select 1 from entries where status = 'accepted'").fetchall())
    except sqlite3.Error:
        return False


def _borrowing_op(signature: str) -> tunecache.Tunable[..., None]:
    # "tricky" is fastest alone but raises inside a model; "fast" is 5x faster than "base".
    return tunecache.Tunable(
        signature,
        dims=("n",),
        shape=lambda n: (n,),
        candidates={
            "base": _sleeper("base", 0.02),
            "tricky": _sleeper("tricky", 0.001, inside_raises=True),
            "fast": _sleeper("fast", 0.004),
        },
        heuristic="base",
        register=False,
    )


#: drop_ratio 10: fast (4x tricky's time) survives the bench to be tried after it
_KEEP_FAST: dict[str, Any] = {"bench_options": {"drop_ratio": 10.0}}


def test_a_neighbour_choice_nothing_beats_is_tried_at_the_key_and_becomes_its_own(
    cache: Cache,
) -> None:
    # Model one accepts fast at n=100. Model two runs n=110: it borrows fast from the
    # neighbour and validates it, then tries tricky at its own key, which loses. Rejecting
    # tricky would mask the key down to base; instead fast is tried at n=110 against base.
    op = _borrowing_op("ttborrow_F64")
    one = tune.tune(tune.Model("one", lambda: op(100)), cache=cache, **_KEEP_FAST)
    assert [(k.action, k.choice) for k in one.keys] == [("accepted", "fast")]

    two = tune.tune(tune.Model("two", lambda: op(110)), cache=cache, **_KEEP_FAST)

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
    again = tune.tune(tune.Model("two", lambda: op(110)), cache=cache, **_KEEP_FAST)
    assert {k.action for k in again.keys} == {"known"}


def test_a_neighbour_this_session_accepted_is_kept_at_a_key_nothing_beats_it(
    cache: Cache,
) -> None:
    # One model, two shapes: fast is accepted at n=100 first (the heavier key), then n=110
    # borrows it, tricky loses there, and n=110 keeps fast instead of falling to base.
    op = _borrowing_op("ttborrow2_F64")

    def run() -> None:
        op(100)
        op(100)
        op(110)

    report = tune.tune(tune.Model("both", run), cache=cache, **_KEEP_FAST)

    table = Table.open(path=cache.path, device=cache.device, model="both")
    for n in (100, 110):
        answer = table.resolve(make_key("ttborrow2_F64", [("n", n)]), op.candidates, "base")
        assert (answer.choice, answer.source) == ("fast", "exact"), (n, report.keys)
    assert not report.masked
