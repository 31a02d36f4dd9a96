"""The output check's common case on the GPU in one small Triton kernel of tunecache's own.

`tensor_difference` (tunecache.triton.gpu) accepts two floating-point outputs when the largest
gap between them is within the tolerance of the reference's largest magnitude. Worked out with
torch's own subtraction and inf-norm, that costs a fresh process 50-70 ms the first time: each
distinct torch kernel a process meets loads its module, and the norm's reduction module alone
is ~54 ms on the H200 (tools/gpu/probe_check.py), more than the rest of the first key's check.
The same two maxima from one Triton kernel cost 2.6-2.8 ms there on first use, once Triton's
disk cache holds it: it is compiled once per Triton version, GPU architecture and output
dtype (~0.36 s on the H200, kept in Triton's cache like the user's kernels; its length is not
specialised on, but a tensor that does not start on a 16-byte boundary, or of 2**31 values or
more, is another variant, compiled once too).

`float_gaps(torch, expected, actual)` gives (largest gap, largest reference magnitude) in
float32, with every NaN in either tensor counted as an infinite gap and magnitude, so a
caller accepts only finite figures and leaves anything else to the element-by-element rules;
None where the kernel does not apply (not CUDA, not contiguous, not fp16/bf16/fp32) or cannot
run (said once, as a warning): then torch's path decides, as before.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from typing import Any

from tunecache.errors import TunecacheWarning

__all__ = ["BLOCK", "float_gaps"]

#: values each program of the kernel reduces: one pair of floats per block comes back
BLOCK = 4096

_lock = threading.Lock()
#: the compiled kernel (None: not built yet; False: it failed once, torch decides from then on)
_kernel: Any = None


def _build() -> Any:
    triton = importlib.import_module("triton")
    tl = importlib.import_module("triton.language")

    # The length is not specialised on (Triton would compile one variant for lengths that are
    # multiples of 16 and another for the rest): one compiled kernel per dtype. Unannotated
    # but for BLOCK: Triton reads annotations as its own (tl.constexpr).
    @triton.jit(do_not_specialize=["n"])  # type: ignore[untyped-decorator]
    def tunecache_output_gaps(  # type: ignore[no-untyped-def]
        expected_ptr,
        actual_ptr,
        out_ptr,
        n,
        BLOCK: tl.constexpr,  # type: ignore[name-defined]
    ):
        block = tl.program_id(0)
        offsets = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        expected = tl.load(expected_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        actual = tl.load(actual_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        gap = tl.abs(actual - expected)
        size = tl.abs(expected)
        # A NaN anywhere (a NaN operand, or inf - inf) becomes an infinite figure: finite
        # figures then mean every value in both tensors was finite.
        gap = tl.where(gap == gap, gap, float("inf"))
        size = tl.where(size == size, size, float("inf"))
        tl.store(out_ptr + 2 * block, tl.max(gap, axis=0))
        tl.store(out_ptr + 2 * block + 1, tl.max(size, axis=0))

    return tunecache_output_gaps


def _floats(torch: Any) -> tuple[Any, ...]:
    return tuple(
        getattr(torch, name) for name in ("float16", "bfloat16", "float32") if hasattr(torch, name)
    )


def float_gaps(torch: Any, expected: Any, actual: Any) -> tuple[float, float] | None:
    """The largest |actual - expected| and the largest |expected| of two CUDA tensors of one
    shape and dtype (fp16, bf16 or fp32, contiguous), in float32, a NaN anywhere counted as
    infinite; None where the kernel does not apply or could not run."""
    global _kernel
    if not (
        expected.dtype in _floats(torch)
        and getattr(expected, "is_cuda", False)
        and getattr(actual, "is_cuda", False)
        and expected.device == actual.device
        and expected.is_contiguous()
        and actual.is_contiguous()
    ):
        return None
    with _lock:
        if _kernel is None:
            try:
                _kernel = _build()
            except Exception as error:  # no usable Triton: torch's path, as before
                _kernel = False
                _said(error)
        kernel = _kernel
    if kernel is False:
        return None
    count = int(expected.numel())
    if count == 0:
        return 0.0, 0.0
    blocks = -(-count // BLOCK)
    out = torch.empty(2 * blocks, dtype=torch.float32, device=expected.device)
    try:
        # Triton launches on the current device: the tensors' own, for the launch.
        with torch.cuda.device(expected.device):
            kernel[(blocks,)](expected, actual, out, count, BLOCK=BLOCK)
    except Exception as error:  # it would not compile or launch here: torch's path from now
        with _lock:
            _kernel = False
        _said(error)
        return None
    # A copy to the host waits for the kernel (an error of the device's surfaces here, and is
    # raised as torch's own path would raise it); the last maxima are the host's (numpy).
    figures = out.view(blocks, 2).cpu().numpy()
    return float(figures[:, 0].max()), float(figures[:, 1].max())


def _said(error: Exception) -> None:
    warnings.warn(
        "tunecache: the output check's own Triton kernel cannot run here"
        f" ({type(error).__name__}: {error}); torch's kernels compare outputs instead",
        TunecacheWarning,
        stacklevel=3,
    )
