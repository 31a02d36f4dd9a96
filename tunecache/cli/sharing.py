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
the database it tuned into and that database's `CacheReader.change_mark`). They are kept in
`<cache root>/sessions/`, or beside the file `--db` names (`<file>.share-<digest>.lock`).

A command that finds the lock taken says so on stderr and waits for it, at most SHARE_WAIT
seconds (a claim's wait), with one flock call every `tunecache.hostlock.POLL` seconds. Once it
holds the lock it takes the result if that was written after it began to wait and the database's
change mark is still the one the result names: nothing was written to the store since, so the
report is what the store holds. It prints that output, each JSON report's `shared_from` naming
the command whose session it is (null in a command's own), or a line that says so above the
text, and exits 0, having benched, tried and written nothing. Otherwise (the other command
failed, was interrupted, or something wrote to the store since) it runs a session of its own
while it holds the lock, so that commands still waiting share its result in turn, and what it
waited counts against its claim wait and its --budget.

Not shared: `--alone`, `--pending`, a fleet store (TUNECACHE_URL names it, and other hosts
write it), a folder that cannot take the lock. A model named as MODULE:ATTR is the same model
for two commands of one environment and directory: an edit of its module between their starts
is not seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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

__all__ = ["FOLDER", "SHARE_WAIT", "Gate", "gate", "request_digest"]

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
    shared: `--alone`, `--pending`, a fleet store, or a request that cannot be named (a
    model file missing, a working directory gone, an option the command will refuse)."""
    if args.alone or args.pending:
        return None
    from tunecache.errors import TunecacheError

    try:
        if args.db is None and args.root is None:
            from tunecache.store.urls import from_environment

            if from_environment() is not None:
                return None
        folder, prefix = _folder(args)
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
    return Gate(folder / f"{prefix}{digest}.lock", folder / f"{prefix}{digest}.json", digest)


class Gate:
    """The lock and the result of one request (`request_digest`): `take` it, or `wait` for the
    command that holds it and read its `result`; `publish` a result; `release` at the end."""

    def __init__(
        self,
        lock: Path,
        result: Path,
        digest: str,
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = HostLock(lock, clock)
        self.result_path = result
        self.digest = digest
        self._wall, self._clock = wall, clock
        #: when this command came to the gate (wall clock: a result must be written after it)
        self.arrived = wall()
        #: seconds this command waited for another at the gate
        self.waited = 0.0
        #: whether this command holds the lock
        self.held = False
        #: who took the lock and when: this command (`take`), or the one it waits for
        self.taken: dict[str, Any] = {}
        self.awaited: dict[str, Any] = {}

    def take(self) -> bool:
        """Take the lock if nobody holds it (and then write in it who took it, and when);
        whether this command holds it now. Where another holds it, who that is (`awaited`) is
        read from the file."""
        self.held = self.lock.acquire(0.0)
        if self.held:
            self.taken = {"by": f"{platform.node()} pid {os.getpid()}", "taken": self._wall()}
            with contextlib.suppress(OSError):
                self.lock.path.write_text(json.dumps(self.taken))
        else:
            self.awaited = self._holder()
        return self.held

    def _holder(self) -> dict[str, Any]:
        """Who took the lock, and when, as its file says (empty where it says nothing yet)."""
        try:
            found = json.loads(self.lock.path.read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def wait(
        self, timeout: float = SHARE_WAIT, *, sleep: Callable[[float], object] = time.sleep
    ) -> bool:
        """Wait for the lock, at most `timeout` seconds; whether this command holds it now."""
        start = self._clock()
        try:
            self.held = self.lock.acquire(timeout, sleep=sleep)
        finally:
            self.waited += self._clock() - start
        return self.held

    def result(self) -> dict[str, Any] | None:
        """The result of the command this one waited for, where it can be shared: written for
        this request by that command (or, where its lock did not say who took it, after this
        one arrived), and the store's change mark still the one it names; None otherwise."""
        try:
            found = json.loads(self.result_path.read_text())
        except (OSError, ValueError):
            return None
        if (
            not isinstance(found, dict)
            or found.get("format") != FORMAT
            or found.get("digest") != self.digest
            or not isinstance(found.get("written"), (int, float))
        ):
            return None
        awaited = self.awaited.get("taken") is not None
        if found.get("taken") != self.awaited if awaited else found["written"] < self.arrived:
            return None
        mark = change_mark(Path(found["database"]), found["device"])
        if mark is None or mark != found.get("mark"):
            return None
        return found

    def publish(self, output: Any, database: Path, device: str) -> None:
        """Write this command's result: its `output` (JSON-ready), the database it tuned into
        and that database's change mark now, in a file put in place whole. Nothing is written
        where the mark cannot be read, or the folder cannot take the file; results older than
        KEEP seconds of other requests go."""
        mark = change_mark(database, device)
        if mark is None:
            return
        found = {
            "format": FORMAT,
            "digest": self.digest,
            "written": self._wall(),
            "taken": self.taken,
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
        """Remove the results in the cache root's folder older than KEEP seconds (the locks
        stay: a lock file removed while another command opens it would let two hold it)."""
        folder, now = self.result_path.parent, self._wall()
        if folder.name != FOLDER:
            return  # beside a --db file: nothing else there is ours
        with contextlib.suppress(OSError):
            for path in folder.glob("*.json"):
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
    from tunecache.errors import TunecacheError
    from tunecache.store.reading import CacheReader

    try:
        reader = CacheReader.open(database, device)
        if reader is None:
            return None
        with contextlib.closing(reader):
            return list(reader.change_mark())
    except TunecacheError:
        return None
