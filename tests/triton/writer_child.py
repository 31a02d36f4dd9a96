"""A process that tunes one key with the CPU kernel, for the write-behind tests (test_writer.py).

    python -m tests.triton.writer_child M [--hold] [--fork] [--wait] [--stall-commit]

It reports each step on stdout, one line each, as it reaches it: `launched {stats}` once the
winner ran (its record queued, perhaps not written), `sees N` from a forked child reading the
store, `flushed True|False`, `imported [...]` (SQLAlchemy or Alembic, if loaded) and `done`.
`--hold` waits for a line on stdin after the launch; `--stall-commit` makes the writer report
`in transaction` inside its write transaction, before COMMIT, and wait there for good (the
parent's SIGKILL). The store is the test's (TUNECACHE_DIR), for the device of fake.GPU.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from typing import Any

from tests.triton.fake import GPU, CpuKernel, launch, tuner

_said = threading.Lock()


def say(text: str) -> None:
    """One whole line, even with the writer's thread saying its own at the same time."""
    with _said:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def entries() -> int:
    """The entries the store holds, read without tunecache's writers."""
    from tunecache import paths

    db = paths.locate(device=GPU)[1]
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])


def stall_commits() -> None:
    from tunecache.store.direct import DirectStore

    made = DirectStore.__init__

    def stalled() -> None:
        say("in transaction")
        sys.stdin.readline()  # never answered: the parent kills this process here

    def init(self: DirectStore, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.before_commit = stalled

    DirectStore.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    m, flags = int(sys.argv[1]), set(sys.argv[2:])
    if "--stall-commit" in flags:
        stall_commits()
    kernel = tuner(CpuKernel())
    launch(kernel, m)
    say(f"launched {json.dumps(kernel.stats)}")
    if "--hold" in flags:
        sys.stdin.readline()
    if "--fork" in flags:
        pid = os.fork()
        if pid == 0:
            say(f"sees {entries()}")
            os._exit(0)
        os.waitpid(pid, 0)
    if "--wait" in flags:
        say(f"flushed {kernel.wait_pending(timeout=60)}")
    heavy = sorted({name.split(".")[0] for name in sys.modules} & {"sqlalchemy", "alembic"})
    say(f"imported {json.dumps(heavy)}")
    say("done")


if __name__ == "__main__":
    main()
