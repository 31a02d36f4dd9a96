"""The GPU backend of `tunecache.triton.autotune`: Triton and torch, imported lazily.

`gpu_backend` builds the `Backend` the decorator gives every kernel: the GPU's identity
(`gpu_device`: name, multiprocessor count, compute capability, driver and Triton versions),
synchronisation on the calling thread's stream, a stream of its own for background tuning,
Triton's "this config does not fit" exceptions, the L2 flush before each timed launch, and
the error an `early_config_prune` that keeps nothing raises (a `triton.TritonError` too).
Nothing imports Triton or torch before a decorated kernel's first call (or `gpu_device`).
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tunecache.triton.backend import Backend
from tunecache.triton.configs import NoConfigError
from tunecache.triton.warm import driver_version, gpu_probe
from tunecache.triton.warm import torch_module as _torch
from tunecache.triton.warm import triton_module as _triton

if TYPE_CHECKING:
    from tunecache.identity import Fields

__all__ = [
    "GPU_BENCH",
    "HOST_VALUES",
    "driver_version",
    "gpu_backend",
    "gpu_device",
    "gpu_fields",
    "tensor_difference",
    "triton_no_config_error",
]

#: `tunecache.bench.bench` options for a GPU kernel (override any with `bench=`):
#: 1 ms samples are ~100x the cost of a synchronisation, and 3 rounds of them separate configs
#: 5% apart; 0.1 s caps a key of 12 configs at a tenth of what Triton's 25 + 100 ms per config
#: takes; one warm-up call, because every config was launched once before the bench starts.
GPU_BENCH: Mapping[str, Any] = {
    "sample_time": 1e-3,
    "min_samples": 3,
    "max_samples": 8,
    "budget": 0.1,
    "warmup": 1,
}


def gpu_fields(index: int | None = None) -> Fields:
    """`gpu_device(index).fields`, checked as a Device checks them, without building the
    Device (nor importing its module): made of `warm.gpu_probe`'s values, which the warm start
    compares instead."""
    from tunecache.identity import check_fields, slugify

    if index is None:
        index = _torch().cuda.current_device()
    name, major, minor, multiprocessors, driver, version = gpu_probe(index)
    accelerator = slugify(f"{name} sm{major}{minor} driver {driver}")
    fields = (slugify(name), multiprocessors, accelerator, "triton", version)
    check_fields(*fields)
    return fields


def gpu_device(index: int | None = None) -> Any:
    """The identity of GPU `index` (default: the current one) for Triton's kernels.

    cpu = the GPU's name as a slug (nvidia-h200), threads = its multiprocessor count (so a MIG
    slice is another device), accelerator = name, compute capability and driver version,
    client = "triton" at Triton's version: a new driver or Triton starts a fresh cache.
    """
    from tunecache.device import Device

    return Device(*gpu_fields(index))


def _failures() -> tuple[type[Exception], ...]:
    """What Triton's own autotuner treats as "this config does not fit": skip, not raise."""
    found: list[type[Exception]] = []
    for module, names in (
        ("triton.runtime.errors", ("OutOfResources", "PTXASError")),
        ("triton.compiler.errors", ("CompileTimeAssertionFailure",)),
    ):
        with contextlib.suppress(ImportError):
            loaded = importlib.import_module(module)
            found.extend(getattr(loaded, n) for n in names if hasattr(loaded, n))
    return tuple(found)


_no_config_errors: dict[type, type[NoConfigError]] = {}


def triton_no_config_error(triton: Any) -> type[NoConfigError]:
    """The error an `early_config_prune` that keeps no config raises under this Triton: a
    NoConfigError (so a BadArgumentError, as tunecache raises them) that is a `triton.TritonError`
    too, as Triton's own "No valid autotuner configs after pruning" is, so that code written
    for `triton.autotune` catches it. Where Triton has no such base (or one that cannot be
    mixed in), NoConfigError itself."""
    base = getattr(triton, "TritonError", None)
    if not isinstance(base, type) or not issubclass(base, Exception):
        return NoConfigError
    found = _no_config_errors.get(base)
    if found is None:
        try:
            # Sound while TritonError is a plain Exception (3.6's has no __init__, no slots):
            # the two bases then share BaseException's layout and construction.
            found = type(
                "NoConfigError",
                (NoConfigError, base),
                {"__doc__": NoConfigError.__doc__, "__module__": __name__},
            )
        except TypeError:
            found = NoConfigError
        _no_config_errors[base] = found
    return found


#: outputs of at most this many values are compared on the host (`tensor_difference`): two
#: copies and numpy cost 0.2 ms there (16,384 fp16 values, tunecache.compare on a 2-core CPU),
#: about what the device path costs once warm, and load no kernel into the process (the
#: device path's first use costs 2.6-2.8 ms with tunecache.triton.gaps's kernel, 50-70 ms
#: with torch's subtraction and norm)
HOST_VALUES = 1 << 14


def tensor_difference(
    torch: Any,
    expected: Any,
    actual: Any,
    tolerance: float | None,
    host_values: int = HOST_VALUES,
    gaps: Callable[[Any, Any, Any], tuple[float, float] | None] | None = None,
) -> str | None:
    """`tunecache.compare.difference`'s rules for two torch tensors, worked out on their
    device (a 4096 x 4096 output compared on the host would cost more than its whole bench);
    anything else goes to `difference` itself. Floats are compared in float32 (float64 and
    complex128 for float64 and complex values): the largest finite gap within `tolerance`
    (default: the square root of the dtype's epsilon) of the reference's largest finite
    magnitude, NaNs where the reference has them, equal infinities. Integers and booleans
    exactly. Contiguous outputs of at most `host_values` values (in a dtype numpy has) are
    copied to the host and compared there by `difference` itself: the same rules, and no
    torch kernel to load. `gaps(torch, expected, actual)` works out the common case's two
    figures (the largest gap, the largest reference magnitude; NaN anywhere infinite) where it
    can (`tunecache.triton.gaps.float_gaps`, one Triton kernel), else None; then torch does."""
    tensor = torch.Tensor
    if not (isinstance(expected, tensor) and isinstance(actual, tensor)):
        from tunecache.triton.backend import difference

        return difference(expected, actual, tolerance)
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return (
            f"{actual.dtype} of shape {tuple(actual.shape)},"
            f" expected {expected.dtype} of shape {tuple(expected.shape)}"
        )
    count = expected.numel()
    if count == 0:
        return None
    if count <= host_values and expected.is_contiguous() and actual.is_contiguous():
        try:
            # Copies of contiguous memory (no kernel), each waiting for the launch before it;
            # detached, as an input that requires grad may be checked too (check_outputs=True).
            host = expected.detach().cpu().numpy(), actual.detach().cpu().numpy()
        except TypeError:
            host = None  # a dtype numpy lacks (bfloat16, float8): compared on the device
        if host is not None:
            from tunecache.triton.backend import difference

            return difference(*host, tolerance)
    if not (expected.is_floating_point() or expected.is_complex()):
        if torch.equal(expected, actual):
            return None
        unequal = int((expected != actual).sum())
        return f"{unequal} of {count} values differ (exact: {expected.dtype})"
    rtol = float(torch.finfo(expected.dtype).eps) ** 0.5 if tolerance is None else tolerance
    if not expected.is_complex():
        # The common case, agreement, from two figures: `gaps`'s one kernel, or torch's
        # subtraction and inf-norm (accumulated in float32), where every distinct torch kernel
        # a process meets for the first time costs it a module load. Only finite figures
        # accept: a NaN or an infinity anywhere (the reference's too: an infinite scale would
        # accept any gap) leaves it to the rules below, as does a dtype torch cannot
        # subtract (float8).
        figures = gaps(torch, expected, actual) if gaps is not None else None
        if figures is None:
            wide = torch.float64 if expected.dtype == torch.float64 else torch.float32
            norm = torch.linalg.vector_norm
            try:
                figures = (
                    float(norm(actual - expected, float("inf"), dtype=wide).item()),
                    float(norm(expected, float("inf"), dtype=wide).item()),
                )
            except RuntimeError:
                figures = (math.nan, math.nan)
        gap, scale = figures
        if math.isfinite(gap) and math.isfinite(scale) and gap <= rtol * (scale or 1.0):
            return None
    return _tensor_rules(torch, expected, actual, rtol)


def _tensor_rules(torch: Any, expected: Any, actual: Any, rtol: float) -> str | None:
    """`tensor_difference` element by element: NaNs, infinities, then the largest finite gap."""
    if expected.is_complex():
        wide = torch.complex128
    else:
        wide = torch.float64 if expected.dtype == torch.float64 else torch.float32
    ref, got = expected.to(wide), actual.to(wide)
    holes = ref.isnan()
    if bool((holes != got.isnan()).any()):
        return "NaN where the other is a number"
    huge = ref.isinf()
    if bool((huge != got.isinf()).any()) or bool((ref[huge] != got[huge]).any()):
        return "infinities differ"
    finite = ~(holes | huge)
    gap = float((got - ref).abs().where(finite, 0).max())
    scale = float(ref.abs().where(finite, 0).max()) or 1.0
    if gap <= rtol * scale:
        return None
    return (
        f"largest difference {gap:.3g}, {gap / scale:.3g} of the reference's largest"
        f" magnitude {scale:.3g} (tolerance {rtol:.3g})"
    )


def gpu_backend(device: Any, flush_l2: bool) -> Backend:
    """The backend of a decorated kernel: the current GPU through torch, Triton's default
    config, `GPU_BENCH`; `device` (a `tunecache.Device`) replaces the GPU's identity, and
    `flush_l2` evicts the L2 cache before each timed launch."""
    triton = _triton()
    torch = _torch()
    streams: dict[int, Any] = {}
    flushes: dict[int, Callable[[], object]] = {}

    def identity(index: int) -> Any:
        return device if device is not None else gpu_device(index)

    def fields(index: int) -> Fields:
        return device.fields if device is not None else gpu_fields(index)

    def sync() -> None:
        # The stream this thread launches on: a background tuner's own stream, or the
        # caller's; the host clock is read only once that work is done.
        torch.cuda.current_stream().synchronize()

    @contextlib.contextmanager
    def context(index: int, background: bool) -> Iterator[None]:
        with torch.cuda.device(index):
            if not background:
                yield
                return
            # The pending key's copies were queued on the caller's stream: wait for them
            # before benching on a stream of this thread's own.
            torch.cuda.synchronize(index)
            stream = streams.get(index)
            if stream is None:
                stream = streams[index] = torch.cuda.Stream(index)
            with torch.cuda.stream(stream):
                yield

    def flush(index: int) -> Callable[[], object] | None:
        if not flush_l2:
            return None
        found = flushes.get(index)
        if found is None:
            # Twice the L2 size, zeroed before each timed launch, as Triton's do_bench does
            # with 256 MB: a config's time then includes reading its inputs from memory.
            size = 2 * int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0))
            buffer = torch.empty(max(size, 1 << 20), dtype=torch.int8, device=f"cuda:{index}")
            found = flushes[index] = buffer.zero_
        return found

    return Backend(
        device=identity,
        current=torch.cuda.current_device,
        sync=sync,
        failures=_failures(),
        context=context,
        flush=flush,
        bench=GPU_BENCH,
        default_config=lambda: triton.Config({}, num_warps=4, num_stages=3, num_ctas=1),
        no_config_error=triton_no_config_error(triton),
        difference=lambda expected, actual, tolerance: tensor_difference(
            torch, expected, actual, tolerance, gaps=_gaps()
        ),
        fields=fields,
    )


def _gaps() -> Callable[[Any, Any, Any], tuple[float, float] | None]:
    """`tunecache.triton.gaps.float_gaps`, imported with the first output check."""
    from tunecache.triton.gaps import float_gaps

    return float_gaps
