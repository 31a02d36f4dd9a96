"""Steps 4 and 5 for one heavy key that no entry of its own serves: bench its candidates in
isolation (or reuse the timing record already stored for it: `records`), then try the survivors
through whole-model runs and write what wins.

The bench only prunes: an entry is accepted only when the whole model, in paired runs, gets
faster with it than with what it runs now. Where none wins, the evidence is kept (`rejected`, or
`unvalidated` where nothing beat what runs now, or where a budget stopped short of an answer)
so that the next session does not bench the key again, and remembers no "no" it did not earn:
a rejection whose trial ran on a contended machine, or contradicted the bench, is written with
its doubt (`tunecache.tune.doubt`), and a later session takes the key up again.
Another model's decision is never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tunecache.tune import doubt
from tunecache.tune.checking import outputs_differ
from tunecache.tune.records import Evidence, bound_calls, gather

if TYPE_CHECKING:
    from tunecache import accept
    from tunecache.cache import Entry
    from tunecache.resolve import Answer
    from tunecache.tune.profiling import Heavy
    from tunecache.tune.session import Session

__all__ = ["Attempt", "Evidence", "tune_key"]


@dataclass
class Attempt:
    """The survivors tried so far in whole-model runs: in order, with the first one's verdict,
    how contended its trial was, and the errors the model raised with them (and the wrong
    outputs found before)."""

    tried: list[str] = field(default_factory=list)
    first: accept.Verdict | None = None
    waited: float | None = None
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
    evidence = gather(session, heavy, stored, now.choice)
    if evidence is None:
        return
    attempt = Attempt()
    tries = _tries(session, heavy, evidence, now.choice, attempt)
    if not tries:
        _keep_what_runs(session, heavy, evidence, stored, now.choice, attempt)
        return
    if _try_survivors(session, heavy, evidence, tries, now.choice, attempt):
        return
    _conclude(session, heavy, evidence, tries, now, attempt)


def _tries(
    session: Session, heavy: Heavy, evidence: Evidence, current: str, attempt: Attempt
) -> list[str]:
    """The survivors worth a whole-model trial against `current`, fastest first."""
    tries = [name for name in evidence.ranking if name != current]
    record = evidence.record
    if not evidence.complete:
        # A bench the budget cut short: only a survivor it measured faster than what runs
        # now is worth whole-model runs (a lone probe of a slow candidate is not).
        medians = {c.name: c.median for c in record.candidates}
        limit = medians.get(current)
        tries = [n for n in tries if _faster(medians.get(n), limit)]
    if tries and not record.settings.get("checked"):
        # A record benched before outputs were checked: check the ones about to be tried.
        wrong = outputs_differ(heavy.op, bound_calls(heavy), heavy.heuristic, tries)
        attempt.errors.extend(f"{name}: {text}" for name, text in wrong.items())
        tries = [name for name in tries if name not in wrong]
    return tries


def _faster(time: float | None, than: float | None) -> bool:
    """Whether a measured time per call is below another measured one."""
    return time is not None and than is not None and time < than


def _keep_what_runs(
    session: Session,
    heavy: Heavy,
    evidence: Evidence,
    stored: Entry | None,
    current: str,
    attempt: Attempt,
) -> None:
    """Nothing beats what runs now (or nothing measured can be tried). Keep the evidence as an
    unvalidated entry choosing what runs now (served only to tables that ask for everything),
    so the next session does not bench again; a bench the budget cut short says so."""
    entry_id = stored.id if stored is not None else None
    if stored is None or session.options.retune or evidence.fresh:
        entry_id = session.put(heavy, current, evidence.record, "unvalidated").id
    action = "kept" if evidence.complete else "budget cut"
    note = attempt.note() if evidence.complete else attempt.note(_CUT)
    session.outcome(heavy, action, entry_id=entry_id, note=note, **evidence.as_outcome())


_CUT = "the key's budget ended its bench, so a candidate may be unmeasured"


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
            attempt.first, attempt.waited = verdict, session.waited
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
        # A budget stopped short of an answer: keep the evidence, remember no "no", so
        # the next session takes the key up again.
        entry = session.put(heavy, attempt.tried[0], evidence.record, "unvalidated")
        action, cut = (
            ("skipped", f"the time budget ran out before {untried} were tried")
            if untried
            else ("budget cut", _CUT)
        )
        session.outcome(heavy, action, entry_id=entry.id, note=attempt.note(cut), **more)
        return
    if now.source == "nearest" and _keep_borrowed(session, heavy, now.choice, evidence, attempt):
        return
    record = evidence.record
    predicted = doubt.predicted_gain(record, heavy.share, attempt.tried[0], now.choice)
    why = doubt.trial_doubt(attempt.first, attempt.waited, predicted)
    if why is not None:
        # A "no" this session does not trust: written with its doubt, so that a later session
        # benches the key again and tries its survivors anew (tunecache.tune.doubt).
        record = doubt.with_settings(record, doubt=why)
    # The entry and this model's mask on it, in one commit.
    judged = ("masked", attempt.first)
    entry_id = session.put_judged(heavy, attempt.tried[0], record, "rejected", judged)
    notes = () if why is None else (f"not final: {why}",)
    session.outcome(heavy, "rejected", entry_id=entry_id, note=attempt.note(*notes), **more)


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
