"""What the tuner hands back: a session's report key by key, and the held-out evaluation's rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from tunecache.accept import Verdict

__all__ = [
    "ACTIONS",
    "OUTCOMES",
    "Evaluation",
    "EvaluationRow",
    "KeyOutcome",
    "Progress",
    "TuneReport",
    "PlainRow",
    "count_outcomes",
    "plain_fields",
]

#: a progress callback: (what, done, total), as the command line's progress bar takes it
Progress = Callable[[str, int, int], None]

#: what happened to a key in a session
ACTIONS = (
    "accepted",  # a new entry won its paired whole-model runs and is served to this model
    "rejected",  # no survivor beat the current table; the evidence is kept, never served
    "kept",  # the bench found nothing faster than what the model already runs
    "validated",  # another model's entry helps this one too
    "masked",  # another model's entry does not help this one; it stops applying here
    "known",  # this model already judged what serves the key in an earlier session
    "failed",  # every candidate raised (or was refused) on the captured arguments
    "skipped",  # the session's time budget ran out first, or another tuner's claim outlasted
    # the wait for it (`tunecache.tune.claims`)
    "budget cut",  # the key's budget ended its bench before the evidence was complete
    "superseded",  # accepted here, but another tuner's later decision is what the cache holds
)

#: how a model measured with a cache compares with its heuristic (`tunecache.stats.classify`)
OUTCOMES = ("improved", "neutral", "regressed")


def count_outcomes(outcomes: Iterable[str]) -> dict[str, int]:
    """How many of `outcomes` are each of OUTCOMES (every one counted, zeros included)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome in outcomes:
        counts[outcome] += 1
    return counts


def plain_fields(row: Any) -> dict[str, Any]:
    """A dataclass instance of plain values as a JSON-ready dict, field by field, in order."""
    return {column.name: getattr(row, column.name) for column in fields(row)}


class PlainRow:
    """A mixin for a dataclass of plain values: `as_dict` gives them field by field."""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, field by field."""
        return plain_fields(self)


@dataclass(frozen=True)
class KeyOutcome:
    """What one session did for one key."""

    key: str
    action: str
    #: the key's share of its scenario's profiled time (the largest over scenarios)
    share: float
    scenario: str
    heuristic: str
    #: what the model runs for the key after the session
    choice: str
    entry_id: int | None = None
    #: survivors tried in paired whole-model runs, in order
    tried: tuple[str, ...] = ()
    #: the verdict that decided (the last one tried), if any
    verdict: Verdict | None = None
    #: the isolated bench's fastest candidate and why it stopped, when it ran
    bench_best: str | None = None
    bench_stopped: str | None = None
    note: str = ""
    #: candidates refused because their output differed from the heuristic's, and candidates
    #: one call of which took longer than what was left of the key's budget
    wrong: tuple[str, ...] = ()
    too_slow: tuple[str, ...] = ()
    #: why the stored evidence was benched again ("" when it was not, or there was none), or
    #: why the evidence reused is doubtful although it may not be benched again
    doubt: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, the verdict as its own dict."""
        return {
            **plain_fields(self),
            "tried": list(self.tried),
            "verdict": None if self.verdict is None else self.verdict.as_dict(),
            "wrong": list(self.wrong),
            "too_slow": list(self.too_slow),
        }


@dataclass(frozen=True)
class TuneReport:
    """What a tuning (or validation) session found and wrote for one model."""

    model: str
    fingerprint: str
    run_id: int | None
    scenarios: tuple[str, ...]
    keys: tuple[KeyOutcome, ...]
    #: heavy keys of all scenarios, and keys screened out as too light to confirm
    screened: int
    #: the finished table against no table, end to end; None when the model uses no entry,
    #: when an earlier session's guard passed over this very table (`guard_skipped`), or when a
    #: run with the table raised (`guard_error`)
    guard: Verdict | None
    #: entries this model uses after the session, and entries masked for it in the session
    kept: tuple[int, ...]
    masked: tuple[int, ...]
    seconds: float
    interrupted: bool = False
    budget_spent: bool = False
    guard_skipped: bool = False
    guard_error: str = ""
    #: the other tuner whose guard over this model outlasted this session's claim wait: this
    #: session ran no guard of its own (its entries stay as the other's guard leaves them)
    guard_left_to: str = ""
    #: of `seconds`, how long the session waited for other tuners of its device: for another
    #: session of the model on this host, a key's or the guard's claim, a measurement turn
    waited: float = 0.0

    def count(self, action: str) -> int:
        """How many keys the session ended with `action` (one of ACTIONS)."""
        return sum(1 for outcome in self.keys if outcome.action == action)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, every key and verdict as its own dict."""
        return {
            "model": self.model,
            "fingerprint": self.fingerprint,
            "run_id": self.run_id,
            "scenarios": list(self.scenarios),
            "keys": [outcome.as_dict() for outcome in self.keys],
            "screened": self.screened,
            "guard": None if self.guard is None else self.guard.as_dict(),
            "guard_skipped": self.guard_skipped,
            "guard_error": self.guard_error,
            "guard_left_to": self.guard_left_to,
            "kept": list(self.kept),
            "masked": list(self.masked),
            "seconds": self.seconds,
            "waited": self.waited,
            "interrupted": self.interrupted,
            "budget_spent": self.budget_spent,
        }


@dataclass(frozen=True)
class Evaluation:
    """The held-out protocol's result: every model's row, and the tuning reports."""

    rows: tuple[EvaluationRow, ...]
    reports: tuple[TuneReport, ...]
    seconds: float

    def counts(self, group: str | None = None) -> dict[str, int]:
        """How many models of `group` ("tuned", "held-out"; None: all) had each outcome."""
        return count_outcomes(row.outcome for row in self.rows if group in (None, row.group))

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values: the rows, the counts by group, and the tuning reports."""
        return {
            "rows": [row.as_dict() for row in self.rows],
            "counts": {group: self.counts(group) for group in ("tuned", "held-out")},
            "reports": [report.as_dict() for report in self.reports],
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class EvaluationRow(PlainRow):
    """One model's end-to-end time with the shared cache against its heuristic, paired."""

    model: str
    group: str  # "tuned" or "held-out"
    outcome: str  # one of OUTCOMES
    heuristic_ms: float | None
    cached_ms: float | None
    speedup: float
    low: float
    high: float
    p_faster: float
    p_slower: float
    pairs: int
    #: entries of the cache that serve the model's runs
    entries: int
    note: str = ""
