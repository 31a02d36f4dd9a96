"""Where a device's cache lives: `<root>/tune/<version>/<cpu>-t<threads>/cache.db`.

`<root>` is platformdirs' user cache folder of the client application, unless the `TUNECACHE_DIR`
environment variable or an explicit argument names another. `<version>` is the client library's
version, so an upgrade starts a fresh cache and the old one can be pruned whole.

A path is bytes to the operating system and may not be UTF-8 (`TUNECACHE_DIR=$'/tmp/x_\\xff'`);
Python holds such a name as text with surrogate escapes. Whatever reaches SQLite as a URI goes
through `sqlite_uri`, built from the path's bytes, so such a name works wherever another does.
"""

from __future__ import annotations

import os
import stat
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from tunecache import config
from tunecache.errors import BadArgumentError
from tunecache.identity import CHECKED_FIELDS, Fields, detect_fields, dirname

# Not `typing` at run time: `tunecache where` and `list` start without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Unpack

    from tunecache.device import Device
    from tunecache.keywords import Identity, Location


__all__ = [
    "DATABASE_NAME",
    "ENV_VAR",
    "LOCATION_OPTIONS",
    "Location",
    "cache_root",
    "check_options",
    "database_path",
    "database_path_of",
    "device_dir",
    "display",
    "explicit_path",
    "kind_of",
    "locate",
    "sqlite_uri",
    "version_dir",
]

#: environment variable that overrides the cache root for every client
ENV_VAR = config.ENV_VARS["root"]
#: file name of a device's SQLite database inside its folder
DATABASE_NAME = "cache.db"


def cache_root(client: str = "tunecache", root: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds every cache of `client`: the argument, else the root
    `tunecache.configure()` set, else $TUNECACHE_DIR, else the user cache folder."""
    # Relative roots are made absolute now: a program that changes directory later must not
    # split its cache in two.
    if root is not None and not os.fspath(root):
        raise BadArgumentError("the cache root must not be empty")
    named, _ = config.root(root)
    if named is not None:
        return Path(named).expanduser().absolute()
    # Imported here: platformdirs is only needed when no explicit root is given.
    import platformdirs

    return Path(platformdirs.user_cache_dir(client, appauthor=False))


def _version_dir(client: str, client_version: str, root: str | os.PathLike[str] | None) -> Path:
    return cache_root(client, root) / "tune" / client_version


def version_dir(device: Device, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of every device's cache for the client version of `device`."""
    return _version_dir(device.client, device.client_version, root)


def device_dir(device: Device, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds `device`'s database and its WAL files."""
    return version_dir(device, root) / device.dirname


def database_path(device: Device, root: str | os.PathLike[str] | None = None) -> Path:
    """The SQLite database file of `device`."""
    return device_dir(device, root) / DATABASE_NAME


def database_path_of(
    client: str,
    client_version: str,
    cpu: str,
    threads: int,
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """`database_path` from the identity's fields, for callers that have no Device at hand."""
    return _version_dir(client, client_version, root) / dirname(cpu, threads) / DATABASE_NAME


def explicit_path(path: str | os.PathLike[str]) -> Path:
    """A database file named by the caller, made absolute; an empty name is refused, and so is
    a store URL (it names a fleet store, not a file: shown masked, never as a path)."""
    if not str(path):
        raise BadArgumentError("the database path must not be empty")
    if isinstance(path, str) and "://" in path:
        from tunecache.store import urls

        if path.split("://", 1)[0].lower() in urls.SCHEMES:
            raise BadArgumentError(
                f"{urls.mask(path)} is a fleet store, not a cache file: open it with url= "
                f"(or ${urls.ENV_VAR}), or sync with it (tunecache sync --remote URL)"
            )
    return Path(path).absolute()


def display(path: str | os.PathLike[str]) -> str:
    """`path` as text that is valid UTF-8 whatever its bytes, to store or hash: each byte that
    is not UTF-8 becomes a `\\xNN` escape, and a UTF-8 name is its own text, unchanged."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symlink"),
)


def kind_of(mode: int) -> str:
    """What a file of this `st_mode` is, in words for a message: "a regular file", "a FIFO",
    "a character device", "a folder"..."""
    return next((name for test, name in _KINDS if test(mode)), "a file of no known kind")


def sqlite_uri(path: str | os.PathLike[str], **query: str) -> str:
    """The SQLite URI filename of `path` (made absolute), with `query` as its parameters
    (`mode="ro"`, `immutable="1"`).

    Every byte of the path that is not a letter, digit or one of `/_.-~` is percent-encoded
    from `os.fsencode`, so `?`, `#` and `%` in a name stay part of it, and a name that is not
    UTF-8 reaches SQLite as the bytes it is (SQLite decodes the escapes into bytes).
    """
    name = urllib.parse.quote_from_bytes(os.fsencode(os.path.abspath(path)), safe="/")
    params = "&".join(f"{key}={urllib.parse.quote(value, safe='')}" for key, value in query.items())
    return f"file:{name}?{params}" if params else f"file:{name}"


#: the names of every option that names a cache (those of Location, which a test keeps equal)
LOCATION_OPTIONS = frozenset({*CHECKED_FIELDS, "root", "path", "device"})


def check_options(given: Iterable[str], caller: str, allowed: Iterable[str]) -> None:
    """Refuse a keyword argument `caller` does not take, as Python itself would for a function
    with explicit keywords: TypeError, naming the caller, so a misspelt option says where."""
    known = frozenset(allowed)
    for name in given:
        if name not in known:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")


def locate(
    *,
    root: str | os.PathLike[str] | None = None,
    path: str | os.PathLike[str] | None = None,
    device: Device | None = None,
    **identity: Unpack[Identity],
) -> tuple[Fields, Path]:
    """The checked fields of the identity these options name and the file of its database.

    `device`, if given, is the identity (the identity options are then ignored); else it is
    detected from them. The file is `path` if given, else the identity's default location under
    `root` (see `cache_root`).
    """
    check_options(identity, "locate", CHECKED_FIELDS)
    fields = device.fields if device is not None else detect_fields(**identity)
    if path is not None:
        return fields, explicit_path(path)
    cpu_, threads_, _, client_, version = fields
    return fields, database_path_of(client_, version, cpu_, threads_, root)


def __getattr__(name: str) -> Any:
    # PEP 562: Location, the TypedDict of these options, lives in tunecache.keywords, and
    # `typing` costs `tunecache where` and `list` 2 ms to import.
    if name == "Location":
        from tunecache.keywords import Location

        return Location
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
