"""tunecache.triton.measure: timing configs, skipping those that do not fit."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from tests.triton.fake import (
    GPU,
    Config,
    CpuKernel,
    OutOfResources,
    TableTimer,
    blocks,
    configs,
    launch,
    stored,
    tuner,
)
from tunecache.errors import BadArgumentError
from tunecache.triton.measure import Call, kernel_call, quantiles_ms


def test_a_bench_the_budget_cuts_short_is_finished_before_anything_is_stored() -> None:
    # A 1 ms budget cannot give three configs (one of them 40x slower) their samples: the
    # key is benched to the end instead of being stored with holes, and says so.
    kernel = tuner(CpuKernel(), configs()[:2], bench={"budget": 1e-3})
    launch(kernel, 256)
    entry = stored(256, kernel)
    assert entry is not None and entry.choice == kernel.candidates[1]
    from tunecache.cache import Cache

    with Cache.open(device=GPU) as cache:
        record = cache.record(entry)
    assert record is not None and record.settings["budget_overrun"] is True
    assert all(len(c.samples) >= 1 for c in record.candidates)


def test_configs_that_do_not_fit_are_skipped_and_other_errors_surface() -> None:
    with pytest.raises(OutOfResources):
        launch(tuner(CpuKernel(), blocks(200, 300)), 64)  # nothing fits: Triton's own error
    assert stored(64, tuner(CpuKernel(), blocks(200, 300))) is None

    class Broken(CpuKernel):
        def run(self, *args: Any, grid: Any, warmup: bool, **meta: Any) -> None:
            if meta["BLOCK"] == 32:
                raise TypeError("a bug in the kernel")
            super().run(*args, grid=grid, warmup=warmup, **meta)

    with pytest.raises(TypeError, match="a bug"):
        launch(tuner(Broken(), blocks(16, 32)), 64)
    assert stored(64, tuner(CpuKernel(), blocks(16, 32))) is None


def test_timings_are_kept_in_tritons_form_median_p20_p80_in_ms() -> None:
    assert quantiles_ms(()) == [math.inf] * 3
    assert quantiles_ms([5e-3, 1e-3, 4e-3, 2e-3, 3e-3]) == pytest.approx([3.0, 2.0, 4.0])
    kernel = CpuKernel()
    tuned = tuner(kernel, blocks(16, 32), do_bench=TableTimer(kernel, {16: 2.0, 32: 1.0}))
    launch(tuned, 64)
    timings = {c.kwargs["BLOCK"]: t for c, t in tuned.configs_timings.items()}
    assert timings.keys() == {16, 32}
    assert timings[16] == pytest.approx([2.0, 1.8, 2.2])
    assert timings[32] == pytest.approx([1.0, 0.9, 1.1])


def test_a_config_launches_between_its_own_hook_the_pre_hook_and_the_post_hook() -> None:
    seen: list[tuple[str, Any]] = []
    config = Config({"BLOCK": 16}, pre_hook=lambda nargs: seen.append(("own", nargs["BLOCK"])))

    class Kernel:
        fn = SimpleNamespace(run=lambda *args, **meta: seen.append(("run", meta["BLOCK"])))

        def pre_hook(self, nargs: dict[str, Any]) -> None:
            seen.append(("pre", nargs["x"]))

        def post_hook(self, nargs: dict[str, Any], exception: BaseException | None) -> None:
            seen.append(("post", exception))

    call = Call((1,), {"grid": (1,)}, {"x": 1})
    kernel_call(Kernel(), "mm", config, call)()
    assert seen == [("own", 16), ("pre", 1), ("run", 16), ("post", None)]
    broken = Kernel()
    broken.fn = SimpleNamespace(run=lambda *args, **meta: 1 / 0)
    seen.clear()
    with pytest.raises(ZeroDivisionError):
        kernel_call(broken, "mm", config, call)()
    assert seen[-1][0] == "post" and isinstance(seen[-1][1], ZeroDivisionError)
    with pytest.raises(BadArgumentError, match=r"mm: \['BLOCK'\] are passed by the caller"):
        kernel_call(Kernel(), "mm", config, Call((1,), {"BLOCK": 8}, {}))
