"""Step 7 of a session, the guard: the finished table must beat no table at all over every
scenario, end to end, or every entry the model uses is masked for it.

The guard is the promise "never slower than the heuristic", so it runs whatever the budget says.
A passing guard leaves a note on the session's `runs` row naming a digest of what every key was
answered; a later session over exactly the same answers skips it, whatever it wrote that
changed none of them (a record benched again in place, a "no" written again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tunecache import dispatch
from tunecache._digest import sha256
from tunecache.resolve import Table
from tunecache.tune import doubt
from tunecache.tune.runs import RunFailed, run_with, served, served_entries, tagged

if TYPE_CHECKING:
    from tunecache.tune.session import Session

__all__ = ["final_guard", "guard_note", "served_now"]


def served_now(session: Session) -> tuple[dict[str, str], RunFailed | None]:
    """What the current table answers the model's runs (one profiled pass of each scenario):
    key text -> "entry id:choice", and the failure if a run with the table raised (the
    answers met until then are in). Where the table answers every key the session's last
    profile met with the choice its runs got, the runs would be the profiled ones: their
    answers are read from it, and the model is not run again (`LastProfile`)."""
    last = session.last_profile
    if last is not None and last.answers_as(session.table):
        return last.served(session.table), None
    answers: dict[str, str] = {}
    for case in session.cases:
        failed = None
        with dispatch.profile(capture=True) as profiled:
            try:
                tagged(run_with(session.model, session.table, [case]), "B")()
            except RunFailed as error:
                failed = error
        answers.update(served(session.table, profiled))
        if failed is not None:
            return answers, failed
    return answers, None


def guard_note(session: Session, answers: dict[str, str]) -> str:
    """The run note a passing guard leaves: the model, its version, and a digest of what
    every key it ran was answered (entry and choice), so any change is a new table."""
    lines = "\n".join(f"{key} {answer}" for key, answer in sorted(answers.items()))
    digest = sha256(lines.encode()).hexdigest()[:32]
    return f"model {session.model.name} ({session.fingerprint}): guard passed over table {digest}"


def final_guard(session: Session) -> None:
    """Run the guard over the session's finished table, masking what it uses if it loses.

    Raises the model's own error when the model fails with no table at all (or with its
    heuristic): that is its bug, not the cache's.
    """
    outcome = session.guard
    answers, failed = served_now(session)
    used = sorted(served_entries(answers))
    outcome.kept = used
    if not used:
        if failed is not None:
            raise failed.error  # the model fails with its heuristic: its own bug
        return
    note = guard_note(session, answers)
    if failed is None and session.cache.runs_noted(note):
        # A finished session's guard passed over exactly this table: every key answered by
        # the same entry and choice. What this session wrote changed none of those answers
        # (a record benched again in place), so running the guard again could only risk a
        # noisy "no" over a table already judged.
        outcome.skipped = True
        session.cache.note(session.current_run(), note)
        return
    why = None
    if failed is None:
        verdict, failed = session.trial(Table.empty(), session.table, session.cases)
        outcome.verdict = verdict
        if verdict is not None and verdict.accepted:
            session.cache.note(session.current_run(), note)
            return
        busy = doubt.contended(session.waited)
        why = None if busy is None else f"contended: the final guard that masked it {busy}"
    if failed is not None:
        outcome.error = failed.text()
        if failed.side == "A":
            raise failed.error  # the model fails with no table at all: its own bug
    _mask_everything(session, used, why)
    outcome.kept = []


def _mask_everything(session: Session, used: list[int], why: str | None) -> None:
    """Mask every entry the model uses, then whatever a masked entry's neighbours serve in its
    place, until the model runs its heuristic everywhere. `why`, if given, is the doubt a
    contended guard leaves in the records of the entries this session accepted and rejects
    now, so that a later session tries their keys again (`tunecache.tune.doubt`)."""
    failed = None
    while used:
        for entry_id in used:
            # An entry no other model vouches for is nobody's decision any more: rejected,
            # in the same commit as the mask, so no state serves it unvouched.
            others = session.cache.verdicts_on(entry_id)
            others.pop(session.model.name, None)
            vouched = "validated" in others.values()
            decided = session.decided.get(entry_id)
            if why is not None and not vouched and decided is not None:
                heavy, choice, record = decided
                judged = ("masked", session.guard.verdict)
                doubted = doubt.with_settings(record, doubt=why)
                session.put_judged(heavy, choice, doubted, "rejected", judged)
                continue
            session.record_verdict(
                entry_id, "masked", session.guard.verdict, status=None if vouched else "rejected"
            )
        answers, failed = served_now(session)
        used = sorted(served_entries(answers))
    if failed is not None:
        raise failed.error
