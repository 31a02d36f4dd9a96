"""tunecache.tune.model: a model, its scenarios, and what may stand for one."""

from __future__ import annotations

import pytest

from tests import tune_models as tm
from tunecache import tune
from tunecache.errors import BadArgumentError
from tunecache.tune.model import scenario_text


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


def test_a_callable_is_a_model_named_after_it_and_scenarios_read_as_text() -> None:
    model = tune.as_model(tm.encoder)
    assert (model.name, model.run, model.cases()) == ("encoder", tm.encoder, [{}])
    assert tune.as_model(tm.encoder, name="enc").name == "enc"
    assert tune.as_model(tm.ENCODER) is tm.ENCODER
    assert scenario_text({"s": 64, "b": 1}) == "s=64 b=1" and scenario_text({}) == "-"
    assert tune.Model("one", tm.scaled, scenarios={"s": 5}).scenarios == {"s": (5,)}
