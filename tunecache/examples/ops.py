"""Tunable numpy ops with genuine alternatives: the example workload's building blocks.

Each op is a `tunecache.Tunable` whose heuristic is what a numpy library would ship as its one
implementation, and whose other candidates are real algorithms that win at other shapes on some
machines. Every candidate returns the same result as the heuristic (to float rounding), so a
cache may pick any of them. Keys carry the sizes that decide the winner, so the resolver's
nearest-shape search can lend a decision to a shape that was never tuned.

- `conv2d` (``conv2d_F32_ci16_co16_h64_w64_kh3_kw3``): "same"-padded 2-D cross-correlation of one
  multi-channel image. im2col + one GEMM (heuristic), direct (sliding windows + tensordot), or
  FFT (batched real FFTs, channel mixing in the frequency domain, one batched inverse).
- `chain3` / `chain4` (``chain3_F32_a1500_b32_c1500_d32``): a product of 3 or 4 matrices, left
  to right (heuristic: what ``a @ b @ c`` does), right to left, or `numpy.linalg.multi_dot`,
  which picks the cheapest order itself for 5-30 microseconds of Python per call.
- `matmul` (``matmul_F32_m256_k128_n512``): one product with all BLAS threads (heuristic) or
  with the BLAS pool limited to one thread for the call, through threadpoolctl.

Einsum contractions are not among them. Measured here (tools/bench_ops.py prints it), a reshape
+ BLAS rewrite beat numpy's default ``optimize=False`` at every contraction these models would
use: by 1.8x for one attention head of one token, 9x at 64 tokens, 12-18x at 256 and 1024, and
`optimize="greedy"` was never the fastest. The one place einsum won was a weighted sum over a
middle axis of 3 channels, by 2 microseconds, within noise and far below what a whole-model run
can confirm. An op with no crossover needs a better default, not a cache, so it is left out
(issue 5 asks for exactly this).
"""

from __future__ import annotations

import functools
import itertools
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tunecache.dispatch import Tunable

if TYPE_CHECKING:
    # threadpoolctl ships no type information (no py.typed marker, no stubs).
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

__all__ = ["blas_controller", "chain3", "chain4", "conv2d", "matmul"]

Array = np.ndarray[Any, np.dtype[Any]]


def _dtype(*arrays: Array) -> tuple[str]:
    """The result's dtype as a signature token: "F32", "F64", "C64" (kind and bits, uppercase
    so it never reads as a dim)."""
    dtype = np.result_type(*arrays)
    return (f"{dtype.kind.upper()}{dtype.itemsize * 8}",)


# --- 2-D convolution ------------------------------------------------------------------------


def _conv_shape(x: Array, w: Array) -> tuple[int, int, int, int, int, int]:
    """(ci, co, h, w, kh, kw) of a call, or a clear error for arrays that do not fit."""
    if x.ndim != 3 or w.ndim != 4 or w.shape[1] != x.shape[0]:
        raise ValueError(
            f"conv2d takes an image (c_in, h, w) and weights (c_out, c_in, kh, kw), "
            f"got {x.shape} and {w.shape}"
        )
    co, ci, kh, kw = w.shape
    return (ci, co, x.shape[1], x.shape[2], kh, kw)


def _pad_same(x: Array, kh: int, kw: int) -> Array:
    """Zero padding so a (kh, kw) window fits at every pixel: (kh - 1) // 2 rows on top, the rest
    below, the same for columns (the convention of numpy's and scipy's "same" modes)."""
    top, left = (kh - 1) // 2, (kw - 1) // 2
    return np.pad(x, ((0, 0), (top, kh - 1 - top), (left, kw - 1 - left)))


def _conv_out(x: Array, w: Array, out: Array) -> Array:
    dtype = np.result_type(x, w)
    if dtype.kind in "iub" and out.dtype.kind not in "iub":
        # The FFT path computes integer products in floating point: round, never truncate
        # (2.9999 must come back as 3, as the other candidates' exact products do).
        out = np.rint(out)
    return out.astype(dtype, copy=False)


def _im2col(x: Array, w: Array) -> Array:
    """The heuristic: copy each kernel tap's shifted image into a (c_in*kh*kw, h*w) column
    matrix, then one GEMM with the (c_out, c_in*kh*kw) weights (Caffe's layout)."""
    ci, co, h, wd, kh, kw = _conv_shape(x, w)
    xp = _pad_same(x, kh, kw)
    cols = np.empty((ci, kh, kw, h, wd), dtype=xp.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, i : i + h, j : j + wd]
    out = w.reshape(co, -1) @ cols.reshape(ci * kh * kw, h * wd)
    return _conv_out(x, w, out.reshape(co, h, wd))


def _direct(x: Array, w: Array) -> Array:
    """Every window as a strided view (no Python loop over taps), contracted with the weights in
    one tensordot: no per-tap copies, which pays off for large kernels on few channels."""
    _, _, _, _, kh, kw = _conv_shape(x, w)
    windows = sliding_window_view(_pad_same(x, kh, kw), (kh, kw), axis=(1, 2))
    out = np.tensordot(w, windows, axes=((1, 2, 3), (0, 3, 4)))
    return _conv_out(x, w, out)


@functools.lru_cache(maxsize=256)
def fast_length(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n: a length numpy's pocketfft transforms quickly."""
    best = 1 << max(n - 1, 0).bit_length()
    five = 1
    while five < best:
        three = five
        while three < best:
            two = three
            while two < n:
                two *= 2
            best = min(best, two)
            three *= 3
        five *= 5
    return best


def _fft(x: Array, w: Array) -> Array:
    """FFT convolution with proper channel mixing: one batched rfft2 of every input channel, one
    of every kernel, a contraction over input channels per frequency, one batched irfft2.

    The transform covers the padded image; circular wrap-around only reaches the first kh - 1
    rows and kw - 1 columns, which are cropped. Its cost hardly depends on the kernel size, so it
    wins for long kernels and loses where c_out * c_in kernel transforms outweigh the work.
    """
    ci, co, h, wd, kh, kw = _conv_shape(x, w)
    xp = _pad_same(x, kh, kw)
    size = (fast_length(xp.shape[1]), fast_length(xp.shape[2]))
    spectra = np.fft.rfft2(xp, s=size)  # (ci, f1, f2)
    kernels = np.fft.rfft2(w[:, :, ::-1, ::-1], s=size)  # (co, ci, f1, f2): correlation
    freq = spectra.shape[1:]
    mixed = np.einsum(
        "ocf,cf->of", kernels.reshape(co, ci, -1), spectra.reshape(ci, -1), optimize=False
    )
    full = np.fft.irfft2(mixed.reshape(co, *freq), s=size)
    return _conv_out(x, w, full[:, kh - 1 : kh - 1 + h, kw - 1 : kw - 1 + wd])


conv2d: Tunable[[Array, Array], Array] = Tunable(
    "conv2d",
    dims=("ci", "co", "h", "w", "kh", "kw"),
    shape=_conv_shape,
    facts=_dtype,
    candidates={"im2col": _im2col, "direct": _direct, "fft": _fft},
    heuristic="im2col",
)
conv2d.__doc__ = """conv2d(x, w): "same"-padded cross-correlation of x (c_in, h, w) with
w (c_out, c_in, kh, kw), giving (c_out, h, w); candidates im2col (heuristic), direct, fft."""


# --- matrix chains --------------------------------------------------------------------------


def _chain_shape(*mats: Array) -> tuple[int, ...]:
    """(rows of the first, then the columns of each) of a chain of 2-D matrices that fit."""
    if any(m.ndim != 2 for m in mats) or any(
        a.shape[1] != b.shape[0] for a, b in itertools.pairwise(mats)
    ):
        shapes = " @ ".join(str(m.shape) for m in mats)
        raise ValueError(f"chain{len(mats)} takes 2-D matrices whose inner sizes match: {shapes}")
    return (mats[0].shape[0], *(m.shape[1] for m in mats))


def _left3(a: Array, b: Array, c: Array) -> Array:
    """The heuristic: (a @ b) @ c, the order Python's `a @ b @ c` evaluates."""
    out: Array = (a @ b) @ c
    return out


def _right3(a: Array, b: Array, c: Array) -> Array:
    out: Array = a @ (b @ c)
    return out


def _multi_dot3(a: Array, b: Array, c: Array) -> Array:
    out: Array = np.linalg.multi_dot([a, b, c])
    return out


def _left4(a: Array, b: Array, c: Array, d: Array) -> Array:
    """The heuristic: ((a @ b) @ c) @ d."""
    out: Array = ((a @ b) @ c) @ d
    return out


def _right4(a: Array, b: Array, c: Array, d: Array) -> Array:
    out: Array = a @ (b @ (c @ d))
    return out


def _multi_dot4(a: Array, b: Array, c: Array, d: Array) -> Array:
    out: Array = np.linalg.multi_dot([a, b, c, d])
    return out


chain3: Tunable[[Array, Array, Array], Array] = Tunable(
    "chain3",
    dims=("a", "b", "c", "d"),
    shape=_chain_shape,
    facts=_dtype,
    candidates={"left": _left3, "right": _right3, "multi_dot": _multi_dot3},
    heuristic="left",
)
chain3.__doc__ = """chain3(a, b, c): a @ b @ c for shapes (a, b) (b, c) (c, d); candidates left
(heuristic), right, multi_dot."""

chain4: Tunable[[Array, Array, Array, Array], Array] = Tunable(
    "chain4",
    dims=("a", "b", "c", "d", "e"),
    shape=_chain_shape,
    facts=_dtype,
    candidates={"left": _left4, "right": _right4, "multi_dot": _multi_dot4},
    heuristic="left",
)
chain4.__doc__ = """chain4(a, b, c, d): a @ b @ c @ d for shapes (a, b) (b, c) (c, d) (d, e);
candidates left (heuristic), right, multi_dot."""


# --- matmul with the BLAS thread count as part of the choice ---------------------------------

_controller: ThreadpoolController | None = None
_controller_saw_scipy = False


def blas_controller() -> ThreadpoolController:
    """The process's threadpoolctl controller, created on first use.

    threadpoolctl is the one library that finds every BLAS and OpenMP pool the process has
    loaded (numpy's OpenBLAS, scipy's own copy, MKL, BLIS) and sets their sizes. It scans the
    loaded libraries once, when created (about a millisecond), so it is scanned again if scipy
    was imported since: scipy's wheels bring a BLAS of their own.
    """
    global _controller, _controller_saw_scipy
    has_scipy = "scipy" in sys.modules
    if _controller is None or (has_scipy and not _controller_saw_scipy):
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
        _controller_saw_scipy = has_scipy
    return _controller


def _matmul_shape(a: Array, b: Array) -> tuple[int, int, int]:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"matmul takes 2-D matrices whose inner sizes match: {a.shape} @ {b.shape}"
        )
    return (a.shape[0], a.shape[1], b.shape[1])


def _all_threads(a: Array, b: Array) -> Array:
    """The heuristic: BLAS with its whole thread pool, numpy's default."""
    return a @ b


def _one_thread(a: Array, b: Array) -> Array:
    """The product with every BLAS pool limited to one thread for the call, then restored.

    The limit costs about 20 microseconds per call here (threadpoolctl reads and sets each
    pool's size, then restores it), so it only pays off for products of at least tens of
    microseconds. Where it wins: skinny or small products whose threading overhead exceeds the
    work, and any product while the other cores are busy, where OpenBLAS's spinning threads
    turn a 0.3 ms product into tens of milliseconds (measured on this shared 2-core machine).
    The limit is process-wide while it lasts: another Python thread's BLAS call in that window
    also runs on one thread.
    """
    with blas_controller().limit(limits=1, user_api="blas"):
        return a @ b


matmul: Tunable[[Array, Array], Array] = Tunable(
    "matmul",
    dims=("m", "k", "n"),
    shape=_matmul_shape,
    facts=_dtype,
    candidates={"all_threads": _all_threads, "one_thread": _one_thread},
    heuristic="all_threads",
)
matmul.__doc__ = """matmul(a, b): a @ b for 2-D a (m, k) and b (k, n); candidates all_threads
(heuristic) and one_thread."""
