"""What the resolver says: an `Answer` for the hot path, an `Explanation` for people."""

from __future__ import annotations

from typing import Any, NamedTuple

from tunecache.keys import Key, format_key

__all__ = ["SOURCES", "Answer", "Explanation"]

#: where an answer came from
SOURCES = ("exact", "nearest", "masked", "heuristic")


class Answer(NamedTuple):
    """What the resolver answered and why."""

    #: the candidate to run: always one of the caller's legal candidates
    choice: str
    #: "exact", "nearest", "masked" or "heuristic"
    source: str
    #: the entry the answer rests on (None for the heuristic, or an in-memory decision)
    entry_id: int | None = None
    #: summed |log2 ratio| to the entry's shape: 0.0 for exact, None when no entry answered
    distance: float | None = None
    #: the tuned key the answer was borrowed from (nearest only)
    borrowed_from: Key | None = None


class Explanation(NamedTuple):
    """How a key resolves for a table, step by step, for people."""

    key: Key
    answer: Answer | None
    steps: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form: stable field names for scripts."""
        answer = self.answer
        return {
            "key": format_key(self.key),
            "choice": None if answer is None else answer.choice,
            "source": None if answer is None else answer.source,
            "entry_id": None if answer is None else answer.entry_id,
            "distance": None if answer is None else answer.distance,
            "borrowed_from": (
                None
                if answer is None or answer.borrowed_from is None
                else format_key(answer.borrowed_from)
            ),
            "steps": list(self.steps),
        }
