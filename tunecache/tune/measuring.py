"""One measurement at a time per device: the tuners of a device identity on one host take turns
to time things.

Claims keep two tuners from benching one key; this keeps two tuners from timing two keys at
once. Tuners beside each other on one machine share its cores, and a bench, a paired whole-model
trial or a profile timed while another tuner times its own is contended: slower, noisier (the
acceptance rule then runs to its most pairs), and doubted by the evidence rules
(`tunecache.tune.doubt`). So each bench, each trial and each profile holds an exclusive flock on
`<database>.measure-lock` beside the device's local cache file (for a fleet store too: the cores
are this host's), and tuners of one device measure one after another, as one tuner alone would,
while their waiting for claims and their writes go on (`MeasureLock.waited` sums how long this
process waited for another's turn). It is a `tunecache.hostlock.HostLock`: a process that dies
holding it lets go of it with its descriptor, and a child forked while it is held (a model's
worker pool started during a trial) closes its copy at once. Where the folder cannot take the
file, measurements go unlocked, as before.

The same kind of lock (`HostLock`) keeps one session of a model at a time on this host
(`session_lock`): a tuner that finds it taken sleeps until it is let go of, looking at it with
one system call every `tunecache.hostlock.POLL` seconds, instead of reading the store's claims
through SQLAlchemy at that rate. Those reads woke three waiting tuners sixty times a second for
a millisecond each, beside a holder whose BLAS threads stall together whenever one of them is
preempted: with four tuners of one model at once, the holder's trials rejected the real win in 4
of 8 runs (tools/bench_tuners.py, ATTENTIONx10; a tuner alone accepted it in 7 and 8 of 8, two
runs of the tool), and in 0 of 8 once they slept on the lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tunecache.hostlock import HostLock

__all__ = ["MeasureLock", "session_lock"]


class MeasureLock(HostLock):
    """The measurement lock of the device whose local cache file is `database`."""

    def __init__(self, database: Path, timer: Callable[[], float] = time.monotonic) -> None:
        super().__init__(database.with_name(database.name + ".measure-lock"), timer)


def session_lock(
    database: Path, model: str, timer: Callable[[], float] = time.monotonic
) -> HostLock:
    """The lock one tuning session of `model` holds on this host, for as long as it runs,
    beside the device's local cache file `database` (a digest of the name and the host names
    the file: a cache folder on a network filesystem, whose flocks other hosts see, keeps one
    file per host, as the session's claim names its host). The file goes with the lock's
    last holder (`HostLock(removed=True)`)."""
    import platform

    from tunecache._digest import sha256

    digest = sha256(f"{model}\0{platform.node()}".encode()).hexdigest()[:16]
    path = database.with_name(f"{database.name}.session-{digest}.lock")
    # One file per model name: its last holder removes it, so none piles up.
    return HostLock(path, timer, removed=True)
