"""tunecache.triton.autotuner's Options: every argument is checked when the decorator is made."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import tunecache.triton as tct
from tests.triton.fake import configs
from tunecache.errors import BadArgumentError
from tunecache.triton import autotuner as options_module
from tunecache.triton.autotuner import DEFAULTS, Options


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"key": "M"}, "key is a list"),
        ({"configs": [{"BLOCK": 1}]}, "config 0: a config is a triton.Config"),
        ({"unseen": "sometimes"}, "unseen must be one of"),
        ({"max_distance": -1}, "max_distance"),
        ({"prune_configs_by": {"topk": 2}}, "unknown fields"),
        ({"prune_configs_by": {"top_k": 0}}, "top_k"),
        ({"prune_configs_by": {"perf_model": 3}}, "must be callable"),
        ({"reset_to_zero": "out"}, "reset_to_zero is a list"),
        ({"do_bench": 3}, "do_bench must be callable"),
        ({"warmup": "25"}, "milliseconds"),
        ({"bench": {"samples": 3}}, "unknown options"),
        ({"dims": ["X"]}, "not in key"),
        ({"device": "nvidia-h200"}, "tunecache.Device"),
        ({"pending_limit": -1}, "pending_limit"),
        ({"revision": ""}, "revision"),
        ({"check_outputs": "out"}, "check_outputs is a bool or a non-empty list"),
        ({"check_outputs": []}, "check_outputs is a bool or a non-empty list"),
        ({"check_tolerance": -1e-3}, "check_tolerance"),
        ({"check_tolerance": True}, "check_tolerance"),
    ],
)
def test_bad_arguments_fail_when_the_decorator_is_made(
    arguments: dict[str, Any], message: str
) -> None:
    given_ = {"configs": configs(), "key": ["M"], **arguments}
    with pytest.raises(BadArgumentError, match=message) as error:
        tct.autotune(**given_)
    assert "\n" not in str(error.value)


def test_the_defaults_are_the_decorators() -> None:
    signature = inspect.signature(tct.autotune)
    given = {n: p.default for n, p in signature.parameters.items() if n not in ("configs", "key")}
    assert given == dict(DEFAULTS)
    options = Options(configs(), ["M"])
    assert (options.unseen, options.revision, options.flush_l2, options.pending_limit) == (
        "borrow",
        "auto",
        True,
        32,
    )
    assert options.bench == {} and options.dims is None and options.device is None
    with pytest.raises(TypeError, match="unexpected keyword arguments: nope"):
        Options(configs(), ["M"], nope=1)


@pytest.mark.parametrize("value", [0, 0.5, 1, 3.0, -1, float("inf"), float("nan"), True, "1", None])
def test_max_distance_is_checked_by_the_resolvers_rule_without_the_resolver(value: Any) -> None:
    from tunecache import resolve

    assert options_module.DEFAULT_MAX_DISTANCE == resolve.DEFAULT_MAX_DISTANCE
    outcomes = []
    for check in (options_module.check_max_distance, resolve.check_max_distance):
        try:
            outcomes.append(check(value))
        except BadArgumentError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1]
