"""Where a device's cache lives: `<root>/tune/<version>/<cpu>-t<threads>/cache.db`.

`<root>` is platformdirs' user cache folder of the client application, unless the `TUNECACHE_DIR`
environment variable or an explicit argument names another. `<version>` is the client library's
version, so an upgrade starts a fresh cache and the old one can be pruned whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

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
    "explicit_path",
    "locate",
    "version_dir",
]

#: environment variable that overrides the cache root for every client
ENV_VAR = "TUNECACHE_DIR"
#: file name of a device's SQLite database inside its folder
DATABASE_NAME = "cache.db"


def cache_root(client: str = "tunecache", root: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds every cache of `client`: the argument, else $TUNECACHE_DIR, else
    the user cache folder."""
    # Relative roots are made absolute now: a program that changes directory later must not
    # split its cache in two.
    if root is not None:
        if not os.fspath(root):
            raise BadArgumentError("the cache root must not be empty")
        return Path(root).expanduser().absolute()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser().absolute()
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
    """A database file named by the caller, made absolute; an empty name is refused."""
    if not str(path):
        raise BadArgumentError("the database path must not be empty")
    return Path(path).absolute()


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
