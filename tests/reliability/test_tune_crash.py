"""SIGKILL a real `tunecache tune` process at random points: the cache stays whole and honest.

A tuning session writes as it goes: entries, timing records, verdicts, run rows. Killed at any
instant, it must leave a database that passes integrity_check, where no entry is `accepted`
without the `validated` verdict of the model that accepted it (the tuner commits unvalidated,
then the verdict, then the status), and where the next session runs to its end.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "tunecache", "tune", "tests.tune_models:ENCODER", "--share", "0"]


def _start(db: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [*COMMAND, "--db", str(db)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


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
    # How long one whole session takes here, process start included, to aim the kills.
    calibration = tmp_path / "calibration.db"
    start = time.monotonic()
    done = _start(calibration)
    assert done.wait(timeout=120) == 0, done.stderr.read() if done.stderr else ""
    span = time.monotonic() - start

    landed = {"before the first write": 0, "mid-session": 0, "after the end": 0}
    for seed in range(6):
        db = tmp_path / f"kill{seed}.db"
        process = _start(db)
        time.sleep(random.Random(seed).uniform(0.45, 1.0) * span)
        ended = process.poll() is not None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if not db.exists():
            landed["before the first write"] += 1
            continue
        landed["after the end" if ended else "mid-session"] += 1
        assert _violations(db) == [], f"seed {seed}"
        # The next session (a fresh process) runs to its end on what the killed one left.
        again = _start(db)
        assert again.wait(timeout=120) == 0, (seed, again.stderr.read() if again.stderr else "")
        assert _violations(db) == [], f"seed {seed}, after the next session"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            statuses = [row[0] for row in conn.execute("select status from runs order by id")]
        assert statuses[-1] == "finished"
    print(f"6 SIGKILLs of 'tunecache tune' ({span:.2f} s a session): {landed}")
    assert landed["mid-session"] > 0
