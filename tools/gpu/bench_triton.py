"""Issue 17's targets on a GPU: tunecache.triton.autotune beside triton.autotune, in one run, for
two kernel families.

    TUNECACHE_DIR=/tmp/tc python tools/gpu/bench_triton.py [--quick] [--family NAME] [--profile]

The families (each a module of this folder with the same interface): Triton's tutorial fp16
matmul with 12 configs (matmul.py), and a row-wise fp16 layer norm with 10 configs
(layernorm.py), a memory-bound kernel that is not a matmul. For each, autotuners wrap the same
JITFunction: triton.autotune with cache_results off and on, and tunecache.triton.autotune (with
and without its L2 flush). Fairness: every config is compiled and launched once at every shape
before any timing, so tuning times compare benching, not compiling. Per family it prints:

1. new-key tuning time in this process (bench, decision, the record handed to the writer)
   against Triton's, for every shape after each autotuner's first;
2. the runtime of each autotuner's pick over Triton's pick (triton.testing.do_bench medians, the
   picks interleaved round by round);
3. the first new key of a fresh process (tools/gpu/fresh.py): Triton's tune, tunecache's with
   its store on disk, with no store yet, and with the store on disk and the output check off
   (the check's first use in a fresh process, paired run by run); the flush timed on its own;
4. the first call of a stored key in a warm process, decoration timed with it, end to end and
   with the kernel's modules preloaded;
5. unseen shapes next to tuned ones: time to first call, and runtime over a full tune's pick
   (a shape whose neighbour Triton compiles apart is tuned at once, not borrowed);

then every target of issue 17 for both families, each with its figure and verdict. Triton's
compiled kernels go to a fresh TRITON_CACHE_DIR under /tmp unless one is set.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

import fresh  # noqa: E402
from common import (  # noqa: E402
    FIRST_RUNS,
    TARGET_BORROW,
    TARGET_DECORATE,
    TARGET_PICK,
    TARGET_PRELOADED,
    TARGET_TUNE,
    TARGET_WARM,
    WARM_RUNS,
    say,
    verdict,
)
from processes import first_new_key, warm_first_call  # noqa: E402

FAMILIES = ("matmul", "layernorm")


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def launch_config(family: Any, config: Any, ops: tuple[Any, ...]) -> Callable[[], None]:
    a = family.args(*ops)
    meta = config.all_kwargs()
    return lambda: family.KERNEL[family.grid](*a, **meta)


# -- setting up -----------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    import torch
    import triton

    import tunecache
    import tunecache.triton as tct

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit", "--format=csv"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    device = tct.gpu_device(0)
    return {
        "gpu": props.name,
        "multiprocessors": str(props.multi_processor_count),
        "compute capability": f"{props.major}.{props.minor}",
        "L2": f"{props.L2_cache_size / 2**20:.0f} MiB",
        "driver": tct.driver_version(),
        "cuda (torch)": str(torch.version.cuda),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "tunecache": tunecache.__version__,
        "python": platform.python_version(),
        "bytecode": "written" if not sys.flags.dont_write_bytecode else "not written (precompiled)",
        "tunecache device": f"{device.cpu}-t{device.threads} ({device.accelerator})",
        "nvidia-smi": smi.replace("\n", " | "),
    }


def precompile(family: Any, shapes: list[int], ops: dict[int, Any]) -> float:
    """Compile every config at every shape's specialisation, launch each once, check it."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    try:
        from triton.runtime._async_compile import AsyncCompileMode

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 8) as pool, AsyncCompileMode(pool):
            for shape in shapes:
                for config in family.CONFIGS:
                    family.KERNEL.warmup(
                        *family.args(*ops[shape]), grid=(1,), **config.all_kwargs()
                    )
    except Exception as error:  # the launches below compile in order instead
        say(f"  (parallel compile unavailable: {type(error).__name__}: {error})")
    for shape in shapes:
        for config in family.CONFIGS:
            ops[shape][-1].fill_(float("nan"))
            launch_config(family, config, ops[shape])()
            _sync()
            err = family.error(ops[shape])
            if not err < 1e-2:
                raise SystemExit(f"wrong result: {shape} {config}: relative error {err}")
    _sync()
    return time.perf_counter() - t0


def first_call(kernel: Any, family: Any, ops: tuple[Any, ...]) -> float:
    return fresh.first_call(kernel, family, ops)


def median_ms(fn: Callable[[], None]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))


def compare(family: Any, configs: list[Any], ops: tuple[Any, ...], rounds: int) -> dict[str, float]:
    """Median do_bench time (ms) of each distinct config, interleaved round by round."""
    import tunecache.triton as tct

    distinct = {tct.config_name(c): c for c in configs}
    names = list(distinct)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(median_ms(launch_config(family, distinct[name], ops)))
    return {n: statistics.median(t) for n, t in times.items()}


# -- 1 and 2: new keys in this process, and the picks ---------------------------------------------


def tuning(family: Any, shapes: list[int], ops: dict[int, Any], root: Path) -> dict[str, Any]:
    """Part 1: every autotuner tunes every shape once; first-call times and picks."""
    import triton

    import tunecache.triton as tct

    configs, key = family.CONFIGS, family.KEY
    tuners: dict[str, Any] = {
        "triton": triton.autotune(configs=configs, key=key)(family.KERNEL),
        "triton cache_results": triton.autotune(configs=configs, key=key, cache_results=True)(
            family.KERNEL
        ),
        # The output check on (issue 17 item 5): each config's output compared with the first's.
        "tunecache": tct.autotune(
            configs=configs, key=key, unseen="tune", check_outputs=family.OUTPUTS
        )(family.KERNEL),
        "tunecache no flush": tct.autotune(
            configs=configs,
            key=key,
            unseen="tune",
            flush_l2=False,
            root=root,
            check_outputs=family.OUTPUTS,
        )(family.KERNEL),
    }
    names = list(tuners)
    say(f"warm-up key {family.WARMUP}, each autotuner's first key in this process (untimed below):")
    for name in names:
        say(f"  {name:<22} {first_call(tuners[name], family, ops[family.WARMUP]) * 1e3:8.1f} ms")
    # The warm-up keys' records are written before timing starts: the figures below are later
    # keys, each record written behind its launch while the next key is timed.
    tct.flush()
    times: dict[str, dict[int, float]] = {n: {} for n in names}
    picks: dict[str, dict[int, Any]] = {n: {} for n in names}
    spent: dict[int, tuple[float, float]] = {}
    checks: dict[int, float] = {}
    for i, shape in enumerate(shapes):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            tuned_before = getattr(tuners[name], "stats", {}).get("tuned", 0)
            times[name][shape] = first_call(tuners[name], family, ops[shape])
            picks[name][shape] = tuners[name].best_config
            if name == "tunecache" and tuners[name].stats["tuned"] > tuned_before:
                spent[shape] = (tuners[name].bench_time, tuners[name].store_time)
                checks[shape] = tuners[name].outputs_time or 0.0
    flushed = time.perf_counter()
    tct.flush()
    flushed = time.perf_counter() - flushed
    say()
    say(f"1. {family.NAME}: new-key tuning time in this process (every config compiled before)")
    say(f"{'shape':>6} " + " ".join(f"{n:>22}" for n in names) + "   tunecache / triton")
    for shape in shapes:
        cells = " ".join(f"{times[n][shape] * 1e3:19.1f} ms" for n in names)
        say(f"{shape:>6} {cells}   {times['tunecache'][shape] / times['triton'][shape]:.3f}")
    notes = []
    for shape in shapes:
        if shape in spent:
            bench, store = spent[shape]
            rest = times["tunecache"][shape] - bench - store
            notes.append(f"{shape}: {bench * 1e3:.0f} + {store * 1e3:.2f} + {rest * 1e3:.0f}")
        else:
            notes.append(f"{shape}: not tuned")
    say("   tunecache's first call per shape, ms: bench (one untimed launch per config")
    say("   included) + handing the record to the writer + the rest (key, lookups, launch):")
    say("   " + "; ".join(notes))
    total = {n: sum(times[n].values()) for n in names}
    ratio = total["tunecache"] / total["triton"]
    worst = max(times["tunecache"][s] / times["triton"][s] for s in shapes)
    say(
        f"   all shapes: tunecache {total['tunecache']:.3f} s, triton {total['triton']:.3f} s;"
        f" the writer's flush afterwards {flushed * 1e3:.1f} ms"
    )
    say(
        f"   ratio tunecache / triton: {ratio:.3f} overall, {worst:.3f} worst shape"
        f" (no flush: {total['tunecache no flush'] / total['triton']:.3f});"
        f" target <= {TARGET_TUNE}: {verdict(worst <= TARGET_TUNE)}"
    )
    wrong = _refused(tuners["tunecache"], family, ops, shapes)
    checked = sum(checks.values())
    benched = sum(b for b, _ in spent.values())
    say(
        f"   the output check ({family.OUTPUTS} of every config against the first config's, on"
        f" the GPU): {checked * 1e3:.1f} ms of the {benched * 1e3:.0f} ms benched"
        f" ({checked / benched:.1%}); configs recorded wrong: {wrong or 'none'}"
    )
    return {
        "tuners": tuners,
        "times": times,
        "picks": picks,
        "tune_worst": worst,
        "check": (checked, benched, wrong),
    }


def _refused(kernel: Any, family: Any, ops: dict[int, Any], shapes: list[int]) -> list[str]:
    """The configs the output check recorded as wrong, at any shape (their records read back)."""
    import tunecache.triton as tct
    from tunecache.cache import Cache

    tct.flush()
    found = []
    with Cache.open(device=tct.gpu_device(0)) as cache:
        for shape in shapes:
            entry = cache.get(kernel.key(*family.args(*ops[shape])), candidates=kernel.candidates)
            record = cache.record(entry) if entry is not None else None
            for c in record.candidates if record is not None else ():
                if c.error and c.error.startswith("wrong output"):
                    found.append(f"{shape}: {c.name}")
    return found


def picks_report(
    family: Any, shapes: list[int], ops: dict[int, Any], part1: Any, rounds: int
) -> float:
    """Part 2: the runtime of each pick over Triton's pick, by one method, interleaved."""
    import tunecache.triton as tct

    picks = part1["picks"]
    say()
    say(f"2. {family.NAME}: runtime of the pick / runtime of Triton's pick ({rounds} rounds)")
    say(
        f"{'shape':>6} {'triton pick':>18} {'tunecache pick':>18} {'tc/triton':>10}"
        f" {'no-flush/tri':>13} {'tri cache/tri':>14}"
    )
    worst = 0.0
    for shape in shapes:
        order = ("triton", "tunecache", "tunecache no flush", "triton cache_results")
        ms = compare(family, [picks[n][shape] for n in order], ops[shape], rounds)
        r = [
            ms[tct.config_name(picks[n][shape])] / ms[tct.config_name(picks["triton"][shape])]
            for n in order
        ]
        worst = max(worst, r[1])
        say(
            f"{shape:>6} {family.short(picks['triton'][shape]):>18}"
            f" {family.short(picks['tunecache'][shape]):>18} {r[1]:10.3f} {r[2]:13.3f} {r[3]:14.3f}"
        )
    say(
        f"   worst tunecache/triton: {worst:.3f};"
        f" target <= {TARGET_PICK}: {verdict(worst <= TARGET_PICK)}"
    )
    say("   (tri cache/tri: Triton's own second tuning of the same key, a measure of its noise)")
    return worst


# -- 5: borrowing ---------------------------------------------------------------------------------


def borrowing(
    family: Any, ops: dict[int, Any], unseen: list[int], part1: Any, root: Path, rounds: int
) -> float:
    """Part 5: tune a few shapes, then serve their neighbours: borrowed where Triton compiles
    them alike, tuned at once where it does not."""
    import tunecache.triton as tct

    configs, key = family.CONFIGS, family.KEY
    # Tuned at once, each of them (with the default "borrow", a tuned shape within the cap of
    # an earlier one would borrow, and its neighbours would borrow from a borrowed key).
    tuned = tct.autotune(configs=configs, key=key, root=root, unseen="tune")(family.KERNEL)
    for shape in family.TUNED:
        first_call(tuned, family, ops[shape])
    served = tct.autotune(configs=configs, key=key, root=root)(family.KERNEL)
    first_call(served, family, ops[family.TUNED[0]])  # its first look waits for tuned's records
    say()
    say(
        f"5. {family.NAME}: unseen shapes beside tuned ones"
        f" (tuned: {family.TUNED}; served: {unseen})"
    )
    say(
        f"{'shape':>6} {'borrowed from':>14} {'first call':>11} {'triton tunes':>13}"
        f" {'pick':>18} {'/ full tune':>12} {'/ triton':>9}"
    )
    worst = 0.0
    borrowed: dict[int, Any] = {}
    for shape in unseen:
        tunes = served.stats["tuned"]
        t = first_call(served, family, ops[shape])
        borrowed[shape] = pick = served.best_config
        tuned_now = served.stats["tuned"] > tunes
        pending = {p.key: p for p in served.pending}
        k = served.key(*family.args(*ops[shape]))
        source = pending[k].answer.borrowed_from if k in pending else None
        origin = "/".join(str(v) for _, v in source.dims) if source is not None else "-"
        if tuned_now:
            origin = "tuned (not alike)"
        full = part1["picks"]["tunecache"].get(shape)
        ref = part1["picks"]["triton"].get(shape)
        ms = compare(family, [pick] + [c for c in (full, ref) if c is not None], ops[shape], rounds)
        mine = ms[tct.config_name(pick)]
        r_full = mine / ms[tct.config_name(full)] if full is not None else float("nan")
        r_tri = mine / ms[tct.config_name(ref)] if ref is not None else float("nan")
        if full is not None and not tuned_now:
            worst = max(worst, r_full)
        tri = part1["times"]["triton"].get(shape)
        tri_text = f"{tri * 1e3:10.0f} ms" if tri is not None else f"{'-':>13}"
        say(
            f"{shape:>6} {origin:>17} {t * 1e3:8.2f} ms {tri_text} {family.short(pick):>18}"
            f" {r_full:12.3f} {r_tri:9.3f}"
        )
    benched = served.stats["tuned"]
    say(
        f"   tuned at once while serving: {benched} (the nearest tuned neighbour compiled apart"
        f" by Triton: a size divisible by 16 in one key and not the other); stats {served.stats}"
    )
    met = worst <= TARGET_BORROW and served.stats["borrowed"] > 0
    say(
        f"   worst borrowed runtime / full tune: {worst:.3f};"
        f" target <= {TARGET_BORROW}: {verdict(met)}"
    )
    t0 = time.perf_counter()
    done = served.tune_pending()
    spent = time.perf_counter() - t0
    changed = []
    for shape in unseen:
        first_call(served, family, ops[shape])
        if tct.config_name(served.best_config) != tct.config_name(borrowed[shape]):
            changed.append(
                f"{shape}: {family.short(borrowed[shape])} -> {family.short(served.best_config)}"
            )
    say(
        f"   tune_pending(): {len(done)} keys tuned in {spent:.2f} s;"
        f" picks changed: {'; '.join(changed) or 'none'}"
    )
    return worst


def evidence(family: Any, ops: dict[int, Any]) -> None:
    """What `tunecache inspect` shows for one tuned key: every config's timings."""
    import tunecache.triton as tct
    from tunecache import maintain
    from tunecache.cache import Cache

    kernel = tct.autotune(configs=family.CONFIGS, key=family.KEY)(family.KERNEL)
    key = kernel.key(*family.args(*ops[family.STORED]))
    tct.flush()
    with Cache.open(device=tct.gpu_device(0)) as cache:
        (item,) = maintain.inspect(cache, key)
        say()
        say(f"the evidence kept for {key.text} (entry {item.entry.id}):")
        for c in item.candidates:
            median = f"{c.median_s * 1e6:9.1f} us" if c.median_s is not None else f"{'-':>12}"
            say(
                f"   {c.name:<78} {median} x{c.samples:<2} {c.error or ''}"
                f"{' <- chosen' if c.chosen else ''}"
            )
        shown = {
            k: item.settings[k] for k in ("stopped", "rounds", "elapsed") if k in item.settings
        }
        say(f"   bench: {shown}")


# -- main -----------------------------------------------------------------------------------------


def family_report(name: str, options: Any, scratch: Path) -> dict[str, Any]:
    """Every part for one kernel family; its figures for the summary."""
    import torch

    family = importlib.import_module(name)
    quick = options.quick
    shapes = family.QUICK_SHAPES if quick else family.SHAPES
    unseen = family.QUICK_UNSEEN if quick else family.UNSEEN
    rounds = 3 if quick else 5
    firsts = [family.FIRST + r for r in range(FIRST_RUNS)]
    every = sorted({*shapes, *family.TUNED, *unseen, family.WARMUP, family.STORED, *firsts})
    say()
    say(f"== {family.NAME}: {family.TITLE}")
    ops = {shape: family.operands(shape) for shape in every}
    say(f"compiling and checking {len(family.CONFIGS)} configs at {every} ...")
    say(f"  done in {precompile(family, every, ops):.1f} s (every config correct against torch)")
    failed: list[str] = []

    def attempt(title: str, step: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return step()
        except Exception:
            failed.append(title)
            say(f"part {title} of {name} failed:")
            say(traceback.format_exc())
            return None
        finally:
            # What each part takes, against run.sh's deadline for the whole.
            say(f"   (part {title} of {name}: {time.perf_counter() - started:.0f} s)")

    parts = set(options.parts.split(","))

    def part(title: str, step: Callable[[], Any]) -> Any:
        return attempt(title, step) if title in parts else None

    part1 = attempt("1", lambda: tuning(family, shapes, ops, scratch / f"{name}-noflush"))
    part1 = part1 or {"picks": {}, "times": {}}
    figures: dict[str, Any] = {"tune": part1.get("tune_worst"), "check": part1.get("check")}
    figures["pick"] = part("2", lambda: picks_report(family, shapes, ops, part1, rounds))
    figures["first"] = part("3", lambda: first_new_key(family, scratch, FIRST_RUNS))
    runs = 2 if quick else WARM_RUNS
    figures["warm"] = part("4", lambda: warm_first_call(family, part1, runs, options.profile))
    root = scratch / f"{name}-borrow"
    figures["borrow"] = part("5", lambda: borrowing(family, ops, unseen, part1, root, rounds))
    if parts >= {"1", "2", "3", "4", "5"}:
        attempt("evidence", lambda: evidence(family, ops))
    figures["failed"] = failed
    ops.clear()
    part1.clear()
    gc.collect()
    torch.cuda.empty_cache()
    return figures


def summary(results: dict[str, dict[str, Any]]) -> None:
    """Every target of issue 17, for every family, with its figure."""
    say()
    say("== issue 17's targets (figure; verdict), per family")

    def row(
        what: str, get: Callable[[dict[str, Any]], float | None], target: float, unit: str = "x"
    ) -> None:
        cells = []
        for name, figures in results.items():
            try:
                value = get(figures)
            except (KeyError, TypeError):
                value = None
            if value is None:
                cells.append(f"{name}: not measured")
                continue
            shown = f"{value * 1e3:.2f} ms" if unit == "ms" else f"{value:.3f}"
            cells.append(f"{name}: {shown} ({verdict(value <= target)})")
        limit = f"{target * 1e3:g} ms" if unit == "ms" else f"{target:g}"
        say(f"  {what} <= {limit}: " + "; ".join(cells))

    row("new key in a process, worst shape / triton", lambda f: f["tune"], TARGET_TUNE)
    row(
        "first new key of a process, store on disk / triton",
        lambda f: f["first"]["tunecache"],
        TARGET_TUNE,
    )
    row(
        "first new key of a process, no store yet / triton",
        lambda f: f["first"]["tunecache no store"],
        TARGET_TUNE,
    )
    row(
        "first new key of a process, store on disk, output check off / triton",
        lambda f: f["first"]["tunecache no check"],
        TARGET_TUNE,
    )
    row("decoration", lambda f: f["warm"]["decorate tunecache"], TARGET_DECORATE, "ms")
    row(
        "warm first call + decoration / triton cache_results",
        lambda f: f["warm"]["end to end"],
        TARGET_WARM,
    )
    row(
        "the same, kernel modules preloaded",
        lambda f: f["warm"]["kernel module preloaded"],
        TARGET_PRELOADED,
    )
    row("pick's runtime / triton's pick, worst", lambda f: f["pick"], TARGET_PICK)
    row("borrowed pick's runtime / a full tune's, worst", lambda f: f["borrow"], TARGET_BORROW)
    cells = []
    for name, figures in results.items():
        checked, benched, wrong = figures.get("check") or (0.0, 0.0, [])
        share = f"{checked / benched:.1%}" if benched else "not measured"
        cells.append(
            f"{name}: {checked * 1e3:.1f} ms of {benched * 1e3:.0f} ms benched ({share}),"
            f" {len(wrong)} config(s) recorded wrong"
        )
    say(
        "  config correctness (item 5: check_outputs on in part 1, each config's output"
        " compared with the first config's before timing): " + "; ".join(cells)
    )
    failed = {n: f["failed"] for n, f in results.items() if f.get("failed")}
    if failed:
        say(f"  parts that failed: {failed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes, rounds and runs")
    parser.add_argument("--family", choices=FAMILIES, action="append", help="only these")
    parser.add_argument("--profile", action="store_true", help="profile part 4's first calls")
    parser.add_argument(
        "--parts",
        default="1,2,3,4,5",
        help="only these parts (comma-separated; 1 stores the keys the others read)",
    )
    options = parser.parse_args()
    # A fresh store every run (inside $TUNECACHE_DIR if set): keys stored by an earlier run
    # would be answered, not tuned.
    parent = os.environ.get("TUNECACHE_DIR") or None
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    os.environ["TUNECACHE_DIR"] = tempfile.mkdtemp(prefix="tc-bench-store-", dir=parent)
    if not os.environ.get("TRITON_CACHE_DIR"):
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tc-bench-triton-")
    say("tunecache.triton.autotune vs triton.autotune: " + ", ".join(options.family or FAMILIES))
    for name, value in versions().items():
        say(f"  {name}: {value}")
    say(f"  store: {os.environ['TUNECACHE_DIR']}   triton cache: {os.environ['TRITON_CACHE_DIR']}")
    scratch = Path(tempfile.mkdtemp(prefix="tc-bench-roots-"))
    started = time.perf_counter()
    results = {name: family_report(name, options, scratch) for name in options.family or FAMILIES}
    summary(results)
    say(f"(the benchmark took {time.perf_counter() - started:.0f} s)")
    return 1 if any(f.get("failed") for f in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
