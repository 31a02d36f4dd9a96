"""Whole-model runs: one run over scenarios with a table, a paired trial of two tables, and what
a table served to a profiled run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tunecache import accept, dispatch
from tunecache.keys import Key
from tunecache.resolve import Table, using
from tunecache.tune.model import Model
from tunecache.tune.options import Options

__all__ = ["RunFailed", "run_with", "served", "served_entries", "served_keys", "tagged", "trial"]


class RunFailed(Exception):
    """A whole-model run raised while two tables were compared (side "A" or "B")."""

    def __init__(self, side: str, error: Exception) -> None:
        super().__init__(side, error)
        self.side = side
        self.error = error

    def text(self) -> str:
        """The model's error in one line: its type and the first line of its message."""
        return f"{type(self.error).__name__}: {self.error}".splitlines()[0]


def run_with(model: Model, table: Table, cases: Sequence[dict[str, int]]) -> Callable[[], None]:
    """One whole-model run: every case in turn, with `table` as the current table."""
    run = model.run

    def one_run() -> None:
        with using(table):
            for case in cases:
                run(**case)

    return one_run


def tagged(run: Callable[[], None], side: str) -> Callable[[], None]:
    """`run`, with an error the model raises wrapped as a RunFailed of `side`, so a session
    can tell which table broke the model from its own mistakes."""

    def tried() -> None:
        try:
            run()
        except Exception as error:
            raise RunFailed(side, error) from error

    return tried


def trial(
    model: Model,
    options: Options,
    baseline: Table,
    candidate: Table,
    cases: Sequence[dict[str, int]],
) -> tuple[accept.Verdict | None, RunFailed | None]:
    """`candidate` (side B) against `baseline` (side A) in paired whole-model runs, by the
    session's acceptance rule.

    A verdict, or None and the failure when a run raises: a change that breaks the model
    (side B) is one it does not take, never fatal to the session.
    """
    try:
        verdict = accept.accept(
            tagged(run_with(model, baseline, cases), "A"),
            tagged(run_with(model, candidate, cases), "B"),
            confirmations=options.confirmations,
            pairs=options.pairs,
            alpha=options.alpha,
            sync=model.sync,
        )
    except RunFailed as failed:
        return None, failed
    return verdict, None


def served(table: Table, profile: dispatch.Profile) -> dict[str, str]:
    """Key text -> "entry id:choice" for every key of a profiled run an entry answered."""
    return served_keys(table, {key: call.op for key, call in profile.captured().items()})


def served_keys(table: Table, ops: Mapping[Key, dispatch.Tunable[Any, Any]]) -> dict[str, str]:
    """Key text -> "entry id:choice" for every key of `ops` (each with its op) an entry of
    `table` answers."""
    answers: dict[str, str] = {}
    for key, op in ops.items():
        answer = table.resolve(key, op.candidates, op.heuristic_for(key))
        if answer.source in ("exact", "nearest") and answer.entry_id is not None:
            answers[key.text] = f"{answer.entry_id}:{answer.choice}"
    return answers


def served_entries(answers: Mapping[str, str]) -> set[int]:
    """The entry ids behind answers as `served` gives them."""
    return {int(answer.split(":")[0]) for answer in answers.values()}
