"""Identical `tunecache tune` commands on one host share one session (tunecache.cli.sharing):
real processes for the wait, the share and a holder killed; a real cache file for the change
mark that decides whether a result still holds."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tune_models as tm
from tunecache.cache import Cache
from tunecache.cli import sharing
from tunecache.cli.commands import tuning
from tunecache.cli.parser import build_parser
from tunecache.device import Device
from tunecache.hostlock import POLL, HostLock
from tunecache.store.reading import CacheReader
from tunecache.tune.claims import CLAIM_WAIT
from tunecache.tune.reports import KeyOutcome, TuneReport

ROOT = Path(tm.__file__).resolve().parent.parent

# A model that says it runs (a file named for its process) and then waits for the test's word
# (a file `go`): the first command is inside its session, holding the gate, for as long as the
# test needs; a command that shares its session never runs the model, so never writes a file.
GATED = """
import os, time
from pathlib import Path
from tests import tune_models as tm
from tunecache.tune import Model

HERE = Path(__file__).parent


def gated():
    (HERE / f"started-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while not (HERE / "go").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the test never said go")
        time.sleep(0.01)
    return tm.scorer()


def raises():
    gated()
    raise ValueError("the user's own error")


GATED = Model("gated", gated)
RAISES = Model("raises", raises)
"""


def _until(found: object, what: str, deadline: float = 120.0) -> None:
    """Wait for the callable `found` to be true (an event another process makes)."""
    end = time.monotonic() + deadline
    while not found():  # type: ignore[operator]
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.01)


class Child:
    """`python FLAGS -m tunecache COMMAND` as a real process: its stderr read line by line by
    a thread of its own (so that a line is seen as soon as it is printed, however many come
    before it), its stdout at the end."""

    def __init__(self, command: list[str], env: dict[str, str], *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, *flags, "-m", "tunecache", *command],
            env=env,
            cwd=env["PYTHONPATH"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self.process.pid
        self.err: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def said(self, text: str, deadline: float = 120.0) -> str:
        """Wait until the child prints a line on stderr that holds `text`; that line."""
        end = time.monotonic() + deadline
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"never printed {text!r}: {self.err[-20:]}") from None
            assert line is not None, f"ended before printing {text!r}: {self.err[-20:]}"
            if text in line:
                return line

    def end(self) -> tuple[int, str]:
        """Wait for the child's exit: its status and its stdout (its stderr is `err`)."""
        assert self.process.stdout is not None
        out = self.process.stdout.read()
        code = self.process.wait(timeout=120)
        self._reader.join(timeout=120)
        return code, out

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[list[str], dict[str, str]]]:
    """The command that tunes the gated model into a file of the test's, and its environment
    (the same for every command of a test: the environment is part of the request)."""
    models = tmp_path / "gated.py"
    models.write_text(GATED)
    command = ["tune", f"{models}:GATED", "--db", str(tmp_path / "t.db")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNECACHE_DIR": str(tmp_path / "root")}
    yield command, env


def _started(folder: Path) -> list[Path]:
    return sorted(folder.glob("started-*"))


def _pair(
    tmp_path: Path, command: list[str], env: dict[str, str], *flags: str
) -> tuple[Child, Child, tuple[int, str], tuple[int, str]]:
    """Two identical commands: the second started once the first runs its model, the word to
    go given once the second waits. Both children, and each one's exit status and stdout."""
    first = Child(command, env)
    try:
        _until(lambda: _started(tmp_path), "the first command's model ran")
        second = Child(command, env, *flags)
        try:
            second.said("waiting to report its session")
            (tmp_path / "go").touch()
            ended2 = second.end()
        finally:
            second.kill()
        ended1 = first.end()
    finally:
        first.kill()
    return first, second, ended1, ended2


@pytest.mark.parametrize("json_output", [True, False])
def test_an_identical_command_waits_and_reports_the_running_ones_session(
    tmp_path: Path, gated: tuple[list[str], dict[str, str]], json_output: bool
) -> None:
    command, env = gated
    command = [*command, "--json"] if json_output else command
    # The second imports nothing heavy: -X importtime names every module it loads.
    first, second, (code1, out1), (code2, out2) = _pair(tmp_path, command, env, "-X", "importtime")
    assert (code1, code2) == (0, 0), (first.err[-5:], second.err[-5:])
    by = f"{platform.node()} pid {first.pid}"
    assert any(f"({by}): waiting to report its session" in line for line in second.err)
    if json_output:
        own, shared = json.loads(out1), json.loads(out2)
        assert [r["shared_from"] for r in own] == [None]
        assert [r["shared_from"] for r in shared] == [by]
        assert [{**r, "shared_from": None} for r in shared] == own
        assert own[0]["keys"], "the model's heavy key is in the report"
    else:
        header, _, text = out2.partition("\n")
        assert f"the session of an identical tune command ({by})" in header
        assert text == out1 and "final guard" in text
    # It never ran the model (one process did), nor imported the store's SQLAlchemy side.
    assert [p.name for p in _started(tmp_path)] == [f"started-{first.pid}"]
    modules = {line.split("|")[-1].strip() for line in second.err if "|" in line}
    assert "tunecache.cli.sharing" in modules
    assert not {m for m in modules if m.startswith(("sqlalchemy", "alembic", "tunecache.tune"))}
    # The lock's file goes with its last holder; the result stays for later waiters.
    assert not list(tmp_path.glob("t.db.share-*.lock"))
    assert len(list(tmp_path.glob("t.db.share-*.json"))) == 1


def test_a_waiter_behind_a_model_that_raises_runs_it_and_reports_it_as_the_users(
    tmp_path: Path, gated: tuple[list[str], dict[str, str]]
) -> None:
    command, env = gated
    command = [command[0], command[1].replace(":GATED", ":RAISES"), *command[2:]]
    first, second, (code1, _), (code2, _) = _pair(tmp_path, command, env)
    assert code1 == code2 == 9
    for child in (first, second):
        assert any("raised ValueError: the user's own error" in line for line in child.err)
    assert len(_started(tmp_path)) == 2  # the second ran the model itself
    assert not list(tmp_path.glob("t.db.share-*.json"))  # nothing to share, ever


def test_a_command_whose_holder_is_killed_runs_a_session_of_its_own(
    tmp_path: Path, gated: tuple[list[str], dict[str, str]]
) -> None:
    command, env = gated
    command = [*command, "--json"]
    first = Child(command, env)
    try:
        _until(lambda: _started(tmp_path), "the first command's model ran")
        second = Child(command, env)
        try:
            second.said("waiting to report its session")
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(timeout=60)
            (tmp_path / "go").touch()
            code, out = second.end()
        finally:
            second.kill()
    finally:
        first.kill()
    assert code == 0, second.err[-5:]
    (report,) = json.loads(out)
    assert report["shared_from"] is None
    assert len(_started(tmp_path)) == 2  # it ran the model itself
    assert report["keys"] and report["run_id"] is not None


def test_what_a_session_leaves_undone_is_not_shared() -> None:
    def report(**more: object) -> TuneReport:
        fields = {"model": "m", "fingerprint": "f", "run_id": 1, "scenarios": ("-",),
                  "keys": (), "screened": 0, "guard": None, "kept": (), "masked": (),
                  "seconds": 1.0}  # fmt: skip
        return TuneReport(**{**fields, **more})  # type: ignore[arg-type]

    skipped = KeyOutcome("k", "skipped", 0.5, "-", "loop", "loop")
    kept = KeyOutcome("k", "kept", 0.5, "-", "loop", "loop")
    assert tuning.complete([report(), report(keys=(kept,))])
    assert not tuning.complete([report(), report(budget_spent=True)])
    assert not tuning.complete([report(guard_left_to="vm pid 1")])
    assert not tuning.complete([report(keys=(kept, skipped))])


def _args(*argv: str) -> argparse.Namespace:
    args = build_parser(["tune"]).parse_args(["tune", *argv])
    args.argv = ("tune", *argv)
    return args


def test_what_is_not_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "t.db")
    assert sharing.gate(_args("m:M", "--db", db)) is not None
    assert sharing.gate(_args("m:M", "--db", db, "--alone")) is None
    assert sharing.gate(_args("--pending", "--db", db)) is None
    # A model file that is not there: the command says so as it always has.
    assert sharing.gate(_args(f"{tmp_path / 'none.py'}:M", "--db", db)) is None
    monkeypatch.setenv("TUNECACHE_URL", "postgresql://nobody@/nothing")
    assert sharing.gate(_args("m:M")) is None  # a fleet store: other hosts write it
    assert sharing.gate(_args("m:M", "--db", db)) is not None  # a file named: not the fleet's


def test_the_request_is_the_command_its_directory_environment_cpus_and_model_file(
    tmp_path: Path,
) -> None:
    base = {"cwd": "/w", "environ": {"A": "1"}, "cpus": [0, 1], "model_files": [(1, 2, 3)]}
    digest = sharing.request_digest(["tune", "m:M"], **base)  # type: ignore[arg-type]
    assert digest == sharing.request_digest(["tune", "m:M"], **base)  # type: ignore[arg-type]
    for change in (
        {"cwd": "/x"},
        {"environ": {"A": "2"}},
        {"environ": {"A": "1", "RANK": "1"}},
        {"cpus": [0]},
        {"model_files": [(1, 2, 4)]},
    ):
        other = sharing.request_digest(["tune", "m:M"], **{**base, **change})  # type: ignore[arg-type]
        assert other != digest, change
    assert sharing.request_digest(["tune", "m:M", "--retune"], **base) != digest  # type: ignore[arg-type]
    # A model file's edit is a new request.
    models = tmp_path / "m.py"
    models.write_text("M = 1\n")
    gate = sharing.gate(_args(f"{models}:M", "--db", str(tmp_path / "t.db")))
    os.utime(models, ns=(0, 10**9))
    again = sharing.gate(_args(f"{models}:M", "--db", str(tmp_path / "t.db")))
    assert gate is not None and again is not None and gate.digest != again.digest
    assert gate.lock.path.name.startswith("t.db.share-")  # beside the file --db names
    assert gate.result_path.name == gate.lock.path.name.removesuffix(".lock") + ".json"


def test_the_wait_is_a_claims_or_the_budget_and_a_wait_the_tuner_refuses_is_not_shared(
    tmp_path: Path,
) -> None:
    assert sharing.SHARE_WAIT == CLAIM_WAIT
    assert sharing.wait_limit(None, None) == CLAIM_WAIT
    assert sharing.wait_limit(5.0, None) == 5.0
    assert sharing.wait_limit(None, 30.0) == 30.0
    assert sharing.wait_limit(60.0, 30.0) == 30.0
    assert sharing.wait_limit(0.0, None) == 0.0
    for bad in ((-1.0, None), (math.nan, None), (math.inf, None), (None, -1.0), (None, math.nan)):
        assert sharing.wait_limit(*bad) is None, bad
    db = str(tmp_path / "t.db")
    found = sharing.gate(_args("m:M", "--db", db, "--budget", "3"))
    assert found is not None and found.limit == 3.0
    # The tuner refuses these as it always has: the command is not shared first.
    assert sharing.gate(_args("m:M", "--db", db, "--claim-wait", "-1")) is None
    assert sharing.gate(_args("m:M", "--db", db, "--budget", "nan")) is None


@pytest.fixture
def store(tmp_path: Path, device: Device) -> Iterator[Cache]:
    with Cache.open(device=device, path=tmp_path / "s.db") as cache:
        yield cache


def _gate(tmp_path: Path, now: list[float]) -> sharing.Gate:
    """A gate of the request "d" whose wall clock is `now[0]`, that waits not at all."""
    return sharing.Gate(tmp_path / sharing.FOLDER, "", "d", 0.0, wall=lambda: now[0])


def _publish(gate: sharing.Gate, store: Cache, device: Device, output: object) -> None:
    mark = sharing.change_mark(store.path, device.fingerprint)
    assert mark is not None
    gate.publish(output, store.path, device.fingerprint, mark)


def test_a_result_holds_while_nothing_is_written_to_the_store(
    tmp_path: Path, store: Cache, device: Device
) -> None:
    store.put(tm.NORM, choice="vectorized", candidates=["loop", "vectorized"], heuristic="loop")
    now = [100.0]
    holder = _gate(tmp_path, now)
    assert holder.take()
    waiter = _gate(tmp_path, now)
    assert not waiter.take()
    assert waiter.holder() == f"{platform.node()} pid {os.getpid()}"
    now[0] = 101.0
    _publish(holder, store, device, ["the output"])
    holder.release()
    assert waiter.wait()
    found = waiter.result()
    assert found is not None and found["output"] == ["the output"]
    assert found["by"] == f"{platform.node()} pid {os.getpid()}"
    # Reading the store changes nothing; any write does, and the result no longer holds.
    assert list(store.entries())
    assert waiter.result() is not None
    store.put(tm.TOTAL, choice="numpy_sum", candidates=["numpy_sum", "_pysum"])
    assert waiter.result() is None
    waiter.release()


def test_commands_behind_one_that_ran_its_own_session_share_that_one(
    tmp_path: Path, store: Cache, device: Device
) -> None:
    now = [100.0]
    first, second, third = (_gate(tmp_path, now) for _ in range(3))
    assert first.take() and not second.take() and not third.take()
    first.release()  # it failed: nothing published
    now[0] = 110.0
    assert second.wait() and second.result() is None
    second.own()  # its own session, then its result
    store.put(tm.NORM, choice="vectorized", candidates=["loop", "vectorized"])
    _publish(second, store, device, ["second's"])
    second.release()
    assert third.wait()
    found = third.result()
    assert found is not None and found["output"] == ["second's"]
    third.release()


def test_a_result_from_before_a_command_came_is_never_taken(
    tmp_path: Path, store: Cache, device: Device
) -> None:
    now = [100.0]
    earlier = _gate(tmp_path, now)
    assert earlier.take()
    _publish(earlier, store, device, ["yesterday's"])
    earlier.release()
    now[0] = 100_000.0
    # A command that comes later and finds the lock free takes it: its own session.
    later = _gate(tmp_path, now)
    assert later.take()
    assert not later.result_path.exists()  # owning the lock removed the result before it
    later.release()
    # One that waits for a holder that fails before it owns the lock (between its flock and
    # its removal of the result, as one killed there) finds the old result, and leaves it.
    now[0] = 100.0
    _publish(earlier, store, device, ["yesterday's"])
    now[0] = 100_000.0
    holder = HostLock(later.lock.path)
    assert holder.acquire(0.0)
    waiter = _gate(tmp_path, now)
    assert not waiter.take()
    holder.release()
    assert waiter.wait() and waiter.result() is None
    # Nor a result of another request, however recent.
    path = waiter.result_path
    path.write_text(json.dumps({**json.loads(path.read_text()), "digest": "e", "written": 1e9}))
    assert waiter.result() is None
    waiter.release()


def test_results_and_their_parts_go_after_a_day_and_locks_stay(
    tmp_path: Path, store: Cache, device: Device
) -> None:
    folder = tmp_path / sharing.FOLDER
    folder.mkdir()
    old = [folder / "old.json", folder / "old.json.123.part", folder / "old.lock"]
    for path in old:
        path.write_text("x")
        os.utime(path, (1.0, 1.0))
    now = [sharing.KEEP + 1000.0]
    gate = _gate(tmp_path, now)
    assert gate.take()
    _publish(gate, store, device, [])
    assert sorted(p.name for p in folder.iterdir()) == ["d.json", "d.lock", "old.lock"]
    gate.release()


def test_the_change_mark_counts_every_kind_of_write(store: Cache, device: Device) -> None:
    def mark() -> tuple[object, ...]:
        reader = CacheReader.open(store.path, device.fingerprint)
        assert reader is not None
        try:
            return reader.change_mark()
        finally:
            reader.close()

    marks = [mark()]
    entry = store.put(tm.NORM, choice="vectorized", candidates=["loop", "vectorized"])
    marks.append(mark())
    store.set_status(entry, "accepted")
    marks.append(mark())
    store.validate(entry, model="m", fingerprint="f", verdict="masked")
    marks.append(mark())
    with store.run("tune"):
        pass
    marks.append(mark())
    other = store.put(tm.TOTAL, choice="numpy_sum", candidates=["numpy_sum", "_pysum"])
    marks.append(mark())
    with sqlite3.connect(store.path) as conn:  # another tool's delete (no trigger counts it)
        conn.execute("DELETE FROM entries WHERE id = ?", (other.id,))
    marks.append(mark())
    assert len(set(marks)) == len(marks), marks
    assert mark() == marks[-1]


def test_a_lock_whose_file_goes_with_its_holder_is_taken_again_on_the_new_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "request.lock"
    first, second, third = (HostLock(path, removed=True) for _ in range(3))
    assert first.acquire(0.0)
    looking = threading.Event()

    def sleep(seconds: float) -> None:
        looking.set()  # the second waits on the first one's file
        time.sleep(seconds)

    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(second.acquire(60.0, sleep=sleep)))
    waiter.start()
    assert looking.wait(60)
    first.release()  # removes the file, then lets go: the second's flock is on a removed file
    waiter.join(60)
    assert got == [True]
    assert path.exists()  # the one the second made in its place, and holds
    assert not third.acquire(0.0)  # one holder at a time on the new file too
    second.release()
    assert not path.exists()
    assert third.acquire(0.0)
    third.release()


def test_no_gate_without_a_wait_or_before_a_db_files_folder_exists(tmp_path: Path) -> None:
    assert sharing.gate(_args("m:M", "--db", str(tmp_path / "t.db"), "--claim-wait", "0")) is None
    assert sharing.gate(_args("m:M", "--db", str(tmp_path / "t.db"), "--budget", "0")) is None
    assert sharing.gate(_args("m:M", "--db", str(tmp_path / "new" / "t.db"))) is None
    assert not (tmp_path / "new").exists()


def test_a_holder_never_removes_a_file_it_does_not_hold(tmp_path: Path) -> None:
    path = tmp_path / "request.lock"
    first, second, third = (HostLock(path, removed=True) for _ in range(3))
    assert first.acquire(0.0)
    path.unlink()  # something else removes it (a user, a prune of the folder)
    assert second.acquire(0.0)  # a new file: the first's is gone, as before removal existed
    first.release()  # must not remove the second's file
    assert path.exists()
    assert not third.acquire(0.0)
    second.release()
    assert not path.exists()


def test_a_file_that_never_stays_is_given_up_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A filesystem whose file never looks the same twice: the retries sleep, and stop at the
    # deadline, on the lock's own (injected) clock.
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr("tunecache.hostlock._names", lambda path, fd: False)
    lock = HostLock(tmp_path / "request.lock", lambda: now[0], removed=True)
    assert not lock.acquire(1.0, sleep=sleep)
    assert now[0] == pytest.approx(1.0) and len(slept) == pytest.approx(1.0 / POLL, abs=1)
    assert not lock.acquire(0.0, sleep=sleep)  # an immediate look: two tries, no sleep
    assert now[0] == pytest.approx(1.0)
