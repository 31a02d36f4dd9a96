"""One session's state and its writes: the model, its cache and options, the table the model runs
with now, what happened to each key, and every entry and verdict written.

Every decision is one transaction, made as soon as it is reached (an entry with this model's
verdict on it is one: `put_judged`), and the current table follows it at once (a mask as
`derive(mask=...)`, which answers exactly as the stored verdict will): Ctrl-C or a crash between
two writes leaves what was decided so far, and nothing more.
The steps themselves live beside this module: profiling (steps 1, 2), judging another model's
entry and benching a key (3 to 5, `tuner`, `benching`), and the guard (7).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunecache import accept, evidence
from tunecache._digest import sha256
from tunecache.errors import TunecacheError
from tunecache.resolve import DEFAULT_MAX_DISTANCE, Table
from tunecache.tune.claims import Holder, pid_alive
from tunecache.tune.measuring import MeasureLock, session_lock
from tunecache.tune.mirror import Mirror
from tunecache.tune.model import Model, scenario_text
from tunecache.tune.options import Options
from tunecache.tune.profiling import LastProfile, Profiler, wall_profile
from tunecache.tune.records import speedup_of
from tunecache.tune.reports import KeyOutcome, Progress, TuneReport
from tunecache.tune.runs import RunFailed, trial

if TYPE_CHECKING:
    from tunecache.cache import Cache, Entry
    from tunecache.codec import TimingRecord
    from tunecache.tune.claims import Claims
    from tunecache.tune.profiling import Heavy

__all__ = ["GuardOutcome", "Running", "Session"]


@dataclass
class GuardOutcome:
    """What the final guard did: its verdict, whether it was skipped, why a run with the table
    failed, and the entries the model uses after it (None until the guard has looked)."""

    verdict: accept.Verdict | None = None
    skipped: bool = False
    error: str = ""
    kept: list[int] | None = None
    #: the other tuner whose guard this session's claim wait gave up waiting for
    left_to: str = ""


@dataclass(frozen=True)
class Running:
    """How a session runs: who hears of its progress, how far its tables borrow a neighbour's
    decision, the clock its budget is read on, how it profiles a run, and how it reads the time
    this process waited for a CPU (None: `tunecache.evidence.cpu_wait`, looked up when read);
    the clock its claims are read on (seconds since the epoch: processes and hosts compare
    them) and how it waits between two looks at a key another tuner claims."""

    progress: Progress | None = None
    max_distance: float = DEFAULT_MAX_DISTANCE
    clock: Callable[[], float] = time.perf_counter
    profiler: Profiler = wall_profile
    cpu_wait: Callable[[], float | None] | None = None
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], object] = time.sleep

    def waiting(self) -> float | None:
        """Seconds this process has waited for a CPU so far, or None where unknown."""
        return (evidence.cpu_wait if self.cpu_wait is None else self.cpu_wait)()


class Session:
    """The state of one model's session: its cache, its current table and what it did."""

    def __init__(self, model: Model, cache: Cache, options: Options, how: Running) -> None:
        self.model = model
        self.cache = cache
        self.options = options
        self.how = how
        self.started = how.clock()
        self.cases = model.cases()
        #: taken around each bench and trial: one tuner of the device times at a time here
        self.measuring = MeasureLock(cache.path, timer=how.clock)
        #: held by a tuning session of the model for as long as it runs: one at a time here
        self.hosting = session_lock(cache.path, model.name, timer=how.clock)
        # A fleet store's rows are read by the tables through a local mirror of them.
        self.mirror = Mirror(cache) if cache.url is not None else None
        self.base = Table.open(
            path=cache.path if self.mirror is None else self.mirror.path,
            device=cache.device,
            model=model.name,
            scenarios=model.scenarios,
            max_distance=how.max_distance,
        )
        #: the table the model runs with now: every decision of this session is in it
        self.table = self.base
        self.fingerprint = model.fingerprint or ""
        #: whether the model's version is settled: its fingerprint, and its verdicts read
        self.identified = False
        self.run_id: int | None = None
        self.outcomes: list[KeyOutcome] = []
        self.verdicts: dict[int, str] = {}
        self.masked: list[int] = []
        self.wrote = False  # whether any verdict or entry was written
        #: keys found too light to confirm anything about, in every profile so far
        self.screened = 0
        self.budget_spent = False
        self.guard = GuardOutcome()
        #: the fraction of the last trial's wall time this process waited for a CPU, if known
        self.waited: float | None = None
        #: entries this session accepted: the key, choice and record each was written with
        self.decided: dict[int, tuple[Heavy, str, TimingRecord]] = {}
        #: this session's claims on the keys it tunes (None: it claims nothing, as validation)
        self.claims: Claims | None = None
        #: the heavy key of each outcome, in order (what `settled` resolves again)
        self.met: list[Heavy] = []
        #: seconds spent waiting for other tuners' claims (a session of the model on this
        #: host, a key, the guard); their measurement turns are `measuring.waited`
        self.waited_for_others = 0.0
        #: what the last finished profile ran (the passes and the guard reuse its runs)
        self.last_profile: LastProfile | None = None
        #: keys whose evidence another tuner wrote while this session ran (`concurrent`)
        self.concurrent: set[str] = set()
        self.wall_started = how.wall()

    # -- time and progress --------------------------------------------------------------------

    def out_of_time(self) -> bool:
        """Whether the session's budget is spent; it stops new keys, never a started trial."""
        budget = self.options.budget
        if budget is not None and self.how.clock() - self.started >= budget:
            self.budget_spent = True
            return True
        return False

    def tell(self, what: str, done: int, total: int) -> None:
        """Report progress to the caller's callback, if any."""
        if self.how.progress is not None:
            self.how.progress(what, done, total)

    # -- what the session knows ---------------------------------------------------------------

    def identify(self, seen: Sequence[str]) -> None:
        """Settle the model's version from the key texts its first profile saw (unless the model
        names its fingerprint), and read the verdicts that version already has."""
        self.identified = True
        if not self.fingerprint:
            # The model's structure: the keys its runs use. Its verdicts belong to this version.
            self.fingerprint = sha256("\n".join(sorted(seen)).encode()).hexdigest()[:16]
        self.table = self.base = self.base.derive(fingerprint=self.fingerprint)
        self.verdicts = self.cache.verdicts(self.model.name, self.fingerprint)

    def refresh(self) -> None:
        """See what other tuners wrote since the table was opened (a claim this session took
        over from one): tables over the store as it is now, and this model's verdicts read
        again. What this session wrote is in the store, so the tables answer as before for it."""
        self._mirrored()
        self.base = self.base.reload()
        self.table = self.table.reload()
        if self.identified:
            self.verdicts = self.cache.verdicts(self.model.name, self.fingerprint)

    def _mirrored(self) -> None:
        """Bring a fleet store's mirror up to date with what was written (nothing for a file:
        the tables read it)."""
        if self.mirror is not None:
            self.mirror.update()

    def close(self) -> None:
        """Let go of what the session holds open: its tables' connections, a mirror."""
        self.table.close()
        self.base.close()
        if self.mirror is not None:
            self.mirror.close()

    def took_over(self, key: str, holder: Holder) -> None:
        """Note that this session took `key`'s claim over from another tuner (`holder`): read
        what it wrote, and reuse its evidence where that tuner ran beside this session (its
        claim ended after this session started, or its process, another one, still runs on
        this host: `concurrent`)."""
        self.refresh()
        # Another process: an earlier session of this one is a later session's predecessor.
        here = holder.host == platform.node() and holder.pid != os.getpid() and pid_alive(holder)
        if here or holder.expires_at.timestamp() > self.wall_started:
            self.concurrent.add(key)

    def reuses(self, key: str) -> bool:
        """Whether the key's stored evidence is reused even where it is doubtful: another
        tuner benched it while this session ran, under the very contention this session
        would bench it again in (a doubtful record is benched again by a later session)."""
        return key in self.concurrent

    def trial(
        self, baseline: Table, candidate: Table, cases: Sequence[dict[str, int]]
    ) -> tuple[accept.Verdict | None, RunFailed | None]:
        """`candidate` (B) against `baseline` (A) by this session's rule (`runs.trial`), timed
        while no other tuner of the device on this host times anything (`measuring`); how long
        this process waited for a CPU meanwhile is kept in `waited`."""
        with self.measuring.held():
            before, wall = self.how.waiting(), time.perf_counter()
            try:
                return trial(self.model, self.options, baseline, candidate, cases)
            finally:
                waited = time.perf_counter() - wall
                self.waited = evidence.waited(before, self.how.waiting(), waited)

    def outcome(self, heavy: Heavy, action: str, **more: Any) -> None:
        """Record what happened to a heavy key, with what the model runs for it now."""
        heuristic = heavy.heuristic
        self.met.append(heavy)
        self.outcomes.append(
            KeyOutcome(
                key=heavy.key.text,
                action=action,
                share=heavy.share,
                scenario=scenario_text(heavy.case),
                heuristic=heuristic,
                choice=self.table.resolve(heavy.key, heavy.op.candidates, heuristic).choice,
                **more,
            )
        )

    # -- writes -------------------------------------------------------------------------------

    def record_verdict(
        self,
        entry_id: int,
        verdict_name: str,
        verdict: accept.Verdict | None,
        status: str | None = None,
    ) -> None:
        """Write this model's verdict on an entry (and a new status with it, in one commit)."""
        self.cache.validate(
            entry_id,
            model=self.model.name,
            fingerprint=self.fingerprint,
            verdict=verdict_name,
            gain=_gain(verdict),
            rounds=verdict.rounds if verdict else 0,
            confirmations=verdict.confirmations if verdict else 0,
            run_id=self.run_id,
            status=status,
        )
        self._mirrored()
        self._judged(entry_id, verdict_name)

    def _judged(self, entry_id: int, verdict_name: str) -> None:
        """Follow a verdict this session wrote: remember it, and serve by it at once."""
        self.verdicts[entry_id] = verdict_name
        self.wrote = True
        if verdict_name == "masked":
            if entry_id not in self.masked:
                self.masked.append(entry_id)
            self.table = self.table.derive(mask=[entry_id])

    def put(
        self,
        heavy: Heavy,
        choice: str,
        record: TimingRecord,
        status: str,
        speedup: float | None = None,
    ) -> Entry:
        """Write an entry for a heavy key, with its timing record, as part of this run (not
        where this session's claim on it lapsed and another tuner has it: ClaimLost)."""
        if self.claims is not None:
            self.claims.confirm(heavy.key.text)
        self.wrote = True
        entry = self.cache.put(
            heavy.key,
            choice=choice,
            candidates=heavy.op.candidates,
            heuristic=heavy.heuristic,
            record=record,
            speedup=speedup,
            status=status,
            run_id=self.run_id,
        )
        self._mirrored()
        return entry

    def put_judged(
        self,
        heavy: Heavy,
        choice: str,
        record: TimingRecord,
        status: str,
        judged: tuple[str, accept.Verdict | None],
        speedup: float | None = None,
    ) -> int:
        """Write an entry for a heavy key with its timing record, its status and this model's
        verdict on it (`judged`: the verdict's name and the trial behind it), all in one
        commit; the entry's id."""
        # Imported here: importing the tuner must not load SQLAlchemy (tests/test_import.py).
        from tunecache.cache import NewEntry, NewVerdict

        if self.claims is not None:
            self.claims.confirm(heavy.key.text)  # ClaimLost: another tuner has the key now
        verdict_name, verdict = judged
        given = NewVerdict(
            self.model.name,
            self.fingerprint,
            verdict_name,
            gain=_gain(verdict),
            rounds=verdict.rounds if verdict else 0,
            confirmations=verdict.confirmations if verdict else 0,
            run_id=self.run_id,
        )
        self.wrote = True
        (entry_id,) = self.cache.put_many(
            [
                NewEntry(
                    heavy.key,
                    choice,
                    heavy.op.candidates,
                    heuristic=heavy.heuristic,
                    record=record,
                    speedup=speedup,
                    status=status,
                    run_id=self.run_id,
                    verdicts=(given,),
                )
            ]
        )
        self._mirrored()
        self._judged(entry_id, verdict_name)
        return entry_id

    def accept_entry(
        self,
        heavy: Heavy,
        choice: str,
        record: TimingRecord,
        verdict: accept.Verdict,
        against: str,
    ) -> int:
        """Write `choice` for the key as accepted, with this model's verdict, and serve it; the
        entry's id.

        One commit: the entry, its record, this model's `validated` verdict and the status
        `accepted` land together or not at all, so no state between them is ever seen.
        """
        speedup = speedup_of(record, choice, against)
        entry_id = self.put_judged(
            heavy, choice, record, "accepted", ("validated", verdict), speedup
        )
        self.table = self.table.derive(include=[entry_id])
        self.decided[entry_id] = (heavy, choice, record)
        return entry_id

    def current_run(self) -> int:
        """The id of this session's row in `runs` (a session writes only inside its run)."""
        assert self.run_id is not None, "a session writes inside its run"
        return self.run_id

    # -- the report ---------------------------------------------------------------------------

    def report(self, *, interrupted: bool = False) -> TuneReport:
        """What the session did so far, as its caller gets it."""
        guard = self.guard
        return TuneReport(
            model=self.model.name,
            fingerprint=self.fingerprint,
            run_id=self.run_id,
            scenarios=tuple(scenario_text(case) for case in self.cases),
            keys=self.settled(),
            screened=self.screened,
            guard=guard.verdict,
            guard_skipped=guard.skipped,
            guard_error=guard.error,
            guard_left_to=guard.left_to,
            kept=tuple(guard.kept if guard.kept is not None else ()),
            masked=tuple(self.masked),
            seconds=self.how.clock() - self.started,
            waited=self.waited_for_others + self.measuring.waited,
            interrupted=interrupted,
            budget_spent=self.budget_spent,
        )

    def settled(self) -> tuple[KeyOutcome, ...]:
        """The outcomes as the cache holds them when the session ends: a key another tuner
        decided since this session did is reported with what the model runs now (and an
        entry accepted here but replaced or rejected since as "superseded"), never with what
        this session chose. Keys whose entry this session masked keep their outcome (`masked`
        says it)."""
        if not self.outcomes:
            return ()
        try:
            self._mirrored()
            # The store's answers, without this session's own forcing of its entries.
            fresh = self.base.reload()
            answers = [fresh.resolve(h.key, h.op.candidates, h.heuristic) for h in self.met]
            replaced = [
                outcome.action == "accepted" and self._replaced(heavy, outcome)
                for outcome, heavy in zip(self.outcomes, self.met, strict=True)
            ]
        except TunecacheError:
            return tuple(self.outcomes)  # a store gone meanwhile: what the session saw
        out = []
        for outcome, now, gone in zip(self.outcomes, answers, replaced, strict=True):
            masked = {outcome.entry_id, now.entry_id} & set(self.masked)
            if not gone and (now.choice == outcome.choice or masked):
                out.append(outcome)
                continue
            entry = "" if now.entry_id is None else f", entry {now.entry_id}"
            said = f"the cache serves {now.choice!r} now ({now.source}{entry}): decided since"
            action = "superseded" if outcome.action == "accepted" else outcome.action
            note = "; ".join(n for n in (outcome.note, said) if n)
            out.append(dataclasses.replace(outcome, action=action, choice=now.choice, note=note))
        return tuple(out)

    def _replaced(self, heavy: Heavy, outcome: KeyOutcome) -> bool:
        """Whether the entry this session accepted for a key no longer stands as it accepted
        it: another choice was written over it since, or another tuner rejected it (this
        session's own guard masking it is said by `masked`)."""
        decided = self.decided.get(outcome.entry_id) if outcome.entry_id is not None else None
        stored = self.cache.get(heavy.key, candidates=heavy.op.candidates)
        if decided is None or stored is None or stored.choice != decided[1]:
            return True
        return stored.status != "accepted" and outcome.entry_id not in self.masked


def _gain(verdict: accept.Verdict | None) -> float | None:
    """A verdict's speedup as the store keeps it: a finite positive number, or nothing."""
    if verdict is None or not (math.isfinite(verdict.speedup) and verdict.speedup > 0):
        return None
    return verdict.speedup
