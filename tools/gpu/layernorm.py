"""The second kernel family the GPU benchmarks tune: a row-wise layer norm, with 10 configs.

Not a matmul: a memory-bound normalisation, one program per row, that walks its row in blocks of
BLOCK_SIZE three times (the mean, the variance, then the normalised output), fp16 in and out,
fp32 arithmetic. Its configs are block sizes and warp counts; which one is fastest depends on the
row length N (a block much longer than the row wastes lanes, a short one adds loop trips), so
the tuning key is N, with M = 8192 rows. The same interface as matmul.py: CONFIGS, KEY, KERNEL,
grid, operands, args, error, short, and the shapes the benchmark uses.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

NAME = "layernorm"
TITLE = "fp16 layer norm, 10 configs, M = 8192 rows"


@triton.jit
def layer_norm_kernel(
    x_ptr,
    y_ptr,
    w_ptr,
    b_ptr,
    M,
    N,
    stride,
    eps,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    # First pass: the row's mean, accumulated block by block in fp32.
    total = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        total += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / N
    # Second pass: the variance around it (masked lanes contribute nothing).
    squares = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        centred = tl.where(cols < N, x - mean, 0.0)
        squares += centred * centred
    inv_std = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / N + eps)
    # Third pass: normalise, scale and shift.
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * inv_std * w + b).to(tl.float16), mask=mask)


KERNEL = layer_norm_kernel

#: 10 configs: (BLOCK_SIZE, warps)
CONFIGS = [
    triton.Config({"BLOCK_SIZE": block}, num_warps=warps)
    for block, warps in [
        (256, 1),
        (512, 2),
        (512, 4),
        (1024, 4),
        (1024, 8),
        (2048, 8),
        (2048, 16),
        (4096, 8),
        (4096, 16),
        (8192, 16),
    ]
]
#: the output arguments the output check compares (check_outputs)
OUTPUTS = ["y_ptr"]
KEY = ["N"]

M = 8192
EPS = 1e-5

#: the row lengths of part 1 (new keys), of the quick run, of part 4 (tuned, then served), the
#: warm-up key, the key a fresh process meets first, and the one a warm process finds stored
SHAPES = [4096, 4000, 1024, 1000, 8192, 8000, 2048, 2040, 1008]
QUICK_SHAPES = [4096, 1000, 8192, 2040]
TUNED = [4096, 1024, 8192]
UNSEEN = [4000, 4100, 1008, 1000, 8000]
QUICK_UNSEEN = [4000, 1000]
WARMUP = 3072
FIRST = 6144
STORED = 4096


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (meta["M"],)


def operands(n: int, seed: int = 0) -> tuple[Any, ...]:
    """Random fp16 rows X (M x n), weight and bias (n), and an output Y, on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed + n)
    x = torch.randn((M, n), device="cuda", dtype=torch.float16, generator=gen)
    w = torch.rand((n,), device="cuda", dtype=torch.float16, generator=gen) + 0.5
    b = torch.randn((n,), device="cuda", dtype=torch.float16, generator=gen)
    return x, w, b, torch.empty_like(x)


def args(x: Any, w: Any, b: Any, y: Any) -> tuple[Any, ...]:
    """The kernel's positional arguments for Y = layer_norm(X) * w + b."""
    m, n = x.shape
    return (x, y, w, b, m, n, x.stride(0), EPS)


def error(ops: tuple[Any, ...]) -> float:
    """The relative error of the output against torch's layer norm in fp32."""
    x, w, b, y = ops
    reference = torch.nn.functional.layer_norm(x.float(), (x.shape[1],), w.float(), b.float(), EPS)
    return float((y.float() - reference).norm() / reference.norm())


def short(config: Any) -> str:
    return f"B{config.kwargs['BLOCK_SIZE']} w{config.num_warps}"
