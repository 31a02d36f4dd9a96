"""Pruning the version folders an upgrade left behind (tunecache.maintain.versions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.maintain.conftest import Filled
from tests.store_helpers import NAMES, sql
from tunecache import maintain
from tunecache.cache import Cache
from tunecache.device import Device


def _version(root: Path, version: str) -> Path:
    device = Device("test-cpu-9000", 4, None, "tunecache", version)
    with Cache.open(device=device, root=root) as old:
        old.put("conv_F32_m1", choice="direct", candidates=NAMES)
        return old.path


def test_old_version_folders_are_removed_and_the_current_one_kept(
    filled: Filled, tmp_path: Path
) -> None:
    root = tmp_path / "store"  # where the cache fixture lives
    old = _version(root, "0.0.9")
    current = filled.cache.path
    dry = maintain.prune(filled.cache, versions=True, root=root, dry_run=True)
    assert [(v.version, v.removed, v.skipped) for v in dry.versions] == [("0.0.9", False, None)]
    assert dry.versions[0].bytes > 0 and old.exists()
    report = maintain.prune(filled.cache, versions=True, root=root)
    assert [(v.version, v.removed) for v in report.versions] == [("0.0.9", True)]
    assert not old.parent.parent.exists()
    assert current.exists() and filled.cache.count() == 4


def test_a_version_folder_in_use_is_skipped(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.8")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(old)!r}, isolation_level=None)\n"
            "c.execute('SELECT count(*) FROM entries').fetchall()\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "c.execute(\"UPDATE entries SET choice = 'im2col'\")\n"
            "c.execute('COMMIT')\n"
            "print('written', flush=True)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "ready"
        report = maintain.prune_versions(filled.cache.device, root=root)
        assert len(report) == 1 and not report[0].removed
        assert report[0].skipped is not None and "in use" in report[0].skipped
        # The writer that held it open still writes, and its write is there.
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "written"
    finally:
        holder.communicate(timeout=30)
    assert sql(old, "SELECT choice FROM entries") == [("im2col",)]
    assert sql(old, "PRAGMA journal_mode") == [("wal",)]
    # Once nobody holds it, it goes.
    assert maintain.prune_versions(filled.cache.device, root=root)[0].removed


def test_a_version_folder_with_quarantined_databases_goes(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.6")
    aside = old.parent / "quarantine" / "cache.db.20260101T000000.42"
    aside.mkdir(parents=True)
    (aside / "cache.db").write_bytes(b"damaged" * 10)
    [found] = maintain.prune_versions(filled.cache.device, root=root)
    assert found.removed and not old.parent.parent.exists()


def test_a_version_folder_with_foreign_files_is_left(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.7")
    (old.parent / "notes.txt").write_text("mine")
    [found] = maintain.prune_versions(filled.cache.device, root=root)
    assert not found.removed and found.skipped is not None and "notes.txt" in found.skipped
    assert (old.parent / "notes.txt").read_text() == "mine"


def test_a_dry_run_only_looks(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.5")
    [found] = maintain.prune_versions(filled.cache.device, root=root, dry_run=True)
    assert (found.version, found.path, found.removed, found.skipped) == (
        "0.0.5",
        str(old.parent.parent),
        False,
        None,
    )
    assert found.bytes == sum(p.stat().st_size for p in old.parent.iterdir())
    assert old.exists()


def test_only_real_folders_of_other_versions_are_pruned(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert maintain.prune_versions(filled.cache.device, root=tmp_path / "nowhere") == []
    assert maintain.prune_versions(filled.cache.device, root=root) == []  # only the current one
    tune = filled.cache.path.parent.parent.parent
    (tune / ".partial").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tune / "0.0.4").symlink_to(elsewhere, target_is_directory=True)
    (tune / "0.0.3").write_text("a file, not a folder")
    assert maintain.prune_versions(filled.cache.device, root=root) == []
    assert (tune / ".partial").is_dir() and elsewhere.is_dir() and (tune / "0.0.3").is_file()
