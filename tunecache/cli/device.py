"""The device options every subcommand takes, and the identity and cache they name."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from tunecache.cli.exits import UsageError
from tunecache.cli.options import option

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from tunecache.store.reading import CacheReader

__all__ = [
    "DEVICE",
    "database",
    "device",
    "existing",
    "sourced",
    "fleet_url",
    "local_only",
    "location",
    "open_cache",
    "read_cache",
]

#: the device options, shown under their own heading in every subcommand's --help
DEVICE = (
    option("--client", help="client library name (default: $TUNECACHE_CLIENT, else tunecache)"),
    option(
        "--client-version",
        help="client library version (needed with --client; default: $TUNECACHE_CLIENT_VERSION)",
    ),
    option(
        "--threads",
        type=int,
        help="thread pool size (default: $TUNECACHE_THREADS, else what the BLAS pools run: "
        "$OMP_NUM_THREADS and its kin, else usable CPUs)",
    ),
    option("--accelerator", help="accelerator name, e.g. 'NVIDIA H200'"),
    option("--cpu", help="another CPU model (or GPU name) than this machine's"),
    option(
        "--gpu",
        type=int,
        metavar="INDEX",
        help="the identity tunecache.triton uses for this machine's GPU INDEX (needs torch)",
    ),
    option("--root", help="cache root (default: $TUNECACHE_DIR, else the user cache)"),
    option("--db", help="an explicit database file instead of the device's own"),
)


def device(args: argparse.Namespace) -> Any:
    """The device identity the options name: this machine's, with any field overridden (each
    one not named settled by `tunecache.config`: configured, the environment, the default), or
    with --gpu the identity tunecache.triton gives this machine's GPU."""
    return sourced(args)[0]


def sourced(args: argparse.Namespace) -> tuple[Any, dict[str, str], str | None]:
    """`device(args)`, where each of its fields came from, and what default threads counted
    (`tunecache.identity.settle`'s; --gpu names every field: "argument")."""
    if args.gpu is None:
        from tunecache.device import Device
        from tunecache.identity import settle

        fields, sources, counted = settle(
            client=args.client,
            client_version=args.client_version,
            threads=args.threads,
            accelerator=args.accelerator,
            cpu=args.cpu,
        )
        return Device(*fields), sources, counted
    named = [f"--{n.replace('_', '-')}" for n in ("client", "client_version", "threads",
             "accelerator", "cpu") if getattr(args, n) is not None]  # fmt: skip
    if named:
        raise UsageError(f"--gpu gives the whole identity: drop {' '.join(named)}")
    from tunecache import triton

    found = triton.gpu_device(args.gpu)
    from tunecache.identity import CHECKED_FIELDS

    return found, dict.fromkeys(CHECKED_FIELDS, "argument"), None


def location(args: argparse.Namespace) -> dict[str, Any]:
    """The cache the device options name, as `tunecache.open` and `Table.open` take it."""
    return {"device": device(args), "root": args.root, "path": args.db}


def open_cache(args: argparse.Namespace) -> Any:
    """The cache the device options name, opened (and created if need be)."""
    from tunecache.cache import Cache

    return Cache.open(**location(args))


def fleet_url(found: dict[str, Any]) -> str | None:
    """The fleet store TUNECACHE_URL names, where the options `found` name no file or root
    (which would name a local cache instead), or None."""
    if found["root"] is not None or found["path"] is not None:
        return None
    from tunecache.store.urls import from_environment

    return from_environment()


def local_only(found: dict[str, Any]) -> None:
    """Refuse, for a command that works on a local cache file only, options that leave
    TUNECACHE_URL naming a fleet store: a BadArgumentError that says how to name a file."""
    url = fleet_url(found)
    if url is not None:
        from tunecache.errors import BadArgumentError
        from tunecache.store.urls import ENV_VAR, mask

        raise BadArgumentError(
            f"this command works on a local cache, and {ENV_VAR} names the fleet store "
            f"{mask(url)}: name a local one with --db or --root"
        )


def database(found: dict[str, Any]) -> Path:
    """The database file the options `found` (`location`'s) name, found or not."""
    from tunecache.paths import locate

    return locate(device=found["device"], root=found["root"], path=found["path"])[1]


def existing(found: dict[str, Any]) -> Path:
    """The database file the options `found` name, for a command that only reads: a
    NoCacheError where there is none (nothing is created), a StoreError where something that
    is not a regular file is there. Decided by os.stat, with nothing opened."""
    from tunecache.errors import NoCacheError
    from tunecache.store.filesystems import database_stat

    db = database(found)
    got = database_stat(db)
    if got is None:
        raise NoCacheError(f"no cache at {db}")
    if got.st_size == 0:
        # SQLite makes the file before its first page: a cache another process is creating.
        raise NoCacheError(f"no cache at {db} (the file is empty)")
    return db


@contextlib.contextmanager
def read_cache(found: dict[str, Any]) -> Iterator[CacheReader]:
    """A reader of the cache `found` names (`location`'s options), for a command that only
    reads; where there is none, NoCacheError, and nothing is created (`existing`).

    A file at this tunecache's schema revision is read straight through stdlib sqlite3, with
    the store's filesystem check and without SQLAlchemy; any other (an older or newer
    revision, a damaged one) is opened through the store first, as `open_cache` opens it:
    upgraded, opened read-only or refused exactly as the store decides.
    """
    from tunecache.store.filesystems import check_filesystem
    from tunecache.store.reading import CacheReader

    local_only(found)
    db = existing(found)
    check_filesystem(db)
    reader = CacheReader.open(db, found["device"].fingerprint)
    if reader is None:
        from tunecache.cache import Cache

        with Cache.open(**found) as cache:
            reader = CacheReader.of(cache)
    with contextlib.closing(reader):
        yield reader
