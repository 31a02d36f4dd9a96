"""Maintenance of a cache: list and inspect decisions, summarise models, prune, doctor, SQL.

Every maintenance subcommand of `tunecache` is one function here; the command line only parses
arguments and prints what these return. Everything is scoped to the cache's own device except
`doctor`, which checks the whole database file, and version pruning, which works on folders.

- `listing`: decisions as `tunecache list` shows them, and the models seen;
- `inspection`: one entry's evidence, verdicts and run;
- `prune` and `versions`: removing entries, and whole version folders;
- `doctor`: the health of the file, and repairs;
- `query`: read-only SQL on the documented views.
"""

from __future__ import annotations

from tunecache.cache import Progress
from tunecache.errors import NotFoundError
from tunecache.maintain.doctor import WAL_WARN_BYTES, DoctorReport, Problem, doctor
from tunecache.maintain.inspection import CandidateInfo, Inspection, RunInfo, Verdict, inspect
from tunecache.maintain.listing import EntryInfo, ModelSummary, list_entries, models
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
    "list_entries",
    "models",
    "prune",
    "prune_versions",
    "run_query",
]
