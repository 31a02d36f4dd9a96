"""How a key resolves, and why, for people: what `Table.explain` and `tunecache explain` print.

Explaining runs the same steps as the hot path (`tunecache.resolve.lookup`) with a trace, a
list each step writes a line to; the lines for an exact entry and for a nearest-shape search are
written here. Nothing is remembered: the table's memo and counters stay as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tunecache.candidates import candidate_names
from tunecache.errors import BadArgumentError
from tunecache.keys import Key, parse
from tunecache.resolve.answer import Answer, Explanation
from tunecache.resolve.grid import EPS
from tunecache.resolve.reader import Busy

if TYPE_CHECKING:
    from tunecache.resolve.grid import Grid, Row
    from tunecache.resolve.lookup import Lookup, Rules

__all__ = ["describe", "explain_key", "trace_nearest"]


def explain_key(
    lookup: Lookup,
    key: Key | str,
    candidates: Sequence[str] | None,
    heuristic: str | None,
) -> Explanation:
    """How `key` resolves under `lookup`'s table (called under the table's lock).

    Without `candidates`, each list stored for the key's signature is tried in turn. Without
    `heuristic`, an answer from the heuristic has an empty choice: the caller's pick.
    """
    key = parse(key) if isinstance(key, str) else key
    if heuristic is not None and candidates is not None and heuristic not in candidates:
        raise BadArgumentError(f"heuristic {heuristic!r} is not one of the candidates")
    model, use = lookup.rules.model, lookup.rules.use
    steps: list[str] = [
        f"model {model!r}, serving {use} entries"
        if model is not None
        else f"no model, so no masks; serving {use} entries"
    ]
    if lookup.reader is None:
        steps.append("an in-memory table")
    elif not lookup.reader.path.exists():
        steps.append(f"no cache at {lookup.reader.path}: every answer is the heuristic")
    answer: Answer | None = None
    try:
        if candidates is not None:
            lists = [candidate_names(candidates)]
        else:
            lists = lookup.candidate_lists(key.signature, steps)
            if not lists:
                steps.append(f"no candidate list is stored for {key.signature}")
        for names in lists:
            pick = heuristic if heuristic is not None and heuristic in names else ""
            answer = lookup.resolve(key, names, pick, steps)
            steps.append(f"answer: {answer.choice or 'the caller heuristic'} ({answer.source})")
    except Busy:
        steps.append("the cache is busy: the heuristic, for now")
    return Explanation(key, answer, tuple(steps))


def describe(
    entry_id: int,
    choice: str,
    status: str,
    verdicts: list[Any],
    judged: str | None,
    rules: Rules,
) -> str:
    """One line on an exact key's stored entry: its choice, status, verdicts and fate."""
    said = ", ".join(f"{m}: {v}" for m, _, v in verdicts) or "no model's verdict"
    outcome = {
        "use": "it is served",
        "masked": f"it is masked for {rules.model!r}",
        None: f"it is not served under use={rules.use!r}",
    }[judged]
    return f"entry {entry_id} for this exact key chooses {choice!r} ({status}; {said}): {outcome}"


def trace_nearest(
    trace: list[str],
    group: Grid,
    values: tuple[int, ...],
    cap: float,
    found: tuple[Row, float] | None,
) -> None:
    """The lines of a nearest-shape search: the three closest shapes, and what was borrowed."""
    symbolic = [group.names[i] for i in group.free]
    note = f" (symbolic dims {symbolic} uncapped)" if symbolic else ""
    trace.append(f"searching {group.size} tuned shapes within distance {cap:g}{note}")
    for row, capped, total in group.ranked(values, 3):
        shape = " ".join(f"{n}={v}" for n, v in zip(group.names, row.values, strict=True))
        verdict = "within the cap" if capped <= cap + EPS else "beyond the cap"
        trace.append(f"  {shape}: distance {total:.3f}, {verdict}, chooses {row.choice!r}")
    if found is not None:
        trace.append(f"borrowing from entry {found[0].entry_id} at distance {found[1]:.3f}")
