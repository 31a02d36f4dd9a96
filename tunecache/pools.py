"""The thread pools that run the work: the BLAS and OpenMP pools this process has loaded.

A device identity's `threads` defaults to what these pools run (`default_threads`): the BLAS
pools' thread count as threadpoolctl reads it once a BLAS is loaded (numpy loads one); before
then, the count the environment sets for them (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS...), so
that `tunecache where`, which loads no BLAS, names the folder a numpy program will use; else
the CPUs this process may use. threadpoolctl is imported only once such a library is
mapped into the process (`native_pools_loaded`, which reads /proc/self/maps where there is one),
so the resolver's and the read commands' start never pays for it.

Several pools with different settings (numpy's and scipy's own OpenBLAS, an OpenMP runtime
beside them) make timings depend on which pool a candidate happens to use: the tuner warns once
about them (`warn_if_mixed`).
"""

from __future__ import annotations

import os
import sys
import warnings

from tunecache.errors import TunecacheWarning

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "POOL_LIBRARIES",
    "SETTINGS",
    "default_threads",
    "describe",
    "mixed",
    "native_pools_loaded",
    "pools",
    "threadpool_info",
    "warn_if_mixed",
]

#: parts of the file names of the libraries threadpoolctl finds pools in (BLAS and OpenMP)
POOL_LIBRARIES = (
    b"openblas",
    b"libblis",
    b"libmkl",
    b"flexiblas",
    b"libgomp",
    b"libiomp",
    b"libomp",
    b"armpl",
)
#: the environment variables that set a BLAS pool's size before it is loaded, the first one set
#: winning: those the OpenBLAS numpy's wheels load obeys (the first two before
#: OMP_NUM_THREADS). MKL_NUM_THREADS and BLIS_NUM_THREADS are not among them: numpy's OpenBLAS
#: ignores them, so a prediction from them would name another folder than a numpy program
#: uses. A pool never runs more threads than the CPUs it may use
SETTINGS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
# Where no /proc/self/maps is: the modules whose import loads a BLAS.
_POOL_MODULES = ("numpy", "scipy", "torch", "sklearn")
# The pools already warned about, as their descriptions: once each per process.
_warned: set[str] = set()


def native_pools_loaded() -> bool:
    """Whether this process has loaded a BLAS or OpenMP library (without threadpoolctl)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            maps = fh.read()
    except OSError:
        return any(name in sys.modules for name in _POOL_MODULES)
    return any(part in maps for part in POOL_LIBRARIES)


def threadpool_info() -> list[dict[str, Any]]:
    """threadpoolctl's view of every pool loaded (`threadpoolctl.threadpool_info()`)."""
    # threadpoolctl ships no type information (no py.typed marker, no stubs).
    import threadpoolctl  # type: ignore[import-untyped]

    info: list[dict[str, Any]] = threadpoolctl.threadpool_info()
    return info


def pools() -> list[dict[str, Any]]:
    """The BLAS and OpenMP pools loaded, as threadpoolctl describes them (empty before any is
    loaded, and then threadpoolctl is not imported)."""
    if not native_pools_loaded():
        return []
    return [p for p in threadpool_info() if p.get("user_api") in ("blas", "openmp")]


def default_threads(cpus: int) -> tuple[int, str]:
    """The thread count that runs the work, and what was counted: the largest BLAS pool's
    (else the largest OpenMP pool's) once one is loaded; before then, what the environment
    tells the pools to run (`SETTINGS`, at most `cpus`), else `cpus`."""
    found = pools()
    for api, label in (("blas", "BLAS"), ("openmp", "OpenMP")):
        counts = [p["num_threads"] for p in found if p["user_api"] == api]
        counts = [n for n in counts if isinstance(n, int) and 1 <= n <= 65536]
        if counts:
            return max(counts), f"the {label} pools"
    if not found:
        for var in SETTINGS:
            text = os.environ.get(var, "").strip()
            # A list ("4,2", OpenMP's nested levels) sets the outer level first.
            head = text.split(",", 1)[0].strip()
            if head.isdigit() and int(head) >= 1:
                return min(int(head), cpus), var
    return cpus, "usable CPUs"


def describe(pool: dict[str, Any]) -> str:
    """One pool in a few words: `openblas 2 threads (libscipy_openblas64_.so)`."""
    name = str(pool.get("filepath") or pool.get("prefix") or "?").rsplit("/", 1)[-1]
    count = pool.get("num_threads")
    plural = "" if count == 1 else "s"
    return f"{pool.get('internal_api', pool.get('user_api'))} {count} thread{plural} ({name})"


def mixed(found: list[dict[str, Any]]) -> str | None:
    """The pools in words where there are several and their thread counts differ, else None."""
    if len(found) < 2 or len({p.get("num_threads") for p in found}) < 2:
        return None
    return ", ".join(describe(p) for p in found)


def warn_if_mixed() -> str | None:
    """Warn (a TunecacheWarning, once per process for each set of pools) where several BLAS or
    OpenMP pools with different thread counts are loaded; returns what it named, or None."""
    text = mixed(pools())
    if text is None or text in _warned:
        return text
    _warned.add(text)
    warnings.warn(
        f"several thread pools with different thread counts are loaded: {text}; a bench of a "
        "candidate measures whichever pool it uses: limit them alike (threadpoolctl's "
        "threadpool_limits) and name the count with TUNECACHE_THREADS",
        TunecacheWarning,
        stacklevel=3,
    )
    return text
