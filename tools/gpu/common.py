"""What every part of tools/gpu/bench_triton.py shares: issue 17's targets, and printing."""

from __future__ import annotations

TARGET_TUNE = 0.10  # new-key tuning time over Triton's, at most (the first of a process too)
TARGET_DECORATE = 2e-3  # seconds of decoration, at most
TARGET_WARM = 0.9  # warm first call (decoration included) over Triton's cache_results path
TARGET_PRELOADED = 3.0  # the same with the kernel's modules preloaded, at most
TARGET_PICK = 1.03  # runtime of the pick over Triton's pick, at most
TARGET_BORROW = 1.05  # runtime of a borrowed config over a full tune's pick, at most
FIRST_RUNS = 3  # fresh processes per autotuner for part 3 (each a new key)
WARM_RUNS = 5  # fresh processes per autotuner and variant for part 4 (a run swings 0.5 ms)


def say(text: str = "") -> None:
    """Print a line of the report at once (a step cut short by its deadline keeps it)."""
    print(text, flush=True)


def verdict(met: bool) -> str:
    """A target's verdict, as the report words it."""
    return "met" if met else "NOT met"
