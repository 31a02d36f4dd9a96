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
  (`outputs_time`). With the check off, the child then times the check's torch work on the
  output after the first call, each op's first use in the process and its second one (the
  subtraction, the inf-norm reduction, `tensor_difference` whole), and the same comparison on
  the host on its first 2**20 values (a copy to the host, then `tunecache.compare`'s numpy
  rules, the path a small output could take): where the check's
  first use goes, for making it cheaper.
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


def _timed(fn: Any) -> float:
    """Seconds `fn()` takes to the end of its GPU work."""
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - t0


def check_first_use(family: Any, ops: tuple[Any, ...]) -> dict[str, float]:
    """The output check's torch work on the kernel's output, in ms, in a process that has not
    compared tensors yet: each op's first and second use, the whole comparison once warm, and
    the host comparison (copy both to the host, `tunecache.compare`'s rules)."""
    import torch

    from tunecache.compare import difference
    from tunecache.triton.gpu import tensor_difference

    named = dict(zip(family.KERNEL.arg_names, family.args(*ops), strict=False))
    out = named[family.OUTPUTS[0]]
    ref = out.clone()  # a device-to-device copy: no kernel of torch's own
    norm = torch.linalg.vector_norm
    times = {
        "sub first": _timed(lambda: out - ref),
        "sub again": _timed(lambda: out - ref),
        "norm first": _timed(lambda: norm(out, float("inf"), dtype=torch.float32).item()),
        "norm again": _timed(lambda: norm(out, float("inf"), dtype=torch.float32).item()),
        "difference warm": _timed(lambda: tensor_difference(torch, ref, out, None)),
    }
    # The host path is for small outputs: timed on the first 2**20 values (2 MiB in fp16).
    head, part = out.reshape(-1)[: 1 << 20], ref.reshape(-1)[: 1 << 20].cpu().numpy()
    times["host 1M copy"] = _timed(lambda: head.cpu())
    times["host 1M copy + compare"] = _timed(lambda: difference(part, head.cpu().numpy(), None))
    return {k: v * 1e3 for k, v in times.items()}


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
        # What tunecache.triton.jitkey did before the first launch (Triton's installation hash
        # served from the file beside the store, computed and kept there, or left to Triton).
        out["triton key"] = getattr(sys.modules.get("tunecache.triton.jitkey"), "outcome", None)
        # Who answered the first call: the warm start's file (no flow built, so its module
        # never loaded), or the flow (the store, or a bench).
        out["answered by"] = "flow" if "tunecache.triton.flow" in sys.modules else "warm start"
        out["bench_time"], out["store_time"] = kernel.bench_time, kernel.store_time
        out["outputs_time"] = kernel.outputs_time
        t0 = time.perf_counter()
        out["flushed"] = kernel.wait_pending(timeout=120)
        out["flush"] = time.perf_counter() - t0
        out["imported_by_flush"] = sorted(set(heavy()) - set(imported_first))
    else:
        out["benched"] = getattr(kernel, "bench_time", None) is not None
    out["second"] = first_call(kernel, family, ops)
    if task == "first" and mode == "tunecache" and options.no_check:
        out["check_first_use"] = check_first_use(family, ops)
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
