"""What the tuner's tests share: a read-only look at the store, a clock that moves only when
told, ops whose candidates rank the same on any machine, and profiles whose shares are scripted.

A budget read on the wall clock runs out wherever a loaded machine happens to be; the tests give
the session (`tune(clock=...)`) and the bench (`bench_options={"clock": ...}`) a `Clock` that
moves at the events under test instead. Likewise a key's share of one profiled run of a model
that takes half a millisecond moves with every scheduler hiccup: a test of screening profiles
through `scripted`, whose keys take the times it is told, so what they assert cannot depend on
speed.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tunecache
from tests import tune_models as tm
from tunecache import dispatch, resolve
from tunecache.cache import Cache
from tunecache.dispatch import ProfileRow
from tunecache.tune import TuneReport
from tunecache.tune.claims import Claims, Holder
from tunecache.tune.model import Model
from tunecache.tune.options import session_options
from tunecache.tune.profiling import Profiler
from tunecache.tune.session import Running
from tunecache.tune.tuner import run_session

NORM = tm.NORM
TOTAL = tm.TOTAL
NORM_NAMES = tm.loop.candidates
TOTAL_NAMES = tm.numpy_sum.candidates


def read_only(cache: Cache) -> sqlite3.Connection:
    """A read-only sqlite3 connection to the cache's database, as a person would open it."""
    return sqlite3.connect(f"file:{cache.path}?mode=ro", uri=True)


def verdict(cache: Cache, model: str, entry_id: int) -> str | None:
    """`model`'s verdict on an entry, if it has one."""
    return cache.verdicts(model).get(entry_id)


class Clock:
    """A clock that stands still until moved: `advance` adds seconds, `spend` jumps far ahead."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock on by `seconds`."""
        self.now += seconds

    def spend(self) -> None:
        """Move the clock past any budget a test sets."""
        self.now += 1e6


def outside_the_model() -> Callable[[], bool]:
    """A check that is True while no table is in force (in the bench) and False inside a
    whole-model run, where the session makes its table current with `using`."""
    outside = resolve.current()
    return lambda: resolve.current() is outside


def sleeper(
    name: str,
    seconds: float,
    bench_clock: Clock,
    *,
    inside_raises: bool = False,
    on_inside: Callable[[], object] | None = None,
) -> Callable[[int], None]:
    """A candidate that takes `seconds` for real (whole-model runs are timed on the wall clock)
    and moves the bench's clock by as much (so the bench ranks it the same on any machine).
    With `inside_raises` it raises inside a model, after calling `on_inside`."""
    in_bench = outside_the_model()

    def candidate(n: int) -> None:
        if inside_raises and not in_bench():
            if on_inside is not None:
                on_inside()
            raise RuntimeError(f"{name} cannot run inside the model")
        bench_clock.advance(seconds)
        time.sleep(seconds)

    return candidate


def borrowing_op(
    signature: str, *, on_tricky_inside: Callable[[], object] | None = None
) -> tuple[tunecache.Tunable[..., None], dict[str, Any]]:
    """An op where "tricky" is fastest alone but raises inside a model, and "fast" is 5x faster
    than "base"; and the tune options that bench it on its own clock. drop_ratio 10: "fast"
    (4x tricky's time) survives the bench to be tried after it."""
    clock = Clock()
    op = tunecache.Tunable(
        signature,
        dims=("n",),
        shape=lambda n: (n,),
        candidates={
            "base": sleeper("base", 0.02, clock),
            "tricky": sleeper(
                "tricky", 0.001, clock, inside_raises=True, on_inside=on_tricky_inside
            ),
            "fast": sleeper("fast", 0.004, clock),
        },
        heuristic="base",
        register=False,
    )
    return op, {"bench_options": {"drop_ratio": 10.0, "clock": clock}}


class ScriptedProfile(dispatch.Profile):
    """A real profile (it sees and captures every call) whose per-key times come from a script."""

    def __init__(self, seconds: Callable[[ProfileRow], float]) -> None:
        super().__init__(capture=True)
        self.seconds = seconds

    def rows(self) -> list[ProfileRow]:
        """The real rows, each with the script's time for its key and the choice it ran."""
        return [row._replace(seconds=self.seconds(row)) for row in super().rows()]


def scripted(seconds: Callable[[ProfileRow], float], rest: float) -> Profiler:
    """A profiler whose keys take `seconds(row)`, and whose run takes that and `rest` more."""

    def profiler(run: Callable[[], None]) -> tuple[dispatch.Profile, float]:
        with ScriptedProfile(seconds) as profiled:
            run()
        return profiled, sum(row.seconds for row in profiled.rows()) + rest

    return profiler


def encoder_times(row: ProfileRow) -> float:
    """The encoder's keys as this machine runs them unloaded: the Python-loop row norm carries
    the run (about 98%) until it runs vectorized (then about 64%), the sum about 1% of the
    heuristic's run, and the bias 0.2% of it (4% of the tuned one)."""
    signature = row.key.signature
    if signature == "ttrownorm_F64":
        return 0.9 if row.choice == "loop" else 0.03
    return {"tttotal_F64": 0.01, "ttbias_F64": 0.002}[signature]


def tune_scripted(model: Model, cache: Cache, profiler: Profiler, **options: Any) -> TuneReport:
    """`tune.tune(model, cache=cache, **options)`, profiling through `profiler`."""
    how = Running(profiler=profiler)
    return run_session(model, cache, {}, session_options(**options), how, tune_keys=True)


def matrix_op(
    signature: str,
    dims: tuple[str, ...],
    candidates: dict[str, Callable[..., Any]],
    heuristic: str,
    **more: Any,
) -> tunecache.Tunable[..., Any]:
    """A test op over a matrix, keyed by its first sizes (`dims`: ("m",) or ("m", "n")), and
    registered nowhere."""
    return tunecache.Tunable(
        signature,
        dims=dims,
        shape=lambda x: tuple(x.shape[: len(dims)]),
        candidates=candidates,
        heuristic=heuristic,
        register=False,
        **more,
    )


_TRY_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("busy")
else:
    print("free")
"""


def lock_seen(path: Path) -> str:
    """How another process of this host finds the flock at `path`: "busy" or "free"."""
    done = subprocess.run(
        [sys.executable, "-c", _TRY_LOCK, str(path)], capture_output=True, check=True
    )
    return done.stdout.decode().strip()


def always_alive(holder: Holder) -> bool:
    """A liveness check that sees every holder's process alive (as from another host)."""
    return True


def claims_on(cache: Cache, clock: Clock, host: str, ttl: float = 30.0) -> Claims:
    """A holder on `host` whose processes are never seen (as from another host), on `clock`."""
    return Claims(cache, ttl=ttl, clock=clock, timer=clock, host=host, alive=always_alive)


def epoch_clock() -> Clock:
    """A wall clock at a plausible epoch second that moves only when told."""
    moment = Clock()
    moment.advance(1.8e9)
    return moment
