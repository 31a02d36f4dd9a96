"""tunecache.tune.evaluate (tunecache.tune.heldout): tune on some models, measure the shared
cache on every model, held-out ones included, against its heuristic.
"""

from __future__ import annotations

import json

import pytest

from tests import tune_models as tm
from tests.tune.support import read_only
from tunecache import tune
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError


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


def test_evaluate_refuses_a_held_out_model_the_cache_already_judged(cache: Cache) -> None:
    # The scorer tuned here already has verdicts: measured as "held out", it would not be.
    tune.tune(tm.SCORER, cache=cache)
    entries = cache.count()
    with read_only(cache) as db:
        runs = db.execute("select count(*) from runs").fetchone()

    with pytest.raises(BadArgumentError, match="held-out model 'scorer' was already tuned"):
        tune.evaluate([tm.ENCODER], [tm.SCORER], cache=cache, pairs=8)

    # Refused before the tuned models are tuned: nothing more is written.
    assert cache.count() == entries
    with read_only(cache) as db:
        assert db.execute("select count(*) from runs").fetchone() == runs
    # The message names the way out, for the library and the command line alike.
    with pytest.raises(BadArgumentError, match=r"fresh cache .*--root DIR"):
        tune.evaluate([], [tm.SCORER], cache=cache, pairs=8)


def test_evaluate_classifies_at_the_acceptance_rules_alpha_by_default(cache: Cache) -> None:
    # alpha=None is the rule's default (0.01): 7 pairs can reach it, 6 cannot.
    tune.check_evaluate_options(7, None)
    with pytest.raises(BadArgumentError, match=r"can never reach alpha 0\.01: measure at least 7"):
        tune.evaluate([tm.ENCODER], [], cache=cache, pairs=6, alpha=None)
    with pytest.raises(BadArgumentError, match=r"can never reach alpha 0\.001"):
        tune.evaluate([tm.ENCODER], [], cache=cache, pairs=7, alpha=0.001)
    assert cache.count() == 0

    result = tune.evaluate([tm.SCORER], [], cache=cache, pairs=7, alpha=None)

    (row,) = result.rows
    assert row.pairs == 7 and row.entries == 1
