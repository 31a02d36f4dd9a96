"""tunecache.tune.tune and validate (tunecache.tune.tuner): a session's passes over its heavy
keys, step 3 (judging another model's entry), the budget, progress and Ctrl-C.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tunecache
from tests import tune_models as tm
from tests.tune.support import (
    NORM,
    NORM_NAMES,
    Clock,
    matrix_op,
    outside_the_model,
    read_only,
    verdict,
)
from tunecache import tune
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.keys import make_key
from tunecache.resolve import Table, using


def test_the_tuned_table_serves_the_model(cache: Cache) -> None:
    # share 0: every key is tuned, so the row norm's entry never hangs on how a loaded
    # machine splits one profiled run's time between the keys.
    tune.tune(tm.ENCODER, cache=cache, share=0.0)

    table = Table.open(path=cache.path, device=cache.device, model="encoder")
    answer = table.resolve(NORM, NORM_NAMES, "loop")
    assert (answer.source, answer.choice) == ("exact", "vectorized")
    with using(table), tunecache.profile() as p:
        tm.encoder()
    served = {row.key: row.choice for row in p.rows()}
    assert served[NORM] == "vectorized"


def test_another_model_validates_a_shared_entry_for_itself(cache: Cache) -> None:
    # share 0: the set-up tunes every key, so the row norm's entry is there whatever share of
    # one profiled run a loaded machine gives it.
    tune.tune(tm.ENCODER, cache=cache, share=0.0)
    entry = cache.get(NORM, candidates=NORM_NAMES)
    assert entry is not None

    report = tune.validate(tm.SCORER, cache=cache)

    (norm,) = [k for k in report.keys if k.key == NORM.text]
    assert norm.action == "validated" and norm.entry_id == entry.id
    assert verdict(cache, "scorer", entry.id) == "validated"
    with read_only(cache) as db:
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
    slow = matrix_op(
        "ttrownorm_F64",
        ("m", "n"),
        {"loop": tm.loop.functions["loop"], "vectorized": tm.vectorized},
        "vectorized",
    )
    model = tune.Model("fastnorm", lambda: slow(tm.X))

    report = tune.validate(model, cache=cache)

    (outcome,) = report.keys
    assert outcome.action == "masked" and outcome.choice == "vectorized"
    assert verdict(cache, "fastnorm", entry.id) == "masked"
    mine = Table.open(path=cache.path, device=cache.device, model="fastnorm")
    assert mine.resolve(key, slow.candidates, "vectorized").source == "masked"
    theirs = Table.open(path=cache.path, device=cache.device, model="other")
    assert theirs.resolve(key, slow.candidates, "vectorized").choice == "loop"


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
        # The op joins the model's runs once the row norms are served from their stored entry
        # (accepted and committed), so it is benched after them whatever the keys' shares.
        norms = tm.scorer()
        if tunecache.current().resolve(NORM, NORM_NAMES, "loop").entry_id is None:
            return norms
        return op(data)

    with pytest.raises(tune.TuneInterrupted) as stop:
        tune.tune(tune.Model("interrupted", model), cache=cache, share=0.0)

    assert calls["n"] == 1
    report = stop.value.report
    assert report.interrupted
    assert [k.action for k in report.keys] == ["accepted"]
    entry = cache.get(NORM, candidates=NORM_NAMES)
    assert entry is not None and entry.status == "accepted"
    with read_only(cache) as db:
        status = db.execute("select status from runs where id = ?", (report.run_id,)).fetchone()
    assert status == ("interrupted",)


def test_the_budget_stops_new_keys_but_never_cuts_a_started_trial(cache: Cache) -> None:
    # The session's clock runs out as soon as the bench first calls a candidate: the key was
    # started inside the budget, so its trial runs to its decision all the same.
    session_clock, bench_clock = Clock(), Clock()
    in_bench = outside_the_model()

    def sleeping(seconds: float) -> Callable[[int], None]:
        def candidate(n: int) -> None:
            if in_bench():
                session_clock.spend()
            bench_clock.advance(seconds)
            time.sleep(seconds)

        return candidate

    op = tunecache.Tunable(
        "ttsleep_F64",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"slow": sleeping(0.02), "quick": sleeping(0.005)},
        heuristic="slow",
        register=False,
    )
    model = tune.Model("sleeper", lambda: op(1))

    report = tune.tune(
        model, cache=cache, budget=0.15, clock=session_clock, bench_options={"clock": bench_clock}
    )

    (outcome,) = report.keys
    assert outcome.action == "accepted"
    assert outcome.verdict is not None and outcome.verdict.rounds == 24
    assert "budget" not in outcome.verdict.reason
    assert report.budget_spent


def test_a_session_opens_the_cache_its_location_options_name(
    device: Device, tmp_path: Path
) -> None:
    # Without `cache`, tune and validate open `tunecache.open(**options)` themselves.
    db = tmp_path / "named.db"
    report = tune.tune(tm.ENCODER, path=db, device=device, share=0.0)
    assert db.is_file() and report.count("accepted") >= 1
    tune.validate(tm.SCORER, path=db, device=device)
    with Cache.open(path=db, device=device) as cache:
        assert cache.verdicts("encoder") and cache.verdicts("scorer")


def test_options_a_cache_cannot_take_are_refused_before_anything_runs(
    device: Device, tmp_path: Path
) -> None:
    with pytest.raises(BadArgumentError, match=r"unknown options \['thread'\]"):
        tune.tune(tm.ENCODER, path=tmp_path / "c.db", thread=2)
    with (
        Cache.open(path=tmp_path / "d.db", device=device) as cache,
        pytest.raises(BadArgumentError, match="either an open cache or options"),
    ):
        tune.validate(tm.SCORER, cache=cache, root=tmp_path)
    assert not (tmp_path / "c.db").exists()
