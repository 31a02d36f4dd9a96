"""tunecache.triton.gpu: the GPU backend, run on a CPU against stand-ins for torch and Triton.

The real thing runs in tools/gpu/check_triton.py on a GPU; these tests pin what the backend asks
of torch and Triton, and what it makes of their answers.
"""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tunecache.triton as tct
from tests.triton.fake import GPU, CpuKernel, configs, launch
from tunecache.compare import difference
from tunecache.device import Device
from tunecache.errors import BadArgumentError, TunecacheError
from tunecache.triton import GPU_BENCH, gpu, warm
from tunecache.triton.configs import NoConfigError
from tunecache.triton.gpu import driver_version, gpu_backend, gpu_device


def _no_proc_file(*args: Any, **kwargs: Any) -> Any:
    raise FileNotFoundError("/proc/driver/nvidia/version")


def test_the_driver_version_comes_from_proc_then_from_torch(
    fake_gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
    monkeypatch.setattr(warm, "open", lambda *a, **k: io.StringIO(proc), raising=False)
    assert driver_version() == "580.159.04"
    monkeypatch.setattr(warm, "open", _no_proc_file, raising=False)
    assert driver_version() == "cuda-12.4"
    fake_gpu.torch.version.hip = "6.2.41133"
    assert driver_version() == "hip-6.2.41133"
    fake_gpu.torch.version.hip = None
    fake_gpu.torch._C = SimpleNamespace()
    assert driver_version() == "unknown"


#: pieces of /proc/driver/nvidia/version's text, and of texts that only look like it
PROC_PIECES = (
    *("Kernel Module", "for", "x86_64", "580.159.04", "1", ".5", "9a", " ", "  ", "\t", "\n"),
    *("\u2003", "\u0663", "NVRM version: NVIDIA UNIX Open ", "Release"),
)


@given(st.lists(st.sampled_from(PROC_PIECES), max_size=12))
def test_the_kernel_modules_version_is_what_the_drivers_pattern_finds(parts: list[str]) -> None:
    import re

    text = "".join(parts)
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)", text)
    assert warm.kernel_module_version(text) == (None if found is None else found.group(1))


def test_a_gpus_identity_is_its_name_multiprocessors_capability_driver_and_triton(
    fake_gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm, "driver_version", lambda: "580.159.04")
    # What tests/test_cli.py reads back as an H200's identity.
    h200 = Device("nvidia-h200", 132, "nvidia-h200-sm90-driver-580-159-04", "triton", "3.6.0")
    assert gpu_device() == h200
    assert gpu_device(0) == h200
    # Its fields alone, checked alike, are what the first call of a stored key works from.
    assert gpu.gpu_fields(0) == h200.fields
    detected, given = gpu_backend(None, flush_l2=False), gpu_backend(GPU, flush_l2=False)
    assert detected.fields is not None and detected.fields(0) == h200.fields
    assert given.fields is not None and given.fields(0) == GPU.fields  # the device option
    fake_gpu.torch.cuda.properties.multi_processor_count = 0  # threads 0: not an identity
    for identity in (gpu.gpu_fields, gpu_device):
        with pytest.raises(BadArgumentError, match="threads"):
            identity(0)


def test_the_backend_syncs_the_callers_stream_and_tunes_in_the_background_on_its_own(
    fake_gpu: SimpleNamespace,
) -> None:
    backend = gpu_backend(GPU, flush_l2=True)
    cuda = fake_gpu.torch.cuda
    assert backend.device(5) is GPU and backend.current() == 0
    assert backend.bench == dict(GPU_BENCH) and backend.bench is not GPU_BENCH
    assert backend.failures == ()  # the stand-in triton has no triton.runtime.errors
    backend.sync()
    with backend.context(1, False):
        pass
    assert cuda.events == [("sync",), ("device", 1)]
    cuda.events.clear()
    for _ in range(2):
        with backend.context(1, True):
            pass
    # The pending copies are waited for each time; the tuning thread's stream is made once.
    assert cuda.events == [
        ("device", 1),
        ("synchronize", 1),
        ("new stream", 1),
        ("on", ("stream", 1)),
        ("device", 1),
        ("synchronize", 1),
        ("on", ("stream", 1)),
    ]
    default = backend.default_config()
    assert (default.kwargs, default.num_warps, default.num_stages, default.num_ctas) == (
        {},
        4,
        3,
        1,
    )


def test_the_l2_flush_zeroes_twice_the_l2_once_made_per_device(fake_gpu: SimpleNamespace) -> None:
    flush = gpu_backend(None, flush_l2=True).flush
    assert flush is not None
    first = flush(0)
    assert first is not None and flush(0) is first
    first()
    buffer = first.__self__
    assert (buffer.size, buffer.device, buffer.zeroed) == (120 << 20, "cuda:0", 1)
    fake_gpu.torch.cuda.properties.L2_cache_size = 0
    small = flush(1)
    assert small is not None and small.__self__.size == 1 << 20
    off = gpu_backend(None, flush_l2=False).flush
    assert off is not None and off(0) is None


def test_the_backend_without_torch_says_it_needs_torch(
    fake_gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(BadArgumentError, match=r"tunecache\.triton needs torch"):
        gpu_backend(None, flush_l2=True)


def test_an_early_prune_that_keeps_nothing_raises_a_triton_error_too(
    fake_gpu: SimpleNamespace,
) -> None:
    error = gpu_backend(GPU, flush_l2=False).no_config_error
    assert error is not None
    assert issubclass(error, NoConfigError) and issubclass(error, BadArgumentError)
    assert issubclass(error, fake_gpu.triton.TritonError)
    assert gpu.triton_no_config_error(fake_gpu.triton) is error  # made once per Triton

    def keep_none(configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        return []

    kernel = tct.autotune(
        configs(), key=["M"], prune_configs_by={"early_config_prune": keep_none}, device=GPU
    )(CpuKernel())
    with pytest.raises(fake_gpu.triton.TritonError, match="No valid autotuner configs") as caught:
        launch(kernel, 64)
    assert isinstance(caught.value, BadArgumentError)
    # A Triton without TritonError, or with one that cannot be mixed in (here: its bases in
    # the other order, so no method resolution order fits both): tunecache's own error.
    assert gpu.triton_no_config_error(SimpleNamespace()) is NoConfigError
    unmixable = SimpleNamespace(TritonError=type("TritonError", (ValueError, TunecacheError), {}))
    assert gpu.triton_no_config_error(unmixable) is NoConfigError


# -- the output check on the device ---------------------------------------------------------------


class _Tensor:
    """The part of a torch tensor `gpu.tensor_difference` uses, over a numpy array (so the
    rules run on a CPU); `ops` counts the elementwise and reduction calls made."""

    ops: ClassVar[list[str]] = []

    def __init__(self, array: Any) -> None:
        import numpy as np

        self.a = np.asarray(array)

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)

    def numel(self) -> int:
        return int(self.a.size)

    def is_floating_point(self) -> bool:
        return self.a.dtype.kind == "f"

    def is_complex(self) -> bool:
        return self.a.dtype.kind == "c"

    def _op(self, name: str, value: Any) -> _Tensor:
        _Tensor.ops.append(name)
        return _Tensor(value)

    def __sub__(self, other: _Tensor) -> _Tensor:
        import numpy as np

        with np.errstate(invalid="ignore"):  # inf - inf: NaN, as on a GPU
            return self._op("sub", self.a - other.a)

    def __ne__(self, other: object) -> _Tensor:  # type: ignore[override]
        return self._op("ne", self.a != (other.a if isinstance(other, _Tensor) else other))

    def __or__(self, other: _Tensor) -> _Tensor:
        return self._op("or", self.a | other.a)

    def __invert__(self) -> _Tensor:
        return self._op("not", ~self.a)

    def __getitem__(self, mask: _Tensor) -> _Tensor:
        return self._op("index", self.a[mask.a])

    def to(self, dtype: Any) -> _Tensor:
        return self._op("to", self.a.astype(dtype))

    def isnan(self) -> _Tensor:
        import numpy as np

        return self._op("isnan", np.isnan(self.a))

    def isinf(self) -> _Tensor:
        import numpy as np

        return self._op("isinf", np.isinf(self.a))

    def abs(self) -> _Tensor:
        import numpy as np

        return self._op("abs", np.abs(self.a))

    def where(self, condition: _Tensor, other: float) -> _Tensor:
        import numpy as np

        return self._op("where", np.where(condition.a, self.a, other))

    def any(self) -> bool:
        return bool(self.a.any())

    def max(self) -> float:
        return float(self.a.max())

    def sum(self) -> int:
        return int(self.a.sum())

    def item(self) -> float:
        return float(self.a)

    def is_contiguous(self) -> bool:
        return bool(self.a.flags.c_contiguous)

    def detach(self) -> _Tensor:
        return self

    def cpu(self) -> _Tensor:
        return self._op("cpu", self.a.copy())

    def numpy(self) -> Any:
        if self.a.dtype == object:
            raise TypeError("Got unsupported ScalarType BFloat16")  # as torch says it
        return self.a


def _fake_torch() -> SimpleNamespace:
    import numpy as np

    def vector_norm(x: _Tensor, ord: float, dtype: Any) -> _Tensor:
        with np.errstate(invalid="ignore"):
            return x._op("norm", np.max(np.abs(x.a.astype(dtype))) if x.a.size else 0.0)

    return SimpleNamespace(
        Tensor=_Tensor,
        float32=np.float32,
        float64=np.float64,
        complex128=np.complex128,
        equal=lambda a, b: a.shape == b.shape and bool((a.a == b.a).all()),
        finfo=np.finfo,
        linalg=SimpleNamespace(vector_norm=vector_norm),
    )


def test_outputs_that_agree_on_the_device_cost_a_subtraction_and_two_norms() -> None:
    import numpy as np

    torch = _fake_torch()
    ref = _Tensor(np.linspace(-8, 8, 1000).astype(np.float16))
    near = _Tensor((ref.a.astype(np.float32) + 1e-3).astype(np.float16))
    _Tensor.ops = []
    assert gpu.tensor_difference(torch, ref, near, None, 0) is None  # within fp16's 3e-2 of 8
    assert _Tensor.ops == ["sub", "norm", "norm"]  # nothing element by element


def test_outputs_that_differ_on_the_device_are_said_as_compare_says_them() -> None:
    import numpy as np

    torch = _fake_torch()
    ref = _Tensor(np.linspace(-8, 8, 1000).astype(np.float32))
    off = _Tensor(ref.a + 1)
    said = gpu.tensor_difference(torch, ref, off, None, 0)
    assert said is not None and said.startswith("largest difference 1, 0.125 of the reference")
    assert gpu.tensor_difference(torch, ref, off, 0.2, 0) is None
    holes = ref.a.copy()
    holes[3] = np.nan
    # A NaN where the reference has one agrees; where it has a number, it does not.
    assert gpu.tensor_difference(torch, _Tensor(holes), _Tensor(holes.copy()), None, 0) is None
    said = gpu.tensor_difference(torch, ref, _Tensor(holes), None, 0)
    assert said == "NaN where the other is a number"
    ints = _Tensor(np.arange(10))
    other = _Tensor(np.where(np.arange(10) == 4, 0, np.arange(10)))
    assert gpu.tensor_difference(torch, ints, _Tensor(np.arange(10)), None, 0) is None
    assert (
        gpu.tensor_difference(torch, ints, other, None, 0) == "1 of 10 values differ (exact: int64)"
    )
    said = gpu.tensor_difference(torch, ref, _Tensor(ref.a[:10]), None, 0) or ""
    assert "expected float32 of shape (1000,)" in said
    # Anything that is not a tensor is tunecache.compare's.
    assert gpu.tensor_difference(torch, np.arange(3), np.arange(3), None) is None


def test_small_outputs_are_compared_on_the_host_by_the_same_rules() -> None:
    import numpy as np

    torch = _fake_torch()
    ref = np.linspace(-8, 8, 1000).astype(np.float32)
    holes = ref.copy()
    holes[3] = np.nan
    ints = np.arange(10)
    cases = [
        (ref, ref + 1e-6),
        (ref, ref + 1),
        (ref, holes),
        (holes, holes.copy()),
        (ints, np.where(ints == 4, 0, ints)),
        (ref.astype(np.float16), (ref + 1e-3).astype(np.float16)),
    ]
    for expected, actual in cases:
        on_device = gpu.tensor_difference(torch, _Tensor(expected), _Tensor(actual), None, 0)
        _Tensor.ops = []
        on_host = gpu.tensor_difference(torch, _Tensor(expected), _Tensor(actual), None)
        assert _Tensor.ops == ["cpu", "cpu"]  # two copies, no torch kernel
        # The same verdict, in tunecache.compare's own words (which also say where).
        assert (on_host is None) == (on_device is None)
        assert on_host == difference(expected, actual, None)
    # Beyond the limit, not contiguous, or a dtype numpy lacks: on the device, as before.
    big = np.zeros(gpu.HOST_VALUES + 1, np.float32)
    strided = ref[::2]
    odd = np.array([1.0, 2.0], dtype=object)  # stands for bfloat16: .numpy() refuses it
    device = ["sub", "norm", "norm"]
    for expected, ops in ((big, device), (strided, device), (odd, ["cpu"])):  # odd: exact, equal
        _Tensor.ops = []
        assert (
            gpu.tensor_difference(torch, _Tensor(expected), _Tensor(expected.copy()), None) is None
        )
        assert _Tensor.ops == ops


def _numpy_gaps(torch: Any, expected: _Tensor, actual: _Tensor) -> tuple[float, float]:
    """What `tunecache.triton.gaps.float_gaps`'s kernel works out, in numpy: the largest gap
    and the largest reference magnitude in float32, a NaN anywhere infinite."""
    import numpy as np

    e, a = expected.a.astype(np.float32), actual.a.astype(np.float32)
    with np.errstate(invalid="ignore"):
        gap, size = np.abs(a - e), np.abs(e)
    gap, size = np.where(np.isnan(gap), np.inf, gap), np.where(np.isnan(size), np.inf, size)
    return float(gap.max()), float(size.max())


def test_outputs_that_agree_by_the_gaps_kernel_cost_no_torch_kernel() -> None:
    import numpy as np

    torch = _fake_torch()
    ref = _Tensor(np.linspace(-8, 8, 1000).astype(np.float16))
    near = _Tensor((ref.a.astype(np.float32) + 1e-3).astype(np.float16))
    _Tensor.ops = []
    assert gpu.tensor_difference(torch, ref, near, None, 0, gaps=_numpy_gaps) is None
    assert _Tensor.ops == []  # the kernel's two figures decided it
    # Where the kernel does not apply (it says None), torch's subtraction and norms decide.
    assert gpu.tensor_difference(torch, ref, near, None, 0, gaps=lambda *a: None) is None
    assert _Tensor.ops == ["sub", "norm", "norm"]
    # A gap beyond the tolerance is said as the element-by-element rules say it.
    off = _Tensor(ref.a.astype(np.float32) + 1)
    ref32 = _Tensor(ref.a.astype(np.float32))
    with_kernel = gpu.tensor_difference(torch, ref32, off, None, 0, gaps=_numpy_gaps)
    assert with_kernel == gpu.tensor_difference(torch, ref32, off, None, 0)
    assert with_kernel is not None and with_kernel.startswith("largest difference 1,")


@pytest.mark.parametrize("kernel", [None, _numpy_gaps], ids=["torch", "gaps kernel"])
def test_an_infinity_in_the_reference_does_not_make_every_output_agree(kernel: Any) -> None:
    import numpy as np

    torch = _fake_torch()
    ref = np.linspace(-8, 8, 1000).astype(np.float32)
    ref[7] = np.inf
    finite = ref.copy()
    finite[7] = 5.0  # an infinite reference scale would accept this infinite gap
    said = gpu.tensor_difference(torch, _Tensor(ref), _Tensor(finite), None, 0, gaps=kernel)
    assert said == "infinities differ"
    # Equal infinities, and NaNs where the reference has them, still agree (by the rules).
    assert gpu.tensor_difference(torch, _Tensor(ref), _Tensor(ref.copy()), None, 0, kernel) is None
    holes = ref.copy()
    holes[3] = np.nan
    assert (
        gpu.tensor_difference(torch, _Tensor(holes), _Tensor(holes.copy()), None, 0, kernel) is None
    )
    assert gpu.tensor_difference(torch, _Tensor(ref), _Tensor(holes), None, 0, kernel) == (
        "NaN where the other is a number"
    )


class _CudaTensor(_Tensor):
    """A `_Tensor` that says it lives on a CUDA device."""

    is_cuda = True
    device = "cuda:0"


def test_the_gaps_kernel_applies_only_to_contiguous_cuda_floats_and_says_once_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    from tunecache.errors import TunecacheWarning
    from tunecache.triton import gaps

    torch = SimpleNamespace(float16=np.float16, float32=np.float32)
    values = np.linspace(-8, 8, 100).astype(np.float32)
    monkeypatch.setattr(gaps, "_kernel", None)
    monkeypatch.setitem(sys.modules, "triton", None)  # no Triton: the kernel cannot be built
    import warnings

    # Not applicable (on the host, integers, strided): no kernel is built, so nothing is said.
    strided = _CudaTensor(np.linspace(-8, 8, 200).astype(np.float32)[::2])
    cases = [
        (_Tensor(values), _Tensor(values)),
        (_CudaTensor(values.astype(np.int64)), _CudaTensor(values.astype(np.int64))),
        (_CudaTensor(values), strided),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for expected, actual in cases:
            assert gaps.float_gaps(torch, expected, actual) is None
    with pytest.warns(TunecacheWarning, match="torch's kernels compare outputs instead"):
        assert gaps.float_gaps(torch, _CudaTensor(values), _CudaTensor(values)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the second call is silent
        assert gaps.float_gaps(torch, _CudaTensor(values), _CudaTensor(values)) is None
