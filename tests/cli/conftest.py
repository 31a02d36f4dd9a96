"""Shared fixtures and helpers of the command-line tests: a filled cache, and ways to run the
command (in process, or as a real process as a user would)."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunecache.cache import Cache
from tunecache.cli import main
from tunecache.codec import CandidateTiming, TimingRecord

NAMES = ("direct", "im2col", "winograd")


def run_process(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m tunecache ARGS` as a real process (with `env` added to the environment),
    its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )


def run_on_terminal(*args: str, columns: int = 200) -> tuple[int, str]:
    """`python -m tunecache ARGS` as a real process whose standard output is a terminal (a
    pseudo-terminal this test reads): its exit status and what it printed there."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tunecache", *args],
        stdin=subprocess.PIPE,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    out = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # Linux: EIO once the child has closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    _, err = child.communicate(timeout=120)
    assert not err, err
    # A terminal turns each newline into CR LF.
    return child.returncode, out.decode().replace("\r\n", "\n")


def run_json(capsys: pytest.CaptureFixture[str], *args: str, status: int = 0) -> Any:
    """Run a subcommand in process with --json; check its status and return what it printed."""
    assert main([*args, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def run_human(capsys: pytest.CaptureFixture[str], *args: str, status: int = 0) -> str:
    """Run a subcommand in process; check its status and return its standard output."""
    assert main(list(args)) == status
    return capsys.readouterr().out


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of a database, read-only, to tell that nothing changed."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }
    finally:
        conn.close()


@pytest.fixture
def filled(_isolated_cache_root: Path) -> Iterator[Cache]:
    """This machine's own cache (where the command looks by default), with a few entries."""
    record = TimingRecord(
        candidates=(
            CandidateTiming("direct", (3e-5, 3.1e-5)),
            CandidateTiming("im2col", (1e-5, 1.2e-5)),
            CandidateTiming("winograd", error="unsupported"),
        ),
        settings={"min_time": 0.01},
    )
    with Cache.open() as cache:
        with cache.run("tune", "from the tests") as run_id:
            good = cache.put(
                "conv_F32_m64_k3", choice="im2col", candidates=NAMES, heuristic="direct",
                record=record, speedup=2.5, run_id=run_id,
            )  # fmt: skip
        masked = cache.put("conv_F32_m128_k3", choice="winograd", candidates=NAMES)
        cache.put("matmul_F32_m8_n8", choice="direct", candidates=NAMES)
        cache.validate(
            good, model="resnet", fingerprint="r1", verdict="validated", rounds=3, confirmations=3
        )
        cache.validate(masked, model="resnet", fingerprint="r1", verdict="masked", rounds=3)
        yield cache
