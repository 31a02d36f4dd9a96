"""`tunecache.triton.autotune`: a drop-in, persistent replacement for `triton.autotune`.

    import tunecache.triton

    @tunecache.triton.autotune(configs=[triton.Config({"BLOCK_M": 128, ...}, num_warps=8), ...],
                               key=["M", "N", "K"])
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ...): ...

    matmul_kernel[grid](a, b, c, M, N, K, ...)

Each key is tuned once per device and kept in the tunecache store, with every config's timings;
a key next to a tuned one is served its neighbour's config at once (docs/triton.md).

Triton, torch and the store are imported lazily: `import tunecache.triton` needs none of them,
and only applying the decorator to a kernel imports Triton and torch. A warm process answers a
stored key through the stdlib sqlite3 module; SQLAlchemy loads only when something is tuned.

The modules, from the bottom: `keys` (config names, tuning keys), `reuse` (what stored timings
answer for a changed config list), `options` (the decorator's arguments, checked), `backend`
(what the autotuner needs from the machine), `configs` (a kernel's configs and their pruning),
`measure` (timing configs), `state` (the store, per device), `background` (pending keys and
their thread), `autotuner` (the decision flow), `gpu` (the Triton and torch backend) and
`decorator` (`autotune`).
"""

from __future__ import annotations

from tunecache.triton.autotuner import Autotuner
from tunecache.triton.backend import Backend
from tunecache.triton.background import Pending
from tunecache.triton.decorator import autotune
from tunecache.triton.gpu import GPU_BENCH, driver_version, gpu_device
from tunecache.triton.keys import KeySpec, config_name
from tunecache.triton.options import UNSEEN, Options
from tunecache.triton.reuse import Plan, plan_reuse

__all__ = [
    "GPU_BENCH",
    "UNSEEN",
    "Autotuner",
    "Pending",
    "autotune",
    "config_name",
    "driver_version",
    "gpu_device",
    # the seams the CPU tests (and other backends) build on
    "Backend",
    "KeySpec",
    "Options",
    "Plan",
    "plan_reuse",
]
