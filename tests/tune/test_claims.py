"""One tuner per key (tunecache.tune.claims, tunecache.store.claims): claims taken, renewed,
released and expired on injected clocks; the measurement turns (tunecache.tune.measuring);
and real processes (tests/tune/claims_child.py) that
hold a claim, are killed holding one, or tune beside each other, synchronised on their pipes.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import tune_models as tm
from tests.tune.claims_child import benches, spawn, tune_at_once
from tests.tune.support import (
    NORM,
    NORM_NAMES,
    TOTAL,
    Clock,
    always_alive,
    claims_on,
    epoch_clock,
    lock_seen,
)
from tunecache import tune
from tunecache.cache import Cache
from tunecache.cli.options import TUNE, add_options, option_values
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.hostlock import POLL, HostLock
from tunecache.resolve import Table
from tunecache.tune.claims import Claims, Holder, pid_alive
from tunecache.tune.measuring import MeasureLock
from tunecache.tune.options import TUNE_OPTIONS

KEY = NORM.text


def _never_alive(holder: Holder) -> bool:
    return False


@pytest.fixture
def clock() -> Clock:
    """A wall clock at a plausible epoch second that moves only when told."""
    return epoch_clock()


def test_a_live_claim_keeps_the_key_from_another_tuner(cache: Cache, clock: Clock) -> None:
    a, b = claims_on(cache, clock, "host-a"), claims_on(cache, clock, "host-b")
    assert a.claim(KEY) == (KEY, True, None)
    refused = b.claim(KEY)
    assert not refused.taken and refused.holder is not None
    assert (refused.holder.host, refused.holder.token) == ("host-a", a.token)
    assert b.holder(KEY) == refused.holder and a.holder(KEY) is None
    assert a.claim(KEY).taken  # its own claim again: still its own
    assert a.held == {KEY} and b.held == frozenset()


def test_a_claim_expires_unless_its_holder_renews_it(cache: Cache, clock: Clock) -> None:
    a, b = claims_on(cache, clock, "host-a"), claims_on(cache, clock, "host-b")
    a.claim(KEY)
    clock.advance(20)
    assert a.renew() == 1  # now it stands until 20 + 30
    clock.advance(25)
    assert not b.claim(KEY).taken
    clock.advance(6)  # 51 s after the claim, 31 after the renewal: expired
    taken = b.claim(KEY)
    assert taken.taken and taken.holder is not None and taken.holder.token == a.token
    assert a.renew() == 0  # the key is b's now: a holds nothing any more
    assert not a.claim(KEY).taken


def test_a_release_frees_the_key_and_says_who_tuned_it_last(cache: Cache, clock: Clock) -> None:
    a, b = claims_on(cache, clock, "host-a"), claims_on(cache, clock, "host-b")
    a.claim(KEY)
    a.claim(TOTAL.text)
    a.release(KEY)
    assert a.held == {TOTAL.text}
    taken = b.claim(KEY)
    assert taken.taken and taken.holder is not None and taken.holder.host == "host-a"
    assert b.last(KEY) is not None and b.last(KEY).token == b.token  # type: ignore[union-attr]
    a.release()
    assert b.claim(TOTAL.text).taken and a.held == frozenset()


def test_each_device_identity_claims_its_own_keys(
    cache: Cache, device: Device, tmp_path: Path, clock: Clock
) -> None:
    other = Cache.open(device=device.with_threads(8), path=cache.path)
    try:
        assert claims_on(cache, clock, "host-a").claim(KEY).taken
        assert claims_on(other, clock, "host-b").claim(KEY).taken
    finally:
        other.close()


def test_a_wait_ends_at_its_deadline_naming_the_holder(cache: Cache, clock: Clock) -> None:
    a, b = claims_on(cache, clock, "host-a"), claims_on(cache, clock, "host-b")
    a.claim(KEY)
    heard: list[Holder] = []
    waited = b.wait(KEY, 5.0, sleep=clock.advance, poll=1.0, waiting=heard.append)
    assert not waited.taken and waited.holder is not None and waited.holder.host == "host-a"
    assert [h.host for h in heard] == ["host-a"]  # told once, not at every look

    def release_then_sleep(seconds: float) -> None:
        a.release(KEY)
        clock.advance(seconds)

    assert b.wait(KEY, 5.0, sleep=release_then_sleep, poll=1.0).taken


def test_a_bad_ttl_is_refused(cache: Cache) -> None:
    for ttl in (0, -1.0, float("nan"), "30", True):
        with pytest.raises(BadArgumentError, match="ttl"):
            Claims(cache, ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="claim_ttl"):
        tune.tune(tm.ENCODER, cache=cache, claim_ttl=0)
    with pytest.raises(BadArgumentError, match="claim_wait is a number of seconds"):
        tune.tune(tm.ENCODER, cache=cache, claim_wait=None)  # type: ignore[arg-type]
    assert cache.count() == 0


def test_renewing_renews_from_a_thread_and_releases_at_the_end(cache: Cache) -> None:
    claims = Claims(cache, ttl=30.0)
    with claims.renewing(every=0.001):
        claims.claim(KEY)
        first = claims.last(KEY)
        assert first is not None
        while (now := claims.last(KEY)) is not None and now.expires_at == first.expires_at:
            pass  # until the thread's beat moves the expiry on
    assert claims.held == frozenset()
    assert Claims(cache, alive=always_alive).claim(KEY).taken


def test_a_killed_tuners_claim_goes_at_once_on_its_host_and_at_expiry_elsewhere(
    cache: Cache, clock: Clock
) -> None:
    with spawn("hold", str(cache.path), KEY) as (child, out):
        assert out.readline().split() == ["claimed", str(child.pid)]
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Another host cannot see the process: the claim stands until it expires.
    elsewhere = Claims(cache, clock=clock, host="host-b", alive=pid_alive)
    holder = elsewhere.last(KEY)
    assert holder is not None and holder.pid == child.pid and holder.host == platform.node()
    clock.now = holder.expires_at.timestamp() - 1
    assert not Claims(cache, clock=clock, alive=always_alive).claim(KEY).taken
    clock.now = holder.expires_at.timestamp() + 1
    assert Claims(cache, clock=clock, alive=always_alive).claim(KEY).taken
    # On its own host, a gone process's claim is taken over at once.
    with spawn("hold", str(cache.path), TOTAL.text) as (child, out):
        assert out.readline().startswith("claimed")
        assert not Claims(cache).claim(TOTAL.text).taken  # alive: it keeps it
        child.send_signal(signal.SIGKILL)
        child.wait()
    taken = Claims(cache).claim(TOTAL.text)
    assert taken.taken and taken.holder is not None and taken.holder.pid == child.pid


def test_a_tuner_tunes_other_keys_then_waits_for_a_claimed_one(cache: Cache) -> None:
    with spawn("hold", str(cache.path), KEY) as (child, out):
        assert out.readline().startswith("claimed")
        told: list[str] = []

        def progress(what: str, done: int, total: int) -> None:
            if what.startswith(f"waiting for {KEY}"):
                told.append(what)
                assert child.stdin is not None
                child.stdin.write(b"release\n")
                child.stdin.flush()
                assert out.readline().strip() == "released"

        report = tune.tune(tm.ENCODER, cache=cache, share=0.0, progress=progress)
    assert told == [f"waiting for {KEY}, claimed by {platform.node()} pid {child.pid}"]
    keys = [outcome.key for outcome in report.keys]
    assert keys[-1] == KEY  # left for last: the others were tuned meanwhile
    (norm,) = [o for o in report.keys if o.key == KEY]
    # The holder wrote nothing: this tuner benched the key itself once it was free.
    assert norm.action == "accepted" and norm.choice == "vectorized"
    assert norm.bench_stopped not in (None, "stored")


def test_a_claim_that_outlasts_the_wait_skips_the_key(cache: Cache) -> None:
    with spawn("hold", str(cache.path), KEY) as (child, out):
        assert out.readline().startswith("claimed")
        report = tune.tune(tm.ENCODER, cache=cache, share=0.0, claim_wait=0)
    (norm,) = [o for o in report.keys if o.key == KEY]
    assert norm.action == "skipped" and f"pid {child.pid}" in norm.note
    assert cache.get(NORM, candidates=NORM_NAMES) is None  # the holder's to tune
    assert any(o.action != "skipped" for o in report.keys)  # the other keys were tuned


def test_two_tuners_at_once_bench_each_key_once_and_report_what_the_cache_holds(
    cache: Cache,
) -> None:
    reports = tune_at_once(str(cache.path))
    benched = benches(reports)
    assert benched and set(benched.values()) == {1}, benched
    table = Table.open(path=cache.path, device=cache.device, model="encoder")
    table = table.derive(fingerprint=reports[0]["fingerprint"])
    for report in reports:
        for outcome in report["keys"]:
            key = {NORM.text: NORM, TOTAL.text: TOTAL}.get(outcome["key"])
            if key is None:
                continue
            names = NORM_NAMES if key is NORM else tm.numpy_sum.candidates
            answer = table.resolve(key, names, outcome["heuristic"])
            assert answer.choice == outcome["choice"], (report["run_id"], outcome)


def test_a_report_says_what_the_cache_holds_when_another_tuner_replaced_it(
    cache: Cache, cache_at: Any
) -> None:
    other = cache_at(cache.path)
    replaced: list[int] = []

    def progress(what: str, done: int, total: int) -> None:
        entry = cache.get(NORM, candidates=NORM_NAMES)
        if replaced or entry is None or entry.status != "accepted":
            return
        # Another tuner's later decision for the key, written over this session's.
        replaced.append(other.put(NORM, choice="loop", candidates=NORM_NAMES, heuristic="loop").id)

    report = tune.tune(tm.ENCODER, cache=cache, share=0.0, progress=progress)
    assert replaced
    (norm,) = [o for o in report.keys if o.key == KEY]
    # Whatever the guard made of the table meanwhile: the cache holds "loop" for the key.
    assert (norm.action, norm.choice) == ("superseded", "loop")
    assert "decided since" in norm.note


def test_the_command_line_waits_as_long_as_claim_wait_says() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser, TUNE)
    assert option_values(parser.parse_args(["--claim-wait", "5"]), TUNE)["claim_wait"] == 5.0
    assert "claim_wait" in TUNE_OPTIONS  # and evaluate passes it on to each tuning


def test_tuners_of_a_device_take_turns_to_time_things(cache: Cache) -> None:
    lock = MeasureLock(cache.path)

    def other_process() -> str:
        return lock_seen(lock.path)

    with lock.held():
        with lock.held():  # re-entrant: a trial inside a held block takes no second turn
            assert other_process() == "busy"
        assert other_process() == "busy"
    assert other_process() == "free"


def test_a_process_forked_while_the_lock_is_held_does_not_keep_it(cache: Cache) -> None:
    # A real fork inside held(): the child stays alive, blocked on a pipe, while the parent
    # lets go of the lock; another process must find it free then.
    lock = MeasureLock(cache.path)

    def other_process() -> str:
        return lock_seen(lock.path)

    go_read, go_write = os.pipe()
    up_read, up_write = os.pipe()
    pid = 0
    try:
        with lock.held():
            pid = os.fork()
            if pid == 0:  # the child: its own turn, then wait for the parent's word, and go
                try:
                    os.close(go_write)
                    with lock.held():  # the child takes the lock afresh: it waits its turn
                        os.write(up_write, b"x")
                    os.write(up_write, b"y")
                    os.read(go_read, 1)
                finally:
                    os._exit(0)
            os.close(up_write)
            assert other_process() == "busy"
        said = b""
        while len(said) < 2:  # its turn taken (after the parent's ended) and over
            said += os.read(up_read, 2 - len(said))
        assert said == b"xy"
        assert other_process() == "free"  # the child runs on, holding nothing
    finally:
        os.write(go_write, b"g")
        if pid:
            os.waitpid(pid, 0)
        for fd in (go_read, go_write, up_read):
            os.close(fd)


_HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_host_lock_waits_at_most_its_deadline_for_another_process(tmp_path: Path) -> None:
    clock = Clock()
    lock = HostLock(tmp_path / "a.lock", timer=clock)
    looks: list[float] = []

    def sleep(seconds: float) -> None:
        looks.append(seconds)
        clock.advance(seconds)

    other = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(lock.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == b"held\n"
        assert lock_seen(lock.path) == "busy"
        # 0.12 s of the injected timer: two looks of POLL, then the 0.02 s left; not taken.
        assert not lock.acquire(0.12, sleep=sleep)
        assert looks == pytest.approx([POLL, POLL, 0.12 - 2 * POLL])
        assert lock.waited == pytest.approx(0.12)
        assert not lock.acquire(0.0, sleep=sleep) and len(looks) == 3  # a look, no sleep
    finally:
        assert other.stdin is not None
        other.stdin.close()  # the other process ends, and its lock with it
        other.wait()
        assert other.stdout is not None
        other.stdout.close()
    assert lock_seen(lock.path) == "free"
    assert lock.acquire(1.0, sleep=sleep) and lock.acquire(0.0)  # held, then held once more
    assert lock_seen(lock.path) == "busy"
    lock.release()
    assert lock_seen(lock.path) == "busy"  # one acquire is still held
    lock.release()
    assert lock_seen(lock.path) == "free"
    lock.release()  # one release too many lets go of nothing
    assert len(looks) == 3  # the free lock was taken at the first look
