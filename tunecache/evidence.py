"""What a timing record carries besides its samples: the environment it was measured in, how
long the process waited for a CPU while it measured, and a candidate's failure or refusal as one
line of text. Shared by the bench, the tuner and the Triton client's measure."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

from tunecache import codec

__all__ = [
    "REFUSALS",
    "TOO_SLOW",
    "WRONG",
    "cpu_wait",
    "environment",
    "error_text",
    "refusal",
    "refusal_text",
    "waited",
]

#: a candidate one call of which took longer than what was left of its key's budget
TOO_SLOW = "too slow"
#: a candidate whose output differs from the heuristic's on the bench's inputs
WRONG = "wrong output"
#: the kinds of refusal a candidate's error text may start with (`refusal`)
REFUSALS = (TOO_SLOW, WRONG)

# /proc/<pid>/task/<tid>/schedstat: "<ns on a CPU> <ns waiting on a run queue> <timeslices>".
_TASKS = "/proc/self/task"


def error_text(e: Exception) -> str:
    """An exception as one bounded line: its type, then its message."""
    message = " ".join(str(e).split())[:300]
    return _encodable(f"{type(e).__name__}: {message}" if message else type(e).__name__)


def refusal_text(kind: str, why: str) -> str:
    """A refused candidate's error text: its kind (one of REFUSALS), then why, in one line."""
    return _encodable(" ".join(f"{kind}: {why}".split())[:300])


def _encodable(text: str) -> str:
    """The text with every character encodable as UTF-8."""
    # Lone surrogates have no UTF-8 form and the codec would refuse the record.
    return text.encode("utf-8", "replace").decode("utf-8")


def refusal(error: str | None) -> str | None:
    """The kind of refusal (TOO_SLOW, WRONG) a candidate's error text records, or None when it
    records no refusal (nothing, or an exception the candidate raised)."""
    if error is None:
        return None
    return next((kind for kind in REFUSALS if error.startswith(f"{kind}: ")), None)


def cpu_wait() -> float | None:
    """Seconds this process's threads have spent waiting for a CPU while runnable (Linux
    schedstat, summed over the live threads), or None where the system does not say.

    The difference of two reads is how long other work on the machine kept this process off a
    CPU in between: near zero on a quiet machine, a large fraction of the time beside a busy
    one. A thread that exits takes its share with it, so a difference can come out negative;
    callers clamp it at zero.
    """
    total = 0
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/schedstat", "rb") as stat:
                fields = stat.read().split()
        except OSError:
            continue  # the thread exited between the listing and the read
        if len(fields) < 2 or not fields[1].isdigit():
            return None
        total += int(fields[1])
    return total / 1e9


def waited(before: float | None, after: float | None, wall: float) -> float | None:
    """The fraction of `wall` seconds this process waited for a CPU, from two reads of
    `cpu_wait` around them; None when either read is unknown."""
    if before is None or after is None or not wall > 0:
        return None
    return max(0.0, after - before) / wall


def environment() -> dict[str, codec.Scalar]:
    """What the timings depend on besides the device identity, as CBOR scalars."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": _numpy_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def _numpy_version() -> str | None:
    """numpy's version, without importing numpy if the caller has not."""
    module = sys.modules.get("numpy")
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        return None
