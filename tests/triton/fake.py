"""A CPU stand-in for Triton, for the tests of tunecache.triton (no Triton, no GPU).

The configs are plain value objects shaped like `triton.Config`; the kernel is a real CPU kernel
with Triton's launch interface (`run(*args, grid=, warmup=, **meta)`, `arg_names`), computed by
numpy; the store is a real SQLite file under the test's cache root. The machinery is the one
`tunecache.triton.autotune` builds, with a CPU `Backend` in place of the GPU one.

The adaptive bench reads the kernel's own clock, which advances by a fixed cost per launch:
which config wins, and how many samples each gets, is the same on any machine, however loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunecache.device import Device
from tunecache.triton import Autotuner, Backend, Options

GPU = Device(
    cpu="test-gpu",
    threads=132,
    accelerator="test-gpu-sm90-driver-1-0",
    client="triton",
    client_version="3.6.0",
)
# Short samples and a small budget, on the kernel's clock: its configs differ 40-fold, not by 5%.
FAST = {"sample_time": 3e-4, "min_samples": 3, "max_samples": 4, "budget": 0.5}
#: seconds on the kernel's clock that one program (a row block) takes per unit of WORK
PROGRAM_TIME = 2e-6


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
    """out = a @ b (+ OFF), row block by row block, computed WORK times over; a BLOCK over 128
    does not fit. `accumulate` adds into out instead; `bump` adds 1 to `a` in place afterwards."""

    name: str = "matmul_kernel"
    accumulate: bool = False
    bump: bool = False
    src: str = "def matmul_kernel(a, b, out, M, N, K, BLOCK, WORK): ..."
    arg_names: list[str] = field(default_factory=lambda: ["a", "b", "out", "M", "N", "K"])
    launches: list[dict[str, Any]] = field(default_factory=list)
    #: the kernel's clock: PROGRAM_TIME x WORK for each program of each launch that ran
    elapsed: float = 0.0

    @property
    def __name__(self) -> str:
        return self.name

    def clock(self) -> float:
        """The time this kernel's launches took, by its own clock (the bench's `clock`)."""
        return self.elapsed

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
        # A config with OFF set computes a wrong answer (off by OFF everywhere), in one pass.
        result += meta.get("OFF", 0)
        if self.accumulate:
            out += result
        else:
            out[...] = result
        if self.bump:
            a += 1
        self.elapsed += PROGRAM_TIME * work * -(-m // block)


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (-(-meta["M"] // meta["BLOCK"]),)


def configs() -> list[Config]:
    """A fast config, a slow one, and one that does not fit."""
    return [
        Config({"BLOCK": 32, "WORK": 40}),
        Config({"BLOCK": 64, "WORK": 1}, num_warps=8),
        Config({"BLOCK": 256, "WORK": 1}),
    ]


def backend(kernel: CpuKernel | None = None, **more: Any) -> Backend:
    """The CPU backend; the bench times `kernel` by its own clock."""
    bench = FAST if kernel is None else {**FAST, "clock": kernel.clock}
    return Backend(device=lambda index: GPU, failures=(OutOfResources,), bench=bench, **more)


def tuner(
    kernel: CpuKernel,
    cfgs: list[Config] | None = None,
    key: list[str] | None = None,
    **options: Any,
) -> Autotuner:
    """What `@tunecache.triton.autotune(configs, key, **options)` makes of the kernel."""
    cfgs = configs() if cfgs is None else cfgs
    return Autotuner(kernel, Options(cfgs, key or ["M", "N", "K"], **options), backend(kernel))


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
    """The entry stored for `launch(kernel, m)`'s key, once the writer has written what this
    process queued."""
    from tunecache.cache import Cache
    from tunecache.triton import flush

    assert flush(timeout=60)
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
