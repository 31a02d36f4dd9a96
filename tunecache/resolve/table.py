"""`Table`: one device's decisions as one model sees them, and what the table remembers.

Every op of every model asks a table on the hot path, so a repeated question is one dictionary
lookup in the table's memo. The first asking of a question goes through the lock to the steps of
resolution (`tunecache.resolve.lookup`), which read the database lazily, one signature at a time
(`tunecache.resolve.reader`). The dispatch layer keeps one memo per tunable op on each table
(`memo_for`), so a Tunable call on a remembered shape is a dictionary hit too.
"""

from __future__ import annotations

from _thread import RLock  # threading costs ~2 ms to import; its RLock is this one
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Unpack

from tunecache import paths
from tunecache.candidates import candidate_names, checksum
from tunecache.errors import BadArgumentError
from tunecache.keys import Key, parse
from tunecache.resolve import misses
from tunecache.resolve.answer import SOURCES, Answer, Explanation
from tunecache.resolve.grid import (
    DEFAULT_MAX_DISTANCE,
    SignatureIndex,
    check_max_distance,
    check_scenarios,
)
from tunecache.resolve.lookup import USES, Lookup, Rules
from tunecache.resolve.reader import Busy, Reader

__all__ = ["MEMO_LIMIT", "Table"]

#: Answers remembered per table before the memo starts over (a guard against unbounded shapes).
MEMO_LIMIT = 1 << 20

# The options a derived table inherits unless `derive` is told otherwise: attributes of a table.
_OPTIONS = ("model", "fingerprint", "use", "max_distance", "scenarios")


def _forget(
    memo: dict[Any, Any],
    indexes: dict[tuple[str, str], SignatureIndex],
    dispatch: dict[object, dict[Any, Any]],
) -> None:
    """Forget every answer a table gave from a file that turned out damaged."""
    memo.clear()
    indexes.clear()
    for tunable_memo in dispatch.values():
        tunable_memo.clear()


class Table:
    """A read-only view of one device's decisions, as one model sees them.

    Tables are cheap to derive (`derive`) and safe to share between threads. A table reads
    lazily and keeps what it read: a key's answer never changes for the life of the table, but a
    key it has not met yet may see writes made since it was opened. `reload()` returns a table
    that reads everything anew.
    """

    def __init__(
        self,
        reader: Reader | None = None,
        *,
        model: str | None = None,
        fingerprint: str | None = None,
        use: str = "validated",
        max_distance: float = DEFAULT_MAX_DISTANCE,
        scenarios: Mapping[str, Iterable[int]] | None = None,
        include: Iterable[int] = (),
        exclude: Iterable[int] = (),
        mask: Iterable[int] = (),
        added: Mapping[tuple[str, str], list[tuple[Key, str]]] | None = None,
    ) -> None:
        if use not in USES:
            raise BadArgumentError(f"use must be one of {USES}, got {use!r}")
        if model is not None and (not isinstance(model, str) or not model):
            raise BadArgumentError("a model is named by a non-empty string")
        if use == "own" and model is None:
            raise BadArgumentError("use='own' needs a model: whose validations count?")
        self._reader = reader
        self.model = model
        self.fingerprint = fingerprint
        self.use = use
        self.max_distance = check_max_distance(max_distance)
        #: symbolic dims and their tuned sizes, as the model declared them
        self.scenarios = check_scenarios(scenarios)
        self._rules = Rules(
            model,
            fingerprint,
            use,
            include=frozenset(include),
            exclude=frozenset(exclude),
            mask=frozenset(mask),
            max_distance=self.max_distance,
            symbolic=frozenset(self.scenarios),
        )
        self._added = {k: list(v) for k, v in (added or {}).items()}
        self._lookup = Lookup(reader, self._rules, self._added)
        self._memo: dict[tuple[Any, ...], Answer] = {}
        self._counts = dict.fromkeys(SOURCES, 0)
        self._lock = RLock()
        # Per-tunable memos of the dispatch layer (tunecache.dispatch), keyed by its token.
        self._dispatch: dict[object, dict[Any, Any]] = {}
        if reader is not None:
            # The dicts, not the table: a reader that referred back to its table would keep a
            # dropped table (and its connection) alive until the garbage collector ran.
            reader.on_damage = partial(_forget, self._memo, self._lookup.indexes, self._dispatch)

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        *,
        model: str | None = None,
        fingerprint: str | None = None,
        use: str = "validated",
        max_distance: float = DEFAULT_MAX_DISTANCE,
        scenarios: Mapping[str, Iterable[int]] | None = None,
        timeout: float = 5.0,
        **location: Unpack[paths.Location],
    ) -> Table:
        """A table over this device's cache (the same location rules as `tunecache.open`: each
        identity field not given is what `tunecache.configure()` set, else the environment's,
        else the default; see `tunecache.config`).

        Nothing is read until the first question; a missing database is an empty table.
        """
        from tunecache import identity

        paths.check_options(location, "Table.open", paths.LOCATION_OPTIONS)
        # The identity's fields, not a Device: the dataclass machinery costs a cold start more
        # than the whole lookup does.
        fields, db = paths.locate(**location)
        reader = Reader(db, identity.fingerprint(fields), timeout)
        return cls(
            reader,
            model=model,
            fingerprint=fingerprint,
            use=use,
            max_distance=max_distance,
            scenarios=scenarios,
        )

    @classmethod
    def empty(cls, **options: Any) -> Table:
        """A table with no decisions: every answer is the heuristic."""
        return cls(None, **options)

    def _options(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _OPTIONS}

    def derive(
        self,
        *,
        include: Iterable[int] = (),
        exclude: Iterable[int] = (),
        mask: Iterable[int] = (),
        add: Iterable[tuple[Key | str, Sequence[str], str]] = (),
        **options: Any,
    ) -> Table:
        """A new table over the same database with some decisions forced in or out.

        `include` serves these entry ids whatever their status or verdicts, `exclude` never
        serves them (a key may then borrow a neighbour's), `mask` treats them as masked for this
        table's model (its key answers the heuristic, and no neighbour borrows from them: what a
        stored `masked` verdict does), and `add` serves in-memory decisions (key, candidates,
        choice) that are not stored at all. Acceptance runs a model with and without an entry
        this way, back to back. Other keyword arguments (model, use, ...) replace this table's.
        """
        added = {k: list(v) for k, v in self._added.items()}
        for key, candidates, choice in add:
            key = parse(key) if isinstance(key, str) else key
            names = candidate_names(candidates)
            if choice not in names:
                raise BadArgumentError(f"choice {choice!r} is not one of the candidates {names}")
            added.setdefault((key.signature, checksum(names)), []).append((key, choice))
        return Table(
            None if self._reader is None else self._reader.copy(),
            include=self._rules.include | frozenset(include),
            exclude=self._rules.exclude | frozenset(exclude),
            mask=self._rules.mask | frozenset(mask),
            added=added,
            **{**self._options(), **options},
        )

    def reload(self) -> Table:
        """A fresh table over the same database and options, seeing what was written since."""
        return self.derive()

    def close(self) -> None:
        """Release the database connection (a later question reopens it)."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()

    @property
    def path(self) -> Path | None:
        """The database this table reads, or None for an in-memory table."""
        return None if self._reader is None else self._reader.path

    def __repr__(self) -> str:
        where = self.path or "in memory"
        model = f" model={self.model}" if self.model else ""
        return f"<Table {where}{model} use={self.use}>"

    # -- the hot path ------------------------------------------------------------------------

    def resolve(self, key: Key, candidates: Sequence[str], heuristic: str) -> Answer:
        """Which of `candidates` should run for `key`; `heuristic` is the caller's own pick.

        Pass `key` as a Key (a NamedTuple: cheap to build and hash) and `candidates` as a tuple:
        a repeated question is then one dictionary lookup.
        """
        try:
            return self._memo[key, candidates, heuristic]
        except (KeyError, TypeError):
            return self._answer(key, candidates, heuristic)

    def choose(self, key: Key, candidates: Sequence[str], heuristic: str) -> str:
        """The name of the candidate to run (`resolve(...).choice`)."""
        try:
            return self._memo[key, candidates, heuristic].choice
        except (KeyError, TypeError):
            return self._answer(key, candidates, heuristic).choice

    def counters(self) -> dict[str, int]:
        """How many distinct questions this table answered from each source."""
        return dict(self._counts)

    # -- what the table remembers, for the dispatch layer -----------------------------------

    def remembered(self, key: Key, candidates: Sequence[str], heuristic: str) -> Answer | None:
        """The answer this table keeps for the question, or None: not asked yet, or answered
        for now only (the cache was busy) and to be asked again."""
        return self._memo.get((key, candidates, heuristic))

    def memo_for(self, token: object) -> dict[Any, Any]:
        """The memo one tunable op keeps on this table, by the op's token (made on first use).

        The table empties it with its own memo when the file turns out damaged; the op fills
        it only with what `remembered` confirms, and reads it on every call without the lock.
        """
        memo = self._dispatch.get(token)
        if memo is None:
            memo = self._dispatch.setdefault(token, {})
        return memo

    # -- the slow path -----------------------------------------------------------------------

    def _answer(self, key: Key | str, candidates: Sequence[str], heuristic: str) -> Answer:
        if isinstance(key, str):
            key = parse(key)
        elif not isinstance(key, Key):
            raise BadArgumentError(f"a key is a tunecache.Key or its text, got {key!r}")
        names = candidates if isinstance(candidates, tuple) else tuple(candidates)
        try:
            hash(names)
        except TypeError:
            raise BadArgumentError("candidates are names (strings)") from None
        if not isinstance(heuristic, str) or heuristic not in names:
            raise BadArgumentError(f"heuristic {heuristic!r} is not one of the candidates {names}")
        with self._lock:
            answer = self._memo.get((key, names, heuristic))
            if answer is not None:
                return answer
            try:
                answer = self._lookup.resolve(key, names, heuristic, None)
            except Busy:
                # Answer now, but ask the database again next time.
                self._counts["heuristic"] += 1
                return Answer(heuristic, "heuristic")
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            self._memo[key, names, heuristic] = answer
            self._counts[answer.source] += 1
            if misses.recorder is not None:  # no entry of its own: kept as pending
                misses.noted(self._reader, key, names, heuristic, answer)
            return answer

    # -- introspection -----------------------------------------------------------------------

    def explain(
        self,
        key: Key | str,
        candidates: Sequence[str] | None = None,
        heuristic: str | None = None,
    ) -> Explanation:
        """How `key` resolves under this table, and why; the memo and counters are untouched.

        Without `candidates`, each list stored for the key's signature is tried in turn. Without
        `heuristic`, an answer from the heuristic has an empty choice: the caller's pick.
        """
        # Loaded here: a host that never explains never imports it.
        from tunecache.resolve.explain import explain_key

        with self._lock:
            return explain_key(self._lookup, key, candidates, heuristic)
