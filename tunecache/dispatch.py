"""Dispatch: make a Python function tunable, so that each call runs the candidate the table picks.

    @tunecache.tunable("matmul_F32", dims=("m", "k", "n"),
                       shape=lambda a, b: (a.shape[0], a.shape[1], b.shape[1]))
    def matmul(a, b):              # the heuristic's pick, candidate "matmul"
        return a @ b

    @matmul.candidate("blocked")
    def _(a, b): ...

A call builds its raw shape tuple with the `shape` function, looks it up in a memo of the current
table (`tunecache.resolve.current()`), and calls the chosen function. Only the first call of each
shape builds a Key and resolves it; every later one is a dictionary hit.

The hit path is one function per op, generated when the op is declared (`_hit_path`): where the
`shape` function and every candidate take the same plain parameters, it has their very
signature, so a call builds no tuple and no dict of arguments. In a process that never entered
a `using` block it reads one value (the default table) before the op's memo of it; once one was
entered, it reads this context's table too, and serves the last `using` table it met from its
memo as well. Anything else (a profile, a miss, another table) takes the full path (`_slow`),
which is the only one that decides, and points the hit path at the table it served.

Profiling (`with tunecache.dispatch.profile() as p:`) records calls and time per key, so the tuner
can screen the keys that carry the time; while one runs, every call takes the full path.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FunctionType, MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, ParamSpec, TypeVar

from tunecache import resolve as _resolve
from tunecache.errors import BadArgumentError, BadKeyError
from tunecache.keys import Key, make_key
from tunecache.resolve import contexts as _contexts

__all__ = ["Captured", "Profile", "ProfileRow", "Tunable", "profile", "registry", "tunable"]

P = ParamSpec("P")
R = TypeVar("R")

# The ContextVar object never changes: bound once here, it is one global read per call.
_current = _contexts.context_table
_registry: dict[str, Tunable[Any, Any]] = {}
_profile: Profile | None = None


def registry() -> dict[str, Tunable[Any, Any]]:
    """Every tunable op of this process, by signature (a copy)."""
    return dict(_registry)


# The hit path of one op, as source: `{params}` is the op's signature, `{raw}` builds the memo's
# key, `{args}` and `{kwargs}` hand the arguments to the full path, `{forward}` to the candidate.
# Each op runs it in a namespace of its own, whose globals (a global read is cheaper than a
# closure's or an attribute's) are the op's shape function and what it serves from: the default
# table `fast_table` with the op's memo of it `fast_memo`, and the last `using` table with its
# memo, as one tuple `scoped`, so that a thread never pairs one table with another's memo (the
# default table changes only by set_default, and `settle` writes its memo first: a call that
# sees the new table finds its memo). `hot.table` is the default table, None while a
# profile runs, and `hot.paused` says one runs (then every call takes the full path);
# `hot.unscoped` is `hot.table` while no `using` block was ever entered, so a process that
# never enters one never reads its context either.
_HIT_PATH = """
def __call__(self, /, {params}):
    if hot.unscoped is fast_table:
        memo = fast_memo
    else:
        table = get()
        if table is None:
            if hot.table is not fast_table:
                return slow(self, None, {args}, {kwargs})
            memo = fast_memo
        else:
            last, memo = scoped
            if table is not last or hot.paused:
                return slow(self, None, {args}, {kwargs})
    raw = {raw}
    try:
        function = memo[raw]
    except KeyError:
        return slow(self, raw, {args}, {kwargs})
    return function({forward})


def settle(table, memo, default):
    global fast_table, fast_memo, scoped
    if default:
        fast_memo = memo
        fast_table = table
    else:
        scoped = (table, memo)
"""
# Names the generated code uses itself: a parameter named so takes the generic form.
_GENERATED_NAMES = frozenset(
    {"self", "shape", "facts", "hot", "get", "slow", "raw", "function", "KeyError"}
    | {"fast_table", "fast_memo", "scoped", "last", "settle", "table", "memo", "default"}
    | {"__builtins__"}
)
_GENERIC = {"params": "*args, **kwargs", "forward": "*args, **kwargs"}
_GENERIC.update(args="args", kwargs="kwargs")
# Compiled once per source (per signature and shape of `raw`), run once per op.
_compiled: dict[str, Any] = {}


def _plain_parameters(function: object) -> tuple[str, ...] | None:
    """The parameter names of a plain Python function that takes only parameters without
    defaults, positional or by keyword; None for anything else."""
    if not isinstance(function, FunctionType):
        return None
    code = function.__code__
    if code.co_flags & 0x0C or code.co_kwonlyargcount or code.co_posonlyargcount:
        return None  # *args or **kwargs, keyword-only or positional-only parameters
    if function.__defaults__ or function.__kwdefaults__:
        return None
    return tuple(code.co_varnames[: code.co_argcount])


def _takes_positionally(function: object, names: tuple[str, ...]) -> bool:
    """Whether a call of `function` with `names` as keywords binds each as a positional call
    in that order would: a plain Python function whose first parameters are these."""
    if not isinstance(function, FunctionType):
        return False
    code = function.__code__
    return code.co_argcount >= len(names) and code.co_varnames[: len(names)] == names


def _hit_path(
    shape: Callable[..., Any],
    facts: Callable[..., Any] | None,
    candidates: Sequence[Callable[..., Any]],
    slow: Callable[..., Any],
) -> tuple[Callable[..., Any], Callable[[object, dict[Any, Any], bool], None]]:
    """An op's hit path (see the module's docstring) and the function that points it at a
    table and its memo. The exact signature only where it changes nothing: the shape function
    (and `facts`) take the same plain parameters, and every candidate takes them first, in
    order, so handing them on by position binds what handing them on by keyword did."""
    names = _plain_parameters(shape)
    exact = (
        names is not None
        and not _GENERATED_NAMES & set(names)
        and (facts is None or _plain_parameters(facts) == names)
        and all(_takes_positionally(c, names) for c in candidates)
    )
    if exact and names is not None:
        joined = ", ".join(names)
        fields = {"params": joined, "forward": joined, "args": f"({joined},)", "kwargs": "{}"}
    else:
        fields = _GENERIC
    call = f"shape({fields['forward']})"
    raw = call if facts is None else f"(facts({fields['forward']}), {call})"
    source = _HIT_PATH.format(raw=raw, **fields)
    code = _compiled.get(source)
    if code is None:
        where = f"<tunable hit path ({fields['params']})>"
        code = _compiled[source] = compile(source, where, "exec")
    namespace: dict[str, Any] = {"shape": shape, "facts": facts, "hot": _contexts.hot}
    namespace.update(get=_current.get, slow=slow, fast_table=object(), fast_memo={})
    namespace["scoped"] = (object(), {})
    # Our own template; the only names put into it are parameter names, checked above.
    exec(code, namespace)
    return namespace["__call__"], namespace["settle"]


class Tunable(Generic[P, R]):
    """A function with several legal implementations, dispatched through the current table.

    Each op is an instance of a class of its own, made for it (a subclass of Tunable), whose
    `__call__` is the op's generated hit path (see the module's docstring).
    """

    if TYPE_CHECKING:

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
            """Run the candidate the table in force picks for these arguments."""
            ...

    def __init__(
        self,
        signature: str,
        *,
        dims: Sequence[str],
        shape: Callable[P, tuple[int, ...]],
        candidates: Mapping[str, Callable[P, R]],
        heuristic: str | Callable[..., str],
        facts: Callable[P, tuple[str, ...]] | None = None,
        bound: Callable[..., float] | None = None,
        register: bool = True,
        tolerance: float | None = None,
        check: Callable[[Any, Any], bool | str | None] | None = None,
    ) -> None:
        """Declare a tunable op.

        `dims` names the sizes `shape(*args, **kwargs)` returns, in order. `facts`, if given,
        returns extra signature tokens from the arguments (a dtype, a layout: "F32", "aconst"),
        appended to `signature`. `heuristic` is the runtime's own pick: a candidate name, or a
        function of the dim values that returns one. `bound`, a function of the dim values,
        gives a time in seconds no candidate can beat (a roofline estimate: work over peak
        rate); the tuner's bench stops once a candidate comes close to it.

        Before timing, the tuner compares each candidate's output with the heuristic's
        (`compare`): `tolerance` is the relative tolerance for floating outputs (None: the
        dtype's default, `tunecache.compare`; 0: exact), and `check`, if given, replaces the
        comparison: `check(heuristic's output, candidate's output)` returns True (or None) when
        they agree, and False or a string saying how they differ when not.
        """
        # make_key checks the signature and the dim names once, here, not on every call.
        try:
            make_key(signature, [(name, 1) for name in dims])
        except (BadKeyError, TypeError) as error:
            raise BadArgumentError(f"bad tunable {signature!r}: {error}") from None
        if not candidates:
            raise BadArgumentError(f"tunable {signature!r} needs at least one candidate")
        self.signature = signature
        self.dims = tuple(dims)
        self._shape = shape
        self._facts = facts
        if bound is not None and not callable(bound):
            raise BadArgumentError(f"tunable {signature!r}: bound is a function of the dims")
        self._bound = bound
        if tolerance is not None and (
            isinstance(tolerance, bool)
            or not isinstance(tolerance, int | float)
            or not 0 <= tolerance < float("inf")
        ):
            raise BadArgumentError(
                f"tunable {signature!r}: tolerance is a number >= 0 or None, got {tolerance!r}"
            )
        if check is not None and not callable(check):
            raise BadArgumentError(f"tunable {signature!r}: check is a function or None")
        self._tolerance = tolerance
        self._check = check
        self._heuristic = heuristic
        self._candidates: dict[str, Callable[P, R]] = {}
        self._token = object()
        # (table, memo) of the last table seen: one identity test finds the memo on a hit.
        self._last: tuple[object, dict[Any, Callable[P, R]]] = (None, {})
        self._keys: dict[Any, tuple[Key, _resolve.Answer]] = {}
        self._lock = threading.Lock()
        self._settle: Callable[[object, dict[Any, Any], bool], None] = _no_table
        for name, function in candidates.items():
            self.add(name, function)
        if isinstance(heuristic, str) and heuristic not in self._candidates:
            raise BadArgumentError(f"heuristic {heuristic!r} is not one of the candidates")
        if register:
            _registry[signature] = self

    # -- declaring -----------------------------------------------------------------------------

    @property
    def candidates(self) -> tuple[str, ...]:
        """The legal candidates' names, in declaration order (their checksum is the list's)."""
        return tuple(self._candidates)

    @property
    def functions(self) -> Mapping[str, Callable[P, R]]:
        """Each legal candidate's function, by name, in declaration order (a read-only view)."""
        return MappingProxyType(self._candidates)

    def add(self, name: str, function: Callable[P, R]) -> None:
        """Add a legal candidate; every memo starts over, as the candidate list changed."""
        if not isinstance(name, str) or not name:
            raise BadArgumentError("a candidate is named by a non-empty string")
        if not callable(function):
            raise BadArgumentError(f"candidate {name!r} is not callable")
        with self._lock:
            self._candidates[name] = function
            self._token = object()
            self._last = (None, {})
            self._keys = {}
            self._build()

    def _build(self) -> None:
        """Give this op its hit path for its candidates as they are now (a class of its own)."""
        call, self._settle = _hit_path(
            self._shape, self._facts, list(self._candidates.values()), Tunable._slow
        )
        base = type(self).__mro__[1] if getattr(type(self), "_per_op", False) else type(self)
        own = type(base.__name__, (base,), {"__call__": call, "__slots__": (), "_per_op": True})
        own.__qualname__, own.__module__ = base.__qualname__, base.__module__
        self.__class__ = own

    def candidate(self, name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorator form of `add`."""

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            self.add(name, function)
            return function

        return decorate

    #: how to build the op's arguments at a shape, for op-level tuning (`inputs`), or None
    input_maker: Callable[..., Any] | None = None

    def inputs(self, maker: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: declare how to build this op's arguments at a shape, so that it can be
        benched without a model (`tunecache.tune.ops`, `tunecache tune-op`, `tune --pending`).
        `maker(**shape)` gets a shape's entries (its dims by name) and returns the positional
        arguments as a tuple, or the keyword arguments as a dict."""
        if not callable(maker):
            raise BadArgumentError(f"{self.signature}: inputs takes a function of the shape")
        self.input_maker = maker
        return maker

    # -- calling -------------------------------------------------------------------------------

    def _slow(self, raw: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """A call the hit path did not serve: find the table in force (deciding the default
        where it is still pending), its memo, the raw shape (where `raw` is None) and the
        function, record it where a profile runs, and point the hit path at the default table
        where that is the table in force."""
        table = _current.get()
        default = table is None
        if table is None:
            table = _contexts.default_table
            if table is _contexts.pending:
                table = _contexts.settle()
        last_table, memo = self._last
        if last_table is not table:
            memo = self._memo_for(table)
        if raw is None:
            raw = self._shape(*args, **kwargs)
            if self._facts is not None:
                raw = (self._facts(*args, **kwargs), raw)
        function = memo.get(raw)
        if function is None:
            function = self._miss(table, memo, raw)
        if not _contexts.hot.paused:
            self._settle(table, memo, default)
        if _profile is None:
            return function(*args, **kwargs)
        result: R = _profile._timed(self, raw, function, args, kwargs)
        return result

    def _memo_for(self, table: _resolve.Table) -> dict[Any, Callable[P, R]]:
        # Only when the table in force changed since this op's last call: not on a hit.
        memo = table.memo_for(self._token)
        self._last = (table, memo)
        return memo

    def _split(self, raw: Any) -> tuple[str, tuple[int, ...]]:
        if self._facts is None:
            return self.signature, raw
        facts, values = raw
        return "_".join((self.signature, *facts)), values

    def key(self, *args: P.args, **kwargs: P.kwargs) -> Key:
        """The key a call with these arguments resolves."""
        raw: Any = self._shape(*args, **kwargs)
        if self._facts is not None:
            raw = (self._facts(*args, **kwargs), raw)
        return self._key(raw)

    def _key(self, raw: Any) -> Key:
        signature, values = self._split(raw)
        if len(values) != len(self.dims):
            raise BadArgumentError(
                f"{self.signature}: shape gave {len(values)} sizes for dims {self.dims}"
            )
        return make_key(signature, list(zip(self.dims, values, strict=True)))

    def heuristic_for(self, key: Key) -> str:
        """The runtime's own pick at this key: the declared heuristic, or what its function of
        the dims returns (BadArgumentError if that is not a candidate)."""
        if isinstance(self._heuristic, str):
            return self._heuristic
        name = self._heuristic(*(value for _, value in key.dims))
        if name not in self._candidates:
            raise BadArgumentError(f"{self.signature}: the heuristic picked unknown {name!r}")
        return name

    def lower_bound(self, key: Key) -> float | None:
        """The declared lower bound on one call at this key's dims, in seconds, or None."""
        if self._bound is None:
            return None
        value = self._bound(*(v for _, v in key.dims))
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < float("inf")
        ):
            raise BadArgumentError(f"{self.signature}: bound gave {value!r}, not seconds > 0")
        return float(value)

    def compare(self, expected: Any, actual: Any) -> str | None:
        """How a candidate's output `actual` differs from the heuristic's `expected`, in one
        line, or None when they agree: by the op's `check`, or else by `tunecache.compare`
        within its `tolerance`. An exception `check` raises propagates."""
        if self._check is None:
            from tunecache.compare import difference

            return difference(expected, actual, self._tolerance)
        verdict = self._check(expected, actual)
        if verdict is None or verdict is True:
            return None
        if verdict is False:
            return "the op's check says it differs"
        if isinstance(verdict, str):
            return " ".join(verdict.split())[:300] or "the op's check says it differs"
        raise BadArgumentError(
            f"{self.signature}: check returned {type(verdict).__name__}, not a bool or a str"
        )

    def resolve(self, *args: P.args, **kwargs: P.kwargs) -> _resolve.Answer:
        """What the current table answers for a call with these arguments (no call is made)."""
        key = self.key(*args, **kwargs)
        return _resolve.current().resolve(key, self.candidates, self.heuristic_for(key))

    def _miss(
        self, table: _resolve.Table, memo: dict[Any, Callable[P, R]], raw: Any
    ) -> Callable[P, R]:
        key = self._key(raw)
        candidates, heuristic = self.candidates, self.heuristic_for(key)
        answer = table.resolve(key, candidates, heuristic)
        function = self._candidates[answer.choice]
        if len(self._keys) >= _resolve.MEMO_LIMIT:
            self._keys.clear()
        self._keys[raw] = (key, answer)
        # Remember only what the table remembered: an answer given while the cache was busy is
        # asked again next time, not frozen into every later call of this shape.
        if table.remembered(key, candidates, heuristic) is answer:
            if len(memo) >= _resolve.MEMO_LIMIT:
                memo.clear()
            memo[raw] = function
        return function

    def __repr__(self) -> str:
        return f"<Tunable {self.signature} dims={self.dims} candidates={list(self._candidates)}>"


def _no_table(table: object, memo: dict[Any, Any], default: bool) -> None:
    """The hit path's settle before an op has one (no candidate yet)."""


def tunable(
    signature: str,
    *,
    dims: Sequence[str],
    shape: Callable[P, tuple[int, ...]],
    candidates: Mapping[str, Callable[P, R]] | None = None,
    heuristic: str | Callable[..., str] | None = None,
    facts: Callable[P, tuple[str, ...]] | None = None,
    bound: Callable[..., float] | None = None,
    tolerance: float | None = None,
    check: Callable[[Any, Any], bool | str | None] | None = None,
) -> Callable[[Callable[P, R]], Tunable[P, R]]:
    """Decorator: the decorated function becomes a candidate named after it, and the heuristic's
    pick unless `heuristic` says otherwise; `candidates` adds the others. `tolerance` and
    `check` say how a candidate's output is compared with the heuristic's (`Tunable`).

    The op takes the function's `__name__`, `__qualname__`, `__module__` and `__doc__`, so
    `help(op)` shows the user's own text, and `__wrapped__`, so `inspect.signature(op)` shows the
    function's parameters (an op takes the same arguments).
    """

    def decorate(function: Callable[P, R]) -> Tunable[P, R]:
        name = function.__name__
        op = Tunable(
            signature,
            dims=dims,
            shape=shape,
            candidates={name: function, **(candidates or {})},
            heuristic=name if heuristic is None else heuristic,
            facts=facts,
            bound=bound,
            tolerance=tolerance,
            check=check,
        )
        # updated=(): the function's own attributes are not copied into the op, where one named
        # like an attribute of the op (`dims`, `signature`) would replace it.
        functools.update_wrapper(op, function, updated=())
        return op

    return decorate


# -- profiling ---------------------------------------------------------------------------------


class ProfileRow(NamedTuple):
    """One key's share of a profiled run: `choice` is the candidate its calls ran ("" if
    several: the table changed between them), `source` where the key's last answer came from
    when that answer is `choice` (else "")."""

    key: Key
    calls: int
    seconds: float
    choice: str
    source: str


class Captured(NamedTuple):
    """The arguments of one real call of a key, kept so the tuner can bench it in isolation."""

    op: Tunable[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


#: a profiled key's function where its calls ran more than one
_SEVERAL: Any = object()


class Profile:
    """Calls and time per key while active; see `profile()`."""

    def __init__(self, *, capture: bool = False) -> None:
        #: (op, raw shape) -> [calls, nanoseconds, the function the calls ran]
        self._stats: dict[tuple[Tunable[Any, Any], Any], list[Any]] = {}
        self._lock = threading.Lock()
        self._previous: Profile | None = None
        self._capture = capture
        self._captured: dict[tuple[Tunable[Any, Any], Any], Captured] = {}

    def _timed(
        self,
        op: Tunable[Any, Any],
        raw: Any,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        start = time.perf_counter_ns()
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = time.perf_counter_ns() - start
            with self._lock:
                stat = self._stats.get((op, raw))
                if stat is None:
                    self._stats[op, raw] = [1, elapsed, function]
                    if self._capture:
                        self._captured[op, raw] = Captured(op, args, dict(kwargs))
                else:
                    stat[0] += 1
                    stat[1] += elapsed
                    stat[2] = function if stat[2] is function else _SEVERAL

    def rows(self) -> list[ProfileRow]:
        """Every key seen, the heaviest first."""
        out = []
        with self._lock:
            stats = [(op_raw, tuple(stat)) for op_raw, stat in self._stats.items()]
        for (op, raw), (calls, nanos, function) in stats:
            choice = next((n for n, f in op._candidates.items() if f is function), "")
            key, answer = op._keys.get(raw) or (op._key(raw), None)
            source = answer.source if answer is not None and answer.choice == choice else ""
            out.append(ProfileRow(key, calls, nanos / 1e9, choice, source))
        out.sort(key=lambda r: (-r.seconds, r.key))
        return out

    def captured(self) -> dict[Key, Captured]:
        """The first call's arguments of every key seen (empty unless `profile(capture=True)`)."""
        with self._lock:
            items = list(self._captured.items())
        return {op._key(raw): c for (op, raw), c in items}

    def heavy(self, share: float = 0.9) -> list[ProfileRow]:
        """The fewest heaviest keys that together carry `share` of the profiled time."""
        if not 0 < share <= 1:
            raise BadArgumentError(f"share is in (0, 1], got {share!r}")
        rows = self.rows()
        total = sum(r.seconds for r in rows)
        picked: list[ProfileRow] = []
        covered = 0.0
        for row in rows:
            if covered >= share * total:
                break
            picked.append(row)
            covered += row.seconds
        return picked

    def counters(self) -> dict[str, int]:
        """Calls by the source of their answer."""
        counts = dict.fromkeys(_resolve.SOURCES, 0)
        for row in self.rows():
            if row.source:
                counts[row.source] += row.calls
        return counts

    def __enter__(self) -> Profile:
        global _profile
        self._previous = _profile
        _profile = self
        _contexts.hot.pause()
        return self

    def __exit__(self, *exc: object) -> None:
        global _profile
        _profile = self._previous
        _contexts.hot.resume()


def profile(*, capture: bool = False) -> Profile:
    """Record calls and time per key of every tunable op, process-wide, inside a `with` block.

    With `capture`, the first call of each key also keeps its arguments (references, not
    copies), so each key can be benched in isolation on the data the model really used.
    """
    return Profile(capture=capture)
