"""Fresh processes for tools/gpu/bench_triton.py: the first new key of a process, and the first
call of a stored key in a warm process, each autotuner in a process of its own.

    python tools/gpu/fresh.py first|warm FAMILY MODE SHAPE [--root DIR] [--preload] [--profile]
                              [--no-check]

FAMILY is a module of this folder (matmul, layernorm); MODE is `triton` (triton.autotune;
cache_results for `warm`) or `tunecache`. The child prints one JSON line last. The decoration is
timed with tunecache's import: work moved there from the first call must still count.

- `first`: every config is launched once directly first (the kernel's modules loaded, as in any
  process that ran it before), then the first call of a key no autotuner has seen is timed, to
  the end of its GPU work: the whole tune for Triton; for tunecache the bench and the launch, its
  record written behind. Then `wait_pending()` (the flush) is timed on its own, and the child
  says whether SQLAlchemy or Alembic were imported by the first call and by the flush.
  tunecache's output check (`check_outputs`) is on, as in every tuning here, unless
  `--no-check`: part 3 runs both, so the check's first use in a fresh process (the torch
  kernels it loads) is measured, not estimated; the child also says the check's own time
  (`outputs_time`).
- `warm`: the first call of a key whose decision is on disk; with `--preload`, the configs the
  autotuners picked are launched directly first, so the first call measures only the lookup.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

HEAVY = {"sqlalchemy", "alembic"}


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def heavy() -> list[str]:
    """SQLAlchemy and Alembic, if this process imported them."""
    return sorted({name.split(".")[0] for name in sys.modules} & HEAVY)


def first_call(kernel: Any, family: Any, ops: tuple[Any, ...]) -> float:
    """Seconds from a call to the end of its GPU work (a garbage collection first, for every
    autotuner alike: one lands wherever allocation counts trip it, tens of ms with torch)."""
    gc.collect()
    _sync()
    t0 = time.perf_counter()
    kernel[family.grid](*family.args(*ops))
    _sync()
    return time.perf_counter() - t0


def launch_config(family: Any, config: Any, ops: tuple[Any, ...]) -> None:
    """One direct launch of a config, no autotuner."""
    family.KERNEL[family.grid](*family.args(*ops), **config.all_kwargs())


def _decorate(
    mode: str, family: Any, root: str | None, warm: bool, check: bool = True
) -> tuple[Any, float]:
    t0 = time.perf_counter()
    if mode == "triton":
        import triton

        kernel = triton.autotune(configs=family.CONFIGS, key=family.KEY, cache_results=warm)(
            family.KERNEL
        )
    else:
        import tunecache.triton as tct

        kernel = tct.autotune(
            configs=family.CONFIGS,
            key=family.KEY,
            unseen="borrow" if warm else "tune",
            root=root,
            # The output check on, as in every tuning here (off only for part 3's comparison).
            check_outputs=family.OUTPUTS if check else False,
        )(family.KERNEL)
    return kernel, time.perf_counter() - t0


def child(task: str, name: str, mode: str, shape: int, root: str | None, options: Any) -> None:
    """One fresh process's measurement, printed as a JSON line."""
    import torch

    family = importlib.import_module(name)
    before = set(sys.modules)
    kernel, decorate = _decorate(mode, family, root, task == "warm", not options.no_check)
    decorated = set(sys.modules)
    ops = family.operands(shape)
    preload = (
        family.CONFIGS
        if task == "first"
        else [family.CONFIGS[int(i)] for i in (options.preload or "").split(",") if i]
    )
    for config in preload:
        launch_config(family, config, ops)
    torch.cuda.synchronize()
    profiler = None
    if options.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    loaded = set(sys.modules)
    first = first_call(kernel, family, ops)
    called = set(sys.modules)
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        print(text.getvalue(), file=sys.stderr)
    imported_first = heavy()
    stats = getattr(kernel, "stats", None)
    out: dict[str, Any] = {
        "first": first,
        "decorate": decorate,
        "imported": imported_first,
        "stats": stats,
        "error": family.error(ops),
        # What decoration and the first call imported (the first call's after the preloads).
        "modules": {
            "decoration": sorted(decorated - before),
            "first call": sorted(called - loaded),
            "sqlite3 before": "sqlite3" in before,
        },
    }
    if mode == "tunecache":
        out["bench_time"], out["store_time"] = kernel.bench_time, kernel.store_time
        out["outputs_time"] = kernel.outputs_time
        t0 = time.perf_counter()
        out["flushed"] = kernel.wait_pending(timeout=120)
        out["flush"] = time.perf_counter() - t0
        out["imported_by_flush"] = sorted(set(heavy()) - set(imported_first))
    else:
        out["benched"] = getattr(kernel, "bench_time", None) is not None
    out["second"] = first_call(kernel, family, ops)
    print(json.dumps(out))


def run(
    task: str,
    family: str,
    mode: str,
    shape: int,
    root: Path | None = None,
    preload: str = "",
    profile: bool = False,
    importtime: bool = False,
    check: bool = True,
) -> dict[str, Any]:
    """Run one child and return what it measured (its profile printed, if asked; with
    `importtime`, Python's -X importtime lines of tunecache and sqlite3 printed; with `check`
    False, tunecache's output check off)."""
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), __file__]
    command += [task, family, mode, str(shape)]
    if root is not None:
        command += ["--root", str(root)]
    if preload:
        command += ["--preload", preload]
    if profile:
        command.append("--profile")
    if not check:
        command.append("--no-check")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"child {task} {family} {mode} {shape} failed:\n{done.stderr[-3000:]}")
    if profile:
        print(f"   profile of the first call, {family} {mode}:", flush=True)
        for line in [line for line in done.stderr.splitlines() if line.strip()][:40]:
            print(f"     {line[:150]}", flush=True)
    if importtime:
        print(f"   -X importtime, {family} {mode} (us: self | cumulative), tunecache and sqlite3:")
        for line in done.stderr.splitlines():
            if line.startswith("import time:") and ("tunecache" in line or "sqlite" in line):
                print(f"     {line[len('import time:') :].rstrip()}", flush=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", choices=["first", "warm"])
    parser.add_argument("family")
    parser.add_argument("mode", choices=["triton", "tunecache"])
    parser.add_argument("shape", type=int)
    parser.add_argument("--root")
    parser.add_argument("--preload")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-check", action="store_true", help="tunecache's output check off")
    options = parser.parse_args()
    child(options.task, options.family, options.mode, options.shape, options.root, options)


if __name__ == "__main__":
    main()
