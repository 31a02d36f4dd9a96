"""Damaged cache files: opening one never crashes the host, the resolver answers the heuristic
with one warning, and at tunecache's own location the database, -wal and -shm are moved aside
together, under a lock, for what could be salvaged of them (or a fresh cache, where nothing
could: tests/reliability/test_salvage.py measures what one damaged page costs)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability import harness
from tests.reliability.harness import DEVICE, MARK, NAMES, OPENED, Child, Sender
from tunecache import paths
from tunecache.cache import Cache
from tunecache.errors import StoreError
from tunecache.keys import Key, make_key
from tunecache.store import quarantine

ENTRIES = 150
SIDE = ("", "-wal", "-shm")


def _key(i: int) -> Key:
    return make_key("conv_F32_corrupt", h=i + 1)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache with ENTRIES entries, written once for the module and copied by each test."""
    db = tmp_path_factory.mktemp("template") / "cache.db"
    with Cache.open(device=DEVICE, path=db) as cache:
        for i in range(ENTRIES):
            harness.write_for(0, i, _key(i)).put(cache)
    assert not Path(f"{db}-wal").exists()  # a clean close checkpointed it
    return db


def _filled(root: Path, template: Path) -> Path:
    """A copy of the template at the managed location of DEVICE under `root`."""
    db = paths.database_path(DEVICE, root)
    db.parent.mkdir(parents=True)
    shutil.copy(template, db)
    return db


def _truncate(db: Path, tmp: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def _flip_magic(db: Path, tmp: Path) -> None:
    data = bytearray(db.read_bytes())
    data[0] ^= 0x01  # "SQLite format 3" -> "RQLite format 3"
    db.write_bytes(data)


def _flip_page_size(db: Path, tmp: Path) -> None:
    data = bytearray(db.read_bytes())
    data[16] ^= 0x40  # a single bit of the page size in the header
    db.write_bytes(data)


def _garbage_pages(db: Path, tmp: Path) -> None:
    data = bytearray(db.read_bytes())
    rng = random.Random(7)
    size = 4096
    for page in range(2, len(data) // size, 3):
        data[page * size : (page + 1) * size] = rng.randbytes(size)
    db.write_bytes(data)


def _not_sqlite(db: Path, tmp: Path) -> None:
    db.write_bytes(b"model weights, not a cache\n" * 4000)


def _another_program(db: Path, tmp: Path) -> None:
    db.unlink()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")


def _foreign_wal(db: Path, tmp: Path) -> None:
    # The -wal of another, larger cache, with commits its writer never checkpointed, put beside
    # this database: replaying its frames mixes the other file's pages into this one.
    other = tmp / "other.db"
    with Cache.open(device=DEVICE, path=other) as cache:
        for i in range(200):
            harness.write_for(1, i, _key(i)).put(cache)

    def crash_after_writes(send: Sender) -> None:
        cache = Cache.open(device=DEVICE, path=other)
        with cache.engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA wal_autocheckpoint = 0")
        for i in range(200, 230):
            harness.write_for(1, i, _key(i)).put(cache)
        os._exit(0)  # no close, so no checkpoint: the commits stay in the -wal

    Child(crash_after_writes).finish()
    shutil.copy(f"{other}-wal", f"{db}-wal")


DAMAGE: dict[str, Callable[[Path, Path], None]] = {
    "truncated": _truncate,
    "flipped magic byte": _flip_magic,
    "flipped page-size bit": _flip_page_size,
    "garbage pages": _garbage_pages,
    "not sqlite": _not_sqlite,
    "another program's database": _another_program,
    "foreign -wal": _foreign_wal,
}


def _open_in_child(root: Path) -> dict[str, object]:
    """In a forked child: resolve every key, then open the cache, write and read one entry.

    A child, so that a crash (a segfault, an abort) is a failed test, not a dead test runner.
    """

    def body(send: Sender) -> None:
        out: dict[str, object] = {}
        from tunecache.resolve import Table

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = Table.open(device=DEVICE, root=root, use="all")
            answers = [table.resolve(_key(i), NAMES, NAMES[3]) for i in range(ENTRIES)]
            table.close()
        # The sources in order, runs collapsed: ["exact", "heuristic"] means some exact
        # answers, then only the heuristic.
        out["resolver_sources"] = [
            a.source for i, a in enumerate(answers) if i == 0 or a.source != answers[i - 1].source
        ]
        out["resolver_illegal"] = [a.choice for a in answers if a.choice not in NAMES]
        out["resolver_warnings"] = [str(w.message) for w in caught]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = Cache.open(device=DEVICE, root=root)
        out["open_warnings"] = [
            str(w.message) for w in caught if "SQLite" not in str(w.message)[:8]
        ]
        out["outcome"] = cache.outcome.value if cache.outcome else None
        out["count"] = cache.count()
        harness.write_for(2, 0, _key(0)).put(cache)
        got = cache.get(_key(0), candidates=NAMES)
        out["written"] = None if got is None else got.choice
        cache.close()
        send(MARK, OPENED, text=json.dumps(out))

    kid = Child(body)
    kid.finish()
    assert kid.crashes() == [] and os.waitstatus_to_exitcode(kid.status or 0) == 0, kid.crashes()
    [report] = [m.text for m in kid.messages if m.tag == MARK]
    result: dict[str, object] = json.loads(report)
    return result


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_cache_is_moved_aside_whole_and_a_fresh_one_takes_its_place(
    tmp_path: Path, template: Path, damage: Callable[[Path, Path], None]
) -> None:
    root = tmp_path / "root"
    db = _filled(root, template)
    damage(db, tmp_path)
    before = {s: Path(f"{db}{s}").read_bytes() for s in SIDE if Path(f"{db}{s}").exists()}

    result = _open_in_child(root)
    print(f"{db.name}: {result}")

    # Read-only, it never moves anything: one warning saying why, and from then on the
    # heuristic. Where the damage lies deep in the file, what it read before meeting the
    # damage answered exactly (the foreign -wal case); never an illegal choice.
    assert result["resolver_sources"] in (["heuristic"], ["exact", "heuristic"])
    assert result["resolver_illegal"] == []
    warned = result["resolver_warnings"]
    assert isinstance(warned, list) and len(warned) == 1, warned
    # The open moved the damage aside, said so once with what it salvaged, and goes on with
    # the rebuilt cache (or a fresh one, where nothing could be read) that works.
    messages = result["open_warnings"]
    assert isinstance(messages, list) and len(messages) == 1, messages
    message = str(messages[0])
    assert "moved aside" in message and "\n" not in message
    kept = _kept(message)
    if kept is None:
        assert "nothing could be salvaged" in message
        assert (result["outcome"], result["count"]) == ("created", 0)
    else:
        assert (result["outcome"], result["count"]) == ("current", kept)
    assert result["written"] == harness.write_for(2, 0, _key(0)).choice
    [folder] = (db.parent / quarantine.QUARANTINE_DIR).iterdir()
    assert str(folder) in message
    # Everything that was there, byte for byte, moved together; REASON.txt says why.
    for suffix, data in before.items():
        assert (folder / f"{db.name}{suffix}").read_bytes() == data, suffix
    assert "cache.db" in (folder / "REASON.txt").read_text()
    assert harness.structure_problems(db) == []
    stored = harness.rows(db)
    assert stored.pop(_key(0).text) == harness.write_for(2, 0, _key(0)).row()
    # What was salvaged is whole: each entry as one write left it (the foreign -wal's pages
    # hold the other cache's writes of the same keys: writer 1's).
    original = harness.rows(template)
    for text, row in stored.items():
        i = int(text.split("_h")[1].split("_")[0]) - 1
        assert row in (original[text], harness.write_for(1, i, _key(i)).row()), text
    assert len(stored) in (kept or 0, (kept or 0) - 1)


def _kept(message: str) -> int | None:
    """How many entries the warning says the salvage kept, or None where nothing was."""
    found = re.search(r"([\d,]+) entries kept", message)
    return None if found is None else int(found.group(1).replace(",", ""))


def test_a_zero_byte_file_is_a_new_cache_not_damage(tmp_path: Path) -> None:
    # SQLite creates the file before it writes the first page, so a zero-byte file is also what
    # a cache being created by another process looks like: it must not be moved aside.
    root = tmp_path / "root"
    db = paths.database_path(DEVICE, root)
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    result = _open_in_child(root)
    print(f"zero-byte file: {result}")
    assert result["open_warnings"] == []
    assert (result["outcome"], result["count"]) == ("created", 0)
    assert not (db.parent / quarantine.QUARANTINE_DIR).exists()
    assert result["resolver_sources"] == ["heuristic"]


def test_a_damaged_file_named_by_the_caller_is_refused_and_left_alone(
    tmp_path: Path, template: Path
) -> None:
    # path= may name anything, even a document opened by mistake: never moved, one-line error.
    root = tmp_path / "root"
    db = _filled(root, template)
    _garbage_pages(db, tmp_path)
    before = db.read_bytes()
    with pytest.raises(StoreError, match="is damaged") as info:
        Cache.open(device=DEVICE, path=db)
    assert "\n" not in str(info.value)
    assert db.read_bytes() == before
    assert not (db.parent / quarantine.QUARANTINE_DIR).exists()


@pytest.mark.slow
def test_processes_that_find_the_same_damage_move_it_aside_once(
    tmp_path: Path, template: Path
) -> None:
    # Six processes open one damaged cache at the same instant; each then writes its own entry.
    # Exactly one moves the damage aside, and nobody moves the fresh cache another has begun.
    root = tmp_path / "root"
    db = _filled(root, template)
    _garbage_pages(db, tmp_path)
    n = 6
    go_r, go_w = os.pipe()

    def body(send: Sender) -> None:
        import_warnings: list[str] = []
        send(harness.READY)
        os.read(go_r, 1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = Cache.open(device=DEVICE, root=root)
        import_warnings += [str(w.message) for w in caught if "moved aside" in str(w.message)]
        harness.write_for(3, os.getpid(), make_key("conv_F32_mine", p=os.getpid())).put(cache)
        cache.close()
        send(MARK, OPENED, text=str(len(import_warnings)))

    kids = [Child(body, close=[go_w]) for _ in range(n)]
    harness.wait_for(kids, harness.READY)
    os.close(go_w)
    for kid in kids:
        kid.finish()
    os.close(go_r)
    moved = [int(m.text) for kid in kids for m in kid.messages if m.tag == MARK]
    print(f"{n} processes opened one damaged cache at once: {sum(moved)} moved it aside")
    assert [kid.crashes() for kid in kids] == [[]] * n
    assert sorted(moved) == [0] * (n - 1) + [1]
    assert len(list((db.parent / quarantine.QUARANTINE_DIR).iterdir())) == 1
    # Every process's entry is in the one cache that took the damaged one's place.
    mine = [t for t in harness.rows(db) if t.startswith("conv_F32_p")]
    assert len(mine) == n
    assert harness.structure_problems(db) == []
