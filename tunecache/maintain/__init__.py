"""Maintenance of a cache: list and inspect decisions, summarise models, prune, doctor, SQL.

Every maintenance subcommand of `tunecache` is one function here; the command line only parses
arguments and prints what these return. Everything is scoped to the cache's own device except
`doctor`, which checks the whole database file, and version pruning, which works on folders.

- `listing`: decisions as `tunecache list` shows them, and the models seen;
- `inspection`: one entry's evidence, verdicts and run;
- `prune` and `versions`: removing entries, and whole version folders;
- `doctor`: the health of the file, and repairs;
- `query`: read-only SQL on the documented views.

Each name loads its module on first use: listing, inspecting and querying read through stdlib
sqlite3 (`tunecache.store.reading`) and never import SQLAlchemy; prune and doctor write, and do.
"""

from __future__ import annotations

from tunecache.errors import NotFoundError

# Not `typing` at run time: `tunecache list` starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tunecache.cache import Progress
    from tunecache.maintain.doctor import WAL_WARN_BYTES, DoctorReport, Problem, doctor
    from tunecache.maintain.inspection import (
        CandidateInfo,
        Inspection,
        RunInfo,
        Verdict,
        inspect,
    )
    from tunecache.maintain.listing import (
        EntryInfo,
        ModelSummary,
        iter_entries,
        list_entries,
        models,
    )
    from tunecache.maintain.prune import PRUNE_KINDS, PrunedEntry, PruneReport, prune
    from tunecache.maintain.query import EXAMPLE_QUERIES, VIEWS, QueryResult, run_query
    from tunecache.maintain.versions import PrunedVersion, prune_versions

__all__ = [
    "EXAMPLE_QUERIES",
    "PRUNE_KINDS",
    "VIEWS",
    "WAL_WARN_BYTES",
    "CandidateInfo",
    "DoctorReport",
    "EntryInfo",
    "Inspection",
    "ModelSummary",
    "NotFoundError",
    "Problem",
    "Progress",
    "PruneReport",
    "PrunedEntry",
    "PrunedVersion",
    "QueryResult",
    "RunInfo",
    "Verdict",
    "doctor",
    "inspect",
    "iter_entries",
    "list_entries",
    "models",
    "prune",
    "prune_versions",
    "run_query",
]

#: where each public name lives: the reading ones never import SQLAlchemy, the writing ones do
_HOMES = {
    "tunecache.cache": ("Progress",),
    "tunecache.maintain.doctor": ("WAL_WARN_BYTES", "DoctorReport", "Problem", "doctor"),
    "tunecache.maintain.inspection": (
        "CandidateInfo", "Inspection", "RunInfo", "Verdict", "inspect",
    ),
    "tunecache.maintain.listing": (
        "EntryInfo", "ModelSummary", "iter_entries", "list_entries", "models",
    ),
    "tunecache.maintain.prune": ("PRUNE_KINDS", "PrunedEntry", "PruneReport", "prune"),
    "tunecache.maintain.query": ("EXAMPLE_QUERIES", "VIEWS", "QueryResult", "run_query"),
    "tunecache.maintain.versions": ("PrunedVersion", "prune_versions"),
}  # fmt: skip
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    # PEP 562: `tunecache list` reads through stdlib sqlite3 and must not pay for prune's and
    # doctor's SQLAlchemy, so each name loads its own module on first use.
    if name in _HOME:
        import importlib

        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tunecache.maintain' has no attribute {name!r}")
