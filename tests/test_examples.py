"""The example workload: every candidate computes what the heuristic computes, the models run
and use the keys they are meant to, and a real tuning session writes only legal choices.

Nothing here asserts a time: which candidate wins is the benchmark's business
(tools/bench_ops.py), and the tuner's.
"""

from __future__ import annotations

import math
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import threadpoolctl  # type: ignore[import-untyped]  # no stubs, no py.typed
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tunecache import dispatch, examples
from tunecache.cache import Cache
from tunecache.examples import models, ops
from tunecache.keys import Key, parse
from tunecache.resolve import Table, using
from tunecache.tune import Model, tune

Array = Any
OPS: list[dispatch.Tunable[Any, Any]] = [ops.conv2d, ops.chain3, ops.chain4, ops.matmul]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _close(got: Array, want: Array, dtype: Any) -> None:
    """Equal to float rounding, scaled to the result's magnitude (FFTs round differently)."""
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
    scale = 1.0 + float(np.abs(want).max(initial=0.0))
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def _candidates(op: dispatch.Tunable[Any, Any]) -> dict[str, Callable[..., Array]]:
    return dict(op.functions)


# --- the ops' declarations: their candidate lists are part of every stored entry --------------


def test_each_op_declares_its_candidates_and_the_library_heuristic() -> None:
    # A changed list invalidates every entry tuned against the old one: change it on purpose only.
    assert ops.conv2d.candidates == ("im2col", "direct", "fft")
    assert ops.chain3.candidates == ("left", "right", "multi_dot")
    assert ops.chain4.candidates == ("left", "right", "multi_dot")
    assert ops.matmul.candidates == ("all_threads", "one_thread")
    one = np.ones((2, 2), dtype=np.float32)
    picks = {
        "conv2d": ops.conv2d.heuristic_for(ops.conv2d.key(one[None], one[None, None])),
        "chain3": ops.chain3.heuristic_for(ops.chain3.key(one, one, one)),
        "chain4": ops.chain4.heuristic_for(ops.chain4.key(one, one, one, one)),
        "matmul": ops.matmul.heuristic_for(ops.matmul.key(one, one)),
    }
    assert picks == {
        "conv2d": "im2col",
        "chain3": "left",
        "chain4": "left",
        "matmul": "all_threads",
    }
    assert {op.signature for op in OPS} <= set(dispatch.registry())


def test_keys_name_the_sizes_that_decide_and_the_dtype() -> None:
    x = np.zeros((3, 64, 48), dtype=np.float32)
    w = np.zeros((16, 3, 7, 5), dtype=np.float32)
    assert ops.conv2d.key(x, w).text == "conv2d_F32_ci3_co16_h64_w48_kh7_kw5"
    a, b, c, d = (np.zeros(s) for s in [(1500, 32), (32, 1500), (1500, 32), (32, 8)])
    assert ops.chain3.key(a, b, c).text == "chain3_F64_a1500_b32_c1500_d32"
    assert ops.chain4.key(a, b, c, d).text == "chain4_F64_a1500_b32_c1500_d32_e8"
    # The dtype is the result's: float32 times float64 computes in float64.
    assert ops.matmul.key(a.astype(np.float32), b).text == "matmul_F64_m1500_k32_n1500"
    calls: list[tuple[dispatch.Tunable[Any, Any], tuple[Array, ...]]] = [
        (ops.conv2d, (x, w)),
        (ops.chain3, (a, b, c)),
        (ops.matmul, (a, b)),
    ]
    for op, args in calls:
        key = op.key(*args)
        assert parse(key.text) == key


@pytest.mark.parametrize(
    ("op", "args", "message"),
    [
        (ops.conv2d, [(3, 8, 8), (4, 2, 3, 3)], "conv2d takes an image"),
        (ops.conv2d, [(8, 8), (4, 1, 3, 3)], "conv2d takes an image"),
        (ops.chain3, [(2, 3), (4, 5), (5, 6)], "chain3 takes 2-D matrices"),
        (ops.chain4, [(2, 3), (3, 4), (4, 5), (6, 1)], "chain4 takes 2-D matrices"),
        (ops.matmul, [(2, 3), (4, 5)], "matmul takes 2-D matrices"),
        (ops.matmul, [(2, 3, 1), (3, 5)], "matmul takes 2-D matrices"),
    ],
)
def test_arrays_that_do_not_fit_get_one_clear_error(
    op: dispatch.Tunable[Any, Any], args: list[tuple[int, ...]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        op(*(np.ones(s) for s in args))


# --- every candidate computes the heuristic's result -----------------------------------------


def _reference_conv(x: Array, w: Array) -> Array:
    """The "same" cross-correlation written out as loops: its definition, independent of any op."""
    co, _, kh, kw = w.shape
    _, h, wd = x.shape
    top, left = (kh - 1) // 2, (kw - 1) // 2
    out = np.zeros((co, h, wd))
    for o in range(co):
        for y in range(h):
            for z in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        yy, zz = y + i - top, z + j - left
                        if 0 <= yy < h and 0 <= zz < wd:
                            out[o, y, z] += float(np.dot(w[o, :, i, j], x[:, yy, zz]))
    return out


@given(
    ci=st.integers(1, 3),
    co=st.integers(1, 3),
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    kh=st.integers(1, 6),
    kw=st.integers(1, 6),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_every_conv2d_candidate_is_same_padded_cross_correlation(
    ci: int, co: int, h: int, w: int, kh: int, kw: int, dtype: Any, seed: int
) -> None:
    # Even kernels and kernels larger than the image included: padding must be right for both.
    rng = _rng(seed)
    x = rng.standard_normal((ci, h, w)).astype(dtype)
    k = rng.standard_normal((co, ci, kh, kw)).astype(dtype)
    want = _reference_conv(x, k).astype(dtype)
    for name, function in _candidates(ops.conv2d).items():
        got = function(x, k)
        assert got.shape == (co, h, w), name
        _close(got, want, dtype)


@given(
    h=st.integers(1, 24),
    kh=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_conv2d_on_integers_is_exact_for_every_candidate(h: int, kh: int, seed: int) -> None:
    # An integer key is legal, and the FFT computes in floating point: its result must be
    # rounded to the exact integer products, never truncated (2.9999 is 3).
    rng = _rng(seed)
    x = rng.integers(-50, 50, (3, h, h + 3))
    k = rng.integers(-9, 9, (2, 3, kh, kh))
    want = _reference_conv(x.astype(np.float64), k.astype(np.float64))
    for name, function in _candidates(ops.conv2d).items():
        got = function(x, k)
        assert got.dtype == np.int64, name
        np.testing.assert_array_equal(got, want.astype(np.int64), err_msg=name)


@pytest.mark.parametrize(
    "shape",
    [
        (16, 16, 64, 64, 3, 3),  # the direct-conv shape
        (16, 32, 32, 32, 5, 5),
        (1, 8, 128, 128, 31, 31),  # the filter bank: FFT's home ground
        (3, 6, 40, 24, 4, 6),  # even kernels on a non-square image
    ],
)
def test_conv2d_candidates_agree_at_model_sizes(shape: tuple[int, ...]) -> None:
    ci, co, h, w, kh, kw = shape
    rng = _rng(1)
    x = rng.standard_normal((ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    results = {name: f(x, k) for name, f in _candidates(ops.conv2d).items()}
    for name in ("direct", "fft"):
        _close(results[name], results["im2col"], np.float32)


@given(
    sizes=st.lists(st.integers(1, 24), min_size=5, max_size=5),
    four=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_every_chain_candidate_gives_the_product(
    sizes: list[int], four: bool, dtype: Any, seed: int
) -> None:
    rng = _rng(seed)
    count = 4 if four else 3
    mats = [rng.standard_normal((sizes[i], sizes[i + 1])).astype(dtype) for i in range(count)]
    op = ops.chain4 if four else ops.chain3
    want = mats[0]
    for m in mats[1:]:
        want = want @ m
    for function in _candidates(op).values():
        _close(function(*mats), want, dtype)


@settings(max_examples=30)  # up to 300^3 products: a few cover the sizes, 100 cost seconds
@given(
    m=st.integers(1, 300),
    k=st.integers(1, 300),
    n=st.integers(1, 300),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_every_matmul_candidate_gives_the_product(m: int, k: int, n: int, dtype: Any) -> None:
    rng = _rng(m * 1_000_000 + k * 1000 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    for function in _candidates(ops.matmul).values():
        _close(function(a, b), a @ b, dtype)


def test_fast_length_is_the_next_5_smooth_number() -> None:
    def smooth(n: int) -> bool:
        for p in (2, 3, 5):
            while n % p == 0:
                n //= p
        return n == 1

    for n in range(1, 600):
        got = ops.fast_length(n)
        assert got >= n and smooth(got)
        assert not any(smooth(m) for m in range(n, got))


# --- the one-thread candidate really runs BLAS on one thread ----------------------------------


# The candidates as plain functions, called below with stand-in operands instead of arrays.
_ONE_THREAD: Callable[..., Any] = ops._one_thread
_ALL_THREADS: Callable[..., Any] = ops._all_threads


class _Spy:
    """An operand whose product records the BLAS pools as they are during the call."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __matmul__(self, other: object) -> str:
        self.seen = threadpoolctl.threadpool_info()
        return "product"


def _blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]


def test_one_thread_limits_every_blas_pool_during_the_call_and_restores_it() -> None:
    before = _blas_threads()
    assert before, "numpy loads a BLAS, so threadpoolctl must find at least one pool"
    spy = _Spy()
    assert _ONE_THREAD(spy, None) == "product"
    during = [p["num_threads"] for p in spy.seen if p["user_api"] == "blas"]
    assert during == [1] * len(before)
    assert _blas_threads() == before
    spy = _Spy()
    _ALL_THREADS(spy, None)
    assert [p["num_threads"] for p in spy.seen if p["user_api"] == "blas"] == before


def test_one_thread_restores_the_pools_when_the_product_raises() -> None:
    before = _blas_threads()

    class Broken:
        def __matmul__(self, other: object) -> None:
            raise RuntimeError("no product")

    with pytest.raises(RuntimeError, match="no product"):
        _ONE_THREAD(Broken(), None)
    assert _blas_threads() == before


def test_the_blas_controller_is_made_once_and_again_after_scipy_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ops, "_controller", None)
    monkeypatch.setattr(ops, "_controller_saw_scipy", False)
    monkeypatch.delitem(sys.modules, "scipy", raising=False)
    first = ops.blas_controller()
    assert ops.blas_controller() is first
    # scipy's wheels bring their own BLAS: once scipy is imported the pools are scanned again.
    monkeypatch.setitem(sys.modules, "scipy", types.ModuleType("scipy"))
    second = ops.blas_controller()
    assert second is not first
    assert ops.blas_controller() is second


# --- the models ------------------------------------------------------------------------------

#: every key each model's runs use: the cache's decisions are about exactly these
EXPECTED_KEYS: dict[str, set[str]] = {
    "cnn": {
        "conv2d_F32_ci3_co16_h64_w64_kh7_kw7",
        "conv2d_F32_ci16_co16_h64_w64_kh3_kw3",
        "conv2d_F32_ci16_co32_h32_w32_kh5_kw5",
        "conv2d_F32_ci32_co32_h32_w32_kh1_kw1",
        "conv2d_F32_ci32_co32_h16_w16_kh3_kw3",
    },
    "separable": {
        "conv2d_F32_ci16_co16_h64_w64_kh3_kw3",
        "conv2d_F32_ci16_co32_h64_w64_kh1_kw1",
        "conv2d_F32_ci1_co1_h64_w64_kh7_kw7",
        "conv2d_F32_ci32_co16_h64_w64_kh1_kw1",
    },
    "filterbank": {"conv2d_F32_ci1_co8_h128_w128_kh31_kw31"},
    "edges": {"conv2d_F32_ci1_co4_h128_w128_kh31_kw31", "conv2d_F32_ci3_co6_h128_w128_kh3_kw3"},
    "attention": {
        f"matmul_F32_m{s}_k{k}_n{n}"
        for s in (1, 64, 256, 1024)
        for k, n in [(128, 128), (64, s), (s, 64), (128, 512), (512, 128)]
    },
    "mlp": {
        "matmul_F32_m256_k128_n512",
        "matmul_F32_m256_k512_n512",
        "matmul_F32_m256_k512_n128",
    },
    "denoiser": {"matmul_F32_m255_k256_n256", "conv2d_F32_ci1_co1_h255_w256_kh9_kw9"},
    "regression": {
        "matmul_F32_m32_k2000_n32",
        "chain3_F32_a32_b32_c2000_d8",
        "chain4_F32_a2000_b32_c32_d2000_e8",
        "chain3_F32_a1_b2000_c32_d32",
    },
    "smoother": {
        "matmul_F32_m32_k2048_n32",
        "chain3_F32_a32_b32_c2048_d8",
        "chain4_F32_a2048_b32_c32_d2048_e8",
        "chain3_F32_a1_b2048_c32_d32",
    },
}

BY_NAME = {m.name: m for m in examples.MODELS}


def _profiled(model: Model, table: Table | None = None) -> tuple[list[Array], dispatch.Profile]:
    """One run of every scenario with `table` (no table: the heuristic everywhere)."""
    outputs = []
    with dispatch.profile(capture=True) as p, using(Table.empty() if table is None else table):
        for case in model.cases():
            outputs.append(np.asarray(model.run(**case)))
    return outputs, p


def test_there_are_at_least_eight_models_with_short_unique_lowercase_names() -> None:
    names = [m.name for m in examples.MODELS]
    assert len(names) >= 8
    assert len(set(names)) == len(names)
    assert all(n.isalpha() and n.islower() and len(n) <= 12 for n in names)
    assert set(names) == set(EXPECTED_KEYS)
    assert all(isinstance(m, Model) for m in examples.MODELS)


def test_tuned_and_held_out_split_the_models_in_two_disjoint_halves() -> None:
    tuned = {m.name for m in examples.TUNED}
    held = {m.name for m in examples.HELD_OUT}
    assert not tuned & held
    assert tuned | held == set(BY_NAME)
    assert abs(len(tuned) - len(held)) <= 1
    assert all(m is BY_NAME[m.name] for m in [*examples.TUNED, *examples.HELD_OUT])


def _distance(a: Key, b: Key) -> float:
    return sum(
        abs(math.log2(x) - math.log2(y)) for (_, x), (_, y) in zip(a.dims, b.dims, strict=True)
    )


def test_every_held_out_model_can_use_a_decision_the_tuned_half_makes() -> None:
    # What the shared cache is for: each held-out model has a key of a tuned model, exactly or
    # within the resolver's default nearest-shape distance (a factor of 2 in all).
    tuned_keys = [parse(k) for m in examples.TUNED for k in EXPECTED_KEYS[m.name]]
    for model in examples.HELD_OUT:
        near = [
            (key.text, other.text)
            for key in map(parse, EXPECTED_KEYS[model.name])
            for other in tuned_keys
            if key.signature == other.signature and _distance(key, other) <= 1.0
        ]
        assert near, f"{model.name} shares no key with the tuned models"


@pytest.mark.parametrize("name", sorted(EXPECTED_KEYS))
def test_each_model_runs_deterministically_on_the_keys_it_declares(name: str) -> None:
    model = BY_NAME[name]
    first, p = _profiled(model)
    again, _ = _profiled(model)
    assert len(first) == len(model.cases())
    for a, b in zip(first, again, strict=True):
        assert np.isfinite(a).all()
        np.testing.assert_array_equal(a, b)
    assert {row.key.text for row in p.rows()} == EXPECTED_KEYS[name]
    # Profiled without a cache, every key ran the heuristic.
    assert {row.source for row in p.rows()} == {"heuristic"}


@pytest.mark.parametrize("name", sorted(EXPECTED_KEYS))
def test_a_model_computes_the_same_whatever_candidates_the_cache_picks(name: str) -> None:
    model = BY_NAME[name]
    want, p = _profiled(model)
    calls = p.captured()
    widest = max(len(call.op.candidates) for call in calls.values())
    for index in range(1, widest):
        # Every key runs its index-th candidate (or its last), as a table might decide.
        add = []
        for key, call in calls.items():
            names = call.op.candidates
            add.append((key, names, names[min(index, len(names) - 1)]))
        got, q = _profiled(model, Table.empty().derive(add=add))
        assert {row.source for row in q.rows()} == {"exact"}
        for a, b in zip(got, want, strict=True):
            _close(a, b, np.float32)


def test_every_models_scenarios_resolve() -> None:
    for model in examples.MODELS:
        table = Table.open(scenarios=model.scenarios, model=model.name)
        assert table.scenarios == dict(model.scenarios)
        for case in model.cases():
            assert set(case) == set(model.scenarios)
    assert BY_NAME["attention"].cases() == [{"s": s} for s in (1, 64, 256, 1024)]
    assert all(not m.scenarios for m in examples.MODELS if m.name != "attention")


def test_attention_refuses_a_sequence_longer_than_its_tokens() -> None:
    with pytest.raises(ValueError, match="1 to 1024 tokens"):
        BY_NAME["attention"].run(s=1025)


def test_the_denoiser_reconstructs_a_clean_signal_as_itself() -> None:
    # Analysis, gain and synthesis must be a perfect pair: with no noise power subtracted, the
    # gain is ~1 and overlap-add gives the input back away from the two half-covered ends.
    den = models._Denoiser(seed=7)
    den.noise_power = np.float32(0.0)
    out = den()
    inner = slice(den.hop, den.signal.shape[0] - 2 * den.hop)
    np.testing.assert_allclose(out[inner], den.signal[inner], rtol=1e-3, atol=1e-3)


def test_importing_the_examples_loads_no_store_and_no_threadpoolctl() -> None:
    code = (
        "import sys, tunecache.examples as e; "
        "print(len(e.MODELS), 'sqlalchemy' in sys.modules, 'threadpoolctl' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [str(len(examples.MODELS)), "False", "False"]


# --- a real tuning session -------------------------------------------------------------------


@pytest.mark.slow
def test_tuning_a_model_writes_only_legal_choices(cache: Cache) -> None:
    model = BY_NAME["regression"]
    report = tune(model, cache=cache)
    entries = cache.entries()
    assert entries
    assert {e.key.text for e in entries} <= EXPECTED_KEYS["regression"]
    ops_by_signature = {op.signature: op for op in OPS}
    for entry in entries:
        op = ops_by_signature[entry.key.signature.split("_")[0]]
        assert entry.candidates == op.candidates
        assert entry.choice in op.candidates
        assert entry.heuristic == op.heuristic_for(entry.key)
        assert entry.status in ("accepted", "rejected", "unvalidated")
    outcomes = {k.key: k for k in report.keys}
    assert set(outcomes) <= EXPECTED_KEYS["regression"]
    for outcome in outcomes.values():
        assert outcome.choice in ops_by_signature[outcome.key.split("_")[0]].candidates
    # Whatever it chose, the model still computes the same.
    table = Table.open(path=cache.path, device=cache.device, model=model.name)
    got, _ = _profiled(model, table)
    want, _ = _profiled(model)
    for a, b in zip(got, want, strict=True):
        _close(a, b, np.float32)
