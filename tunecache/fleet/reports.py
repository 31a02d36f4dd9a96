"""What a sync did, direction by direction: what it read, what each entry came to, and how each
conflict was settled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunecache.fleet.rules import ACTIONS, RULES

__all__ = ["DirectionReport", "SyncReport", "empty_conflicts", "empty_counts"]


@dataclass(frozen=True, slots=True)
class DirectionReport:
    """One direction of a sync ("pull": the remote into the local cache; "push": the other
    way): what it read since its mark, and what it did with each entry."""

    direction: str
    #: the remote, as messages name it (its URL masked)
    remote: str
    #: the device identity synced
    device: str
    #: entries changed since the mark, read from the side copied from
    read: int
    #: entries by what was done with them (every one of `rules.ACTIONS`, even at zero)
    counts: Mapping[str, int]
    #: conflicts by the rule that settled them, then by what came of them ("replaced", "kept",
    #: "merged")
    conflicts: Mapping[str, Mapping[str, int]]
    #: the high-water mark before and after (change numbers of the side read)
    mark_before: int
    mark_after: int
    #: the `runs` row that logs it on the side written, or None where nothing was written
    run_id: int | None
    seconds: float
    #: whether the mark was above the highest change number of the side read (a store
    #: restored from a backup), so this direction read from zero instead
    mark_reset: bool = False

    @property
    def written(self) -> int:
        """Entries written on the side copied to."""
        return sum(self.counts[a] for a in ("added", "merged", "replaced"))

    @property
    def changed(self) -> bool:
        """Whether this direction wrote anything (a mark moved on is not a change)."""
        return self.written > 0

    def summary(self) -> str:
        """One line: what it did, or that there was nothing to do."""
        reset = " (mark reset: the side read is behind it, restored from a backup?)"
        reset = reset if self.mark_reset else ""
        if self.read == 0:
            return f"{self.direction}: nothing new{reset}"
        parts = [f"{n} {a}" for a, n in self.counts.items() if n]
        settled = [
            f"{n} {action} by {rule}"
            for rule, by in self.conflicts.items()
            for action, n in by.items()
            if n
        ]
        line = f"{self.direction}: {self.read} read, " + ", ".join(parts)
        if settled:
            line += "; conflicts: " + ", ".join(settled)
        return line + ("" if self.changed else " (nothing changed)") + reset

    def as_dict(self) -> dict[str, Any]:
        """The direction as JSON-ready values."""
        return {
            "direction": self.direction,
            "remote": self.remote,
            "device": self.device,
            "read": self.read,
            "written": self.written,
            "changed": self.changed,
            "counts": dict(self.counts),
            "conflicts": {rule: dict(by) for rule, by in self.conflicts.items()},
            "mark_before": self.mark_before,
            "mark_after": self.mark_after,
            "mark_reset": self.mark_reset,
            "run_id": self.run_id,
            "seconds": round(self.seconds, 4),
        }


def empty_counts() -> dict[str, int]:
    """Every action at zero."""
    return dict.fromkeys(ACTIONS, 0)


def empty_conflicts() -> dict[str, dict[str, int]]:
    """Every rule, with nothing settled by it yet."""
    return {rule: {} for rule in RULES}


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a sync did: one report per direction, in the order they ran (push before pull)."""

    directions: tuple[DirectionReport, ...] = field(default=())

    @property
    def changed(self) -> bool:
        """Whether any direction wrote anything."""
        return any(d.changed for d in self.directions)

    def direction(self, name: str) -> DirectionReport | None:
        """The report of direction `name`, or None if it did not run."""
        return next((d for d in self.directions if d.direction == name), None)

    def summary(self) -> str:
        """A line per direction, then whether anything changed."""
        lines = [d.summary() for d in self.directions]
        if not self.changed:
            lines.append("nothing changed on either side")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (the `--json` schema of `tunecache sync`)."""
        return {"changed": self.changed, "directions": [d.as_dict() for d in self.directions]}
