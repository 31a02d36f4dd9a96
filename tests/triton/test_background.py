"""tunecache.triton.background: borrowed keys, tuned on request or by a daemon thread."""

from __future__ import annotations

from threading import RLock

import numpy as np
import pytest

from tests.triton.fake import (
    CpuKernel,
    TableTimer,
    backend,
    blocks,
    grid,
    launch,
    operands,
    stored,
    tuner,
)
from tunecache.errors import TunecacheWarning
from tunecache.triton.autotuner import Options
from tunecache.triton.background import PendingItem, PendingKeys
from tunecache.triton.state import WarnOnce


def test_an_unseen_neighbour_borrows_at_once_and_is_tuned_on_request() -> None:
    kernel = CpuKernel()
    tuned = tuner(kernel)
    launch(tuned, 96)
    launched = len(kernel.launches)
    # log2(96/80) = 0.26: within the default cap of 1.0, and both sizes are divisible by 16
    out = launch(tuned, 80)
    a, b, _ = operands(80)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
    assert len(kernel.launches) == launched + 1  # served, not tuned
    (pending,) = tuned.pending
    assert pending.captured and pending.answer.source == "nearest"
    assert pending.answer.borrowed_from is not None
    assert dict(pending.answer.borrowed_from.dims)["m"] == 96
    assert stored(80, tuned) is None

    caller = operands(80)
    tuned[grid](*caller, 80, 40, 48)  # the same key again: served from the dict
    caller[2][...] = 7.0
    assert tuned.tune_pending() == [pending.key]
    assert (caller[2] == 7.0).all()  # benched on copies: the caller's output is untouched
    assert tuned.pending == []
    assert stored(80, tuned) is not None
    launched = len(kernel.launches)
    launch(tuned, 80)
    assert len(kernel.launches) == launched + 1


def test_background_tuning_decides_a_borrowed_key_in_a_daemon_thread() -> None:
    tuned = tuner(CpuKernel(), unseen="background")
    launch(tuned, 96)
    launch(tuned, 80)
    assert tuned.stats["borrowed"] == 1
    assert tuned.wait_pending(timeout=60)
    assert tuned.errors == [] and tuned.pending == []
    assert stored(80, tuned) is not None


def test_pending_keys_beyond_the_limit_keep_no_arguments_until_there_is_room() -> None:
    tuned = tuner(CpuKernel(), pending_limit=1)
    launch(tuned, 96)
    launch(tuned, 80)
    with pytest.warns(TunecacheWarning, match="pending_limit"):
        launch(tuned, 112)
    assert [p.captured for p in tuned.pending] == [True, False]
    assert len(tuned.tune_pending()) == 1
    assert tuned.pending == []
    launch(tuned, 112)  # borrowed again, and now kept
    assert [p.captured for p in tuned.pending] == [True]


def test_a_pending_keys_copies_alias_as_the_callers_tensors_did() -> None:
    keys = PendingKeys("mm", Options(blocks(16), ["M"]), backend(), RLock(), WarnOnce(), _never)
    a, b, out = operands(80)
    args, kwargs = keys.snapshot((a, b, a, 80), {"out": out})
    assert args[0] is args[2] and args[0] is not a and args[3] == 80
    np.testing.assert_array_equal(args[0], a)
    assert kwargs["out"] is not out and args[1] is not b


def _never(item: PendingItem) -> None:
    raise AssertionError("nothing is tuned here")


def test_a_neighbour_compiled_apart_is_not_borrowed_from_the_key_is_tuned_now() -> None:
    # Rows of 96 (divisible by 16) and 90 (not) compile to different kernels in Triton, and a
    # config's ranking belongs to one kernel: 90 is tuned at once; 80, aligned like 96, borrows.
    kernel = CpuKernel()
    times = {16: 1.0, 32: 2.0, 48: 3.0, 64: 4.0}
    timer = TableTimer(kernel, times)
    tuned = tuner(kernel, blocks(16, 32, 48, 64), do_bench=timer)
    launch(tuned, 96)
    assert tuned.best_config.kwargs["BLOCK"] == 16
    times.update({16: 2.0, 32: 1.0})  # unaligned rows: another kernel, another ranking
    timer.benched.clear()
    launch(tuned, 80)
    assert (tuned.best_config.kwargs["BLOCK"], timer.benched) == (16, [])
    launch(tuned, 90)
    assert tuned.best_config.kwargs["BLOCK"] == 32
    assert sorted(timer.benched) == [16, 32, 48, 64]
    assert (tuned.stats["borrowed"], tuned.stats["tuned"]) == (1, 2)
    assert stored(90, tuned) is not None
    assert [dict(p.key.dims)["m"] for p in tuned.pending] == [80]
