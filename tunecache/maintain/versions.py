"""Prune the version folders of a client: caches an upgrade left behind, whole folders at once."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tunecache import paths
from tunecache.device import Device
from tunecache.maintain.reports import Report
from tunecache.store.access import claim, release
from tunecache.store.quarantine import QUARANTINE_DIR

__all__ = ["PrunedVersion", "prune_versions"]


@dataclass(frozen=True, slots=True)
class PrunedVersion(Report):
    """A version folder prune removed, would remove, or had to leave."""

    version: str
    path: str
    bytes: int
    removed: bool
    #: why it was left, or None when it was (or, in a dry run, would be) removed
    skipped: str | None


def _folder_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            # A file may vanish between listing and looking (another pruner, a cleaner).
            with contextlib.suppress(FileNotFoundError):
                total += (Path(dirpath) / name).lstat().st_size
    return total


def _unexpected(version_dir: Path) -> str | None:
    """What in a version folder tunecache did not put there, or None if it is all ours.

    A folder holding anything else (a user's file, a symlink) is left alone: pruning deletes
    whole folders, and must never take something it did not write.
    """
    for device_dir in version_dir.iterdir():
        if device_dir.is_symlink() or not device_dir.is_dir():
            return f"{device_dir.name} is not a device folder"
        for item in device_dir.iterdir():
            if item.name == QUARANTINE_DIR and item.is_dir() and not item.is_symlink():
                # Damaged databases tunecache moved aside: nobody writes to them any more.
                continue
            if item.is_symlink() or not item.is_file():
                return f"{device_dir.name}/{item.name} is not a file"
            if not item.name.startswith(paths.DATABASE_NAME):
                return f"{device_dir.name}/{item.name} is not a cache file"
    return None


def prune_versions(
    device: Device, *, root: str | os.PathLike[str] | None = None, dry_run: bool = False
) -> list[PrunedVersion]:
    """Remove the version folders of `device`'s client other than its current version.

    Each database in a folder is claimed first (`tunecache.store.access.claim`): a folder any
    process still has a database of open is skipped and reported, never deleted under it. A
    dry run only looks.
    """
    tune = paths.cache_root(device.client, root) / "tune"
    if not tune.is_dir():
        return []
    out = []
    for version_dir in sorted(tune.iterdir()):
        version = version_dir.name
        if version == device.client_version or version.startswith("."):
            continue
        if version_dir.is_symlink() or not version_dir.is_dir():
            continue
        size = _folder_bytes(version_dir)
        unexpected = _unexpected(version_dir)
        if unexpected is not None:
            out.append(PrunedVersion(version, str(version_dir), size, False, unexpected))
            continue
        if dry_run:
            out.append(PrunedVersion(version, str(version_dir), size, False, None))
            continue
        out.append(_remove_version(version, version_dir, size))
    return out


def _remove_version(version: str, version_dir: Path, size: int) -> PrunedVersion:
    claims: list[sqlite3.Connection] = []
    try:
        for db in sorted(version_dir.glob(f"*/{paths.DATABASE_NAME}")):
            try:
                claims.append(claim(db))
            except sqlite3.Error as error:
                release(claims, restore=True)
                claims = []
                return PrunedVersion(
                    version,
                    str(version_dir),
                    size,
                    False,
                    f"{db.parent.name} is in use by another process ({error})",
                )
        try:
            shutil.rmtree(version_dir)
        except OSError as error:
            release(claims, restore=True)
            claims = []
            return PrunedVersion(
                version, str(version_dir), size, False, f"cannot remove: {error.strerror}"
            )
        return PrunedVersion(version, str(version_dir), size, True, None)
    finally:
        release(claims, restore=False)
