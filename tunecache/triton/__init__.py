"""`tunecache.triton.autotune`: a drop-in, persistent replacement for `triton.autotune`.

    import tunecache.triton

    @tunecache.triton.autotune(configs=[triton.Config({"BLOCK_M": 128, ...}, num_warps=8), ...],
                               key=["M", "N", "K"])
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ...): ...

    matmul_kernel[grid](a, b, c, M, N, K, ...)

Each key is tuned once per device and kept in the tunecache store, with every config's timings;
a key next to a tuned one is served its neighbour's config at once (docs/triton.md).

Decoration costs nothing: `import tunecache.triton` and applying the decorator import only the
decorator with the checks of its arguments (the other names here load on first use). Triton,
torch, the resolver and the bench are imported by a kernel's first call. A warm process answers
a key its store answered before from the warm start's small file (`warm`), else through the
stdlib sqlite3 module, and a tuned key's record is written behind its launch, through stdlib
sqlite3 too where the store exists (`writer`; `flush()` writes what is queued). SQLAlchemy loads
only to create or upgrade a store.

The modules, from the bottom: `warm` (what a warm process's first call needs: config names,
the raw key, the GPU's probe, the answers' file), `keys` (tuning keys), `reuse` (what stored
timings answer for a changed config list), `backend` (what the autotuner needs from the
machine), `configs` (a kernel's configs and their pruning), `measure` (timing configs), `writer`
(records written behind the launch), `stored` (a stored key's one read), `state` (the store, per
device), `kept` (the warm start's answers, written at exit), `background` (pending keys and their
thread), `flow` (what the first call sets up, and the path of a miss), `gpu` (the Triton and torch
backend), `jitkey` (Triton's installation hash, kept) and `autotuner` (`autotune`, the checks of
its arguments, and the kernel it returns).
"""

from __future__ import annotations

from tunecache.triton.autotuner import autotune

# Not `typing` at run time: applying the decorator loads only what remembers its arguments.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tunecache.triton.autotuner import UNSEEN, Autotuner, Options
    from tunecache.triton.backend import Backend
    from tunecache.triton.background import Pending
    from tunecache.triton.configs import NoConfigError
    from tunecache.triton.gpu import GPU_BENCH, driver_version, gpu_device
    from tunecache.triton.keys import KeySpec, config_name
    from tunecache.triton.reuse import Plan, plan_reuse
    from tunecache.triton.writer import flush

__all__ = [
    "GPU_BENCH",
    "UNSEEN",
    "Autotuner",
    "NoConfigError",
    "Pending",
    "autotune",
    "config_name",
    "driver_version",
    "flush",
    "gpu_device",
    # the seams the CPU tests (and other backends) build on
    "Backend",
    "KeySpec",
    "Options",
    "Plan",
    "plan_reuse",
]

# Each name, by the module that defines it: imported on first use (PEP 562), so that making
# and applying the decorator costs only the decorator's own modules.
_LAZY = {
    "GPU_BENCH": "gpu",
    "UNSEEN": "autotuner",
    "Autotuner": "autotuner",
    "NoConfigError": "configs",
    "Pending": "background",
    "config_name": "keys",
    "driver_version": "gpu",
    "flush": "writer",
    "gpu_device": "gpu",
    "Backend": "backend",
    "KeySpec": "keys",
    "Options": "autotuner",
    "Plan": "reuse",
    "plan_reuse": "reuse",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunecache.triton' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"tunecache.triton.{module}"), name)
    globals()[name] = value
    return value
