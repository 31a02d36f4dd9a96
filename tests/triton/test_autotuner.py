"""tunecache.triton.autotuner: the decision flow, on the CPU kernel and backend of fake.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.triton.fake import (
    GPU,
    Config,
    CpuKernel,
    TableTimer,
    backend,
    blocks,
    configs,
    grid,
    launch,
    operands,
    stored,
    tuner,
)
from tunecache.errors import BadArgumentError
from tunecache.triton.autotuner import Autotuner, Options
from tunecache.triton.keys import config_name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key": ["M", "Q"]}, r"key names \['Q'\], which are not arguments"),
        ({"key": ["M"], "reset_to_zero": ["c"]}, r"reset_to_zero names \['c'\]"),
    ],
)
def test_arguments_that_name_no_kernel_argument_fail_when_applied(
    options: dict[str, Any], message: str
) -> None:
    key = options.pop("key")
    with pytest.raises(BadArgumentError, match=message):
        tuner(CpuKernel(), key=key, **options)
    with pytest.raises(BadArgumentError, match=r"decorates a @triton\.jit kernel"):
        Autotuner(print, Options(configs(), ["M"]), backend())


def test_a_key_is_tuned_once_stored_with_every_config_and_then_answered_from_the_store() -> None:
    from tunecache import maintain
    from tunecache.cache import Cache

    kernel = CpuKernel()
    tuned = tuner(kernel)
    out = launch(tuned, 96)
    a, b, _ = operands(96)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
    fast = config_name(configs()[1])
    assert config_name(tuned.best_config) == fast
    assert tuned.stats["tuned"] == 1
    launched = len(kernel.launches)
    launch(tuned, 96)
    assert len(kernel.launches) == launched + 1  # a dict hit: one launch, no bench
    entry = stored(96, tuned)
    assert entry is not None and entry.choice == fast

    with Cache.open(device=GPU) as cache:
        (inspected,) = maintain.inspect(cache, entry.key)
    by_name = {c.name: c for c in inspected.candidates}
    assert set(by_name) == set(tuned.candidates)
    assert all(c.measured and c.samples >= 3 for n, c in by_name.items() if "256" not in n)
    assert "OutOfResources" in (by_name[config_name(configs()[2])].error or "")
    assert inspected.settings["kernel"] == "matmul_kernel"

    # Another process: the store answers, and nothing is benched.
    again_kernel = CpuKernel()
    again = tuner(again_kernel)
    launch(again, 96)
    assert again.stats == {"exact": 1, "borrowed": 0, "reused": 0, "tuned": 0, "single": 0}
    assert len(again_kernel.launches) == 1
    assert config_name(again.best_config) == fast


def test_launches_pass_grid_and_the_configs_meta_parameters_as_triton_does() -> None:
    kernel = CpuKernel()
    tuned = tuner(kernel, [Config({"BLOCK": 64, "WORK": 1}, num_warps=8)])
    launch(tuned, 100)
    (only,) = kernel.launches
    assert only == {
        "grid": (2,),
        "warmup": False,
        "BLOCK": 64,
        "WORK": 1,
        "num_warps": 8,
        "num_stages": 3,
        "num_ctas": 1,
    }
    assert tuned.stats["single"] == 0  # one config: no key, no store, as in Triton
    with pytest.raises(BadArgumentError, match="don't pass auto-tuned"):
        tuned_many = tuner(CpuKernel(), blocks(16, 32))
        a, b, out = operands(8)
        tuned_many[grid](a, b, out, 8, 40, 48, BLOCK=16)


def test_dtypes_make_different_keys() -> None:
    tuned = tuner(CpuKernel())
    launch(tuned, 96, np.float32)
    launch(tuned, 96, np.float64)
    assert tuned.stats["tuned"] == 2
    assert "F64" in tuned.key(*operands(96, np.float64), 96, 40, 48).signature


def test_an_edited_kernel_starts_afresh() -> None:
    launch(tuner(CpuKernel()), 96)
    edited = tuner(CpuKernel(src="def matmul_kernel(a, b, out, M, N, K): return 2"))
    launch(edited, 96)
    assert edited.stats["tuned"] == 1
    pinned = tuner(CpuKernel(src="other"), revision="v1")
    assert pinned.key(*operands(96), 96, 40, 48).signature.endswith("_Rv1")


def test_unseen_keys_beyond_the_cap_or_with_tune_are_tuned_now() -> None:
    tuned = tuner(CpuKernel(), max_distance=0.05)
    launch(tuned, 96)
    launch(tuned, 112)  # 0.22 away, aligned like 96: beyond this cap
    assert tuned.stats["tuned"] == 2 and not tuned.pending
    eager = tuner(CpuKernel(), unseen="tune")
    launch(eager, 80)  # 96 is stored, near and aligned alike, but unseen="tune" never borrows
    assert eager.stats == {"exact": 0, "borrowed": 0, "reused": 0, "tuned": 1, "single": 0}


def test_a_changed_config_list_reuses_the_stored_timings() -> None:
    times = {16: 3.0, 32: 1.0, 48: 2.0, 64: 4.0, 80: 5.0, 8: 0.5}

    def run(sizes: tuple[int, ...]) -> tuple[Autotuner, TableTimer]:
        kernel = CpuKernel()
        timer = TableTimer(kernel, times)
        tuned = tuner(kernel, blocks(*sizes), do_bench=timer, unseen="tune")
        launch(tuned, 64)
        return tuned, timer

    first, timer = run((16, 32, 48, 64, 80))
    assert sorted(timer.benched) == [16, 32, 48, 64, 80]
    assert first.best_config.kwargs == {"BLOCK": 32}

    fewer, timer = run((16, 32, 64))  # the winner stays: no bench at all
    assert (timer.benched, fewer.best_config.kwargs, fewer.stats["reused"]) == (
        [],
        {"BLOCK": 32},
        1,
    )
    no_winner, timer = run((16, 48, 80))  # the winner went: the best remaining, no bench
    assert (timer.benched, no_winner.best_config.kwargs) == ([], {"BLOCK": 48})
    more, timer = run((16, 32, 48, 64, 80, 8))  # one added: it and the 3 best before
    assert sorted(timer.benched) == [8, 16, 32, 48]
    assert more.best_config.kwargs == {"BLOCK": 8}

    from tunecache.cache import Cache

    assert more.wait_pending(timeout=60)  # the records are written behind the launches
    with Cache.open(device=GPU) as cache:
        entry = cache.get(more.key(*operands(64), 64, 40, 48), candidates=more.candidates)
        assert entry is not None
        record = cache.record(entry)
    assert record is not None
    assert {c.name: c.pruned for c in record.candidates} == {
        config_name(c): c.kwargs["BLOCK"] in (64, 80) for c in blocks(16, 32, 48, 64, 80, 8)
    }
    assert record.settings["reused_from"] == first.checksum


def test_a_changed_list_with_borrowing_serves_the_old_winner_until_tuned() -> None:
    kernel = CpuKernel()
    launch(tuner(kernel, blocks(16, 32), do_bench=TableTimer(kernel, {16: 2.0, 32: 1.0})), 64)
    timer = TableTimer(kernel, {16: 2.0, 32: 1.0, 8: 0.5})
    grown = tuner(kernel, blocks(16, 32, 8), do_bench=timer)
    launch(grown, 64)
    assert timer.benched == [] and grown.best_config.kwargs == {"BLOCK": 32}
    (pending,) = grown.pending
    assert pending.answer.distance == 0.0
    grown.tune_pending()
    assert sorted(timer.benched) == [8, 16, 32]
    launch(grown, 64)
    assert grown.best_config.kwargs == {"BLOCK": 8}


def test_reset_to_zero_and_restore_value_leave_one_launchs_effect() -> None:
    adder = tuner(CpuKernel(accumulate=True), reset_to_zero=["out"])
    out = launch(adder, 96)
    a, b, _ = operands(96)
    np.testing.assert_allclose(
        out, a @ b, rtol=1e-4, atol=1e-5
    )  # one accumulation, not one per bench

    bumper = tuner(CpuKernel(bump=True), restore_value=["a"])
    a, b, out = operands(96)
    first = a.copy()
    bumper[grid](a, b, out, 96, 40, 48)
    np.testing.assert_array_equal(a, first + 1)  # the benches' bumps were undone
