"""Steps 1 and 2 of a session: profile each scenario with the current table, learn each key's
share of the run's time and one real call of it, and screen out the keys too light to confirm.

A key under `share` of its scenario's time is left alone: a whole-model run cannot see a change
that small, so no entry for it could be confirmed (the final guard still covers it). Each
scenario's profiled runs take the device's measurement turn (`tunecache.tune.measuring`), as
benches and trials do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunecache import dispatch
from tunecache.keys import Key
from tunecache.tune.runs import run_with, served_keys

if TYPE_CHECKING:
    from tunecache.resolve import Table
    from tunecache.tune.session import Session

__all__ = ["Heavy", "LastProfile", "Profiler", "Screening", "profile", "wall_profile"]

#: how one run is profiled: (the run) -> its profile, and the run's time on the profile's clock
Profiler = Callable[[Callable[[], None]], tuple[dispatch.Profile, float]]


def wall_profile(run: Callable[[], None]) -> tuple[dispatch.Profile, float]:
    """One run under `dispatch.profile(capture=True)`: its profile, and its wall time (the
    clock the profile's own per-key times are on, so a share is a ratio of the two)."""
    with dispatch.profile(capture=True) as profiled:
        start = time.perf_counter()
        run()
        total = time.perf_counter() - start
    return profiled, total


@dataclass
class Heavy:
    """A key worth tuning: its share, the scenario it weighs most in, and a real call of it."""

    key: Key
    op: dispatch.Tunable[Any, Any]
    call: dispatch.Captured
    case: dict[str, int]
    share: float

    @property
    def heuristic(self) -> str:
        """The op's own pick for this key: what runs where the cache has no answer."""
        return self.op.heuristic_for(self.key)


@dataclass
class Screening:
    """The keys one session's profiles found heavy, and light, so far."""

    heavy: set[Key] = field(default_factory=set)
    light: set[Key] = field(default_factory=set)

    def screened(self) -> int:
        """Keys found only light: too light, in every profile, to confirm anything about."""
        return len(self.light - self.heavy)


@dataclass(frozen=True)
class LastProfile:
    """What a session's last finished profile ran: every key its runs met, with its op, and
    the choice each key was answered with in those runs.

    A run meets its keys in an order its answers decide: a table that answers each of these
    keys with the choice the runs got runs every scenario as the profile did (the same calls,
    the same keys after them, no error), so the runs need not be made again to know what it
    serves (`served`), and their shares stand (`answers_as`). A table read again after another
    tuner's writes that changed none of these answers is such a table. The choices are those
    the runs really got, not the profiled table asked again: a table answers what the store
    holds *now* where it did not keep an answer (a busy store's answer, a memo emptied), so
    asking it again could agree with a new table over runs that had the heuristic.
    """

    met: dict[Key, dispatch.Tunable[Any, Any]]
    ran: dict[Key, str]

    def answers_as(self, now: Table) -> bool:
        """Whether `now` answers every key the profile met with the choice its runs got, and
        would keep answering so (an answer given while the store was busy is asked again
        next time, and may be another then)."""
        if not self.met or self.ran.keys() - self.met.keys():
            return False  # a key seen but not captured: nothing to ask `now` about it with
        for key, op in self.met.items():
            was = self.ran.get(key)
            candidates, heuristic = op.candidates, op.heuristic_for(key)
            answer = now.resolve(key, candidates, heuristic)
            if not was or answer.choice != was:
                return False
            if now.remembered(key, candidates, heuristic) is not answer:
                return False
        return True

    def served(self, now: Table) -> dict[str, str]:
        """What `now` serves the profiled runs, as `tunecache.tune.runs.served` says it: key
        text -> "entry id:choice" for each key an entry answers (for a table that
        `answers_as` the profiled one)."""
        return served_keys(now, self.met)


def profile(session: Session, screening: Screening) -> list[Heavy]:
    """Profile every scenario with the session's current table: its heavy keys, heaviest first.

    A key's share is the largest it has in any scenario, with that scenario's call to bench.
    The session's first profile also settles the model's fingerprint (`Session.identify`).
    """
    heavy: dict[Key, Heavy] = {}
    light: set[Key] = set()
    met: dict[Key, dispatch.Tunable[Any, Any]] = {}
    ran: dict[Key, str] = {}
    for case in session.cases:
        for found in _profile_case(session, case, ran):
            met[found.key] = found.op
            if found.share < session.options.share:
                light.add(found.key)
                continue
            known = heavy.get(found.key)
            if known is None or found.share > known.share:
                heavy[found.key] = found
    session.last_profile = LastProfile(met, ran)
    screening.heavy |= set(heavy)
    screening.light |= light
    session.screened = screening.screened()
    if not session.identified:
        session.identify(sorted(key.text for key in ran))
    return sorted(heavy.values(), key=lambda found: (-found.share, found.key))


def _profile_case(session: Session, case: dict[str, int], ran: dict[Key, str]) -> list[Heavy]:
    """Every key one scenario's profiled run captured, with its share; adds to `ran` every
    key the run used, with the choice it got (a key two scenarios answered apart gets no
    choice: nothing then stands for both)."""
    run = run_with(session.model, session.table, [case])
    # A profile is timed (the shares are ratios of times), and a whole run is the heaviest
    # work a session does outside its benches and trials: it takes its measurement turn, so
    # it neither contends with another tuner's bench nor is contended by one (`measuring`).
    with session.measuring.held():
        run()  # warm-up: first calls resolve keys, allocate, wake BLAS threads
        profiled, total = session.how.profiler(run)
    calls = profiled.captured()
    found = []
    for row in profiled.rows():
        ran[row.key] = row.choice if ran.get(row.key, row.choice) == row.choice else ""
        call = calls.get(row.key)
        if call is not None:
            share = row.seconds / total if total > 0 else 0.0
            found.append(Heavy(row.key, call.op, call, case, share))
    return found
