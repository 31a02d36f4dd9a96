"""tunecache.triton.measure: timing configs, skipping those that do not fit."""

from __future__ import annotations

import math
from pathlib import Path
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
    operands,
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


# -- the output check -----------------------------------------------------------------------------

#: a slow correct config, and a fast one whose outputs are off by one everywhere
RIGHT, WRONG = Config({"BLOCK": 32, "WORK": 40}), Config({"BLOCK": 64, "WORK": 1, "OFF": 1})


def test_a_faster_config_with_wrong_outputs_is_recorded_wrong_and_never_chosen(
    tmp_path: Path,
) -> None:
    from tunecache.cache import Cache

    unchecked = tuner(CpuKernel(), [RIGHT, WRONG], root=tmp_path / "unchecked")
    launch(unchecked, 64)
    assert unchecked.best_config is WRONG  # what the check is for
    assert unchecked.outputs_time is None
    for outputs in (["out"], True):
        root = tmp_path / str(outputs is True)
        checked = tuner(CpuKernel(), [RIGHT, WRONG], check_outputs=outputs, root=root)
        out = launch(checked, 64)
        assert checked.best_config is RIGHT
        assert checked.outputs_time is not None and checked.outputs_time >= 0
        assert math.isinf(checked.configs_timings[WRONG][0])  # never benched
        a, b, _ = operands(64)
        assert abs(out - a @ b).max() < 1e-4  # the launch that followed ran the right config
        assert checked.wait_pending(timeout=60)
        with Cache.open(device=GPU, root=root) as cache:
            key = checked.key(*operands(64), 64, 40, 48)
            entry = cache.get(key, candidates=checked.candidates)
            assert entry is not None and entry.choice == checked.candidates[0]
            record = cache.record(entry)
        assert record is not None
        (refused,) = [c for c in record.candidates if c.error]
        assert refused.name == checked.candidates[1] and not refused.samples
        assert refused.error is not None and refused.error.startswith("wrong output: out:")
        assert "largest difference 1" in refused.error


def test_outputs_are_checked_before_restore_value_puts_them_back(tmp_path: Path) -> None:
    # restore_value's post-hook copies the saved arguments back right after each launch: a
    # check made after it would compare the restored values, never what the config wrote.
    checked = tuner(
        CpuKernel(), [RIGHT, WRONG], check_outputs=["out"], restore_value=["out"], root=tmp_path
    )
    launch(checked, 64)
    assert checked.best_config is RIGHT
    assert math.isinf(checked.configs_timings[WRONG][0])  # refused before any timing
    assert checked.wait_pending(timeout=60)


def test_a_difference_within_the_tolerance_is_none(tmp_path: Path) -> None:
    # The outputs are about 7 in magnitude: 1e-5 off is within float32's default tolerance
    # (its epsilon's square root, 3.5e-4 of the largest magnitude), and not within 1e-9.
    near = Config({"BLOCK": 64, "WORK": 1, "OFF": 1e-5})
    lenient = tuner(CpuKernel(), [RIGHT, near], check_outputs=["out"], root=tmp_path / "a")
    launch(lenient, 64)
    assert lenient.best_config is near
    strict = tuner(
        CpuKernel(), [RIGHT, near], check_outputs=["out"], check_tolerance=1e-9, root=tmp_path
    )
    launch(strict, 64)
    assert strict.best_config is RIGHT


def test_check_outputs_names_kernel_arguments() -> None:
    with pytest.raises(BadArgumentError, match=r"check_outputs names \['c'\]"):
        tuner(CpuKernel(), [RIGHT, WRONG], check_outputs=["c"])
