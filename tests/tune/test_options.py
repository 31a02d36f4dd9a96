"""tunecache.tune.options: every default decided once, every option checked before anything
runs or is written.
"""

from __future__ import annotations

import pytest

from tests import tune_models as tm
from tests.tune.support import read_only
from tunecache import tune
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError


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
        # The output check and what the bench refuses are the tuner's own.
        ({"bench_options": {"compare": len}}, "unknown bench options"),
        ({"bench_options": {"refused": {}}}, "unknown bench options"),
        ({"rebench": -1}, "rebench"),
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
    with read_only(cache) as db:
        assert db.execute("select count(*) from runs").fetchone() == (0,)


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


def test_every_default_is_decided_once() -> None:
    import inspect

    from tunecache import accept
    from tunecache.tune.options import TUNE_DEFAULTS, measure_alpha, session_options

    rule = inspect.signature(accept.accept).parameters
    options = session_options()
    # None means the acceptance rule's own default, for tuning and for measuring alike.
    assert (options.confirmations, options.pairs, options.alpha) == (
        rule["confirmations"].default,
        rule["pairs"].default,
        rule["alpha"].default,
    )
    assert measure_alpha(None) == rule["alpha"].default and measure_alpha(0.05) == 0.05
    # tune's own signature shows the same defaults the options module fills in.
    signature = inspect.signature(tune.tune).parameters
    assert {name: signature[name].default for name in TUNE_DEFAULTS} == TUNE_DEFAULTS
    assert tuple(TUNE_DEFAULTS) == tune.TUNE_OPTIONS
    assert (options.share, options.keep, options.key_budget) == (tune.SHARE, tune.KEEP, 1.0)


def test_tune_options_for_evaluate_are_checked_up_front() -> None:
    tune.check_tune_options({"share": 0.05, "alpha": None, "bench_options": None})
    with pytest.raises(BadArgumentError, match="unknown tune options"):
        tune.check_tune_options({"sharee": 0.05})
    with pytest.raises(BadArgumentError, match="unknown tune options"):
        tune.check_evaluate_options(7, None, {"max_distance": 1.0})
    with pytest.raises(BadArgumentError, match="keep"):
        tune.check_evaluate_options(tune_options={"keep": 0})
