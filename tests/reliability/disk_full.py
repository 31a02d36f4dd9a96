"""A healthy cache on a disk with no room left, for tests/reliability/test_full_disk.py.

A cache at rest has no -shm file: the last connection to close removes it. The first reader
afterwards must make one (32 KiB, SQLite's WAL index), which a full disk refuses. Two ways to
get there without root, both real: a tiny tmpfs filled to the last block (mounted in a user
and mount namespace of its own, `unshare --map-root-user --mount`, where the kernel allows
one), and a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored), under which every write
past the limit fails with EFBIG as one past the end of a full disk fails with ENOSPC.

Run as `python -m tests.reliability.disk_full FOLDER EXPORT` inside the namespace, with FOLDER
the empty tmpfs: it makes the cache, fills the disk, runs every command and prints what each
did as one JSON object.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEY = "conv_F32_m64_k3"
NAMES = ("direct", "im2col")
#: the commands that only read, and what each needs besides --db
READ = (
    ("where",),
    ("list",),
    ("inspect", KEY),
    ("models",),
    ("sql",),
    ("sql", "SELECT key, choice FROM decisions"),
    ("explain", KEY, "--use", "all"),
)


def prepare(db: Path, export: Path) -> None:
    """A cache at `db` with one entry of this machine's identity (as the commands read it),
    closed, and an export of it at `export`."""
    from tunecache import exchange
    from tunecache.cache import Cache

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Cache.open(path=db) as cache:
            cache.put(KEY, choice="im2col", candidates=NAMES, heuristic="direct")
            export.write_bytes(exchange.export_cache(cache))


def fill(folder: Path) -> Path:
    """Write zeros into a file in `folder` until the disk refuses; that file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        block = bytes(4096)
        while True:
            try:
                os.write(fd, block)
            except OSError:
                break
        # Then what is left of the last block, a byte at a time.
        while True:
            try:
                os.write(fd, b"\0")
            except OSError:
                break
    finally:
        os.close(fd)
    return filler


def limit_file_size(limit: int) -> Callable[[], None]:
    """What a child runs first to write as on a full disk: no write past `limit` bytes of any
    file (EFBIG), and SIGXFSZ ignored, so the write fails instead of killing the process."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def run(args: tuple[str, ...], db: Path, before: Callable[[], None] | None) -> dict[str, Any]:
    """One command with --db `db`, as a real process: its status and output."""
    done = subprocess.run(
        [sys.executable, "-m", "tunecache", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        input="",
        preexec_fn=before,
    )
    return {"status": done.returncode, "out": done.stdout, "err": done.stderr}


def commands(db: Path, export: Path, before: Callable[[], None] | None = None) -> dict[str, Any]:
    """Every read command, then doctor and an import, each by its words."""
    out = {" ".join(args): run(args, db, before) for args in READ}
    out["doctor"] = run(("doctor",), db, before)
    out["import"] = run(("import", str(export)), db, before)
    return out


def in_process(db: Path) -> dict[str, Any]:
    """The resolver's answer for KEY (and its warnings), and what opening the store said."""
    from tunecache.cache import Cache
    from tunecache.errors import TunecacheError
    from tunecache.resolve import Table

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = Table.open(path=db, use="all")
        answer = table.resolve(KEY, NAMES, "direct")
        table.close()
    out: dict[str, Any] = {
        "source": answer.source,
        "warnings": [str(w.message) for w in caught if "WAL defect" not in str(w.message)],
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Cache.open(path=db).close()
        out["store"] = None
    except TunecacheError as error:
        out["store"] = str(error)
    return out


def main(folder: Path, export: Path) -> None:
    """The scenario on an empty, tiny filesystem at `folder` (see the module's docstring)."""
    db = folder / "cache.db"
    prepare(db, export)
    result: dict[str, Any] = {"files_at_rest": sorted(os.listdir(folder))}
    filler = fill(folder)
    result["free_bytes"] = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    result["commands"] = commands(db, export)
    result["in_process"] = in_process(db)
    filler.unlink()
    result["after"] = run(("list", "--json"), db, None)
    print(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
