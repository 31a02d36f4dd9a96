"""The kernel the GPU benchmarks tune: Triton's tutorial fp16 matmul, with 12 configs.

The kernel is the grouped-ordering matmul of Triton's matrix-multiplication tutorial (fp16 in,
fp32 accumulation, fp16 out); the configs are the tutorial's 8 fp16 configs plus 4 larger tiles
that fit an H100/H200's 228 KB of shared memory. `OVERSIZED` does not fit: it checks that a
config failing with OutOfResources is recorded and skipped. The interface the benchmark uses
for every kernel family (layernorm.py has the same): CONFIGS, KEY, KERNEL, grid, operands, args,
error, short, and the shapes of each part.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

NAME = "matmul"
TITLE = "fp16 matmul, 12 configs, N = K = 4096"


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # Groups of GROUP_SIZE_M row blocks walk the columns together, so their A tiles stay in L2.
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def _config(m: int, n: int, k: int, stages: int, warps: int) -> Any:
    return triton.Config(
        {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 8},
        num_stages=stages,
        num_warps=warps,
    )


#: 12 configs: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps)
CONFIGS = [
    _config(*c)
    for c in [
        (128, 256, 64, 3, 8),
        (64, 256, 32, 4, 4),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (128, 32, 32, 4, 4),
        (64, 32, 32, 5, 2),
        (32, 64, 32, 5, 2),
        (128, 256, 64, 4, 8),
        (256, 128, 64, 3, 8),
        (128, 128, 64, 4, 8),
        (64, 64, 64, 4, 4),
    ]
]
#: 4 stages of a 128x128 A tile and a 128x256 B tile in fp16: 384 KB of shared memory, more than
#: the 228 KB of an H100/H200, so launching it raises OutOfResources
OVERSIZED = _config(128, 256, 128, 4, 8)

KERNEL = matmul_kernel
#: the output arguments the output check compares (check_outputs)
OUTPUTS = ["c_ptr"]
KEY = ["M", "N", "K"]

N = K = 4096

#: the sizes M of part 1 (new keys), of the quick run, of part 4 (tuned, then served), the
#: warm-up key, the key a fresh process meets first, and the one a warm process finds stored
SHAPES = [4096, 4000, 1024, 1000, 16, 17, 18, 4095, 1008]
QUICK_SHAPES = [4096, 1000, 16, 17]
TUNED = [4096, 1024, 16]
UNSEEN = [4000, 1008, 4095, 1000, 17]
QUICK_UNSEEN = [4095, 17]
WARMUP = 2048
FIRST = 3000
STORED = 4096


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (
        triton.cdiv(meta["M"], meta["BLOCK_SIZE_M"]) * triton.cdiv(meta["N"], meta["BLOCK_SIZE_N"]),
    )


def operands(m: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """Random fp16 A (m x K), B (K x N) and an output C, on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed + m)
    a = torch.randn((m, K), device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn((K, N), device="cuda", dtype=torch.float16, generator=gen)
    return a, b, torch.empty((m, N), device="cuda", dtype=torch.float16)


def args(a: Any, b: Any, c: Any) -> tuple[Any, ...]:
    """The kernel's positional arguments for C = A @ B."""
    m, k = a.shape
    _, n = b.shape
    return (
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )


def error(ops: tuple[Any, ...]) -> float:
    """The relative error of C against A @ B in fp32."""
    a, b, c = ops
    reference = a.float() @ b.float()
    return float((c.float() - reference).norm() / reference.norm())


def short(config: Any) -> str:
    k = config.kwargs
    return (
        f"{k['BLOCK_SIZE_M']}x{k['BLOCK_SIZE_N']}x{k['BLOCK_SIZE_K']}"
        f" s{config.num_stages} w{config.num_warps}"
    )
