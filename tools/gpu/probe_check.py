"""Where the output check's first use in a fresh process goes (issue 17: the first new key of a
process with `check_outputs` on costs 50-80 ms more than with it off).

    python tools/gpu/probe_check.py [--family matmul] [--runs 3]

Each measurement is a fresh child process that does what part 3 of bench_triton.py does before
the first call (operands made, every config launched once directly), then times one way of
comparing the kernel's output with a copy of it, as the first comparison of the process, to the
end of its GPU work:

- `clone`: the reference copy alone (a device-to-device copy);
- `sub`, `norm`: torch's subtraction, torch's inf-norm in float32;
- `difference`: tunecache.triton.gpu.tensor_difference on torch's path (no `gaps=`: what the
  check ran before tunecache.triton.gaps);
- `triton gap`: a small Triton kernel of this file (largest |a - b| and |a| per block), its
  compiled form already in Triton's disk cache (a child compiles it first, untimed);
- `difference, warmed in a thread`: the torch ops started on a second thread on tiny tensors
  while the main thread launches the first config 20 times (what a warm-up overlapped with the
  first configs' bench would cost the bench, and what is left for the comparison after it).

Each line gives the median of the runs in ms; the children alternate.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

VARIANTS = ["clone", "sub", "norm", "difference", "triton gap", "difference, warmed in a thread"]


def _gap_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def gap_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + 2 * pid, tl.max(tl.abs(a - b), axis=0))
        tl.store(out_ptr + 2 * pid + 1, tl.max(tl.abs(a), axis=0))

    return gap_kernel


def _triton_gap(torch: Any, kernel: Any, a: Any, b: Any) -> tuple[float, float]:
    n = a.numel()
    block = 4096
    blocks = (n + block - 1) // block
    out = torch.empty(2 * blocks, dtype=torch.float32, device=a.device)
    kernel[(blocks,)](a, b, out, n, BLOCK=block)
    host = out.cpu().numpy().reshape(-1, 2)
    return float(host[:, 0].max()), float(host[:, 1].max())


def child(family_name: str, variant: str) -> None:
    import torch

    family = importlib.import_module(family_name)
    ops = family.operands(family.FIRST)
    for config in family.CONFIGS:
        family.KERNEL[family.grid](*family.args(*ops), **config.all_kwargs())
    torch.cuda.synchronize()
    named = dict(zip(family.KERNEL.arg_names, family.args(*ops), strict=False))
    out = named[family.OUTPUTS[0]]
    norm = torch.linalg.vector_norm
    result: dict[str, float] = {}

    def timed(fn: Any) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    if variant == "compile":
        kernel = _gap_kernel()
        result["compile"] = timed(lambda: _triton_gap(torch, kernel, out, out.clone()))
    elif variant == "clone":
        result["first"] = timed(lambda: out.clone())
    else:
        ref = out.clone()
        torch.cuda.synchronize()
        if variant == "sub":
            result["first"] = timed(lambda: out - ref)
        elif variant == "norm":
            result["first"] = timed(lambda: norm(out, float("inf"), dtype=torch.float32).item())
        elif variant == "difference":
            from tunecache.triton.gpu import tensor_difference

            result["first"] = timed(lambda: tensor_difference(torch, ref, out, None))
        elif variant == "triton gap":
            t0 = time.perf_counter()
            kernel = _gap_kernel()
            result["define"] = (time.perf_counter() - t0) * 1e3
            result["first"] = timed(lambda: _triton_gap(torch, kernel, ref, out))
            result["again"] = timed(lambda: _triton_gap(torch, kernel, ref, out))
        else:
            from tunecache.triton.gpu import tensor_difference

            def warm() -> None:
                small = torch.zeros(4, dtype=out.dtype, device=out.device)
                tensor_difference(torch, small, small + 0, None, host_values=0)
                torch.cuda.synchronize()

            config = family.CONFIGS[0]
            alone = timed(
                lambda: [
                    family.KERNEL[family.grid](*family.args(*ops), **config.all_kwargs())
                    for _ in range(20)
                ]
            )
            thread = threading.Thread(target=warm)
            t0 = time.perf_counter()
            thread.start()
            beside = timed(
                lambda: [
                    family.KERNEL[family.grid](*family.args(*ops), **config.all_kwargs())
                    for _ in range(20)
                ]
            )
            thread.join()
            result["warm thread"] = (time.perf_counter() - t0) * 1e3
            result["20 launches alone"] = alone
            result["20 launches beside the warm-up"] = beside
            result["first"] = timed(lambda: tensor_difference(torch, ref, out, None))
    print(json.dumps(result))


def run(family: str, variant: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--family", family],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {variant} failed:\n{done.stderr[-3000:]}")
    got: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child")
    options = parser.parse_args()
    if options.child:
        child(options.family[0], options.child)
        return
    for family in options.family or ["matmul", "layernorm"]:
        print(f"== {family}: the first comparison of a fresh process, ms (median of runs)")
        print(
            "   compiling the Triton gap kernel (a cold disk cache the first time, for the first"
            f" family): {run(family, 'compile')}"
        )
        got: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for r in range(options.runs):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for variant in order:
                got[variant].append(run(family, variant))
        for variant, rows in got.items():
            keys = rows[0].keys()
            print(
                f"   {variant:<32} "
                + "; ".join(
                    f"{k} {statistics.median(r[k] for r in rows):.2f}"
                    f" ({', '.join(f'{r[k]:.1f}' for r in rows)})"
                    for k in keys
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
