"""Steps 4 and 5 for one heavy key that no entry of its own serves: bench its candidates in
isolation (or reuse the timing record already stored for it), then try the survivors through
whole-model runs and write what wins.

The bench only prunes: an entry is accepted only when the whole model, in paired runs, gets
faster with it than with what it runs now. Where none wins, the evidence is kept (`rejected`, or
`unvalidated` where nothing beat what runs now, or where the budget stopped short of an answer)
so that the next session does not bench the key again, and remembers no "no" it did not earn.
Another model's decision is never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunecache import bench

if TYPE_CHECKING:
    from tunecache import accept
    from tunecache.cache import Entry
    from tunecache.codec import TimingRecord
    from tunecache.resolve import Answer
    from tunecache.tune.profiling import Heavy
    from tunecache.tune.session import Session

__all__ = ["Attempt", "Evidence", "tune_key"]


@dataclass(frozen=True)
class Evidence:
    """A key's timing record and the survivors it ranks, fastest first: fresh from a bench, or
    lent by the entry already stored for the key."""

    record: TimingRecord
    ranking: tuple[str, ...]
    #: the bench's fastest candidate, and why it stopped ("stored" for a lent record)
    best: str | None
    stopped: str
    #: False when the key budget cut the bench short, so a candidate may be unmeasured
    complete: bool = True
    fresh: bool = False

    def as_outcome(self) -> dict[str, Any]:
        """The fields of a key's outcome this evidence fills in."""
        return {"bench_best": self.best, "bench_stopped": self.stopped}


@dataclass
class Attempt:
    """The survivors tried so far in whole-model runs: in order, with the first one's verdict
    and the errors the model raised with them."""

    tried: list[str] = field(default_factory=list)
    first: accept.Verdict | None = None
    errors: list[str] = field(default_factory=list)

    def note(self, *more: str) -> str:
        """The outcome's note: `more`, then every error met."""
        return "; ".join([*more, *self.errors])


def tune_key(session: Session, heavy: Heavy) -> None:
    """Bench one heavy key and accept its best survivor through whole-model runs (4, 5)."""
    names = heavy.op.candidates
    now = session.table.resolve(heavy.key, names, heavy.heuristic)
    stored = session.cache.get(heavy.key, candidates=names)
    if stored is not None and (
        stored.status == "accepted" or "validated" in session.cache.verdicts_on(stored).values()
    ):
        # Another model's decision that does not serve this one (masked for it, or not
        # legal here): it is theirs, and this session never rewrites it.
        session.outcome(heavy, "known", entry_id=stored.id, note="another model's decision")
        return
    evidence = _evidence(session, heavy, stored)
    if evidence is None:
        return
    tries = [name for name in evidence.ranking if name != now.choice]
    if not tries:
        _keep_what_runs(session, heavy, evidence, stored)
        return
    attempt = Attempt()
    if _try_survivors(session, heavy, evidence, tries, now.choice, attempt):
        return
    _conclude(session, heavy, evidence, tries, now, attempt)


def _evidence(session: Session, heavy: Heavy, stored: Entry | None) -> Evidence | None:
    """The key's evidence, or None once its outcome says no candidate can be tried."""
    keep = session.options.keep
    record = None
    if stored is not None and not session.options.retune:
        record = session.cache.record(stored)
        if record is not None and record.settings.get("complete") is False:
            record = None  # a bench the budget cut short: measure again
    if record is not None:
        ranking = tuple(bench.survivors(record, keep))
        if not ranking:
            session.outcome(heavy, "failed", note="every candidate raised", bench_stopped="stored")
            return None
        return Evidence(record, ranking, ranking[0], "stored")
    result = _bench(session, heavy)
    ranking = tuple(result.survivors(keep))
    if not ranking:
        note = (
            "every candidate raised"
            if result.errors
            else "the key budget ran out before any candidate ran"
        )
        session.outcome(heavy, "failed", note=note, bench_stopped=result.stopped)
        return None
    return Evidence(
        result.record, ranking, result.best, result.stopped, complete=result.complete, fresh=True
    )


def _bench(session: Session, heavy: Heavy) -> bench.BenchResult:
    """Every candidate of the key in isolation, on the call the profile captured."""
    args, kwargs = heavy.call.args, heavy.call.kwargs
    functions = {
        name: _bound(function, args, kwargs) for name, function in heavy.op.functions.items()
    }
    options = {"sync": session.model.sync, **session.options.bench_options}
    lower_bound = heavy.op.lower_bound(heavy.key)
    if lower_bound is not None:
        options.setdefault("lower_bound", lower_bound)
    return bench.bench(functions, budget=session.options.key_budget, **options)


def _bound(
    function: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], object]:
    def call() -> object:
        return function(*args, **kwargs)

    return call


def _keep_what_runs(
    session: Session, heavy: Heavy, evidence: Evidence, stored: Entry | None
) -> None:
    """Nothing beats what runs now. Keep the evidence as an unvalidated entry (served only to
    tables that ask for everything) so the next session does not bench again."""
    entry_id = stored.id if stored is not None else None
    if (
        stored is None
        or session.options.retune
        or (evidence.fresh and stored.status == "unvalidated")
    ):
        entry_id = session.put(heavy, evidence.ranking[0], evidence.record, "unvalidated").id
    session.outcome(heavy, "kept", entry_id=entry_id, **evidence.as_outcome())


def _try_survivors(
    session: Session,
    heavy: Heavy,
    evidence: Evidence,
    tries: list[str],
    current: str,
    attempt: Attempt,
) -> bool:
    """Try each survivor, fastest first, against what runs now; True once the key's outcome is
    decided (one accepted, or the model failing with what it runs now)."""
    for name in tries:
        if attempt.tried and session.out_of_time():
            break
        attempt.tried.append(name)
        candidate = session.table.derive(add=[(heavy.key, heavy.op.candidates, name)])
        verdict, failed = session.trial(session.table, candidate, [heavy.case])
        if failed is not None and failed.side == "A":
            # The model breaks with what it runs now, in this scenario: not this key's doing.
            note = f"the model raised with the current table: {failed.text()}"
            session.outcome(heavy, "failed", note=note, tried=tuple(attempt.tried))
            return True
        if failed is not None:
            attempt.errors.append(f"{name}: a run with it raised {failed.text()}")
        if len(attempt.tried) == 1:
            attempt.first = verdict
        if verdict is not None and verdict.accepted:
            _accepted(session, heavy, name, current, evidence, verdict, attempt)
            return True
    return False


def _conclude(
    session: Session,
    heavy: Heavy,
    evidence: Evidence,
    tries: list[str],
    now: Answer,
    attempt: Attempt,
) -> None:
    """No survivor won: skip the key if the budget stopped short, keep a neighbour's choice that
    wins here, or reject the first survivor with this model's mask."""
    more = {"tried": tuple(attempt.tried), "verdict": attempt.first, **evidence.as_outcome()}
    untried = [name for name in tries if name not in attempt.tried]
    if untried or not evidence.complete:
        # The budget stopped short of an answer: keep the evidence, remember no "no", so
        # the next session takes the key up again.
        entry = session.put(heavy, attempt.tried[0], evidence.record, "unvalidated")
        why = (
            f"the time budget ran out before {untried} were tried"
            if untried
            else "the bench was cut short, so a candidate may be unmeasured"
        )
        session.outcome(heavy, "skipped", entry_id=entry.id, note=attempt.note(why), **more)
        return
    if now.source == "nearest" and _keep_borrowed(session, heavy, now.choice, evidence, attempt):
        return
    # The entry and this model's mask on it, in one commit.
    judged = ("masked", attempt.first)
    entry_id = session.put_judged(heavy, attempt.tried[0], evidence.record, "rejected", judged)
    session.outcome(heavy, "rejected", entry_id=entry_id, note=attempt.note(), **more)


def _keep_borrowed(
    session: Session, heavy: Heavy, choice: str, evidence: Evidence, attempt: Attempt
) -> bool:
    """What runs now at this key is a neighbour's `choice`, and no survivor beat it here.

    Rejecting the survivor would mask the key down to the heuristic and lose the
    neighbour's gain; so the choice is tried at this very key, the heuristic here (A)
    against the choice here (B), and written as the key's own accepted entry if it wins.
    """
    names, heuristic = heavy.op.candidates, heavy.heuristic
    if choice == heuristic:
        return False
    here_heuristic = session.table.derive(add=[(heavy.key, names, heuristic)])
    here_choice = session.table.derive(add=[(heavy.key, names, choice)])
    verdict, failed = session.trial(here_heuristic, here_choice, [heavy.case])
    if failed is not None or verdict is None or not verdict.accepted:
        return False
    note = f"the neighbour's {choice!r} won here against the heuristic; nothing beat it"
    _accepted(session, heavy, choice, heuristic, evidence, verdict, attempt, note)
    return True


def _accepted(
    session: Session,
    heavy: Heavy,
    choice: str,
    against: str,
    evidence: Evidence,
    verdict: accept.Verdict,
    attempt: Attempt,
    *notes: str,
) -> None:
    """Write `choice`, which won against `against`, as the key's accepted entry, and say so."""
    entry_id = session.accept_entry(heavy, choice, evidence.record, verdict, against)
    session.outcome(
        heavy,
        "accepted",
        entry_id=entry_id,
        tried=tuple(attempt.tried),
        verdict=verdict,
        note=attempt.note(*notes),
        **evidence.as_outcome(),
    )
