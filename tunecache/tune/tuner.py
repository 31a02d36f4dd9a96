"""The library calls `tune` and `validate`: one session's passes over a model's heavy keys.

Each pass profiles the model with the current table (`profiling`), then takes its heavy keys in
turn: an entry another model tuned that serves the key is judged for this model (step 3), and a
key no entry of its own serves is benched and tried (`benching`, steps 4 and 5). A pass that
changed the table is followed by another (step 6), and the guard ends the session (step 7).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tunecache.errors import BadArgumentError, TunecacheError, TuneInterrupted
from tunecache.keys import Key
from tunecache.resolve import DEFAULT_MAX_DISTANCE
from tunecache.tune import doubt
from tunecache.tune.benching import tune_key
from tunecache.tune.checking import outputs_differ
from tunecache.tune.claims import (
    CLAIM_TTL,
    CLAIM_WAIT,
    Claim,
    ClaimLost,
    Claims,
    Holder,
    session_key,
)
from tunecache.tune.guard import final_guard
from tunecache.tune.model import Model, as_model
from tunecache.tune.options import KEEP, KEY_BUDGET, REBENCH, SHARE, Options, session_options
from tunecache.tune.profiling import Heavy, Screening, profile
from tunecache.tune.records import bound_calls
from tunecache.tune.reports import Progress, TuneReport
from tunecache.tune.session import Running, Session

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = ["PASSES", "open_cache", "run_session", "tune", "validate"]

#: profiles per session: a key that speeds up shifts the shares, and a key too light to
#: matter before may carry a real share of the faster run; the session profiles again after a
#: pass that changed its table, so a second session finds nothing new to do
PASSES = 3


def tune(
    model: Model | Callable[..., object],
    *,
    cache: Cache | None = None,
    share: float = SHARE,
    keep: int = KEEP,
    confirmations: int | None = None,
    pairs: int | None = None,
    alpha: float | None = None,
    key_budget: float | None = KEY_BUDGET,
    budget: float | None = None,
    retune: bool = False,
    rebench: int = REBENCH,
    claim_wait: float = CLAIM_WAIT,
    claim_ttl: float = CLAIM_TTL,
    max_distance: float = DEFAULT_MAX_DISTANCE,
    bench_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **open_options: Any,
) -> TuneReport:
    """Tune a model on this device and write what it finds to the cache.

    `share` screens out keys lighter than this fraction of a scenario's time; `keep` is how many
    bench survivors may be tried through whole-model runs; `confirmations`, `pairs` and `alpha`
    are the acceptance rule's (`tunecache.accept.accept`'s defaults when None); `key_budget`
    bounds each key's isolated bench and `budget` the whole session, in seconds of `clock`
    (the final guard always runs). A key that already has an entry for its candidate list
    reuses that entry's timing record unless `retune`, or unless the record is doubtful
    (`tunecache.tune.doubt`): then it is benched again, at most `rebench` times for the key.
    Pass an open `cache`, or the options of `tunecache.open`.

    One tuner per key (`tunecache.tune.claims`): a session first waits (at most `claim_wait`
    seconds) while another live tuner tunes the same model on this host, before it runs the
    model at all; then each key is claimed in the store before it is benched; a key another
    live tuner claims is left for last, then waited for (at most `claim_wait` seconds) and
    what that tuner wrote is reused. A claim stands `claim_ttl` seconds unless renewed (this
    process renews its own while it runs). The report says what the cache holds when the
    session ends, and how long the session waited for other tuners (`TuneReport.waited`).

    Ctrl-C raises `TuneInterrupted` (a KeyboardInterrupt) carrying the partial report; every
    entry accepted before it stays stored.
    """
    options = session_options(
        share=share, keep=keep, confirmations=confirmations, pairs=pairs, alpha=alpha,
        key_budget=key_budget, budget=budget, retune=retune, bench_options=bench_options,
        rebench=rebench, claim_wait=claim_wait, claim_ttl=claim_ttl,
    )  # fmt: skip
    how = Running(progress=progress, max_distance=max_distance, clock=clock)
    return run_session(as_model(model), cache, open_options, options, how, tune_keys=True)


def validate(
    model: Model | Callable[..., object],
    *,
    cache: Cache | None = None,
    share: float = SHARE,
    confirmations: int | None = None,
    pairs: int | None = None,
    alpha: float | None = None,
    budget: float | None = None,
    max_distance: float = DEFAULT_MAX_DISTANCE,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **open_options: Any,
) -> TuneReport:
    """Judge, for this model, the entries other models tuned that serve its heavy keys.

    Each is run with and without, in paired whole-model runs, and recorded as `validated` or
    `masked` for this model only; then the finished table must beat no table end to end, or
    every entry the model uses is masked for it. Keys lighter than `share` are not judged one by
    one (no whole-model run could confirm them); the final guard covers them.
    """
    options = session_options(
        share=share, keep=1, confirmations=confirmations, pairs=pairs, alpha=alpha,
        key_budget=None, budget=budget,
    )  # fmt: skip
    how = Running(progress=progress, max_distance=max_distance, clock=clock)
    return run_session(as_model(model), cache, open_options, options, how, tune_keys=False)


def open_cache(cache: Cache | None, open_options: Mapping[str, Any]) -> tuple[Cache, bool]:
    """The cache a library call works in: `cache` as given, or one opened from the options of
    `tunecache.open`; and whether the caller opened it (and so must close it)."""
    if cache is not None:
        if open_options:
            raise BadArgumentError("pass either an open cache or options to open one, not both")
        return cache, False
    from tunecache.cache import OPEN_OPTIONS, Cache

    unknown = sorted(set(open_options) - OPEN_OPTIONS)
    if unknown:
        raise BadArgumentError(f"unknown options {unknown}")
    return Cache.open(**open_options), True


def run_session(
    model: Model,
    cache: Cache | None,
    open_options: Mapping[str, Any],
    options: Options,
    how: Running,
    *,
    tune_keys: bool,
) -> TuneReport:
    """One whole session, inside its row of `runs`: tuning keys, or (not `tune_keys`) only
    judging other models' entries. A tuning session's claims are renewed while it runs and
    released once its run is closed (a tuner waiting for its guard then finds that run)."""
    from tunecache.pools import warn_if_mixed

    warn_if_mixed()  # several BLAS/OpenMP pools of different sizes: once, naming them
    store, owned = open_cache(cache, open_options)
    session = None
    try:
        session = Session(model, store, options, how)
        kind = "tune" if tune_keys else "validate"
        with contextlib.ExitStack() as stack:
            if tune_keys:
                session.claims = Claims(
                    store, ttl=options.claim_ttl, clock=how.wall, timer=how.clock
                )
                # Let go of after the claims: a tuner that waited for it finds them released.
                stack.callback(session.hosting.release)
                stack.enter_context(session.claims.renewing())
            with store.run(kind, notes=f"model {model.name}") as run_id:
                session.run_id = run_id
                try:
                    _passes(session, tune_keys=tune_keys)
                except KeyboardInterrupt:
                    raise TuneInterrupted(session.report(interrupted=True)) from None
        return session.report()
    finally:
        if session is not None:
            session.close()
        if owned:
            store.close()


def _passes(session: Session, *, tune_keys: bool) -> None:
    """Profile, take the heavy keys, and again while a pass changes the table; then the guard."""
    what = f"{'tuning' if tune_keys else 'validating'} {session.model.name}"
    if session.claims is not None:
        _after_other_sessions(session)
    screening = Screening()
    handled: set[Key] = set()
    for number in range(PASSES):
        if number and session.out_of_time():
            break
        try:
            heavy = [found for found in profile(session, screening) if found.key not in handled]
        except Exception:
            if not number:
                raise  # the model fails on its own table, before this session changed it
            break  # this session's table breaks a run: the guard runs it, and masks it
        if number and not heavy:
            break
        total = len(handled) + len(heavy)
        later = []  # keys another live tuner claims: left for last, then waited for
        for done, found in enumerate(heavy, start=len(handled)):
            session.tell(what, done, total)
            if not _claimed_step(session, found, tune_keys=tune_keys):
                later.append(found)
        for done, found in enumerate(later, start=total - len(later)):
            session.tell(what, done, total)
            _claimed_step(session, found, tune_keys=tune_keys, wait=(done, total))
        session.tell(what, total, total)
        handled |= {found.key for found in heavy}
        last = session.last_profile
        if session.budget_spent or (last is not None and last.answers_as(session.table)):
            break  # the shares stand: the runs are what this pass profiled
    if session.claims is not None:
        # One guard at a time per model: a second tuner reads the table the first one's guard
        # passed over, and skips its own guard over the same answers.
        claim = _wait(session, f"guard {session.model.name}", (0, 0))
        if not claim.taken:
            # Another tuner's guard over this model outlasted the wait: two guards at once
            # would time each other's runs. This session runs none, and says so.
            assert claim.holder is not None
            session.guard.left_to = claim.holder.named
            return
        if claim.holder is not None:
            session.refresh()
    final_guard(session)


def _after_other_sessions(session: Session) -> None:
    """Wait, before profiling or benching anything, while another live tuner tunes this model
    on this host (its session lock, `measuring.session_lock`, then its claim,
    `claims.session_key`), then read what it wrote: its keys are then known or reused here,
    not tuned beside it. Tuners of one host share its cores, and one that
    profiles or checks outputs while another times a bench makes that bench contended (and
    doubted, so a later session benches it again). A wait that outlasts the claim wait goes on
    with the per-key claims alone, as tuners of other hosts do."""
    assert session.claims is not None
    key = session_key(session.model.name, session.claims.host)
    lock, timer = session.hosting, session.claims.timer
    deadline, start = _deadline(session), timer()
    if not lock.acquire(0.0):
        # Another tuner of the model on this host holds its session lock
        # (`measuring.session_lock`): sleep until it lets go, one system call a look, not a
        # read of the store's claims. The one read says whom it waits for.
        try:
            holder = session.claims.holder(key)
        except TunecacheError:
            holder = None
        named = "another tuner of this host" if holder is None else holder.named
        session.tell(f"waiting for {key}, claimed by {named}", 0, 0)
        try:
            lock.acquire(max(0.0, deadline - (timer() - start)), sleep=session.how.sleep)
        finally:
            session.waited_for_others += timer() - start
    # The claim in the store as well: a holder of it that takes no session lock (another
    # tool), waited for within what is left of the same deadline. Another host's holder has a
    # key of its own, and is waited for by nobody.
    claim = _wait(session, key, (0, 0), max(0.0, deadline - (timer() - start)))
    if claim.holder is not None:
        # The claim has had a holder (a live one waited for, one that died, or an earlier
        # session that let go of it): what the store holds now is read before this session
        # profiles anything. Cheap where nothing changed.
        session.refresh()


def _deadline(session: Session) -> float:
    """Seconds a wait for another tuner may last: the session's claim wait, within what is
    left of its budget."""
    deadline = session.options.claim_wait
    if session.options.budget is not None:
        left = session.options.budget - (session.how.clock() - session.started)
        deadline = max(0.0, min(deadline, left))
    return deadline


def _wait(
    session: Session, key: str, progress: tuple[int, int], deadline: float | None = None
) -> Claim:
    """Claim `key`, waiting while another live tuner holds it, up to `deadline` seconds (the
    session's claim wait within what is left of its budget, unless given); the progress
    callback hears whom it waits for."""
    assert session.claims is not None
    if deadline is None:
        deadline = _deadline(session)

    def waiting(holder: Holder) -> None:
        session.tell(f"waiting for {key}, claimed by {holder.named}", *progress)

    timer = session.claims.timer
    start = timer()
    try:
        return session.claims.wait(key, deadline, sleep=session.how.sleep, waiting=waiting)
    finally:
        session.waited_for_others += timer() - start


def _claimed_step(
    session: Session, heavy: Heavy, *, tune_keys: bool, wait: tuple[int, int] | None = None
) -> bool:
    """`_step` under the key's claim; False, with no step taken, when another live tuner claims
    the key and no `wait` is asked (the progress to report while waiting). A claim taken over
    from another tuner reads what that one wrote first; a wait that outlasts its deadline
    skips the key, which another tuner is tuning."""
    claims = session.claims
    if claims is None:
        _step(session, heavy, tune_keys=tune_keys)
        return True
    key = heavy.key.text
    claim = claims.claim(key) if wait is None else _wait(session, key, wait)
    if not claim.taken:
        if wait is None:
            return False
        holder = "" if claim.holder is None else f" ({claim.holder.named})"
        note = f"another tuner{holder} still claims it: it tunes the key"
        session.outcome(heavy, "skipped", note=note)
        return True
    try:
        if claim.holder is not None:
            session.took_over(key, claim.holder)
        _step(session, heavy, tune_keys=tune_keys)
    except ClaimLost as lost:
        # This claim lapsed during the key's bench or trial (renewals failed) and another
        # tuner took the key over: what this one found is left unwritten, to that one.
        session.outcome(heavy, "skipped", note=f"{lost}: left to it, nothing written")
    finally:
        claims.release(key)
    return True


def _step(session: Session, heavy: Heavy, *, tune_keys: bool) -> None:
    """One heavy key: judge the entry that serves it, or bench and try its candidates."""
    if session.out_of_time():
        session.outcome(heavy, "skipped", note="time budget spent")
        return
    answer = session.table.resolve(heavy.key, heavy.op.candidates, heavy.heuristic)
    if answer.source == "masked":
        if tune_keys and _reopens(session, heavy, answer.entry_id):
            tune_key(session, heavy)  # this model's own "no", from doubtful evidence
            return
        session.outcome(heavy, "known", entry_id=answer.entry_id, note="masked")
        return
    if answer.entry_id is not None:
        _judge(session, heavy, answer.entry_id)
        if answer.source == "exact" or not tune_keys:
            return
    if tune_keys:
        # No entry of its own serves this key (it runs the heuristic or a neighbour's choice):
        # bench it, and accept what wins through the whole model.
        tune_key(session, heavy)


def _reopens(session: Session, heavy: Heavy, entry_id: int | None) -> bool:
    """Whether a key masked for this model is taken up again: the entry is one it rejected in
    an earlier session (not in one that ran beside this one: `Session.reuses`), nobody vouches
    for it, and its record is doubtful (`tune.doubt`) and has been benched again fewer than
    `rebench` times."""
    if entry_id is None or entry_id in session.masked or session.reuses(heavy.key.text):
        return False
    stored = session.cache.get(heavy.key, candidates=heavy.op.candidates)
    if stored is None or stored.id != entry_id or stored.status != "rejected":
        return False
    if "validated" in session.cache.verdicts_on(stored).values():
        return False
    record = session.cache.record(stored)
    if record is None or doubt.doubt(record) is None:
        return False
    return doubt.rebenches(record) < session.options.rebench


def _judge(session: Session, heavy: Heavy, entry_id: int) -> None:
    """Validate another model's entry that serves this heavy key (step 3); an entry whose
    choice computes something else than the heuristic on this model's call is masked at once."""
    if entry_id in session.verdicts:
        session.outcome(heavy, "known", entry_id=entry_id, note=session.verdicts[entry_id])
        return
    choice = session.table.resolve(heavy.key, heavy.op.candidates, heavy.heuristic).choice
    wrong = outputs_differ(heavy.op, bound_calls(heavy), heavy.heuristic, [choice])
    if wrong:
        session.record_verdict(entry_id, "masked", None)
        note = f"{choice}: {wrong[choice]}"
        session.outcome(heavy, "masked", entry_id=entry_id, note=note, wrong=(choice,))
        return
    without = session.table.derive(mask=[entry_id])
    verdict, failed = session.trial(without, session.table, [heavy.case])
    if failed is not None and failed.side == "A":
        # The model breaks without the entry: that is no verdict on the entry.
        note = f"the model raised without this entry: {failed.text()}"
        session.outcome(heavy, "failed", entry_id=entry_id, note=note)
        return
    action = "validated" if verdict is not None and verdict.accepted else "masked"
    session.record_verdict(entry_id, action, verdict)
    note = f"a run with it raised {failed.text()}" if failed else ""
    session.outcome(heavy, action, entry_id=entry_id, verdict=verdict, note=note)
