"""Claims that lapse (tunecache.tune.claims): a holder whose claim another tuner took over
writes nothing for the key and says so, renewals that keep failing are warned of, a wait's
deadline is measured on its own timer, and a guard whose claim wait ran out is not run.
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any

import pytest

from tests import tune_models as tm
from tests.tune.claims_child import spawn
from tests.tune.support import NORM, NORM_NAMES, Clock, always_alive, claims_on, epoch_clock
from tunecache import tune
from tunecache.cache import Cache
from tunecache.errors import StoreError, TunecacheWarning
from tunecache.tune.claims import FAILED_BEATS, ClaimLost, Claims

KEY = NORM.text


@pytest.fixture
def clock() -> Clock:
    """A wall clock at a plausible epoch second that moves only when told."""
    return epoch_clock()


def test_a_claim_taken_over_is_not_confirmed_and_a_lapsed_one_is_claimed_again(
    cache: Cache, clock: Clock
) -> None:
    a, b = claims_on(cache, clock, "host-a"), claims_on(cache, clock, "host-b")
    assert a.claim(KEY).taken and a.claim("other").taken
    clock.advance(31)  # a's renewals failed: both claims lapsed
    assert b.claim(KEY).taken
    # renew's count: a holds only the claim nobody took, and lets go of the other.
    assert a.renew() == 1 and a.held == {"other"}
    with pytest.raises(ClaimLost, match="host-b pid"):
        a.confirm(KEY)
    a.confirm("other")  # renewed: still a's
    clock.advance(31)
    a.confirm("other")  # lapsed again and nobody took it: claimed again, not lost
    holder = b.holder("other")
    assert holder is not None and holder.host == "host-a"
    a.confirm("never claimed")  # not a's to confirm: nothing is written
    assert a.last("never claimed") is None


def test_a_key_another_tuner_took_over_and_let_go_of_is_lost_not_claimed_again(
    cache: Cache, clock: Clock
) -> None:
    # a's claim lapsed; b took the key over, tuned it, wrote its entry and let go: what a
    # benched is older than what b wrote, and is not written over it.
    a, b = claims_on(cache, clock, "host-a"), claims_on(cache, clock, "host-b")
    assert a.claim(KEY).taken
    clock.advance(31)
    assert b.claim(KEY).taken
    b.release(KEY)
    with pytest.raises(ClaimLost, match="host-b pid"):
        a.confirm(KEY)
    holder = b.holder(KEY)
    assert holder is None or holder.host == "host-b"  # a did not claim it back


def test_renewals_that_keep_failing_are_warned_of_once(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = Claims(cache)
    claims.claim(KEY)
    failed = threading.Event()
    calls: list[int] = []

    def busy() -> int:
        calls.append(1)
        if len(calls) == 2 * FAILED_BEATS:
            failed.set()
        raise StoreError("database is locked")

    monkeypatch.setattr(claims, "renew", busy)
    said = "renewals of this tuner's claims failed"
    with pytest.warns(TunecacheWarning, match=said) as seen, claims.renewing(every=0.001):
        assert failed.wait(60)
    assert len([w for w in seen if issubclass(w.category, TunecacheWarning)]) == 1


def test_a_wait_measures_its_deadline_on_its_timer_not_the_wall_clock(
    cache: Cache, clock: Clock
) -> None:
    timer = Clock()
    a = Claims(cache, ttl=1e6, clock=clock, timer=timer, host="host-a", alive=always_alive)
    b = Claims(cache, ttl=1e6, clock=clock, timer=timer, host="host-b", alive=always_alive)
    a.claim(KEY)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        timer.advance(seconds)
        clock.advance(100.0)  # the wall clock is stepped forward meanwhile

    assert not b.wait(KEY, 5.0, sleep=sleep, poll=1.0).taken
    assert slept == [1.0] * 5


def test_a_tuner_whose_claim_was_taken_over_writes_nothing_for_the_key(
    cache: Cache, cache_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    benching = importlib.import_module("tunecache.tune.benching")
    real = benching.gather
    other = Claims(cache_at(cache.path), clock=lambda: time.time() + 1e4, alive=always_alive)

    def lapsing(session: Any, heavy: Any, *args: Any, **kwargs: Any) -> Any:
        found = real(session, heavy, *args, **kwargs)
        if heavy.key == NORM:
            # Another tuner, whose clock says this one's claim expired, takes the key over.
            assert other.claim(KEY).taken
        return found

    monkeypatch.setattr(benching, "gather", lapsing)
    report = tune.tune(tm.ENCODER, cache=cache, share=0.0)
    (norm,) = [o for o in report.keys if o.key == KEY]
    assert norm.action == "skipped" and "lapsed" in norm.note
    assert cache.get(NORM, candidates=NORM_NAMES) is None  # left to the other tuner
    other.release()


def test_a_guard_whose_claim_wait_runs_out_is_not_run(cache: Cache) -> None:
    with spawn("hold", str(cache.path), f"guard {tm.ENCODER.name}") as (child, out):
        assert out.readline().startswith("claimed")
        report = tune.tune(tm.ENCODER, cache=cache, share=0.0, claim_wait=0)
    assert report.guard is None and not report.guard_skipped
    assert report.guard_left_to.endswith(f"pid {child.pid}")
    assert report.as_dict()["guard_left_to"] == report.guard_left_to
