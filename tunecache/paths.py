"""Where a device's cache lives: `<root>/tune/<version>/<cpu>-t<threads>/cache.db`.

`<root>` is platformdirs' user cache folder of the client application, unless the `TUNECACHE_DIR`
environment variable or an explicit argument names another. `<version>` is the client library's
version, so an upgrade starts a fresh cache and the old one can be pruned whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tunecache.errors import BadArgumentError
from tunecache.identity import dirname

if TYPE_CHECKING:
    from tunecache.device import Device

__all__ = [
    "DATABASE_NAME",
    "ENV_VAR",
    "cache_root",
    "database_path",
    "database_path_of",
    "device_dir",
    "explicit_path",
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
