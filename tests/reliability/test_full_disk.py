"""A full disk (issue 16, case 6): a healthy cache with no -shm file stays readable, and what
cannot be done says "disk full", never "disk I/O error".

The real case, a filesystem with no block left, runs where the kernel lets an unprivileged
process mount a tmpfs in namespaces of its own (`unshare --map-root-user --mount`); elsewhere
that test is skipped. The file-size limit (RLIMIT_FSIZE) reproduces the same failure everywhere:
SQLite's write into the new -shm fails (EFBIG where a full disk gives ENOSPC), and so does every
write a writer makes. tests/reliability/disk_full.py holds the scenario both run.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.reliability import disk_full
from tests.reliability.harness import MARK, OPENED, Child, Sender

#: writes past this many bytes of any file fail: less than one page of the -shm file
LIMIT = 1024


def _rows(db: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT key, choice, heuristic FROM decisions").fetchall()
    finally:
        conn.close()


def _judge(commands: dict[str, Any], source: str, in_process: dict[str, Any]) -> None:
    """Every read command read the entry; doctor and import said "disk full" in one line;
    the resolver answered from the cache without a warning; the store said "disk full"."""
    for name in (" ".join(args) for args in disk_full.READ):
        done = commands[name]
        assert done["status"] == 0, (name, done["err"])
        assert "disk I/O error" not in done["err"], name
    assert disk_full.KEY in commands["list"]["out"]
    assert disk_full.KEY in commands["inspect " + disk_full.KEY]["out"]
    assert "(exact)" in commands[f"explain {disk_full.KEY} --use all"]["out"]
    assert "entries:" in commands["where"]["out"] and "1" in commands["where"]["out"]
    for name in ("doctor", "import"):
        err = commands[name]["err"]
        assert commands[name]["status"] == 5, (name, err)
        assert "disk full" in err and "disk I/O error" not in err, (name, err)
        assert err.startswith("tunecache: error: ") and err.count("\n") == 1, (name, err)
    assert in_process["source"] == source == "exact"
    assert in_process["warnings"] == []
    assert "disk full" in str(in_process["store"]) and "\n" not in str(in_process["store"])


def test_a_file_size_limit_reads_the_cache_and_says_disk_full(tmp_path: Path) -> None:
    db, export = tmp_path / "store" / "cache.db", tmp_path / "e.cbor"
    db.parent.mkdir()
    disk_full.prepare(db, export)
    assert sorted(os.listdir(db.parent)) == ["cache.db", "cache.db.write-lock"]  # no -shm
    before = _rows(db)
    commands = disk_full.commands(db, export, disk_full.limit_file_size(LIMIT))

    def body(send: Sender) -> None:
        disk_full.limit_file_size(LIMIT)()
        send(MARK, OPENED, text=json.dumps(disk_full.in_process(db)))

    kid = Child(body)
    kid.finish()
    assert kid.crashes() == [], kid.crashes()
    [report] = [m.text for m in kid.messages if m.tag == MARK]
    _judge(commands, "exact", json.loads(report))
    # Nothing was lost or changed, and with room again the cache is as it was.
    assert _rows(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_writer_that_runs_out_of_room_says_disk_full(tmp_path: Path) -> None:
    # A cache open and working, then no room: the next write says so, and nothing is lost.
    from tunecache.cache import Cache
    from tunecache.errors import StoreError

    db = tmp_path / "cache.db"
    disk_full.prepare(db, tmp_path / "e.cbor")

    def body(send: Sender) -> None:
        with Cache.open(path=db) as cache:
            wal = Path(f"{db}-wal")
            disk_full.limit_file_size(wal.stat().st_size + 100)()
            try:
                cache.put("conv_F32_m65_k3", choice="im2col", candidates=disk_full.NAMES)
                send(MARK, OPENED, text="written")
            except StoreError as error:
                send(MARK, OPENED, text=str(error))

    kid = Child(body)
    kid.finish()
    assert kid.crashes() == [], kid.crashes()
    [said] = [m.text for m in kid.messages if m.tag == MARK]
    assert "disk full" in said and "\n" not in said, said
    assert [row[0] for row in _rows(db)] == [disk_full.KEY]


def _namespaces_allowed() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    done = subprocess.run(
        [unshare, "--map-root-user", "--mount", "true"], capture_output=True, timeout=30
    )
    return done.returncode == 0


@pytest.mark.skipif(not _namespaces_allowed(), reason="no unprivileged mount namespaces here")
def test_a_full_tmpfs_reads_the_cache_and_says_disk_full(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    mount.mkdir()
    export = tmp_path / "e.cbor"
    script = (
        f"mount -t tmpfs -o size=512k tunecache-full {mount} && "
        f"exec {sys.executable} -m tests.reliability.disk_full {mount} {export}"
    )
    done = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        input="",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    print(json.dumps(result, indent=1))
    assert "cache.db-shm" not in result["files_at_rest"]
    assert result["free_bytes"] < 32768  # not even one -shm file's room
    _judge(result["commands"], "exact", result["in_process"])
    after = result["after"]
    assert after["status"] == 0 and json.loads(after["out"])["count"] == 1, after["err"]


def test_an_import_whose_staging_runs_out_of_room_says_so_and_changes_nothing(
    tmp_path: Path,
) -> None:
    # The staging file (beside the cache, nameless) fills up before anything is written: the
    # error is the store's one line, "disk full", not an internal error, and the cache is as
    # it was.
    from tunecache.cache import Cache, NewEntry
    from tunecache.codec import CandidateTiming, TimingRecord
    from tunecache.exchange import export_cache

    record = TimingRecord(
        candidates=tuple(CandidateTiming(n, tuple(1e-5 * (1 + j) for j in range(50))) for n in "ab")
    )
    source, db = tmp_path / "source.db", tmp_path / "cache.db"
    with Cache.open(path=source) as cache:
        cache.put_many(
            NewEntry(f"conv_F32_m{i + 1}_k3", "a", ("a", "b"), record=record) for i in range(3000)
        )
        export = tmp_path / "export.cbor"
        export.write_bytes(export_cache(cache))
    with Cache.open(path=db) as cache:
        cache.put("conv_F32_m1_k5", choice="b", candidates=("a", "b"))
    before = {p.name: p.read_bytes() for p in tmp_path.glob("cache.db*") if p.is_file()}
    limit = max(len(b) for b in before.values()) + 64 * 1024
    assert export.stat().st_size > 4 * limit
    done = disk_full.run(("import", str(export)), db, disk_full.limit_file_size(limit))
    assert done["status"] == 5, done
    assert done["err"].count("\n") == 1 and "disk full" in done["err"], done["err"]
    after = {p.name: p.read_bytes() for p in tmp_path.glob("cache.db*") if p.is_file()}
    assert after == before
