"""What decoration and the first call of a stored key cost a warm process, on a CPU.

    python tools/bench_triton_cpu.py [--runs 9] [--base PATH] [--importtime] [--profile]

The CPU counterpart of tools/gpu/fresh.py's `warm` task (part 4 of tools/gpu/bench_triton.py),
for working on it without a GPU: stand-ins for `torch` and `triton` (one H200, Triton 3.6.0)
are put in `sys.modules` first, as a process that launched its kernel before has them loaded,
and a kernel-shaped object with Triton's launch interface is decorated with
`tunecache.triton.autotune` as fresh.py decorates it (`unseen="borrow"`, the output check on,
the store under a root of its own). A setup process tunes the key once and flushes its record;
once the store has held still for `warm.SETTLED` seconds, one process answers the key from the
store and keeps the warm start's file at exit; then each run is a fresh process (bytecode
compiled beforehand, PYTHONDONTWRITEBYTECODE unset, as an installed package runs) that times:

- the decoration: `import tunecache.triton` and applying the decorator;
- the first call of the stored key (the GPU backend on the stand-ins, the device identity, the
  store located, sqlite3 and one read, the launch), after a garbage collection, as fresh.py
  times it (there the driver's version comes from /proc; the stand-in's from "torch");
- the second call (one dict lookup and the launch);

"this" answers from the warm start's file; "store", the same tree with TUNECACHE_TRITON_WARM=0
on the same store, through the store, as every first call did before the warm start;

and a baseline process that does what Triton's `cache_results` path does on a hit, with no GPU:
read a JSON file of the key's config and launch it from a dict; and a floor process that does
only what a first call through SQLite cannot skip: import SQLite's C module, open the store
read-only, run the reader's two statements (the first parses the schema), launch. Every process
prints the modules each step imported. With `--base PATH`, a checkout of another tunecache (the
commit before a change: `mkdir /tmp/base && git archive HEAD~1 | tar -x -C /tmp/base`), the runs
alternate between the two trees, each with a store of its own, and the ratios of the medians are
printed side by side. `--importtime` prints `-X importtime` of one run of each tree;
`--profile` a cProfile of one first call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: the stand-ins, the kernel and its configs: the prelude of every child process
PRELUDE = """
import gc, sys, time, types, json
# What a process that imported torch and Triton has loaded already, of what tunecache imports:
# none of it is the decoration's or the first call's to pay for (nor, on the H200, was it).
import collections, collections.abc, contextlib, datetime, functools, hashlib, importlib, math
import operator, os, re, stat, threading, typing, urllib.parse, warnings, weakref
perf = time.perf_counter

def _module(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module

class Props:
    name, major, minor, multi_processor_count, L2_cache_size = "NVIDIA H200", 9, 0, 132, 60 << 20

class Stream:
    def synchronize(self): pass

class Device:
    def __init__(self, index): pass
    def __enter__(self): return self
    def __exit__(self, *exc): return False

cuda = types.SimpleNamespace(
    current_device=lambda: 0, get_device_properties=lambda index: Props(),
    current_stream=lambda: Stream(), device=Device, synchronize=lambda index=None: None,
)
class Tensor:
    def __init__(self, shape, dtype): self.shape, self.dtype = shape, dtype
class Dtype:
    def __init__(self, name): self.name = name
    def __str__(self): return "torch." + self.name
float16 = Dtype("float16")
_module("torch", cuda=cuda, Tensor=Tensor, float16=float16, int8=Dtype("int8"),
        version=types.SimpleNamespace(hip=None, cuda="12.8"),
        _C=types.SimpleNamespace(_cuda_getDriverVersion=lambda: 12080))
class TritonError(Exception): pass
class OutOfResources(TritonError): pass
class Config:
    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None,
                 pre_hook=None, ir_override=None):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook, self.ir_override = (
            num_ctas, maxnreg, pre_hook, ir_override)
    def all_kwargs(self):
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages,
                "num_ctas": self.num_ctas}
_module("triton", __version__="3.6.0", Config=Config, TritonError=TritonError)
_module("triton.runtime"); _module("triton.runtime.errors", OutOfResources=OutOfResources)
_module("triton.compiler"); _module("triton.compiler.errors")

class Kernel:
    \"\"\"A @triton.jit kernel's launch interface: run(*args, grid=, warmup=, **meta).\"\"\"
    arg_names = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K"]
    src = "def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M, BLOCK_N): ..."
    __name__ = "matmul_kernel"
    def __init__(self): self.launches = 0
    def run(self, *args, grid, warmup, **meta):
        self.launches += 1

CONFIGS = [Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
           for m, n, w, s in [(128, 256, 8, 3), (64, 256, 4, 4), (128, 128, 4, 4),
                              (128, 64, 4, 4), (64, 128, 4, 4), (128, 32, 4, 4),
                              (64, 32, 2, 5), (32, 64, 2, 5), (128, 256, 8, 4),
                              (256, 128, 8, 3), (256, 64, 4, 4), (64, 64, 4, 4)]]
KERNEL = Kernel()
SHAPE = 4096
ARGS = (Tensor((SHAPE, SHAPE), float16), Tensor((SHAPE, SHAPE), float16),
        Tensor((SHAPE, SHAPE), float16), SHAPE, SHAPE, SHAPE)
GRID = (1,)
root = sys.argv[1]
"""

#: tunes the key once, writes its record, and says the module of its tunecache
SETUP = """
import tunecache.triton as tct
kernel = tct.autotune(configs=CONFIGS, key=["M", "N", "K"], unseen="tune", root=root,
                      flush_l2=False)(KERNEL)
kernel[GRID](*ARGS)
assert kernel.wait_pending(timeout=60)
assert kernel.stats["tuned"] == 1, kernel.stats
print(json.dumps({"tunecache": sys.modules["tunecache"].__file__}))
"""

#: decoration and the first call of the stored key, as fresh.py's `warm` task measures them
WARM = """
profile = len(sys.argv) > 2 and sys.argv[2] == "profile"
before = set(sys.modules)
t0 = perf()
import tunecache.triton as tct
kernel = tct.autotune(configs=CONFIGS, key=["M", "N", "K"], unseen="borrow", root=root,
                      check_outputs=["c_ptr"])(KERNEL)
t1 = perf()
decorated = set(sys.modules)
gc.collect()  # as fresh.py's first_call: a collection lands wherever allocation counts trip it
if profile:
    import cProfile, pstats, io
    profiler = cProfile.Profile()
    profiler.enable()
t2 = perf()
kernel[GRID](*ARGS)
t3 = perf()
if profile:
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
    print(text.getvalue(), file=sys.stderr)
called = set(sys.modules)
t4 = perf()
kernel[GRID](*ARGS)
t5 = perf()
assert kernel.stats["exact"] == 1 and kernel.stats["tuned"] == 0, kernel.stats
print(json.dumps({
    "decoration": t1 - t0, "first": t3 - t2, "second": t5 - t4,
    "decoration modules": sorted(decorated - before), "first modules": sorted(called - decorated),
}))
"""

#: Triton's `cache_results` hit, without a GPU: a JSON file of the key's config, then a dict
BASELINE = """
import os
before = set(sys.modules)
t0 = perf()
class Autotuner:
    def __init__(self, fn, configs, key):
        self.fn, self.configs, self.key, self.cache = fn, configs, key, {}
    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)
    def run(self, *args, grid, **kwargs):
        named = dict(zip(self.fn.arg_names, args))
        key = tuple(named[k] for k in self.key) + tuple(
            str(a.dtype) for a in args if hasattr(a, "dtype"))
        config = self.cache.get(key)
        if config is None:
            with open(os.path.join(root, "triton-cache.json")) as fh:
                config = self.configs[json.load(fh)["index"]]
            self.cache[key] = config
        return self.fn.run(*args, grid=grid, warmup=False, **config.all_kwargs())
kernel = Autotuner(KERNEL, CONFIGS, ["M", "N", "K"])
t1 = perf()
decorated = set(sys.modules)
gc.collect()
t2 = perf()
kernel[GRID](*ARGS)
t3 = perf()
called = set(sys.modules)
t4 = perf()
kernel[GRID](*ARGS)
t5 = perf()
print(json.dumps({
    "decoration": t1 - t0, "first": t3 - t2, "second": t5 - t4,
    "decoration modules": sorted(decorated - before), "first modules": sorted(called - decorated),
}))
"""


#: what no change of tunecache's own code takes away from the first call: SQLite's C module
#: imported, the store opened read-only, the reader's two statements (the view's SQL, the schema
#: parsed by the first; the stored choice), the launch; the store's path and the key's text given
FLOOR = """
import glob, os
db = glob.glob(os.path.join(root, "tune", "*", "*", "cache.db"))[0]
config = CONFIGS[0]
before = set(sys.modules)
gc.collect()
t0 = perf()
import _sqlite3
conn = _sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0, check_same_thread=False)
conn.execute("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?",
             ("read_entries_v1",)).fetchall()
conn.execute("SELECT choice FROM read_entries_v1 WHERE key = ? AND checksum = ? AND device = ?"
             " AND status != 'rejected'", ("a_n1", "0" * 32, "0" * 32)).fetchone()
KERNEL.run(*ARGS, grid=GRID, warmup=False, **config.all_kwargs())
t1 = perf()
print(json.dumps({"decoration": 0.0, "first": t1 - t0, "second": 0.0,
                  "decoration modules": [], "first modules": sorted(set(sys.modules) - before)}))
"""


def _env(checkout: Path, warm: bool = True) -> dict[str, str]:
    """The child's environment: this checkout first on the path, bytecode written and read;
    without `warm`, the warm start off (TUNECACHE_TRITON_WARM=0: the store answers)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(checkout)
    env.pop("TUNECACHE_DIR", None)
    env.pop("TUNECACHE_TRITON_WARM", None)
    if not warm:
        env["TUNECACHE_TRITON_WARM"] = "0"
    return env


def _child(
    code: str,
    checkout: Path,
    root: Path,
    *extra: str,
    flags: tuple[str, ...] = (),
    warm: bool = True,
) -> tuple[dict[str, Any], str]:
    """Run one child process; its last line of output, as JSON, and its standard error."""
    done = subprocess.run(
        [sys.executable, *flags, "-c", PRELUDE + code, str(root), *extra],
        capture_output=True,
        text=True,
        cwd=checkout,
        env=_env(checkout, warm),
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child failed in {checkout}:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr


def _ms(values: list[float]) -> str:
    low, high = min(values) * 1e3, max(values) * 1e3
    return f"{statistics.median(values) * 1e3:6.2f} ms ({low:.2f}-{high:.2f})"


def _ours(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] == "tunecache"]


def _figures(runs: dict[str, list[dict[str, Any]]], sides: list[str], count: int) -> None:
    """Print each process's times, the modules each tree imported, and the ratios."""
    print(
        f"\nwarm process, stored key, stand-ins for torch and triton; median (range) of"
        f" {count} fresh processes each"
    )
    both: dict[str, float] = {}
    for name, got in runs.items():
        decoration = [g["decoration"] for g in got]
        first = [g["first"] for g in got]
        sums = [d + f for d, f in zip(decoration, first, strict=True)]
        both[name] = statistics.median(sums)
        print(
            f"  {name:<8} decoration {_ms(decoration)}, first call {_ms(first)},"
            f" both {_ms(sums)}, second call"
            f" {statistics.median(g['second'] for g in got) * 1e6:.0f} us"
        )
    for name in sides:
        mods = runs[name][0]
        print(
            f"  {name}: modules imported by decoration {len(mods['decoration modules'])}"
            f" ({len(_ours(mods['decoration modules']))} of tunecache's), by the first call"
            f" {len(mods['first modules'])} ({len(_ours(mods['first modules']))} of"
            " tunecache's)"
        )
        print(f"    decoration: {', '.join(mods['decoration modules'])}")
        print(f"    first call: {', '.join(mods['first modules'])}")
    if "base" in both:
        # Medians, and minima: on a shared machine a run that another process slowed is
        # an outlier of one side only, and the fastest run of each is the least disturbed.
        for what in ("decoration", "first"):
            this = [g[what] for g in runs["this"]]
            base = [g[what] for g in runs["base"]]
            ratio = statistics.median(this) / statistics.median(base)
            print(f"  this / base, {what}: {ratio:.3f} (minima: {min(this) / min(base):.3f})")
        low = {n: min(g["decoration"] + g["first"] for g in runs[n]) for n in ("this", "base")}
        print(
            f"  this / base, decoration + first call: {both['this'] / both['base']:.3f}"
            f" (minima: {low['this'] / low['base']:.3f})"
        )
    print(f"  this / store, decoration + first call: {both['this'] / both['store']:.2f}")
    for name in sides:
        ratio = both[name] / both["baseline"]
        print(f"  {name} / baseline, decoration + first call: {ratio:.2f}")
    for name in sides:
        print(f"  {name} / floor, decoration + first call: {both[name] / both['floor']:.2f}")


def main() -> None:
    """Set the stores up, run the fresh processes, print the figures side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--base", type=Path, help="another checkout to compare with")
    parser.add_argument("--importtime", action="store_true", help="-X importtime of one run")
    parser.add_argument("--profile", action="store_true", help="a cProfile of one first call")
    args = parser.parse_args()
    sides = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    # "store": this tree with its warm start off, on the same store: the first call answered
    # by the store, as every first call was before the warm start.
    sides["store"] = ROOT
    with tempfile.TemporaryDirectory() as scratch:
        roots = {name: Path(scratch) / name for name in [*sides, "baseline"]}
        roots["store"] = roots["this"]
        for name, checkout in sides.items():
            if name == "store":
                continue
            roots[name].mkdir()
            where, _ = _child(SETUP, checkout, roots[name])
            print(f"{name}: {where['tunecache']}")
        # A store written in the last 2 s keeps no warm start (warm.SETTLED): wait that out,
        # then one process per tree answers from its store and keeps the warm start at exit
        # (and writes the bytecode of what the first call imports).
        time.sleep(2.5)
        for name, checkout in sides.items():
            if name != "store":
                _child(WARM, checkout, roots[name])
        _child(WARM, ROOT, roots["this"], warm=False)
        roots["baseline"].mkdir()
        (roots["baseline"] / "triton-cache.json").write_text(json.dumps({"index": 0}))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in [*roots, "floor"]}
        codes = {"baseline": BASELINE, "floor": FLOOR}
        for r in range(args.runs):
            order = [*sides, "baseline", "floor"]
            for name in order if r % 2 == 0 else reversed(order):
                checkout = sides.get(name, ROOT)
                root = roots.get(name, roots["this"])
                code = codes.get(name, WARM)
                runs[name].append(_child(code, checkout, root, warm=name != "store")[0])
        _figures(runs, list(sides), args.runs)
        if args.importtime:
            for name, checkout in sides.items():
                _, err = _child(WARM, checkout, roots[name], flags=("-X", "importtime"))
                print(f"\n-X importtime, {name} (us: self | cumulative), tunecache and sqlite3:")
                for line in err.splitlines():
                    ours = "tunecache" in line or "sqlite" in line
                    if line.startswith("import time:") and ours:
                        print(f"  {line[len('import time:') :].rstrip()}")
        if args.profile:
            for name, checkout in sides.items():
                _, err = _child(WARM, checkout, roots[name], "profile")
                print(f"\nprofile of the first call, {name}:")
                for line in [line for line in err.splitlines() if line.strip()][:45]:
                    print(f"  {line[:150]}")


if __name__ == "__main__":
    main()
