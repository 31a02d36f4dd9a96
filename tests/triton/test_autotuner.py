"""tunecache.triton: a persistent triton.autotune, tested on the CPU without Triton.

The configs are plain value objects shaped like `triton.Config`; the kernel is a real CPU kernel
with Triton's launch interface (`run(*args, grid=, warmup=, **meta)`, `arg_names`), computed by
numpy; the store is a real SQLite file under the test's cache root. The machinery is the one
`tunecache.triton.autotune` builds, with a CPU `Backend` in place of the GPU one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tunecache.triton as tct
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.errors import BadArgumentError, TunecacheWarning
from tunecache.keys import parse
from tunecache.triton.autotuner import Autotuner
from tunecache.triton.backend import Backend
from tunecache.triton.keys import KeySpec, config_name
from tunecache.triton.options import Options
from tunecache.triton.reuse import plan_reuse

ROOT = Path(__file__).resolve().parents[2]

GPU = Device(
    cpu="test-gpu",
    threads=132,
    accelerator="test-gpu-sm90-driver-1-0",
    client="triton",
    client_version="3.6.0",
)
# Short samples and a small budget: the CPU kernel's configs differ by 40x, not by 5%.
FAST = {"sample_time": 3e-4, "min_samples": 3, "max_samples": 4, "budget": 0.5}


class OutOfResources(Exception):
    """What a kernel raises for a config that does not fit (Triton's own OutOfResources)."""


@dataclass(eq=False)
class Config:
    """A value shaped like triton.Config: meta-parameters, then launch options."""

    kwargs: dict[str, Any]
    num_warps: int = 4
    num_stages: int = 3
    num_ctas: int = 1
    maxnreg: int | None = None
    pre_hook: Callable[..., Any] | None = None
    ir_override: str | None = None


@dataclass
class CpuKernel:
    """out = a @ b, row block by row block, computed WORK times over; a BLOCK over 128 does
    not fit. `accumulate` adds into out instead; `bump` adds 1 to `a` in place afterwards."""

    name: str = "matmul_kernel"
    accumulate: bool = False
    bump: bool = False
    src: str = "def matmul_kernel(a, b, out, M, N, K, BLOCK, WORK): ..."
    arg_names: list[str] = field(default_factory=lambda: ["a", "b", "out", "M", "N", "K"])
    launches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def __name__(self) -> str:
        return self.name

    def run(self, *args: Any, grid: Any, warmup: bool, **meta: Any) -> None:
        a, b, out, m, _, _ = args
        named = {**dict(zip(self.arg_names, args, strict=True)), **meta}
        programs = grid(named) if callable(grid) else grid
        self.launches.append({"grid": programs, "warmup": warmup, **meta})
        block, work = meta["BLOCK"], meta.get("WORK", 1)
        if block > 128:
            raise OutOfResources(f"BLOCK={block} needs more shared memory than there is")
        result = np.empty_like(out)
        for _ in range(work):
            for start in range(0, m, block):
                result[start : start + block] = a[start : start + block] @ b
        if self.accumulate:
            out += result
        else:
            out[...] = result
        if self.bump:
            a += 1


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (-(-meta["M"] // meta["BLOCK"]),)


def configs() -> list[Config]:
    """A fast config, a slow one, and one that does not fit."""
    return [
        Config({"BLOCK": 32, "WORK": 40}),
        Config({"BLOCK": 64, "WORK": 1}, num_warps=8),
        Config({"BLOCK": 256, "WORK": 1}),
    ]


def backend(**more: Any) -> Backend:
    return Backend(device=lambda index: GPU, failures=(OutOfResources,), bench=FAST, **more)


def tuner(
    kernel: CpuKernel,
    cfgs: list[Config] | None = None,
    key: list[str] | None = None,
    **options: Any,
) -> Autotuner:
    """What `@tunecache.triton.autotune(configs, key, **options)` makes of the kernel."""
    cfgs = configs() if cfgs is None else cfgs
    return Autotuner(kernel, Options(cfgs, key or ["M", "N", "K"], **options), backend())


def operands(m: int, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 48)).astype(dtype)
    b = rng.standard_normal((48, 40)).astype(dtype)
    return a, b, np.zeros((m, 40), dtype=dtype)


def launch(kernel: Autotuner, m: int, dtype: Any = np.float32) -> np.ndarray:
    a, b, out = operands(m, dtype)
    kernel[grid](a, b, out, m, 40, 48)
    return out


def stored(m: int, kernel: Autotuner) -> Any:
    from tunecache.cache import Cache

    with Cache.open(device=GPU) as cache:
        return cache.get(kernel.key(*operands(m), m, 40, 48), candidates=kernel.candidates)


class TableTimer:
    """A timer with Triton's do_bench interface that launches the config once and reports a
    fixed time per BLOCK (ms), so a test knows which config must win and what was benched."""

    def __init__(self, kernel: CpuKernel, times: dict[int, float]) -> None:
        self.kernel, self.times = kernel, times
        self.benched: list[int] = []

    def __call__(self, fn: Callable[[], None], quantiles: tuple[float, ...]) -> list[float]:
        fn()
        block = self.kernel.launches[-1]["BLOCK"]
        self.benched.append(block)
        t = self.times[block]
        return [t, 0.9 * t, 1.1 * t]


def blocks(*sizes: int) -> list[Config]:
    return [Config({"BLOCK": s}) for s in sizes]


# -- importing and decorating -------------------------------------------------------------------


def test_importing_needs_neither_triton_nor_torch_nor_the_store() -> None:
    code = (
        "import sys, tunecache\n"
        "tunecache.triton.autotune([], key=['M'])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'triton', 'torch', 'sqlalchemy', 'alembic', 'cbor2'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"


def test_decorating_a_kernel_without_triton_says_it_needs_triton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    decorate = tct.autotune(configs(), key=["M"])
    with pytest.raises(BadArgumentError, match="needs Triton"):
        decorate(CpuKernel())


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
    ],
)
def test_bad_arguments_fail_when_the_decorator_is_made(
    arguments: dict[str, Any], message: str
) -> None:
    given_ = {"configs": configs(), "key": ["M"], **arguments}
    with pytest.raises(BadArgumentError, match=message) as error:
        tct.autotune(**given_)
    assert "\n" not in str(error.value)


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


# -- config identity and keys -------------------------------------------------------------------


def test_a_config_is_named_by_its_sorted_meta_parameters_and_launch_options() -> None:
    one = Config({"BLOCK_N": 64, "BLOCK_M": 128}, num_warps=8)
    assert config_name(one) == "BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3,num_ctas=1"
    assert config_name(Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8)) == config_name(one)
    assert config_name(Config({"BLOCK_M": 128, "BLOCK_N": 64}, maxnreg=128)).endswith(
        "num_ctas=1,maxnreg=128"
    )
    assert config_name(Config({"X": "1"})) != config_name(Config({"X": 1}))
    hooked = config_name(Config({"X": 1}, pre_hook=grid))
    assert hooked.endswith("pre_hook=grid")
    long = [Config({f"P{i}": 2**i for i in range(40)}, num_warps=w) for w in (4, 8)]
    names = [config_name(c) for c in long]
    assert all(len(n) <= 200 for n in names) and names[0] != names[1]


def test_duplicate_configs_count_once_and_the_list_has_a_checksum() -> None:
    kernel = tuner(CpuKernel(), [*configs(), Config({"BLOCK": 32, "WORK": 40})])
    assert len(kernel.configs) == 3
    assert kernel.candidates == tuple(config_name(c) for c in configs())
    grown = tuner(CpuKernel(), [*configs(), Config({"BLOCK": 16})])
    assert grown.checksum != kernel.checksum


def _triton_key(
    arg_names: list[str], keys: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """The tuning key Triton 3.6's Autotuner.run builds: the values of the key arguments that
    were passed, then str(dtype) of every passed argument that has a dtype, in passing order."""
    passed = dict(zip(arg_names, args, strict=False))
    passed.update((k, v) for k, v in kwargs.items() if k in arg_names)
    values = [passed[name] for name in keys if name in passed]
    dtypes = [str(v.dtype) for v in passed.values() if hasattr(v, "dtype")]
    return (*values, *dtypes)


@given(
    split=st.integers(0, 6),
    keys=st.lists(st.sampled_from(["M", "N", "K", "a", "flag"]), unique=True, max_size=4),
    m=st.integers(0, 5000),
    flag=st.one_of(st.booleans(), st.none(), st.sampled_from(["relu", "gelu_tanh"])),
)
def test_the_tuning_key_is_tritons(split: int, keys: list[str], m: int, flag: Any) -> None:
    names = ["a", "b", "out", "M", "N", "K", "flag"]
    values = [*operands(2), m, 40, 48, flag]
    names_used = [n for n in keys if n != "a"]  # a tensor is never a key argument
    spec = KeySpec("matmul_kernel", names, names_used, revision="R1234ABCD")
    args, kwargs = tuple(values[:split]), dict(zip(names[split:], values[split:], strict=True))
    raw = spec.raw(args, kwargs)
    assert tuple(str(v) if hasattr(v, "kind") else v for v in raw) == _triton_key(
        names, names_used, args, kwargs
    )
    key = spec.make(args, kwargs)
    assert parse(key.text) == key
    assert key.signature.startswith("matmul-kernel_F32_F32_F32")
    assert dict(key.dims).get("m") == (m if "M" in names_used else None)


def test_sizes_are_dims_and_other_key_values_are_signature_facts() -> None:
    spec = KeySpec("_mm_kernel", ["a", "M", "N", "ACT", "SPLIT"], ["M", "N", "ACT", "SPLIT"])
    a = np.zeros(2, dtype=np.float16)
    key = spec.make((a, 4096, 17, "relu", True), {})
    assert key.text == "mm-kernel_F16_act='relu'_split=True_m4096_n17"
    only_m = KeySpec("mm", ["a", "M", "N"], ["M", "N"], dims=["M"])
    assert only_m.make((a, 64, 3), {}).text == "mm_F16_n=3_m64"
    with pytest.raises(BadArgumentError, match="not a size"):
        only_m.make((a, -1, 3), {})
    with pytest.raises(BadArgumentError, match="is a tensor"):
        KeySpec("mm", ["a", "M"], ["a"]).make((a, 1), {})


# -- tuning, storing, answering -----------------------------------------------------------------


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


def test_a_warm_process_answers_a_stored_key_without_sqlalchemy() -> None:
    launch(tuner(CpuKernel()), 96)
    code = (
        "import sys\n"
        "from tests.triton.test_autotuner import CpuKernel, tuner, launch\n"
        "kernel = tuner(CpuKernel())\n"
        "launch(kernel, 96)\n"
        "assert kernel.stats['exact'] == 1, kernel.stats\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=os.environ
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


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


# -- unseen keys --------------------------------------------------------------------------------


def test_an_unseen_neighbour_borrows_at_once_and_is_tuned_on_request() -> None:
    kernel = CpuKernel()
    tuned = tuner(kernel)
    launch(tuned, 96)
    launched = len(kernel.launches)
    out = launch(tuned, 90)  # log2(96/90) = 0.09: within the default cap of 1.0
    a, b, _ = operands(90)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
    assert len(kernel.launches) == launched + 1  # served, not tuned
    (pending,) = tuned.pending
    assert pending.captured and pending.answer.source == "nearest"
    assert pending.answer.borrowed_from is not None
    assert dict(pending.answer.borrowed_from.dims)["m"] == 96
    assert stored(90, tuned) is None

    caller = operands(90)
    tuned[grid](*caller, 90, 40, 48)  # the same key again: served from the dict
    caller[2][...] = 7.0
    assert tuned.tune_pending() == [pending.key]
    assert (caller[2] == 7.0).all()  # benched on copies: the caller's output is untouched
    assert tuned.pending == []
    assert stored(90, tuned) is not None
    launched = len(kernel.launches)
    launch(tuned, 90)
    assert len(kernel.launches) == launched + 1


def test_unseen_keys_beyond_the_cap_or_with_tune_are_tuned_now() -> None:
    tuned = tuner(CpuKernel(), max_distance=0.05)
    launch(tuned, 96)
    launch(tuned, 90)  # 0.09 away: beyond this cap
    assert tuned.stats["tuned"] == 2 and not tuned.pending
    eager = tuner(CpuKernel(), unseen="tune")
    launch(eager, 88)  # 96 is stored and near, but unseen="tune" never borrows
    assert eager.stats == {"exact": 0, "borrowed": 0, "reused": 0, "tuned": 1, "single": 0}


def test_background_tuning_decides_a_borrowed_key_in_a_daemon_thread() -> None:
    tuned = tuner(CpuKernel(), unseen="background")
    launch(tuned, 96)
    launch(tuned, 90)
    assert tuned.stats["borrowed"] == 1
    assert tuned.wait_pending(timeout=60)
    assert tuned.errors == [] and tuned.pending == []
    assert stored(90, tuned) is not None


def test_pending_keys_beyond_the_limit_keep_no_arguments_until_there_is_room() -> None:
    tuned = tuner(CpuKernel(), pending_limit=1)
    launch(tuned, 96)
    launch(tuned, 90)
    with pytest.warns(TunecacheWarning, match="pending_limit"):
        launch(tuned, 100)
    assert [p.captured for p in tuned.pending] == [True, False]
    assert len(tuned.tune_pending()) == 1
    assert tuned.pending == []
    launch(tuned, 100)  # borrowed again, and now kept
    assert [p.captured for p in tuned.pending] == [True]


# -- a changed config list ----------------------------------------------------------------------


def _timings(**medians: float) -> TimingRecord:
    return TimingRecord(candidates=tuple(CandidateTiming(n, (m,) * 3) for n, m in medians.items()))


def test_plan_reuse_benches_only_what_the_old_record_cannot_answer() -> None:
    record = _timings(A=3.0, B=1.0, C=2.0, D=4.0, E=5.0)
    old = "ABCDE"
    kept = plan_reuse(["A", "B", "D"], old, "B", record)
    assert (kept.choice, kept.bench) == ("B", ())
    assert [c.name for c in kept.keep] == ["A", "B", "D"]
    remaining = plan_reuse(["A", "C", "D"], old, "B", record)
    assert (remaining.choice, remaining.bench) == ("C", ())
    added = plan_reuse(["A", "B", "C", "D", "E", "F"], old, "B", record)
    assert added.choice is None and added.bench == ("A", "B", "C", "F")
    assert [(c.name, c.pruned) for c in added.keep] == [("D", True), ("E", True)]
    # A config that failed before is not tried again, unless every legal one failed.
    failed = TimingRecord(candidates=(CandidateTiming("A", error="OutOfResources"),))
    assert plan_reuse(["A", "F"], "AB", "B", failed).bench == ("F",)
    assert plan_reuse(["A"], "AB", "B", failed).bench == ("A",)


def test_plan_reuse_never_trusts_a_config_the_old_bench_did_not_reach() -> None:
    # C has neither samples nor an error: the old bench's budget ran out before it ran. It
    # lost to nobody, so neither "the winner stays" nor "the best remaining" may skip it.
    holes = TimingRecord(
        candidates=(
            CandidateTiming("A", (1.0,) * 3),
            CandidateTiming("B", (0.5,) * 3),
            CandidateTiming("C"),
        )
    )
    removed = plan_reuse(["A", "C"], "ABC", "B", holes)
    assert removed.choice is None and removed.bench == ("A", "C")
    assert [c.name for c in removed.keep] == []
    dropped = plan_reuse(["B", "C"], "ABCD", "B", holes)
    assert dropped.choice is None and "C" in dropped.bench


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


def test_a_numpy_integer_is_a_size_not_a_tensor() -> None:
    kernel = tuner(CpuKernel())
    a, b, out = operands(16)
    assert kernel.key(a, b, out, np.int64(16), 40, 48) == kernel.key(a, b, out, 16, 40, 48)


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

    with Cache.open(device=GPU) as cache:
        entry = cache.get(more.key(*operands(64), 64, 40, 48), candidates=more.candidates)
        assert entry is not None
        record = cache.record(entry)
    assert record is not None
    assert {c.name: c.pruned for c in record.candidates} == {
        config_name(c): c.kwargs["BLOCK"] in (64, 80) for c in blocks(16, 32, 48, 64, 80, 8)
    }
    assert record.settings["reused_from"] == first.checksum


def test_a_store_whose_path_needs_quoting_still_finds_old_entries(tmp_path: Path) -> None:
    root = tmp_path / "my cache #1"
    kernel = CpuKernel()
    times = {16: 2.0, 32: 1.0, 48: 3.0}
    launch(tuner(kernel, blocks(16, 32, 48), do_bench=TableTimer(kernel, times), root=root), 64)
    timer = TableTimer(kernel, times)
    fewer = tuner(kernel, blocks(16, 32), do_bench=timer, root=root)
    launch(fewer, 64)
    assert (timer.benched, fewer.stats["reused"]) == ([], 1)


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


# -- Triton's options ---------------------------------------------------------------------------


def test_prune_configs_by_is_respected() -> None:
    seen: list[tuple[int, set[str]]] = []

    def early(cfgs: list[Config], nargs: dict[str, Any], **kwargs: Any) -> list[Config]:
        seen.append((len(cfgs), set(kwargs)))
        return [c for c in cfgs if c.kwargs["BLOCK"] <= nargs["M"]]

    kernel = CpuKernel()
    timer = TableTimer(kernel, {8: 4.0, 16: 3.0, 32: 2.0, 64: 1.0})
    tuned = tuner(
        kernel,
        blocks(8, 16, 32, 64),
        do_bench=timer,
        prune_configs_by={"early_config_prune": early},
    )
    launch(tuned, 20)
    assert sorted(timer.benched) == [8, 16] and seen == [(4, {"grid", "warmup"})]

    def model(**meta: Any) -> float:
        return float(meta["BLOCK"])  # predicts the smallest block fastest

    kernel = CpuKernel()
    timer = TableTimer(kernel, {8: 4.0, 16: 3.0, 32: 2.0, 64: 1.0})
    top = tuner(
        kernel,
        blocks(8, 16, 32, 64),
        do_bench=timer,
        prune_configs_by={"perf_model": model, "top_k": 0.5},
    )
    launch(top, 256)
    assert sorted(timer.benched) == [8, 16]
    assert top.best_config.kwargs == {"BLOCK": 16}


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


def test_an_unwritable_store_keeps_tunings_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache root should be")
    tuned = tuner(CpuKernel(), root=blocker)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(tuned, 96)
        launch(tuned, 96)
    assert tuned.stats["tuned"] == 1
    assert [str(w.message) for w in caught if "stay in memory" in str(w.message)]
