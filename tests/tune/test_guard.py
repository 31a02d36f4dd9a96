"""Step 7 (tunecache.tune.guard): the finished table must beat no table end to end, or every
entry the model uses is masked for it; a guard that passed over the same table is skipped.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests import tune_models as tm
from tests.tune.support import TOTAL, TOTAL_NAMES, matrix_op, verdict
from tunecache import tune
from tunecache.cache import Cache
from tunecache.resolve import Table


def test_the_final_guard_drops_a_table_that_does_not_beat_no_table(cache: Cache) -> None:
    # Another model's accepted entry that makes this model far slower (Python's sum of 20,000
    # floats), on a key too light to be judged on its own (share 0.5): the finished table
    # loses to no table end to end, so the guard masks it for this model.
    entry = cache.put(TOTAL, choice="pysum", candidates=TOTAL_NAMES, status="accepted")
    cache.validate(entry, model="other", fingerprint="o", verdict="validated")

    report = tune.tune(tm.ENCODER, cache=cache, share=0.5, budget=0)

    assert report.guard is not None and not report.guard.accepted
    assert report.masked == (entry.id,) and report.kept == ()
    assert verdict(cache, "encoder", entry.id) == "masked"
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


def test_a_choice_that_breaks_another_scenario_is_masked_by_the_guard(cache: Cache) -> None:
    # "fast" needs m divisible by 8. It wins at m=600; m=620, in another scenario, is too light
    # to be judged on its own (under share=0.5) and borrows it as its nearest shape, where it
    # raises. The guard
    # runs every scenario: the table raises, so everything it served is masked, and the
    # session ends normally with the model on its heuristic.
    def fast(x: np.ndarray) -> np.ndarray:
        if x.shape[0] % 8:
            raise ValueError("fast needs m % 8 == 0")
        return tm.vectorized(x)

    op = matrix_op("ttmod8_F64", ("m",), {"base": tm.loop.functions["loop"], "fast": fast}, "base")
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
