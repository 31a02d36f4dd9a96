"""The identity configured once: `configure()`, the environment, and where each field came from.

Every function that names a device and its cache (`tunecache.open`, `Table.open`,
`tunecache.detect`, `tune.tune`, every command, and a tunable op's lazily opened default table)
settles the fields `client`, `client_version`, `threads` and `root` by one rule, here:

1. an explicit argument (a keyword argument, a command-line option);
2. else what `configure()` set for this process;
3. else the environment: TUNECACHE_CLIENT, TUNECACHE_CLIENT_VERSION, TUNECACHE_THREADS,
   TUNECACHE_DIR (the root);
4. else the default: client `tunecache` (at its own version), the threads that run the work
   (`tunecache.pools.default_threads`), the user cache folder.

`client_version` goes with its client: it comes from the place the client came from or from a
stronger one, never from a weaker one (a `--client other` on the command line never takes the
version TUNECACHE_CLIENT_VERSION gives the client TUNECACHE_CLIENT names).

Stdlib only, and neither `typing` nor `dataclasses`: the resolver's cold start and `tunecache
where` pass through here (tests/test_import.py holds both to it).
"""

from __future__ import annotations

import os

from tunecache.errors import BadArgumentError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DISABLE_VAR",
    "ENV_VARS",
    "FIELDS",
    "SOURCES",
    "configure",
    "configured",
    "disabled",
    "identity",
    "is_configured",
    "on_change",
    "reset",
    "root",
]

#: the fields configured once, in the order `where` shows them
FIELDS = ("client", "client_version", "threads", "root")
#: where a field's value came from, strongest first
SOURCES = ("argument", "configure", "environment", "default")
#: the environment variable of each field (the root's is also `tunecache.paths.ENV_VAR`)
ENV_VARS = {name: f"TUNECACHE_{name.upper()}" for name in FIELDS[:3]} | {"root": "TUNECACHE_DIR"}
#: set to 1, a tunable op never opens the configured cache on its own (`tunecache.set_default`)
DISABLE_VAR = "TUNECACHE_DISABLE"

# What configure() set, by field; a field it never set (or cleared) is absent.
_configured: dict[str, object] = {}
# Called after every configure() or reset() (the resolver's lazily opened default listens).
_listeners: list[Callable[[], None]] = []


class _Keep:
    """The default of configure()'s arguments: leave this field as it is."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "KEEP"


KEEP = _Keep()


def _check_threads(value: object, what: str) -> int:
    """`value` as a thread count, or a BadArgumentError that starts with `what`."""
    from tunecache.checks import is_int

    if not is_int(value) or not 1 <= value <= 65536:
        raise BadArgumentError(
            f"{what} must be a whole number of threads from 1 to 65536, got {value!r}"
        )
    return value


def _check(name: str, value: object, what: str) -> object:
    """`value` checked as field `name` (None passes: the field is cleared); a BadArgumentError
    that starts with `what` where it is not legal."""
    if value is None:
        return None
    if name == "threads":
        return _check_threads(value, what)
    if name == "root":
        if not isinstance(value, str | os.PathLike) or not os.fspath(value):
            raise BadArgumentError(f"{what} must be a folder's path, got {value!r}")
        # Made absolute now, as an argument is: a program that changes folder later must not
        # split its cache in two.
        return os.path.abspath(os.path.expanduser(os.fspath(value)))
    from tunecache.identity import check_field

    try:
        check_field(name, value)
    except BadArgumentError as error:
        raise BadArgumentError(f"{what}: {error}") from None
    return value


def configure(
    *,
    client: str | _Keep | None = KEEP,
    client_version: str | _Keep | None = KEEP,
    threads: int | _Keep | None = KEEP,
    root: str | os.PathLike[str] | _Keep | None = KEEP,
) -> dict[str, object]:
    """Set this process's device identity once, for every later `open`, `Table.open`, `tune`
    and tunable op; returns the previous configuration (`configure(**previous)` restores it).

    A field left out keeps its value; None clears it (the environment or the default then
    stands). An explicit argument to a function still wins over what is configured here. A
    client other than tunecache needs its `client_version` configured with it. A `root` alone
    says where caches live, not whose: it configures no identity (`is_configured`).
    """
    given = {"client": client, "client_version": client_version, "threads": threads, "root": root}
    changes = {
        name: _check(name, value, f"configure({name}=)")
        for name, value in given.items()
        if not isinstance(value, _Keep)
    }
    after = {**_configured, **changes}
    after = {name: value for name, value in after.items() if value is not None}
    name = after.get("client")
    if name is not None and name != "tunecache" and "client_version" not in after:
        raise BadArgumentError(
            f"configure(client={name!r}) needs a client_version too: decisions are kept per version"
        )
    previous = configured()
    _configured.clear()
    _configured.update(after)
    _changed()
    return previous


def configured() -> dict[str, object]:
    """What `configure()` set, every field named (None where nothing is configured)."""
    return {name: _configured.get(name) for name in FIELDS}


def reset() -> None:
    """Forget everything `configure()` set (the environment and the defaults stand again)."""
    _configured.clear()
    _changed()


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener` after every `configure()` and `reset()`."""
    _listeners.append(listener)


def _changed() -> None:
    for listener in _listeners:
        listener()


def _environment(name: str) -> object:
    """Field `name` as the environment sets it, checked, or None where it is unset or empty."""
    var = ENV_VARS[name]
    text = os.environ.get(var, "").strip()
    if not text:
        return None
    if name == "threads":
        try:
            number = int(text)
        except ValueError:
            number = None
        return _check_threads(number if number is not None else text, var)
    return _check(name, text, var)


def _pick(name: str, given: object) -> tuple[object, int]:
    """Field `name`'s value and the index in SOURCES of where it came from (default: None)."""
    if given is not None:
        return given, 0
    if name in _configured:
        return _configured[name], 1
    found = _environment(name)
    if found is not None:
        return found, 2
    return None, 3


def is_configured() -> bool:
    """Whether an identity is configured: its client, version or threads, by `configure()` or
    by TUNECACHE_CLIENT, TUNECACHE_CLIENT_VERSION or TUNECACHE_THREADS. The root says where,
    not who: `configure(root=)` alone counts no more than TUNECACHE_DIR alone does."""
    if any(name != "root" for name in _configured):
        return True
    return any(os.environ.get(ENV_VARS[n], "").strip() for n in FIELDS if n != "root")


def disabled() -> bool:
    """Whether TUNECACHE_DISABLE=1 keeps tunable ops from opening the configured cache; any
    value but 1, 0 or nothing is a BadArgumentError naming the variable."""
    text = os.environ.get(DISABLE_VAR, "").strip()
    if text not in ("", "0", "1"):
        raise BadArgumentError(f"{DISABLE_VAR} must be 1 or 0, got {text!r}")
    return text == "1"


def identity(
    client: str | None = None, client_version: str | None = None, threads: int | None = None
) -> tuple[str, str | None, int | None, dict[str, str]]:
    """The client, its version and the threads the arguments (None: not given), the
    configuration and the environment settle on, and where each came from (a SOURCES word).

    A version none of them gives is None for tunecache itself (the caller puts tunecache's own
    version there) and a BadArgumentError for another client, saying where it was named.
    Threads none of them gives are None: the caller detects them.
    """
    name, client_at = _pick("client", client)
    if name is None:
        name = "tunecache"
    # The version from the client's own place or a stronger one (see the module's docstring).
    version: object = None
    version_at = 3
    for at in range(min(client_at, 2) + 1):
        if at == 0:
            version = client_version
        elif at == 1:
            version = _configured.get("client_version")
        else:
            version = _environment("client_version")
        if version is not None:
            version_at = at
            break
    if version is None and name != "tunecache":
        where = _SAID[client_at].format(var=ENV_VARS["client"])
        raise BadArgumentError(
            f"client {name!r} ({where}) needs a client_version: decisions are kept per version"
        )
    count, threads_at = _pick("threads", threads)
    sources = {
        "client": SOURCES[client_at],
        "client_version": SOURCES[version_at],
        "threads": SOURCES[threads_at],
    }
    shown = None if version is None else str(version)
    return str(name), shown, count if isinstance(count, int) else None, sources


# How a message names where the client came from, by SOURCES index.
_SAID = ("given", "configured", "from {var}", "the default")


def root(given: str | os.PathLike[str] | None) -> tuple[str | os.PathLike[str] | None, str]:
    """The cache root the argument, the configuration or TUNECACHE_DIR names (None: the user
    cache folder, the default), and where it came from (a SOURCES word)."""
    if given is not None:
        return given, SOURCES[0]
    if "root" in _configured:
        return str(_configured["root"]), SOURCES[1]
    env = os.environ.get(ENV_VARS["root"])
    if env:
        return env, SOURCES[2]
    return None, SOURCES[3]
