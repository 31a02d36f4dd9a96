"""tunecache.triton.keys: config names and tuning keys."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.triton.fake import Config, CpuKernel, grid, operands, tuner
from tunecache.errors import BadArgumentError
from tunecache.keys import make_key, parse
from tunecache.triton.keys import (
    KeySpec,
    config_name,
    kernel_revision,
    revision_token,
    same_specialization,
)


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


def test_a_numpy_integer_is_a_size_not_a_tensor() -> None:
    kernel = tuner(CpuKernel())
    a, b, out = operands(16)
    assert kernel.key(a, b, out, np.int64(16), 40, 48) == kernel.key(a, b, out, 16, 40, 48)


def test_a_kernels_revision_is_its_sources_digest_or_the_callers_own() -> None:
    inner = SimpleNamespace(src="def k(): pass")
    jitted = SimpleNamespace(fn=SimpleNamespace(fn=inner))  # heuristics over jit over source
    token = kernel_revision(jitted, "auto")
    assert token == revision_token("def k(): pass") and re.fullmatch(r"R[0-9A-F]{8}", token)
    assert kernel_revision(jitted, "v 2") == "Rv%202"
    assert kernel_revision(jitted, None) is None
    assert kernel_revision(SimpleNamespace(), "auto") is None


def test_keys_compile_alike_when_each_size_is_aligned_in_both_or_neither() -> None:
    def key(**dims: int) -> Any:
        return make_key("k_F16", list(dims.items()))

    assert same_specialization(key(n=1024), key(n=4096))
    assert same_specialization(key(n=1000), key(n=1010))
    assert not same_specialization(key(n=1000), key(n=1024))
    assert not same_specialization(key(n=1), key(n=3))  # Triton's "equal to 1" too
    assert not same_specialization(key(m=64, n=32), key(m=64, n=33))
    assert not same_specialization(key(m=64), key(n=64))


def test_the_config_name_limit_is_the_candidate_lists_own() -> None:
    from tunecache import candidates
    from tunecache.triton import warm

    assert warm.MAX_NAME_LEN == candidates.MAX_NAME_LEN
