"""Correctness before speed: every candidate's output on the call the profile captured is
compared with the heuristic's before anything is timed (`tunecache.Tunable.compare`: the op's
`check=` hook, or `tunecache.outputs` within its tolerance).

A candidate that differs is refused: recorded with the error "wrong output: <its largest
difference>" (`tunecache.evidence.WRONG`) and no samples, so it is never benched, chosen or
served. One that raises on the call is refused with its error, as the bench would record it.
Each candidate is called once; the heuristic first, its output the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tunecache.codec import CandidateTiming
from tunecache.evidence import WRONG, error_text, refusal_text
from tunecache.outputs import snapshot

if TYPE_CHECKING:
    from tunecache.dispatch import Tunable

__all__ = ["outputs_differ", "refuse_wrong"]


def outputs_differ(
    op: Tunable[Any, Any],
    functions: Mapping[str, Callable[[], object]],
    heuristic: str,
    names: Iterable[str] | None = None,
) -> dict[str, str]:
    """name -> error text for each of `names` (default: every candidate but the heuristic)
    whose output differs from the heuristic's, or that raised; nothing when the heuristic
    itself raises (no reference: the bench records its error). An exception the op's `check`
    raises propagates: it is the op's bug, not the candidate's."""
    try:
        reference = snapshot(functions[heuristic]())
    except Exception:
        return {}
    found: dict[str, str] = {}
    for name in functions if names is None else names:
        if name == heuristic:
            continue
        try:
            output = functions[name]()
        except Exception as error:
            found[name] = error_text(error)
            continue
        differs = op.compare(reference, output)
        if differs is not None:
            found[name] = refusal_text(WRONG, differs)
    return found


def refuse_wrong(
    op: Tunable[Any, Any], functions: Mapping[str, Callable[[], object]], heuristic: str
) -> dict[str, CandidateTiming]:
    """The candidates a bench must not call, each with the timing that says why (a wrong
    output, or what it raised), from one checked call of every candidate."""
    return {
        name: CandidateTiming(name, error=text)
        for name, text in outputs_differ(op, functions, heuristic).items()
    }
