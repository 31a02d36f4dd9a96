"""A sync killed at any point leaves both sides whole, and the next sync finishes the work: a
real process, killed (SIGKILL) where it says it has got to, on a line of its stdout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import PgSchema
from tunecache import fleet
from tunecache.cache import Cache, NewEntry
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.fleet.transfer import CHUNK

NAMES = ["a", "b"]
COUNT = 2500  # more than one chunk of fleet.transfer.CHUNK

# The child: sync in `direction`, stopping where `point` says (after the first batch of
# entries is written, when the first mark is, when the second is: the first chunk committed,
# or before the second chunk is read), once it has said so on its stdout; it goes on at a line
# on its stdin, or is killed.
CHILD = """
import sys
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.fleet.transfer import CHUNK
from tunecache.fleet import sync
from tunecache.store import bulk, syncing

direction, point, path, url = sys.argv[1:5]

def stop(real, at):
    calls = []
    def stopped(*args, **kwargs):
        calls.append(1)
        if len(calls) == at == 2:
            print("stopped", flush=True)
            sys.stdin.readline()
        out = real(*args, **kwargs)
        if len(calls) == at == 1:
            print("stopped", flush=True)
            sys.stdin.readline()
        return out
    return stopped

if point == "written":
    bulk.write_entries = stop(bulk.write_entries, 1)
elif point == "marked":
    syncing.set_mark = stop(syncing.set_mark, 1)
elif point == "committed":
    syncing.set_mark = stop(syncing.set_mark, 2)
else:
    syncing.entries_between = stop(syncing.entries_between, 2)
device = Device("test-cpu-9000", 4, None, "tunecache", "0.1.0")
with Cache.open(device=device, path=path) as local:
    sync(local, url, direction=direction)
print("finished", flush=True)
"""


def _record() -> TimingRecord:
    return TimingRecord(
        candidates=(CandidateTiming("a", (2e-5, 2e-5)), CandidateTiming("b", (1e-5, 1e-5)))
    )


def _entries(count: int) -> list[NewEntry]:
    return [NewEntry(f"op_F32_m{i}", "b", NAMES, heuristic="a", record=_record())
            for i in range(1, count + 1)]  # fmt: skip


def _killed_at(
    direction: str, point: str, local: Path, url: str, meanwhile: Callable[[], None] | None = None
) -> None:
    """Run the child until it says it stopped at `point`, then kill it; or, with `meanwhile`,
    call that and let the child finish."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, direction, point, str(local), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "stopped"
        if meanwhile is None:
            os.kill(child.pid, signal.SIGKILL)
        else:
            meanwhile()
            child.stdin.write("go on\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "finished"
    except BaseException:
        child.kill()  # a failed step must not leave the child waiting on its stdin
        raise
    finally:
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()
    assert child.returncode == (-signal.SIGKILL if meanwhile is None else 0)


@pytest.mark.parametrize("point", ["written", "marked"])
def test_a_pull_killed_leaves_the_local_cache_as_it_was(
    pg: PgSchema, device: Device, tmp_path: Path, point: str
) -> None:
    with Cache.open(url=pg.url, device=device) as store:
        store.put_many(_entries(COUNT))
    local = tmp_path / "host.db"
    with Cache.open(device=device, path=local) as host:
        host.put_many(_entries(1))  # one of them already here, the same
    _killed_at("pull", point, local, pg.url)
    with (
        Cache.open(device=device, path=local) as host,
        Cache.open(url=pg.url, device=device) as store,
    ):
        assert host.count() == 1 and store.count() == COUNT
        done = fleet.sync(host, store, direction="pull").directions[0]
        assert (done.mark_before, done.read, done.counts["added"]) == (0, COUNT, COUNT - 1)
        assert host.count() == COUNT
        assert fleet.sync(host, store, direction="pull").directions[0].read == 0


@pytest.mark.parametrize("point", ["written", "marked"])
def test_a_push_killed_leaves_the_store_whole_and_the_next_push_finishes(
    pg: PgSchema, device: Device, tmp_path: Path, point: str
) -> None:
    local = tmp_path / "tuner.db"
    with Cache.open(device=device, path=local) as tuner:
        tuner.put_many(_entries(COUNT))
    _killed_at("push", point, local, pg.url)
    with (
        Cache.open(device=device, path=local) as tuner,
        Cache.open(url=pg.url, device=device) as store,
    ):
        # Killed inside the store's transaction: nothing there; killed after it committed,
        # before the local mark: everything there, and the mark not moved.
        assert store.count() == (0 if point == "written" else COUNT)
        done = fleet.sync(tuner, store, direction="push").directions[0]
        assert done.mark_before == 0 and done.read == COUNT
        if point == "written":
            assert done.counts["added"] == COUNT
        else:
            assert done.counts["unchanged"] == COUNT and not done.changed
        assert store.count() == COUNT
        assert fleet.sync(tuner, store, direction="push").directions[0].read == 0


def test_a_pull_killed_after_a_chunk_committed_keeps_it_and_the_next_pull_finishes(
    pg: PgSchema, device: Device, tmp_path: Path
) -> None:
    with Cache.open(url=pg.url, device=device) as store:
        store.put_many(_entries(COUNT))
    local = tmp_path / "host.db"
    _killed_at("pull", "committed", local, pg.url)
    with (
        Cache.open(device=device, path=local) as host,
        Cache.open(url=pg.url, device=device) as store,
    ):
        # The first chunk whole, its mark with it, and nothing of the second.
        assert host.count() == CHUNK
        done = fleet.sync(host, store, direction="pull").directions[0]
        assert done.mark_before > 0
        assert (done.read, done.counts["added"]) == (COUNT - CHUNK, COUNT - CHUNK)
        assert host.count() == COUNT
        assert fleet.sync(host, store, direction="pull").directions[0].read == 0


def test_a_pull_lets_local_writers_in_between_chunks_and_pushes_what_they_wrote(
    device: Device, tmp_path: Path
) -> None:
    remote, local = tmp_path / "remote.db", tmp_path / "host.db"
    with Cache.open(device=device, path=remote) as store:
        store.put_many(_entries(COUNT))
    Cache.open(device=device, path=local).close()

    def write_here() -> None:
        # The pull is between its chunks: a writer here does not wait for its whole read.
        with Cache.open(device=device, path=local, busy_timeout=1.0) as host:
            host.put("op_F32_m9999", choice="a", candidates=NAMES)

    _killed_at("pull", "between", local, str(remote), meanwhile=write_here)
    with Cache.open(device=device, path=local) as host:
        assert host.count() == COUNT + 1
        # The entry written meanwhile is this host's own: the pull did not mark it pushed.
        pushed = fleet.sync(host, str(remote), direction="push").directions[0]
        assert pushed.counts["added"] == 1
