"""One session of a model at a time per host (tunecache.tune.claims.session_key): a tuner that
starts while another live tuner tunes the same model on this host waits for it before it runs
the model at all, then reads what it wrote; a killed holder is taken over at once, and a
session on another host of a fleet store waits for nobody. Real processes
(tests/tune/claims_child.py) hold the claims, synchronised on their pipes; the waits are read
on injected clocks."""

from __future__ import annotations

import platform
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests import tune_models as tm
from tests.tune.claims_child import benches, spawn, tune_at_once
from tests.tune.support import Clock, claims_on, epoch_clock, lock_seen, scripted
from tunecache.cache import Cache
from tunecache.dispatch import Profile
from tunecache.hostlock import POLL
from tunecache.tune.claims import Claims, session_key
from tunecache.tune.measuring import MeasureLock, session_lock
from tunecache.tune.model import Model
from tunecache.tune.options import session_options
from tunecache.tune.profiling import wall_profile
from tunecache.tune.reports import TuneReport
from tunecache.tune.session import Running
from tunecache.tune.tuner import run_session

HERE = session_key(tm.ENCODER.name, platform.node())


class Counted:
    """The encoder's run, counting how many times the session ran it."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> object:
        self.runs += 1
        return tm.encoder()


def _tune(
    cache: Cache, model: Model, clock: Clock, rebench: int | None = None, **more: Any
) -> TuneReport:
    """Tune `model` (every key) with the session's clock and claims' timer on `clock`, which
    each look between two reads of a claim moves on as far as it sleeps (`rebench`: the
    tuner's setting, where given)."""

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        time.sleep(seconds)

    how = Running(clock=clock, sleep=sleep, **more)
    given = {} if rebench is None else {"rebench": rebench}
    options = session_options(share=0.0, **given)
    return run_session(model, cache, {}, options, how, tune_keys=True)


def test_a_tuner_waits_for_a_live_session_of_its_model_before_running_it(cache: Cache) -> None:
    counted = Counted()
    model = Model(tm.ENCODER.name, counted)
    told: list[tuple[str, int]] = []
    with spawn("hold", str(cache.path), HERE) as (child, out):
        assert out.readline().startswith("claimed")

        def progress(what: str, done: int, total: int) -> None:
            if what.startswith("waiting for session"):
                told.append((what, counted.runs))
                assert child.stdin is not None
                child.stdin.write(b"release\n")
                child.stdin.flush()
                assert out.readline().strip() == "released"

        report = _tune(cache, model, Clock(), progress=progress)
    holder = f"{platform.node()} pid {child.pid}"
    # It heard of the holder before it ran the model even once (no profile, no bench).
    assert told == [(f"waiting for {HERE}, claimed by {holder}", 0)]
    assert report.waited == pytest.approx(0.05)  # one look, 50 ms on the injected timer
    assert report.as_dict()["waited"] == report.waited
    assert counted.runs > 0 and report.keys  # then it tuned the model as the holder left it


def test_a_tuner_sleeps_on_a_live_sessions_lock_without_reading_the_claims(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The holder takes the model's session lock on this host, then its claim, as a session
    # does. The waiter looks at the lock 5 times (its sleeps, on the injected timer) before
    # the holder lets go: one read of the claims meanwhile (whom it waits for), not one a look.
    reads: list[str] = []
    holder_of = Claims.holder

    def counted(self: Claims, key: str) -> Any:
        reads.append(key)
        return holder_of(self, key)

    monkeypatch.setattr(Claims, "holder", counted)
    clock = Clock()
    with spawn("hold", str(cache.path), HERE, "--session", tm.ENCODER.name) as (child, out):
        assert out.readline().startswith("claimed")
        told: list[str] = []
        looks: list[int] = []

        def sleep(seconds: float) -> None:
            clock.advance(seconds)
            if told and len(looks) < 5:  # a look at the session lock: the reads so far
                looks.append(reads.count(HERE))
                if len(looks) == 5:
                    assert child.stdin is not None
                    child.stdin.write(b"release\n")
                    child.stdin.flush()
                    assert out.readline().strip() == "released"

        def progress(what: str, done: int, total: int) -> None:
            if what.startswith("waiting for session"):
                told.append(what)

        how = Running(clock=clock, sleep=sleep, progress=progress)
        options = session_options(share=0.0)
        report = run_session(tm.ENCODER, cache, {}, options, how, tune_keys=True)
    assert told == [f"waiting for {HERE}, claimed by {platform.node()} pid {child.pid}"]
    assert looks == [1] * 5  # one read, before the first look
    assert report.waited == pytest.approx(5 * POLL)  # five looks, on the injected timer
    assert report.keys  # then it tuned the model as the holder left it
    lock = session_lock(cache.path, tm.ENCODER.name).path
    assert not lock.exists()  # its last holder removed its file: none piles up per model
    assert lock_seen(lock) == "free"


def test_a_killed_sessions_claim_is_taken_over_at_once(cache: Cache) -> None:
    with spawn("hold", str(cache.path), HERE, "--session", tm.ENCODER.name) as (child, out):
        assert out.readline().startswith("claimed")
        child.send_signal(signal.SIGKILL)
        child.wait()
    told: list[str] = []
    report = _tune(cache, tm.ENCODER, Clock(), progress=lambda what, *_: told.append(what))
    assert not [what for what in told if what.startswith("waiting for")]
    assert report.waited == 0.0
    assert [o.key for o in report.keys if o.bench_stopped not in (None, "stored")]


def test_a_session_on_another_host_waits_for_nobody(cache: Cache) -> None:
    clock = epoch_clock()
    elsewhere = claims_on(cache, clock, "host-b")
    assert elsewhere.claim(session_key(tm.ENCODER.name, "host-b")).taken
    told: list[str] = []
    report = _tune(cache, tm.ENCODER, Clock(), progress=lambda what, *_: told.append(what))
    assert not [what for what in told if what.startswith("waiting for")]
    assert report.keys and report.waited == 0.0
    elsewhere.release()


def test_a_second_session_of_one_process_finds_the_first_ones_claim_released(
    cache: Cache,
) -> None:
    _tune(cache, tm.ENCODER, Clock())
    told: list[str] = []
    report = _tune(cache, tm.ENCODER, Clock(), progress=lambda what, *_: told.append(what))
    # Its own process is alive: a claim the first session kept would stand until it expired.
    assert not [what for what in told if what.startswith("waiting for")]
    assert report.waited == 0.0
    last = claims_on(cache, epoch_clock(), "host-b").last(HERE)
    assert last is not None and last.expires_at.timestamp() <= time.time()


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_a_session_whose_model_raises_lets_go_of_its_claim(
    cache: Cache, error: type[BaseException]
) -> None:
    def broken() -> object:
        raise error("the model's own")

    # A KeyboardInterrupt comes out as TuneInterrupted (a KeyboardInterrupt, with the report).
    with pytest.raises(error):
        _tune(cache, Model(tm.ENCODER.name, broken), Clock())
    last = claims_on(cache, epoch_clock(), "host-b").last(HERE)
    assert last is not None and last.expires_at.timestamp() <= time.time()
    # So the next session of the model waits for nobody.
    told: list[str] = []
    report = _tune(cache, tm.ENCODER, Clock(), progress=lambda what, *_: told.append(what))
    assert not [what for what in told if what.startswith("waiting for")] and report.keys


def test_two_tuners_at_once_one_tunes_and_the_other_reads_what_it_wrote(cache: Cache) -> None:
    reports = tune_at_once(str(cache.path))
    benched = benches(reports)
    assert benched and set(benched.values()) == {1}, benched
    # One session benched every key; the other, which waited for it or started after it,
    # benched none of them.
    fresh = [
        {o["key"] for o in report["keys"] if o["bench_stopped"] not in (None, "stored")}
        for report in reports
    ]
    assert sorted(map(len, fresh)) == [0, len(benched)]


@pytest.mark.parametrize("which", ["measurement turn", "session lock"])
def test_a_profile_runs_under_the_devices_measurement_turn_and_the_models_session_lock(
    cache: Cache, which: str
) -> None:
    lock = (
        MeasureLock(cache.path)
        if which == "measurement turn"
        else session_lock(cache.path, tm.ENCODER.name)
    )
    seen: list[str] = []
    profiler = scripted(lambda row: 0.5, rest=0.0)

    def looking(run: Callable[[], None]) -> tuple[Profile, float]:
        seen.append(lock_seen(lock.path))
        return profiler(run)

    _tune(cache, tm.ENCODER, Clock(), profiler=looking)
    assert seen and set(seen) == {"busy"}
    assert lock_seen(lock.path) == "free"
    # Another model's session lock is another file.
    assert (
        session_lock(cache.path, "another model").path
        != session_lock(cache.path, tm.ENCODER.name).path
    )


def test_a_session_that_finds_everything_tuned_runs_the_model_for_one_profile_only(
    cache: Cache,
) -> None:
    _tune(cache, tm.ENCODER, Clock())
    counted = Counted()
    profiles: list[int] = []

    def counting(run: Callable[[], None]) -> tuple[Profile, float]:
        profiles.append(counted.runs)
        return wall_profile(run)

    # Each key's claim was the first session's: this one reads the store again for each (its
    # tables reopened), and they answer as before, so the runs are still the ones profiled:
    # no second profile, and the guard reads what the table serves from this one. Stored
    # evidence is final here (rebench=0): on a busy machine the first session's bench can be
    # doubted, and a later session would rightly bench it again (tests/tune/test_doubt.py),
    # which is not what this test is about.
    model = Model(tm.ENCODER.name, counted)
    report = _tune(cache, model, Clock(), rebench=0, profiler=counting)
    assert report.keys and {o.action for o in report.keys} <= {"known", "kept"}
    assert report.guard_skipped  # the first session's guard passed over these answers
    assert len(profiles) == len(tm.ENCODER.cases()) == 1
    assert counted.runs == 2  # the profile's warm-up and its profiled run, nothing else
