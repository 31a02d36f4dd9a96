"""What a cache's schema holds at each revision, and how a file's schema differs from it.

A cache file's tables, indexes and views are those its revision's migrations make, and nothing
in `sqlite_master` says when one of them was dropped or redefined since (`sqlite3 cache.db
'drop view read_entries_v1'` is enough). `drift` compares the rows of `sqlite_master` with
`OBJECTS`, the digest of each object's SQL as the migrations make it, and names what differs:

- a table missing or altered is damage: it held rows (`tunecache.store.quarantine` moves the
  file aside, or refuses a file the caller named);
- an index or a view missing or altered, or an index or trigger on tunecache's tables that no
  revision has, holds no data: the store makes it again, in one write transaction
  (`tunecache.store.migrate.mend`), and `doctor` reports it.

Tables and views nobody at tunecache made (a person's own) are left alone: they change nothing
tunecache reads or writes. SQL is compared in a canonical form (whitespace, quotes around names
and the order of a table's constraints do not count), since the same table made by `create_all`
and by the migrations differs in exactly those. Stdlib only, so the resolver and the read
commands check a file without SQLAlchemy; a verdict is remembered per schema, so a process pays
for one comparison per schema it meets, about 0.3 ms, and a dictionary lookup after that.
"""

from __future__ import annotations

import functools
from collections import namedtuple

from tunecache._digest import sha256

# Not `typing` at run time: `tunecache where` starts without it (tests/test_import.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import NamedTuple

    class _DriftFields(NamedTuple):
        change: str
        type: str
        name: str

else:
    _DriftFields = namedtuple("_DriftFields", ("change", "type", "name"))


__all__ = [
    "OBJECTS",
    "REVISIONS",
    "SCHEMA_QUERY",
    "Drift",
    "SchemaRow",
    "canonical",
    "describe",
    "digest",
    "drift",
    "expected",
]

#: one row of SCHEMA_QUERY: an object's type, name, the table it belongs to, and its SQL
SchemaRow = tuple[str, str, str, "str | None"]

#: the rows of `sqlite_master` that `drift` compares (SQLite's own objects left out: the
#: automatic indexes of UNIQUE constraints belong to their table's SQL)
SCHEMA_QUERY = (
    "SELECT type, name, tbl_name, sql FROM sqlite_master"
    " WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
)

#: every released revision, oldest first (a test keeps it equal to the migration scripts)
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007")

#: Every object of the schema: (type, name) -> (the revision that made it, the digest of its
#: canonical SQL). No revision so far has changed an object an older one made; one that does
#: gives the object a digest per revision here. tests/store/test_schema.py replays the
#: migrations to each revision, and `create_all`, and keeps this equal to what they make.
#: Alembic's own `alembic_version` is left to Alembic: without it a file has no revision, which
#: `tunecache.store.migrate` refuses already.
OBJECTS: dict[tuple[str, str], tuple[str, str]] = {
    ("table", "candidate_sets"): ("0001", "0540e979d049d7d3"),
    ("table", "candidate_timings"): ("0001", "ebcb840ff6628278"),
    ("table", "candidates"): ("0001", "1553d6c04ebdff8b"),
    ("table", "claims"): ("0005", "c7a19bcbcc67c496"),
    ("table", "devices"): ("0001", "2e2028d156c41261"),
    ("table", "entries"): ("0001", "89cbccd4914bb1c9"),
    ("table", "entry_changes"): ("0006", "728bd4caa7810d3c"),
    ("table", "entry_origins"): ("0006", "b1e123263af70b2b"),
    ("table", "keys"): ("0001", "e0159c897e77b426"),
    ("table", "models"): ("0001", "f76240232d79f15a"),
    ("table", "pending"): ("0007", "efe0fee0e743d39c"),
    ("table", "runs"): ("0001", "bb2c656a0dc79d9d"),
    ("table", "sync_marks"): ("0006", "5b3ea8a5568c7890"),
    ("table", "sync_store"): ("0006", "7c3a8f0367ef5bf2"),
    ("table", "timing_records"): ("0001", "0716be33fac00a59"),
    ("table", "validations"): ("0001", "d0b6c410296cf89e"),
    ("index", "ix_claims_token"): ("0005", "f7e32dbf247e336e"),
    ("index", "ix_entry_changes_seq"): ("0006", "b37aa3a97d98cf46"),
    ("index", "ix_entries_candidate_set_id"): ("0004", "f65d5c5989f500da"),
    ("index", "ix_entries_device_id_updated_at"): ("0004", "ffe5f3e39129626c"),
    ("index", "ix_entries_key_id"): ("0001", "20735ee6e8fb2f5e"),
    ("index", "ix_entries_run_id"): ("0004", "a9f0a61cab88b2ad"),
    ("index", "ix_keys_signature"): ("0001", "3afd50a4f542adfe"),
    ("index", "ix_runs_device_id"): ("0004", "491addc54319a430"),
    ("index", "ix_runs_status"): ("0004", "ffc8ad5606b5ca8b"),
    ("index", "ix_validations_entry_id"): ("0001", "c492b45daf7bed7d"),
    ("index", "ix_validations_run_id"): ("0004", "3eab72378a9a7339"),
    ("trigger", "entry_changes_after_entry_insert"): ("0006", "380bfd3a9ca2a6bc"),
    ("trigger", "entry_changes_after_entry_update"): ("0006", "10d701ec4fafbeb9"),
    ("trigger", "entry_changes_after_verdict_delete"): ("0006", "c68bb96a0686240f"),
    ("trigger", "entry_changes_after_verdict_insert"): ("0006", "8e7b26751c7d2828"),
    ("trigger", "entry_changes_after_verdict_update"): ("0006", "4e48f50b6a60d690"),
    ("view", "decisions"): ("0002", "81c7382d12708da6"),
    ("view", "read_candidates_v1"): ("0003", "5778754bc9cee3c6"),
    ("view", "read_devices_v1"): ("0004", "4547a6bd1fb6578d"),
    ("view", "read_entries_v1"): ("0003", "e3b94660fd38323a"),
    ("view", "read_entry_origins_v1"): ("0006", "6ae6b7f64237b3e9"),
    ("view", "read_entry_details_v1"): ("0004", "1c3312bdef1239f0"),
    ("view", "read_models_v1"): ("0004", "ec2b123985871541"),
    ("view", "read_records_v1"): ("0004", "a3551b7dcd985143"),
    ("view", "read_runs_v1"): ("0004", "458583146968062a"),
    ("view", "read_verdict_details_v1"): ("0004", "a0424c99703c25a9"),
    ("view", "read_verdicts_v1"): ("0003", "e6211d8ef3c78cc0"),
}

# What starts a table-level constraint, and where one space at most is left around punctuation.
_CONSTRAINTS = ("CONSTRAINT ", "PRIMARY KEY(", "UNIQUE(", "CHECK(", "FOREIGN KEY(")
_PUNCTUATION = tuple((spaced, mark) for mark in "()," for spaced in (" " + mark, mark + " "))


class Drift(_DriftFields):
    """One way a file's schema differs from its revision's: `change` is "missing", "altered"
    or "unexpected" (an index or trigger on tunecache's tables that no revision has)."""

    __slots__ = ()

    @property
    def holds_data(self) -> bool:
        """Whether the object holds rows (a table): then the drift is damage, not a repair."""
        return self.type == "table"

    def __str__(self) -> str:
        return f"{self.type} {self.name} {self.change}"


def canonical(type_: str, sql: str | None) -> str:
    """`sql` in the form `drift` compares: whitespace and the quotes around names do not
    count, nor (in a table) the order of its constraints after its columns.

    Plain string operations, no regular expression: compiling one costs a process more than
    comparing a whole schema (the resolver's first question pays for what is imported).
    """
    if sql is None:
        return ""
    text = " ".join(sql.split()).replace('"', "").replace("`", "")
    for spaced, bare in _PUNCTUATION:
        text = text.replace(spaced, bare)
    if type_ == "table" and text.endswith(")"):
        # Once spaces are gone, a table-level constraint is an item of the body that starts
        # with its keyword right after a comma: the columns come first, in their order.
        for keyword in _CONSTRAINTS:
            text = text.replace("," + keyword, "\0" + keyword)
        columns, *constraints = text[:-1].split("\0")
        text = ",".join([columns, *sorted(constraints)]) + ")"
    return text


def digest(type_: str, sql: str | None) -> str:
    """The digest of an object's canonical SQL, as `OBJECTS` keeps it."""
    return sha256(canonical(type_, sql).encode()).hexdigest()[:16]


def expected(revision: str) -> dict[tuple[str, str], str]:
    """The objects of `revision` by (type, name), each with its digest; {} for a revision this
    tunecache does not know (a newer one: its schema is its own business)."""
    if revision not in REVISIONS:
        return {}
    upto = REVISIONS.index(revision)
    return {key: sum_ for key, (since, sum_) in OBJECTS.items() if REVISIONS.index(since) <= upto}


def drift(rows: Iterable[Sequence[object]], revision: str | None) -> tuple[Drift, ...]:
    """How the schema in `rows` (rows of SCHEMA_QUERY) differs from what `revision` has: tables
    first, then indexes and views, each by name. Nothing for an unknown revision or None."""
    if revision is None:
        return ()
    return _drift(tuple(tuple(row) for row in rows), revision)


@functools.lru_cache(maxsize=16)
def _drift(rows: tuple[SchemaRow, ...], revision: str) -> tuple[Drift, ...]:
    """`drift`, remembered: a process meets one or two schemas, and asks about each often."""
    want = expected(revision)
    if not want:
        return ()
    found = {(str(type_), str(name)): (str(table), sql) for type_, name, table, sql in rows}
    ours = {name for type_, name in want if type_ == "table"}
    out = []
    for key, sum_ in want.items():
        if key not in found:
            out.append(Drift("missing", *key))
        elif digest(key[0], found[key][1]) != sum_:
            out.append(Drift("altered", *key))
    for key, (table, _sql) in found.items():
        if key not in want and key[0] in ("index", "trigger") and table in ours:
            out.append(Drift("unexpected", *key))
    order = {"table": 0, "index": 1, "trigger": 2, "view": 3}
    return tuple(sorted(out, key=lambda d: (order.get(d.type, 4), d.name)))


def describe(drifts: Sequence[Drift], most: int = 4) -> str:
    """The drifts in a few words for a message: the first `most`, then how many more."""
    shown = ", ".join(str(d) for d in drifts[:most])
    more = len(drifts) - most
    return shown + (f" and {more} more" if more > 0 else "")
