"""Correctness before speed, outside a bench: the outputs of some candidates on the call the
profile captured, compared with the heuristic's (`tunecache.Tunable.compare`: the op's `check=`
hook, or `tunecache.compare` within its tolerance).

A fresh bench checks every candidate itself, on its probe (`bench.bench(compare=...)`); this is
for the decisions made without one: the survivors of a record stored before outputs were
checked, before their trial, and another model's entry this model is about to judge. Each
candidate named is called once, after the heuristic, whose output is the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tunecache.compare import snapshot
from tunecache.evidence import WRONG, error_text, refusal_text

if TYPE_CHECKING:
    from tunecache.dispatch import Tunable

__all__ = ["outputs_differ"]


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
