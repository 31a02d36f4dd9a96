"""Identical `tunecache tune` commands on one host share one session: while one runs, the others
wait for it and report what it did, where nothing was written to the store after it.

Four tuners of a light model started at once each paid a process's start (the interpreter, the
tuner's imports, SQLAlchemy and the store opened: a third of the CNN example's 1.1 s alone) on
the same two cores, slowing the one that tuned, and then a session of their own that found
everything tuned: 1.6x one tuner alone (tools/bench_tuners.py), where claims alone kept every
key benched once. Sharing does what a build tool does with two identical requests: one runs, the
others take its answer.

The request is the command line as given, the working directory, the whole environment (a
launcher's per-process variable makes two requests different), the Python executable, the user,
the host, the CPUs the process may run on, tunecache's version, and the inode, size and time of
a model file named as FILE.py:ATTR. Its digest names two files: a lock
(`tunecache.hostlock.HostLock`) that the running command holds from its start, before it imports
anything heavy, to its end; and the result it writes when it ends with exit status 0 (its output,
the database it tuned into and that database's `change_mark` as its session left it, read
before the output is printed). They are kept in `<cache root>/sessions/`, or beside the file
`--db` names (`<file>.share-<digest>.lock`). The holder removes the lock's file as it lets go
(`HostLock(removed=True)`); a result stays a day.

A command that finds the lock taken says so on stderr and waits for it, at most its
`--claim-wait` (SHARE_WAIT, a claim's wait, where not given) or its `--budget` where that is
shorter (`wait_limit`), with one flock call every `tunecache.hostlock.POLL` seconds. Once it
holds the lock it takes the result if there is one written after it came and the database's
change mark is still the one the result names: nothing was written to the store after the
other session ended, so the report is as true as that session's own. It prints that output,
each JSON report's `shared_from` naming the command whose session it is (null in a command's
own), or a line that says so above the text, and exits 0, having benched, tried and written
nothing. Otherwise (the other command failed, was interrupted or killed, or something wrote to
the store since) it runs a session of its own while it holds the lock: it removes the result
before it (as every command that owns the lock does first, so that no command ever takes the
result of one it did not wait for), and commands still waiting share its result in turn. A
session whose budget ran out, or that left a key or its guard to another tuner that outlasted
its wait, publishes nothing: the next command does what it left undone. A command whose wait
outlasts its limit runs a session beside the other, holding no lock, and waits for that one's
session of the model as any tuner does (so at most twice its claim wait in all).

Not shared: `--alone`, `--pending`, a fleet store (TUNECACHE_URL names it, and other hosts write
it), a folder that cannot take the lock or a `--db` file's folder not made yet, a wait of 0 s or
one the tuner refuses (below 0, not a number). Only stdout is shared, not the holder's warnings
on stderr. A waiter that runs its own session has its wait taken off its first model's --budget.
What a model runs is known by its spec: an edit of a MODULE:ATTR model's module, or of a module
a FILE.py model imports, between two commands' starts is not seen, nor are Python's own flags.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from tunecache.hostlock import HostLock

# Not `typing` at run time: a command that shares a session imports nothing it does not use.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

__all__ = ["FOLDER", "SHARE_WAIT", "Gate", "change_mark", "gate", "request_digest", "wait_limit"]

#: seconds a command waits for an identical one (`tunecache.tune.claims.CLAIM_WAIT`, a claim's)
SHARE_WAIT = 600.0
#: the folder of the cache root that holds the locks and results
FOLDER = "sessions"
#: a result older than this many seconds is removed when another command writes one
KEEP = 86400.0
#: the result file's format
FORMAT = 1


def request_digest(
    argv: Sequence[str],
    *,
    cwd: str,
    environ: Mapping[str, str],
    cpus: Sequence[int],
    model_files: Sequence[tuple[int, int, int]] = (),
) -> str:
    """The digest of one `tunecache tune` request: `argv` as given, in the directory `cwd`,
    with the environment `environ`, on the CPUs `cpus`, by this Python, user, host and
    tunecache, and each FILE.py model's (inode, size, mtime_ns) in `model_files`."""
    from tunecache._version import __version__

    request = {
        "argv": list(argv),
        "cwd": cwd,
        "environ": sorted(environ.items()),
        "cpus": sorted(cpus),
        "files": [list(f) for f in model_files],
        "python": sys.executable,
        "user": os.getuid(),
        "host": platform.node(),
        "tunecache": __version__,
    }
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:32]


def _model_files(specs: Sequence[str]) -> list[tuple[int, int, int]]:
    """(inode, size, mtime_ns) of each FILE.py a model spec names; OSError where one is not
    there (the command then reports it as it always has)."""
    found = []
    for spec in specs:
        where = spec.rpartition(":")[0]
        if where.endswith(".py"):
            st = os.stat(where)
            found.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return found


def _folder(args: argparse.Namespace) -> tuple[Path, str]:
    """The folder of the request's files, and the prefix of their names."""
    if args.db is not None:
        from tunecache.paths import explicit_path

        db = explicit_path(args.db)
        return db.parent, f"{db.name}.share-"
    from tunecache import config
    from tunecache.paths import cache_root

    client = config.identity(client=args.client)[0]
    return cache_root(client, args.root) / FOLDER, ""


def gate(args: argparse.Namespace) -> Gate | None:
    """The gate of the `tune` command `args` (its `argv` as given), or None where it is not
    shared: `--alone`, `--pending`, a fleet store, a wait of 0 s, or one the tuner will
    refuse (a `--claim-wait` or `--budget` below 0 or not a number: the command says so as
    before), a request that cannot be named (a model file missing, a working directory gone),
    or a `--db` file whose folder is not there yet (nothing is made before the command
    runs)."""
    if args.alone or args.pending:
        return None
    limit = wait_limit(args.claim_wait, args.budget)
    if not limit:
        return None  # no wait: nothing to share
    from tunecache.errors import TunecacheError

    try:
        if args.db is None and args.root is None:
            from tunecache.store.urls import from_environment

            if from_environment() is not None:
                return None
        folder, prefix = _folder(args)
        if prefix and not folder.is_dir():
            return None
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        digest = request_digest(
            args.argv,
            cwd=os.getcwd(),
            environ=os.environ,
            cpus=cpus,
            model_files=_model_files(args.model),
        )
    except (OSError, TunecacheError):
        return None
    return Gate(folder, prefix, digest, limit)


def wait_limit(claim_wait: float | None, budget: float | None) -> float | None:
    """How long a command waits at the gate: its claim wait (SHARE_WAIT where not given), or
    its budget where that is shorter; None where either is below 0 or not a number."""
    limit = SHARE_WAIT if claim_wait is None else claim_wait
    for value in (limit, budget):
        if value is not None and not 0 <= value < math.inf:
            return None
    return limit if budget is None else min(limit, budget)


class Gate:
    """The lock and the result of one request (`request_digest`), in `folder`, their names
    `prefix` and the digest: `take` the lock, or `wait` for the command that holds it and read
    its `result`; `own` it to run a session of this command's own; `publish` that session's
    result; `release` at the end."""

    def __init__(
        self,
        folder: Path,
        prefix: str,
        digest: str,
        limit: float = SHARE_WAIT,
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = HostLock(folder / f"{prefix}{digest}.lock", clock, removed=True)
        self.result_path = folder / f"{prefix}{digest}.json"
        self.prefix, self.digest = prefix, digest
        #: the longest this command waits at the gate, in seconds (`wait_limit`)
        self.limit = limit
        self._wall = wall
        #: when this command came to the gate (wall clock: a result it takes was written later)
        self.arrived = wall()
        #: whether this command holds the lock
        self.held = False

    def take(self) -> bool:
        """Take the lock if nobody holds it, and `own` it; whether this command holds it."""
        self.held = self.lock.acquire(0.0)
        if self.held:
            self.own()
        return self.held

    def own(self) -> None:
        """Run a session of this command's own under the lock it holds: the result of the
        command before goes (no command waiting behind this one may take it, whether or not
        this one publishes), and the lock's file names this process."""
        with contextlib.suppress(OSError):
            self.result_path.unlink()
        with contextlib.suppress(OSError):
            self.lock.path.write_text(f"{platform.node()} pid {os.getpid()}\n")

    def holder(self) -> str:
        """Who holds the lock, as its file says ("" where it does not say: the holder may not
        have written it yet)."""
        try:
            return self.lock.path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            return ""

    def wait(self, *, sleep: Callable[[float], object] = time.sleep) -> bool:
        """Wait for the lock, at most `limit` seconds; whether this command holds it now (then
        read the `result`, and `own` the lock where there is none to take)."""
        self.held = self.lock.acquire(self.limit, sleep=sleep)
        return self.held

    @property
    def waited(self) -> float:
        """Seconds this command waited for another at the gate (the lock's own count)."""
        return self.lock.waited

    def result(self) -> dict[str, Any] | None:
        """The result of the command that held the lock last, where it can be shared: there
        (every command that owns the lock removes the one before), written for this request
        after this command arrived, and the store's change mark still the one it names; None
        otherwise."""
        try:
            found = json.loads(self.result_path.read_text())
        except (OSError, ValueError):
            return None
        if (
            not isinstance(found, dict)
            or found.get("format") != FORMAT
            or found.get("digest") != self.digest
            or not isinstance(found.get("written"), (int, float))
            or found["written"] < self.arrived
            or not all(isinstance(found.get(k), str) for k in ("database", "device", "by"))
            or not isinstance(found.get("mark"), list)
            or "output" not in found
        ):
            return None
        mark = change_mark(Path(found["database"]), found["device"])
        if mark is None or mark != found.get("mark"):
            return None
        return found

    def publish(self, output: Any, database: Path, device: str, mark: list[Any]) -> None:
        """Write this command's result: its `output` (JSON-ready), the database it tuned into
        and that database's change mark as its session left it (`change_mark`, read before
        the output was printed), in a file put in place whole; nothing where the folder cannot
        take it. Results and parts of them older than KEEP seconds go."""
        found = {
            "format": FORMAT,
            "digest": self.digest,
            "written": self._wall(),
            "by": f"{platform.node()} pid {os.getpid()}",
            "database": str(database),
            "device": device,
            "mark": mark,
            "output": output,
        }
        part = self.result_path.with_name(f"{self.result_path.name}.{os.getpid()}.part")
        try:
            part.write_text(json.dumps(found))
            os.replace(part, self.result_path)
        except OSError:
            with contextlib.suppress(OSError):
                part.unlink()
            return
        self._prune()

    def _prune(self) -> None:
        """Remove this folder's results (of any request, named as this one's are) and parts
        of them older than KEEP seconds (the locks' files go with their holders)."""
        folder, now = self.result_path.parent, self._wall()
        with contextlib.suppress(OSError):
            for pattern in (f"{self.prefix}*.json", f"{self.prefix}*.part"):
                for path in folder.glob(pattern):
                    with contextlib.suppress(OSError):
                        if now - path.stat().st_mtime > KEEP:
                            path.unlink()

    def release(self) -> None:
        """Let go of the lock, where this command holds it."""
        if self.held:
            self.held = False
            self.lock.release()


def change_mark(database: Path, device: str) -> list[Any] | None:
    """The database's `CacheReader.change_mark` as JSON has it, or None where it cannot be read
    without the store (no file, another revision, an error)."""
    import warnings

    from tunecache.errors import TunecacheError
    from tunecache.store.reading import CacheReader

    try:
        with warnings.catch_warnings():
            # A damaged schema's warning: the session, or the store, says it once.
            warnings.simplefilter("ignore")
            reader = CacheReader.open(database, device)
        if reader is None:
            return None
        with contextlib.closing(reader):
            return list(reader.change_mark())
    except TunecacheError:
        return None
