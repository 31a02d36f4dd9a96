"""tunecache.triton.configs: a kernel's configs by name, and Triton's pruning of them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.triton.fake import (
    Config,
    CpuKernel,
    TableTimer,
    blocks,
    configs,
    launch,
    operands,
    stored,
    tuner,
)
from tunecache.errors import BadArgumentError
from tunecache.triton.autotuner import Autotuner, Options
from tunecache.triton.configs import ConfigSet, NoConfigError, all_kwargs
from tunecache.triton.keys import config_name


def test_duplicate_configs_count_once_and_the_list_has_a_checksum() -> None:
    kernel = tuner(CpuKernel(), [*configs(), Config({"BLOCK": 32, "WORK": 40})])
    assert len(kernel.configs) == 3
    assert kernel.candidates == tuple(config_name(c) for c in configs())
    grown = tuner(CpuKernel(), [*configs(), Config({"BLOCK": 16})])
    assert grown.checksum != kernel.checksum


def _pruned(prune_configs_by: dict[str, Any]) -> tuple[Autotuner, TableTimer]:
    """Four blocks, the largest fastest, timed by a table, pruned as Triton would."""
    kernel = CpuKernel()
    timer = TableTimer(kernel, {8: 4.0, 16: 3.0, 32: 2.0, 64: 1.0})
    tuned = tuner(kernel, blocks(8, 16, 32, 64), do_bench=timer, prune_configs_by=prune_configs_by)
    return tuned, timer


def test_prune_configs_by_is_respected() -> None:
    seen: list[tuple[int, set[str]]] = []

    def early(cfgs: list[Config], nargs: dict[str, Any], **kwargs: Any) -> list[Config]:
        seen.append((len(cfgs), set(kwargs)))
        return [c for c in cfgs if c.kwargs["BLOCK"] <= nargs["M"]]

    tuned, timer = _pruned({"early_config_prune": early})
    launch(tuned, 20)
    assert sorted(timer.benched) == [8, 16] and seen == [(4, {"grid", "warmup"})]

    def model(**meta: Any) -> float:
        return float(meta["BLOCK"])  # predicts the smallest block fastest

    top, timer = _pruned({"perf_model": model, "top_k": 0.5})
    launch(top, 256)
    assert sorted(timer.benched) == [8, 16]
    assert top.best_config.kwargs == {"BLOCK": 16}


def test_a_config_launches_with_its_meta_parameters_and_launch_options() -> None:
    config = Config({"BLOCK": 64}, num_warps=8, maxnreg=128)
    assert all_kwargs(config) == {
        "BLOCK": 64,
        "num_warps": 8,
        "num_ctas": 1,
        "num_stages": 3,
        "maxnreg": 128,
    }
    triton_like = SimpleNamespace(kwargs={"X": 1}, all_kwargs=lambda: {"X": 1, "num_warps": 2})
    assert all_kwargs(triton_like) == {"X": 1, "num_warps": 2}


def test_a_config_early_config_prune_makes_up_joins_the_names() -> None:
    listed = blocks(16, 32)
    made_up = Config({"BLOCK": 8})
    kept = ConfigSet(listed, Options(listed, ["M"]), "mm")
    assert kept.name_of(listed[1]) == kept.names[1]
    assert kept.name_of(made_up) == config_name(made_up)
    assert kept.by_name[config_name(made_up)] is made_up
    assert kept.names == tuple(config_name(c) for c in listed)  # the stored list stays
    choice = kept.choice(kept.names[0])
    launch_options = {"num_warps": 4, "num_ctas": 1, "num_stages": 3}
    assert choice == (listed[0], {**listed[0].kwargs, **launch_options}, None)
    assert kept.choice(kept.names[0]) is choice
    pruned_away = Options(listed, ["M"], prune_configs_by={"early_config_prune": _none})
    with pytest.raises(BadArgumentError, match="early_config_prune returned no config"):
        ConfigSet(listed, pruned_away, "mm").legal({}, {})


def _none(configs: list[Config], nargs: dict[str, Any], **kwargs: Any) -> list[Config]:
    return []


class NeverBench:
    """A do_bench that must not be called: pruning left one config, which Triton launches."""

    def __call__(self, fn: Any, quantiles: tuple[float, ...]) -> list[float]:
        raise AssertionError("one config was left, and it was benched")


@pytest.mark.parametrize("top_k", [1, 0.25, 0.1])
def test_a_perf_model_that_keeps_one_config_launches_it_without_a_bench(top_k: Any) -> None:
    def model(**meta: Any) -> float:
        return float(meta["BLOCK"])  # the smallest block predicted fastest

    kernel = CpuKernel()
    tuned = tuner(
        kernel,
        blocks(32, 16, 64, 8),
        do_bench=NeverBench(),
        prune_configs_by={"perf_model": model, "top_k": top_k},
    )
    out = launch(tuned, 64)
    a, b, _ = operands(64)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
    assert tuned.best_config.kwargs == {"BLOCK": 8} and len(kernel.launches) == 1
    assert tuned.stats["single"] == 1 and tuned.stats["tuned"] == 0
    assert stored(64, tuned) is None  # nothing was measured: nothing is stored
    launch(tuned, 64)
    assert tuned.stats["single"] == 1 and len(kernel.launches) == 2  # the memo answers


def test_a_perf_model_that_keeps_two_configs_benches_both() -> None:
    def model(**meta: Any) -> float:
        return float(meta["BLOCK"])

    kernel = CpuKernel()
    timer = TableTimer(kernel, {8: 2.0, 16: 1.0, 32: 3.0, 64: 4.0})
    tuned = tuner(
        kernel,
        blocks(32, 16, 64, 8),
        do_bench=timer,
        prune_configs_by={"perf_model": model, "top_k": 2},
    )
    launch(tuned, 64)
    assert sorted(timer.benched) == [8, 16] and tuned.best_config.kwargs == {"BLOCK": 16}


def test_an_early_prune_that_keeps_nothing_raises_what_triton_callers_catch() -> None:
    tuned = tuner(CpuKernel(), blocks(16, 32), prune_configs_by={"early_config_prune": _none})
    with pytest.raises(NoConfigError, match="No valid autotuner configs after pruning") as error:
        launch(tuned, 64)
    assert isinstance(error.value, BadArgumentError) and "\n" not in str(error.value)
    assert stored(64, tuned) is None
