"""What an import or merge did, entry by entry, and how two entries' evidence compares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

__all__ = ["ACTIONS", "EntryAction", "ImportReport", "evidence", "evidence_of"]

#: what an import can do with one entry of the file (see EntryAction)
ACTIONS = ("added", "unchanged", "kept-local", "replaced", "kept-both")


def evidence(validated: int, rounds: int, samples: int) -> tuple[int, int, int]:
    """How strong an entry's evidence is, compared as a tuple: larger is stronger.

    First the number of models that validated it (whole-model confirmations are what the
    design trusts), then the paired whole-model rounds behind all its verdicts, then the raw
    samples in its timing record. Newer is not stronger: a fresh measurement with fewer
    samples does not beat an older, better-supported one.
    """
    return (validated, rounds, samples)


class _Verdict(Protocol):
    @property
    def verdict(self) -> str: ...
    @property
    def rounds(self) -> int: ...


class _Entry(Protocol):
    @property
    def verdicts(self) -> Sequence[_Verdict]: ...
    @property
    def samples(self) -> int: ...


def evidence_of(entry: _Entry) -> tuple[int, int, int]:
    """The `evidence` of an entry (an export's or a synced one), from its verdicts and record."""
    return evidence(
        sum(1 for v in entry.verdicts if v.verdict == "validated"),
        sum(v.rounds for v in entry.verdicts),
        entry.samples,
    )


@dataclass(frozen=True, slots=True)
class EntryAction:
    """What an import did with one entry of the file.

    `action` is one of: "added" (new here), "unchanged" (the same measurement and verdicts were
    already here), "kept-local" (a different local entry stayed, the file's was dropped),
    "replaced" (the file's entry had stronger evidence and took the local one's place),
    "kept-both" (the local entry stayed and the file's was kept beside it under its origin).
    """

    key: str
    checksum: str
    action: str

    def as_dict(self) -> dict[str, str]:
        """The action as JSON-ready values."""
        return {"key": self.key, "checksum": self.checksum, "action": self.action}


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import or merge did, entry by entry."""

    kind: str
    policy: str
    source_device: Mapping[str, str | int | None]
    source_fingerprint: str
    exported_at: datetime
    tool: str
    #: True when the file came from another device identity (entries arrive unvalidated)
    other_device: bool
    #: the `runs` row that logs this import, or None when nothing changed
    run_id: int | None
    #: the device row that holds the file's entries kept beside local ones ("both"), or None
    origin_device: str | None
    actions: tuple[EntryAction, ...] = ()
    #: verdict rows written
    verdicts: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """How many entries took each action, every action named even at zero."""
        out = dict.fromkeys(ACTIONS, 0)
        for a in self.actions:
            out[a.action] += 1
        return out

    @property
    def changed(self) -> bool:
        """Whether the import wrote anything."""
        return self.run_id is not None

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (the `--json` schema of import and merge)."""
        return {
            "kind": self.kind,
            "policy": self.policy,
            "source_device": dict(self.source_device),
            "source_fingerprint": self.source_fingerprint,
            "exported_at": self.exported_at.isoformat(),
            "tool": self.tool,
            "other_device": self.other_device,
            "run_id": self.run_id,
            "origin_device": self.origin_device,
            "counts": self.counts,
            "verdicts": self.verdicts,
            "entries": [a.as_dict() for a in self.actions],
        }
