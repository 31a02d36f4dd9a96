"""Step 4's evidence for one heavy key: the timing record already stored for it, reused when it
stands (`tunecache.tune.doubt`), or a fresh bench of its candidates in isolation, on the call the
profile captured, each candidate's output compared with the heuristic's as it is probed
(`bench.bench(compare=...)`: a wrong one is never calibrated, sampled or ranked).

A fresh bench refuses, without calling them, the candidates a stored record found too slow for
a budget no larger than this one (`bench.bench(refused=...)`).
A record another tuner benched while this session ran is reused, doubtful or not
(`Session.reuses`). A bench taken because the stored record was doubtful counts itself in its
record's settings (``rebench``, with ``rebenched_for``: why), so a key is benched again a
bounded number of times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunecache import bench
from tunecache.evidence import TOO_SLOW, WRONG, refusal
from tunecache.tune import doubt

if TYPE_CHECKING:
    from tunecache.cache import Entry
    from tunecache.codec import CandidateTiming, TimingRecord
    from tunecache.dispatch import Tunable
    from tunecache.keys import Key
    from tunecache.tune.profiling import Heavy
    from tunecache.tune.session import Session

__all__ = ["Evidence", "bench_candidates", "bound_calls", "gather", "refused_in", "speedup_of"]


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
    #: why the stored record was benched again, or why the one reused is doubtful ("": neither)
    doubt: str = ""

    def as_outcome(self) -> dict[str, Any]:
        """The fields of a key's outcome this evidence fills in."""
        return {
            "bench_best": self.best,
            "bench_stopped": self.stopped,
            "wrong": refused_in(self.record, WRONG),
            "too_slow": refused_in(self.record, TOO_SLOW),
            "doubt": self.doubt,
        }


def refused_in(record: TimingRecord, kind: str) -> tuple[str, ...]:
    """The candidates a record refused for `kind` (`tunecache.evidence.REFUSALS`), in order."""
    return tuple(c.name for c in record.candidates if refusal(c.error) == kind)


def gather(session: Session, heavy: Heavy, stored: Entry | None, current: str) -> Evidence | None:
    """The key's evidence, or None once its outcome says no candidate can be tried (`current`
    is what the model runs for the key now)."""
    keep = session.options.keep
    previous = None if stored is None else session.cache.record(stored)
    why, count = None, 0
    if previous is not None and not session.options.retune:
        anyway = session.reuses(heavy.key.text)
        why, count, reused = doubt.reuse(previous, session.options.rebench, anyway=anyway)
        if reused is not None:
            return _lent(session, heavy, previous, reused, current)
    result = _bench(session, heavy, previous)
    record, said = doubt.rebenched(result.record, why, count)
    evidence = Evidence(
        record,
        tuple(result.survivors(keep)),
        result.best,
        result.stopped,
        complete=result.complete,
        fresh=True,
        doubt=said,
    )
    return _usable(session, heavy, evidence, current)


def _lent(
    session: Session, heavy: Heavy, record: TimingRecord, said: str, current: str
) -> Evidence | None:
    """The stored record as the key's evidence."""
    ranking = tuple(bench.survivors(record, session.options.keep))
    complete = record.settings.get("complete") is not False
    best = ranking[0] if ranking else None
    evidence = Evidence(record, ranking, best, "stored", complete=complete, doubt=said)
    return _usable(session, heavy, evidence, current)


def _usable(session: Session, heavy: Heavy, evidence: Evidence, current: str) -> Evidence | None:
    """`evidence` if it ranks a candidate to try or keep, else None, with the key's outcome
    saying why none can be: the budget cut the bench first (a fresh record is kept, as an
    unvalidated entry choosing what runs now, so the next bench refuses what was too slow), or
    every candidate raised or was refused."""
    if evidence.ranking:
        return evidence
    record = evidence.record
    refused = [c for c in record.candidates if c.error is not None]
    if not evidence.complete or len(refused) < len(record.candidates):
        entry_id = None
        if evidence.fresh:
            entry_id = session.put(heavy, current, record, "unvalidated").id
        note = "the key's budget ran out before any candidate could be measured"
        more = evidence.as_outcome()
        session.outcome(heavy, "budget cut", entry_id=entry_id, note=note, **more)
        return None
    if any(refusal(c.error) is not None for c in refused):
        note = "every candidate raised or was refused: " + "; ".join(
            f"{c.name}: {c.error}" for c in refused
        )
    else:
        note = "every candidate raised"
    session.outcome(heavy, "failed", note=note, **evidence.as_outcome())
    return None


def bound_calls(heavy: Heavy) -> dict[str, Callable[[], object]]:
    """Every candidate of the key as a call with no arguments, on the call the profile
    captured."""
    args, kwargs = heavy.call.args, heavy.call.kwargs

    def bound(function: Callable[..., object]) -> Callable[[], object]:
        def call() -> object:
            return function(*args, **kwargs)

        return call

    return {name: bound(function) for name, function in heavy.op.functions.items()}


def _bench(session: Session, heavy: Heavy, previous: TimingRecord | None) -> bench.BenchResult:
    """Every candidate of the key in isolation, on the call the profile captured
    (`bench_candidates`, with the model's sync and the session's bench options)."""
    options = {
        "sync": session.model.sync,
        "cpu_wait": session.how.cpu_wait,
        **session.options.bench_options,
    }
    with session.measuring.held():  # no other tuner of the device times anything meanwhile
        return bench_candidates(
            heavy.op, heavy.key, bound_calls(heavy), previous, session.options.key_budget, options
        )


def bench_candidates(
    op: Tunable[Any, Any],
    key: Key,
    functions: Mapping[str, Callable[[], object]],
    previous: TimingRecord | None,
    budget: float | None,
    options: Mapping[str, Any],
) -> bench.BenchResult:
    """Every candidate of an op at a key in isolation (`functions`: each one's call with no
    arguments), each one's output compared with the heuristic's as it is probed
    (`bench.bench(compare=...)`), within `budget`; the candidates `previous` found too slow for
    this budget are not called again, and the op's lower bound stops the bench early. `options`
    are `bench.bench`'s others (sync, cpu_wait, samples). The tuner's bench and the op-level
    one's (`tunecache.tune.ops`)."""
    refused: dict[str, CandidateTiming] = {}
    if previous is not None:
        slow = set(doubt.too_slow_for(previous, budget))
        refused.update((c.name, c) for c in previous.candidates if c.name in slow)
    given = dict(options)
    lower_bound = op.lower_bound(key)
    if lower_bound is not None:
        given.setdefault("lower_bound", lower_bound)
    return bench.bench(
        functions,
        budget=budget,
        refused=refused,
        reference=op.heuristic_for(key),
        compare=op.compare,
        **given,
    )


def speedup_of(record: TimingRecord, choice: str, before: str) -> float | None:
    """The isolated bench's speedup of `choice` over `before` (the median of `before` over the
    choice's), from the record; None where either is unmeasured."""
    try:
        chosen, then = record.candidate(choice).median, record.candidate(before).median
    except KeyError:
        return None
    return then / chosen if chosen and then else None
