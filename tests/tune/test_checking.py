"""Correctness before speed (tunecache.tune.checking): every candidate's output on the captured
call is compared with the heuristic's before anything is timed, and a candidate that differs is
recorded as wrong, with its largest difference, and never benched, chosen or served.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import tunecache
from tests.tune.support import Clock, outside_the_model
from tunecache import codec
from tunecache.cache import Cache
from tunecache.evidence import WRONG, refusal
from tunecache.resolve import Table
from tunecache.tune import tune
from tunecache.tune.model import Model

DATA = np.linspace(0.0, 1.0, 50)


def counting_op(
    signature: str, clock: Clock, candidates: dict[str, tuple[float, Any]], **declared: Any
) -> tuple[tunecache.Tunable[..., Any], dict[str, int]]:
    """An op over one array whose candidates take the given seconds (on the bench's clock and
    for real) and return what their function gives; and how often each ran outside a model."""
    in_bench = outside_the_model()
    calls = dict.fromkeys(candidates, 0)

    def make(name: str, seconds: float, compute: Any) -> Any:
        def candidate(x: np.ndarray) -> Any:
            if in_bench():
                calls[name] += 1
            clock.advance(seconds)
            time.sleep(seconds)
            return compute(x)

        return candidate

    op = tunecache.Tunable(
        signature,
        dims=("n",),
        shape=lambda x: (len(x),),
        candidates={name: make(name, *spec) for name, spec in candidates.items()},
        heuristic=next(iter(candidates)),
        register=False,
        **declared,
    )
    return op, calls


def test_a_faster_but_wrong_candidate_is_never_benched_chosen_or_served(cache: Cache) -> None:
    clock = Clock()
    op, calls = counting_op(
        "ttwrong_F64",
        clock,
        {
            "base": (0.01, lambda x: np.cumsum(x)),
            "wrong": (0.001, lambda x: np.cumsum(x) * 1.001),  # 10x faster, 0.1% off
            "right": (0.002, lambda x: np.add.accumulate(x)),
        },
    )
    model = Model("checked", lambda: op(DATA))

    report = tune(model, cache=cache, bench_options={"clock": clock})

    (outcome,) = report.keys
    assert outcome.wrong == ("wrong",) and outcome.action == "accepted"
    assert outcome.choice == "right" and "wrong" not in outcome.tried
    assert calls["wrong"] == 1  # the one checked call: never probed, calibrated or sampled
    entry = cache.get(op.key(DATA), candidates=op.candidates)
    assert entry is not None and entry.choice == "right"
    record = cache.record(entry)
    assert record is not None and record.settings["checked"] is True
    wrong = record.candidate("wrong")
    assert refusal(wrong.error) == WRONG and not wrong.samples
    assert wrong.error is not None and wrong.error.startswith(
        "wrong output: largest difference 0.025 at index (49,), 0.001 of the reference"
    )
    table = Table.open(path=cache.path, device=cache.device, model="checked", use="all")
    assert table.resolve(op.key(DATA), op.candidates, "base").choice == "right"
    assert report.as_dict()["keys"][0]["wrong"] == ["wrong"]


def test_integer_outputs_compare_exactly_and_an_op_may_declare_its_tolerance(
    cache: Cache,
) -> None:
    clock = Clock()
    ints = np.arange(40)
    op, _ = counting_op(
        "ttints_I64",
        clock,
        {"base": (0.01, lambda x: x * 2), "shifted": (0.001, lambda x: x * 2 + (x == 7))},
    )
    report = tune(Model("ints", lambda: op(ints)), cache=cache, bench_options={"clock": clock})
    assert report.keys[0].wrong == ("shifted",) and report.keys[0].choice == "base"

    loose, _ = counting_op(
        "ttloose_F64",
        clock,
        {"base": (0.01, lambda x: x * 1.0), "close": (0.002, lambda x: x * 1.001)},
        tolerance=0.01,
    )
    report = tune(Model("loose", lambda: loose(DATA)), cache=cache, bench_options={"clock": clock})
    assert report.keys[0].wrong == () and report.keys[0].choice == "close"


def test_a_check_hook_decides_and_its_own_error_is_the_ops(cache: Cache) -> None:
    clock = Clock()

    def same_total(expected: np.ndarray, actual: np.ndarray) -> bool | str:
        return bool(np.isclose(expected.sum(), actual.sum())) or "the totals differ"

    op, _ = counting_op(
        "tthook_F64",
        clock,
        {
            "base": (0.01, lambda x: x.copy()),
            "reversed": (0.002, lambda x: x[::-1].copy()),  # same total: agrees by the hook
            "scaled": (0.001, lambda x: x * 2),
        },
        check=same_total,
    )
    report = tune(Model("hooked", lambda: op(DATA)), cache=cache, bench_options={"clock": clock})
    (outcome,) = report.keys
    assert outcome.wrong == ("scaled",) and outcome.choice == "reversed"
    record = cache.record(outcome.entry_id)  # type: ignore[arg-type]
    assert record is not None
    assert record.candidate("scaled").error == "wrong output: the totals differ"

    broken, _ = counting_op(
        "ttbroken_F64",
        clock,
        {"base": (0.01, lambda x: x), "other": (0.001, lambda x: x)},
        check=lambda e, a: 1 / 0,
    )
    with pytest.raises(ZeroDivisionError):
        tune(Model("broken", lambda: broken(DATA)), cache=cache, bench_options={"clock": clock})


def test_another_models_entry_that_is_wrong_on_this_models_data_is_masked_at_once(
    cache: Cache,
) -> None:
    clock = Clock()
    whole = np.arange(50.0)
    op, _ = counting_op(
        "ttround_F64",
        clock,
        {"base": (0.01, lambda x: x + 0.0), "rounded": (0.002, lambda x: np.round(x))},
    )
    # Rounding changes nothing on whole numbers: the first model accepts it.
    first = tune(Model("wholes", lambda: op(whole)), cache=cache, bench_options={"clock": clock})
    assert first.keys[0].action == "accepted" and first.keys[0].choice == "rounded"
    # The second model's data has fractions, at the same key: its own check masks the entry.
    second = tune(Model("fractions", lambda: op(DATA)), cache=cache, bench_options={"clock": clock})
    judged = [k for k in second.keys if k.action == "masked"]
    assert [k.wrong for k in judged] == [("rounded",)]
    assert judged[0].verdict is None and "wrong output: largest difference" in judged[0].note
    table = Table.open(path=cache.path, device=cache.device, model="fractions")
    assert table.resolve(op.key(DATA), op.candidates, "base").choice == "base"


def test_a_record_stored_before_outputs_were_checked_is_checked_before_a_trial(
    cache: Cache,
) -> None:
    clock = Clock()
    op, _ = counting_op(
        "ttlegacy_F64",
        clock,
        {"base": (0.01, lambda x: x * 1.0), "wrong": (0.001, lambda x: x * 3.0)},
    )
    key = op.key(DATA)
    # An older tunecache's evidence: wrong benched fastest, unchecked, kept unvalidated.
    old = codec.TimingRecord(
        candidates=(
            codec.CandidateTiming("base", (0.01, 0.01, 0.01)),
            codec.CandidateTiming("wrong", (0.001, 0.001, 0.001)),
        ),
        settings={"complete": True, "drop_ratio": 1.5, "min_samples": 3},
    )
    cache.put(key, choice="base", candidates=op.candidates, heuristic="base", record=old)

    report = tune(Model("legacy", lambda: op(DATA)), cache=cache, bench_options={"clock": clock})

    (outcome,) = report.keys
    assert outcome.bench_stopped == "stored" and outcome.tried == ()
    assert outcome.action == "kept" and outcome.choice == "base"
    assert "wrong: wrong output: largest difference" in outcome.note
