"""The steps of resolution for one table: which entries it serves, and how a question finds one.

1. the key's entry is masked for this model -> the heuristic (the entry stays for other models);
2. an entry for the exact key and the same candidate list, whose choice is legal -> its choice;
3. the nearest tuned shape of the same signature and candidate list, within the table's cap
   (`tunecache.resolve.grid`) -> its choice, reported as borrowed, with the distance;
4. otherwise the heuristic.

An in-memory decision (`Table.derive(add=...)`) wins over anything stored. Before a signature is
loaded, one indexed query answers an exact key; the first key that needs more loads the whole
signature into a `SignatureIndex`. Every step writes a line to `trace` when one is given, for
`Table.explain`; the hot path passes None and pays nothing for it, not even the import of
`tunecache.resolve.explain`, which is loaded by the first explanation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.candidates import candidate_names, checksum
from tunecache.keys import Key, format_key
from tunecache.resolve.answer import Answer
from tunecache.resolve.grid import Grid, SignatureIndex

if TYPE_CHECKING:
    from tunecache.resolve.columns import Columns
    from tunecache.resolve.reader import Reader

    # One question being resolved: key, legal names, their checksum, heuristic, trace. A plain
    # tuple: a NamedTuple class would cost every process a tenth of a millisecond to import.
    _Question = tuple[Key, tuple[str, ...], str, str, list[str] | None]

__all__ = ["USES", "Lookup", "Rules"]

#: which entries a table serves: validated by any model or accepted (the default), validated by
#: this model itself, or every entry that is not rejected (for tuning and exploration)
USES = ("validated", "own", "all")


class Rules(NamedTuple):
    """What a table answers by: which entries it serves, and how far it borrows a shape."""

    model: str | None
    fingerprint: str | None
    use: str
    #: entry ids served whatever their status or verdicts
    include: frozenset[int]
    #: entry ids never served
    exclude: frozenset[int]
    #: entry ids treated as masked for this model
    mask: frozenset[int]
    #: the nearest-shape cap (`tunecache.resolve.grid`)
    max_distance: float
    #: the dims the cap does not apply to: the model's symbolic ones
    symbolic: frozenset[str]

    def mine(self, model: str, fingerprint: str) -> bool:
        """Whether a verdict by this model (and fingerprint, when the table has one) is ours."""
        return model == self.model and (self.fingerprint is None or fingerprint == self.fingerprint)

    def judge(
        self, entry_id: int, status: str, masked: bool, validated: bool, validated_any: bool
    ) -> str | None:
        """'use', 'masked' or None (not served) for an entry under these rules."""
        if entry_id in self.exclude:
            return None
        if entry_id in self.mask:
            return "masked"
        if entry_id in self.include:
            return "use"
        if masked:
            return "masked"
        if status == "rejected":
            return None
        if self.use == "all":
            return "use"
        if self.use == "own":
            return "use" if validated else None
        return "use" if status == "accepted" or validated_any else None

    def judge_columns(self, ids: Any, status: Any, flags: Any) -> tuple[Any, Any]:
        """`judge` for whole columns (`tunecache.resolve.columns`): boolean arrays of the rows
        served and of the rows masked for this model."""
        import numbers

        import numpy as np

        # Loaded with the first signature, as numpy is: a process of exact hits never needs it.
        from tunecache.resolve.columns import (
            ACCEPTED,
            MASKED_BY_US,
            REJECTED,
            VALIDATED_BY_ANY,
            VALIDATED_BY_US,
        )

        def among(chosen: frozenset[int]) -> Any:
            if not chosen:
                return np.zeros(ids.shape, bool)
            # What `entry_id in chosen` finds: integers, and floats equal to one.
            wanted = []
            for item in chosen:
                value: object = item
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                if isinstance(value, numbers.Integral) and -(2**63) <= int(value) < 2**63:
                    wanted.append(int(value))
            return np.isin(ids, np.array(wanted, np.int64))

        excluded, forced, included = among(self.exclude), among(self.mask), among(self.include)
        masked_by_us = (flags & MASKED_BY_US) != 0
        fit = status != REJECTED
        if self.use == "own":
            fit &= (flags & VALIDATED_BY_US) != 0
        elif self.use != "all":
            fit &= (status == ACCEPTED) | ((flags & VALIDATED_BY_ANY) != 0)
        masked = ~excluded & (forced | (~included & masked_by_us))
        served = ~excluded & ~forced & (included | (~masked_by_us & fit))
        return served, masked


class Lookup:
    """One table's sources under its rules: the reader, the in-memory decisions, the indexes."""

    def __init__(
        self,
        reader: Reader | None,
        rules: Rules,
        added: Mapping[tuple[str, str], list[tuple[Key, str]]],
    ) -> None:
        #: the database, or None for an in-memory table
        self.reader = reader
        self.rules = rules
        self._added = added
        self._added_exact = {
            (key, sum_): choice for (_, sum_), items in added.items() for key, choice in items
        }
        self._sums: dict[tuple[str, ...], str] = {}
        #: the loaded signatures, by (signature, candidate-list checksum)
        self.indexes: dict[tuple[str, str], SignatureIndex] = {}

    def resolve(
        self, key: Key, names: tuple[str, ...], heuristic: str, trace: list[str] | None
    ) -> Answer:
        """The answer for a key; `heuristic` is "" when explain does not know the caller's.

        Raises `tunecache.resolve.reader.Busy` when the database is locked right now.
        """
        sum_ = self._sums.get(names)
        if sum_ is None:
            sum_ = self._sums[names] = checksum(candidate_names(names))
        if trace is not None:
            trace.append(f"candidate list {list(names)} has checksum {sum_}")
        answer = self._find((key, names, sum_, heuristic, trace))
        if answer is None:
            if trace is not None:
                trace.append("nothing tuned answers: the heuristic")
            answer = Answer(heuristic, "heuristic")
        return answer

    def candidate_lists(self, signature: str, trace: list[str] | None) -> list[tuple[str, ...]]:
        """Every candidate list stored for a signature (none for an in-memory table)."""
        if self.reader is None:
            return []
        return [names for _, names in self.reader.candidate_sets(signature, trace)]

    def _find(self, question: _Question) -> Answer | None:
        key, names, sum_, _, trace = question
        added = self._added_exact.get((key, sum_))
        if added is not None:
            if trace is not None:
                trace.append(f"an in-memory decision for this key chooses {added!r}")
            return Answer(added, "exact", None, 0.0) if added in names else None
        if (key.signature, sum_) not in self.indexes and self.reader is not None:
            settled, answer = self._point(self.reader, question)
            if settled:
                return answer
        return self._from_index(question)

    def _point(self, reader: Reader, question: _Question) -> tuple[bool, Answer | None]:
        """Before a signature is loaded, one indexed query answers an exact hit: a process that
        only meets tuned keys never loads (or parses) the rest of the cache. Returns (settled,
        answer); unsettled, the signature's index decides."""
        key, names, sum_, heuristic, trace = question
        got = reader.point(format_key(key), sum_, trace)
        if got is not None:
            entry_id, choice, status, verdicts = got
            rules = self.rules
            mine = [v for m, fp, v in verdicts if rules.mine(m, fp)]
            judged = rules.judge(
                entry_id,
                status,
                "masked" in mine,
                "validated" in mine,
                any(v == "validated" for _, _, v in verdicts),
            )
            if trace is not None:
                from tunecache.resolve.explain import describe

                trace.append(describe(entry_id, choice, status, verdicts, judged, rules))
            if judged == "masked":
                return True, Answer(heuristic, "masked", entry_id, 0.0)
            if judged == "use":
                if choice in names:
                    return True, Answer(choice, "exact", entry_id, 0.0)
                if trace is not None:
                    trace.append(f"its choice {choice!r} is not a legal candidate any more")
                return True, None
        elif trace is not None and reader.broken is None:
            trace.append("no entry for this exact key and candidate list")
        return reader.broken is not None, None

    def _from_index(self, question: _Question) -> Answer | None:
        """Steps 1 to 3 from the signature's index, loading it first if need be."""
        key, names, sum_, heuristic, trace = question
        index = self._index(key.signature, sum_, trace)
        masked_id = index.masked.get(key, -1)
        if masked_id != -1:
            if trace is not None:
                model = self.rules.model
                trace.append(f"entry {masked_id} for this key is masked for model {model!r}")
            return Answer(heuristic, "masked", masked_id, 0.0)
        dim_names = tuple(n for n, _ in key.dims)
        values = tuple(v for _, v in key.dims)
        group = index.groups.get(dim_names)
        if group is None:
            if trace is not None:
                trace.append(f"no usable tuned shape of {key.signature} with dims {dim_names}")
            return None
        row = group.exact(values)
        if row is not None:
            if row.choice in names:
                if trace is not None:
                    trace.append(f"entry {row.entry_id} for this exact key chooses {row.choice!r}")
                return Answer(row.choice, "exact", row.entry_id, 0.0)
            if trace is not None:
                trace.append(f"entry {row.entry_id}'s choice {row.choice!r} is not legal any more")
            return None
        found = group.nearest(values, self.rules.max_distance)
        if trace is not None:
            from tunecache.resolve.explain import trace_nearest

            trace_nearest(trace, group, values, self.rules.max_distance, found)
        if found is None:
            return None
        row, distance = found
        if row.choice not in names:
            return None
        source = Key(key.signature, tuple(zip(dim_names, row.values, strict=True)))
        return Answer(row.choice, "nearest", row.entry_id, distance, source)

    def _index(self, signature: str, sum_: str, trace: list[str] | None) -> SignatureIndex:
        """The signature's index: every entry this table serves, and the keys it masks."""
        found = self.indexes.get((signature, sum_))
        if found is not None:
            return found
        rules = self.rules
        loaded: list[Columns] = []
        if self.reader is not None:
            loaded = self.reader.columns(signature, sum_, rules.model, rules.fingerprint, trace)
            if self.reader.broken is not None:
                # The file turned out damaged while the signature loaded: nothing read from it is
                # served, and no index is kept (every question goes to the heuristic).
                return SignatureIndex({}, {})
        by_names: dict[tuple[str, ...], list[Columns]] = {}
        masked: dict[Key, int | None] = {}
        for columns in loaded:
            served, masks = rules.judge_columns(columns.ids, columns.status, columns.flags)
            names = columns.names
            for entry_id, values in zip(
                columns.ids[masks].tolist(), columns.values[masks].tolist(), strict=True
            ):
                masked[Key(signature, tuple(zip(names, values, strict=True)))] = entry_id
            if served.all():
                by_names.setdefault(names, []).append(columns)
            elif served.any():
                by_names.setdefault(names, []).append(_select(columns, served))
        added: dict[tuple[str, ...], list[tuple[Key, str]]] = {}
        for key, choice in self._added.get((signature, sum_), []):
            added.setdefault(tuple(n for n, _ in key.dims), []).append((key, choice))
            masked.pop(key, None)
        for names, decisions in added.items():
            by_names.setdefault(names, []).append(_in_memory(names, decisions))
        groups = {
            names: Grid(names, *_joined(parts), symbolic=rules.symbolic)
            for names, parts in by_names.items()
        }
        index = SignatureIndex(groups, masked)
        self.indexes[signature, sum_] = index
        return index


def _select(columns: Columns, rows: Any) -> Columns:
    """The rows of `columns` where the boolean array `rows` is true."""
    from tunecache.resolve.columns import Columns

    return Columns(
        columns.names,
        columns.ids[rows],
        columns.status[rows],
        columns.flags[rows],
        columns.values[rows],
        columns.codes[rows],
        columns.choices,
    )


def _in_memory(names: tuple[str, ...], decisions: list[tuple[Key, str]]) -> Columns:
    """In-memory decisions of one list of dim names as columns (entry id -1: not stored)."""
    import numpy as np

    from tunecache.resolve.columns import Columns

    choices = list(dict.fromkeys(choice for _, choice in decisions))
    code_of = {choice: i for i, choice in enumerate(choices)}
    count = len(decisions)
    return Columns(
        names,
        np.full(count, -1, np.int64),
        np.zeros(count, np.uint8),
        np.zeros(count, np.uint8),
        np.array([[v for _, v in key.dims] for key, _ in decisions], np.int64).reshape(
            count, len(names)
        ),
        np.array([code_of[choice] for _, choice in decisions], np.int32),
        choices,
    )


def _joined(parts: list[Columns]) -> tuple[Any, Any, Any, list[str]]:
    """Ids, values, choice codes and choices of several `Columns` of one list of dim names,
    one after the other (a shape that appears twice keeps its last row: see `Grid`)."""
    if len(parts) == 1:
        only = parts[0]
        return only.ids, only.values, only.codes, only.choices
    import numpy as np

    code_of: dict[str, int] = {}
    codes = []
    for part in parts:
        for choice in part.choices:
            code_of.setdefault(choice, len(code_of))
        remap = np.array([code_of[choice] for choice in part.choices], np.int32)
        codes.append(remap[part.codes])
    return (
        np.concatenate([part.ids for part in parts]),
        np.concatenate([part.values for part in parts]),
        np.concatenate(codes),
        list(code_of),
    )
