"""tunecache.tune.reports: what a session and an evaluation hand back, as plain JSON."""

from __future__ import annotations

import json

from tunecache import tune
from tunecache.tune.reports import count_outcomes


def _row(model: str, group: str, outcome: str) -> tune.EvaluationRow:
    return tune.EvaluationRow(model, group, outcome, 2.0, 1.0, 2.0, 1.5, 2.5, 0.001, 0.9, 8, 1)


def test_outcomes_are_counted_with_every_outcome_named() -> None:
    assert count_outcomes([]) == {"improved": 0, "neutral": 0, "regressed": 0}
    assert count_outcomes(["neutral", "improved", "neutral"]) == {
        "improved": 1,
        "neutral": 2,
        "regressed": 0,
    }
    assert tuple(count_outcomes([])) == tune.OUTCOMES


def test_an_evaluation_counts_by_group_and_is_plain_json() -> None:
    rows = (_row("a", "tuned", "improved"), _row("b", "held-out", "neutral"))
    evaluation = tune.Evaluation(rows, (), 1.5)

    assert evaluation.counts("tuned") == {"improved": 1, "neutral": 0, "regressed": 0}
    assert evaluation.counts("held-out")["neutral"] == 1
    assert sum(evaluation.counts().values()) == 2
    plain = json.loads(json.dumps(evaluation.as_dict()))
    assert plain["rows"][0] == {
        "model": "a", "group": "tuned", "outcome": "improved", "heuristic_ms": 2.0,
        "cached_ms": 1.0, "speedup": 2.0, "low": 1.5, "high": 2.5, "p_faster": 0.001,
        "p_slower": 0.9, "pairs": 8, "entries": 1, "note": "",
    }  # fmt: skip
    assert plain["counts"]["held-out"] == {"improved": 0, "neutral": 1, "regressed": 0}


def test_a_tune_report_counts_actions_and_keeps_its_field_order_in_json() -> None:
    outcome = tune.KeyOutcome("k", "accepted", 0.5, "-", "loop", "vectorized", 3, ("vectorized",))
    report = tune.TuneReport("m", "f", 1, ("-",), (outcome, outcome), 0, None, (3,), (), 0.25)

    assert report.count("accepted") == 2 and report.count("masked") == 0
    plain = report.as_dict()
    assert list(plain["keys"][0]) == [
        "key", "action", "share", "scenario", "heuristic", "choice", "entry_id", "tried",
        "verdict", "bench_best", "bench_stopped", "note", "wrong", "too_slow", "doubt",
    ]  # fmt: skip
    assert plain["keys"][0]["tried"] == ["vectorized"] and plain["keys"][0]["verdict"] is None
    assert set(tune.ACTIONS) >= {k["action"] for k in plain["keys"]}
    json.dumps(plain)
