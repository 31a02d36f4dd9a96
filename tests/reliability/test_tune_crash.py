"""SIGKILL a real `tunecache tune` process at the points it writes: the cache stays whole and
honest.

A tuning session writes as it goes: entries, timing records, verdicts, run notes. Killed at any
point, it must leave a database that passes integrity_check, where no entry is `accepted`
without the `validated` verdict of the model that accepted it (the tuner commits an accepted
entry with that verdict, in one transaction), and where the next session runs to its end.

The child is the real command with its cache's writes reporting on a pipe: after each write it
says so and waits for the parent's word. The parent kills it after a chosen write, either while
it waits there (the kill lands exactly between two commits, in the state the protocol promises
is safe), or just after letting it go on (the kill lands somewhere in what follows, a commit
included). No kill is aimed by a delay, so none can miss the session on a slow machine.
"""

from __future__ import annotations

import os
import select
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUNE = ["tune", "tests.tune_models:ENCODER", "--share", "0"]
COMMAND = [sys.executable, "-m", "tunecache", *TUNE]

#: the child: `tunecache tune`, with every write of its cache reported on a pipe
CHILD = """
import os, sys
from tunecache import cli
from tunecache.cache import Cache

reports, answers = int(sys.argv[1]), int(sys.argv[2])


def reporting(write):
    def reported(*args, **kwargs):
        result = write(*args, **kwargs)
        os.write(reports, b"w")
        os.read(answers, 1)  # the parent's word to go on (or its SIGKILL, here)
        return result

    return reported


for name in ("put", "put_many", "validate", "note"):
    setattr(Cache, name, reporting(getattr(Cache, name)))
sys.exit(cli.main(sys.argv[3:]))
"""


def _start(db: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [*COMMAND, "--db", str(db)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _session(db: Path, kill_after: int | None, *, wait_there: bool) -> tuple[int, str]:
    """Run the reporting child over `db`, killing it after its `kill_after`-th write (None:
    never); the writes it reported, and where the kill landed."""
    reports, child_reports = os.pipe()
    child_answers, answers = os.pipe()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(child_reports),
            str(child_answers),
            *TUNE,
            "--db",
            str(db),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=(child_reports, child_answers),
    )
    os.close(child_reports)
    os.close(child_answers)
    writes = 0
    try:
        while True:
            readable, _, _ = select.select([reports], [], [], 120)
            assert readable, "the child neither wrote nor ended in 120 s"
            if not os.read(reports, 1):
                break  # the session ended
            writes += 1
            if writes == kill_after and wait_there:
                process.kill()
                return writes, "between two commits"
            os.write(answers, b"c")
            if writes == kill_after:
                process.kill()
                process.wait(timeout=30)
                # An exit of its own before the kill means the kill came after the end.
                return writes, "after the end" if process.returncode == 0 else "in what follows"
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
        return writes, "after the end"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        os.close(reports)
        os.close(answers)


def _violations(db: Path) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        found = [f"integrity: {row[0]}" for row in conn.execute("pragma integrity_check")]
        found = [f for f in found if f != "integrity: ok"]
        tables = {row[0] for row in conn.execute("select name from sqlite_master")}
        if "entries" not in tables:
            return found  # killed while the schema was being created: nothing was written
        unvouched = conn.execute(
            "select e.id from entries e where e.status = 'accepted' and not exists "
            "(select 1 from validations v where v.entry_id = e.id and v.verdict = 'validated')"
        ).fetchall()
        found += [
            f"entry {row[0]} is accepted with no model's validated verdict" for row in unvouched
        ]
    return found


@pytest.mark.slow
def test_a_killed_tuning_session_leaves_a_whole_cache_the_next_session_finishes(
    tmp_path: Path,
) -> None:
    # How many writes one whole session makes here, to spread the kills over them.
    total, _ = _session(tmp_path / "calibration.db", None, wait_there=True)
    assert total >= 2

    landed = {"between two commits": 0, "in what follows": 0, "after the end": 0}
    for trial in range(6):
        db = tmp_path / f"kill{trial}.db"
        # Every third write or so, from the first on; every other kill waits at the write.
        kill_after = 1 + trial * (total - 1) // 5
        writes, where = _session(db, kill_after, wait_there=trial % 2 == 0)
        landed[where] += 1
        assert _violations(db) == [], f"trial {trial}, killed after write {writes}"
        # The next session (a fresh process) runs to its end on what the killed one left.
        again = _start(db)
        assert again.wait(timeout=120) == 0, (trial, again.stderr.read() if again.stderr else "")
        assert _violations(db) == [], f"trial {trial}, after the next session"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            statuses = [row[0] for row in conn.execute("select status from runs order by id")]
        assert statuses[-1] == "finished"
    print(f"6 SIGKILLs of 'tunecache tune' ({total} writes a session): {landed}")
    assert landed["between two commits"] > 0
