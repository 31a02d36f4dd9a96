"""Damage made by writing real bytes into real pages, and the scenarios that judge what a cache
keeps of it: a cache moved aside while writers write (nothing acknowledged may be lost), and
the salvage of a cache with one garbage page (what it keeps, what it loses).

The tests in this folder run them small; tools/bench_quarantine.py runs them full size, seeded,
and prints the figures. Pages are found by walking SQLite's b-trees in the file itself (the
file format is documented at https://sqlite.org/fileformat2.html), not through a SQLite
extension a build may lack.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tests.reliability import batches, harness
from tests.reliability.harness import ACK, COUNT, DEVICE, ERROR, MARK, OPENED, READY, Child, Sender
from tunecache import paths
from tunecache.cache import Cache
from tunecache.keys import Key, make_key

#: the tables and indexes whose pages the scenarios damage
ENTRIES_TABLE = "entries"
KEY_ID_INDEX = "ix_entries_key_id"

_LEAF = {0x0A: "index leaf", 0x0D: "table leaf"}
_INTERIOR = {0x02: "index interior", 0x05: "table interior"}


@dataclass(frozen=True, slots=True)
class Page:
    """One b-tree page of a database file."""

    number: int
    #: "table leaf", "table interior", "index leaf" or "index interior"
    kind: str
    #: how many cells (rows, index records or child pointers) it holds
    cells: int


def tree_pages(db: Path, name: str) -> list[Page]:
    """Every page of the b-tree of table or index `name`, in the order a walk meets them.

    Reads the database file alone: the caller makes sure its -wal holds nothing (a cache
    closed cleanly checkpoints it).
    """
    with contextlib.closing(harness.connect_ro(db)) as conn:
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        found = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)
        ).fetchone()
    if found is None:
        raise LookupError(f"no table or index {name} in {db}")
    data = db.read_bytes()
    out: list[Page] = []
    todo = [int(found[0])]
    while todo:
        number = todo.pop()
        page = data[(number - 1) * size : number * size]
        head = 100 if number == 1 else 0
        kind = page[head]
        cells = int.from_bytes(page[head + 3 : head + 5], "big")
        if kind in _LEAF:
            out.append(Page(number, _LEAF[kind], cells))
            continue
        if kind not in _INTERIOR:
            raise ValueError(f"page {number} of {name} is not a b-tree page (type {kind})")
        out.append(Page(number, _INTERIOR[kind], cells))
        pointers = head + 12
        children = [
            int.from_bytes(page[offset : offset + 4], "big")
            for offset in (
                int.from_bytes(page[pointers + 2 * i : pointers + 2 * i + 2], "big")
                for i in range(cells)
            )
        ]
        todo += reversed([*children, int.from_bytes(page[head + 8 : head + 12], "big")])
    return out


def garbage(db: Path, page: int, seed: int) -> None:
    """Overwrite one page of the file at `db` with random bytes, in place."""
    with contextlib.closing(harness.connect_ro(db)) as conn:
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(random.Random(seed).randbytes(size))


def middle_leaf(db: Path, name: str) -> Page:
    """A leaf page a quarter of the way into a b-tree: appends never touch it, nor do the
    splits they cause (SQLite balances a page with up to two neighbours on each side)."""
    leaves = [p for p in tree_pages(db, name) if p.kind.endswith("leaf")]
    if len(leaves) < 6:
        raise ValueError(f"{name} has {len(leaves)} leaf pages; fill the cache more")
    return leaves[len(leaves) // 4]


# -- a cache to damage ----------------------------------------------------------------------------


def base_key(index: int) -> Key:
    """The key of entry `index` of a filled cache; its text sorts before every key a writer
    of these scenarios adds, so the writers' new rows land in other pages."""
    return make_key("conv_F32_base", h=index + 1)


def base_write(index: int) -> harness.Write:
    """Entry `index` of a filled cache, fully determined by its number."""
    return harness.write_for(0, index, base_key(index))


def fill(db: Path, entries: int) -> None:
    """Write `entries` entries into the cache at `db` (created if need be), 1,000 a batch, and
    close it: the close checkpoints the -wal into the file."""
    with Cache.open(device=DEVICE, path=db) as cache:
        for start in range(0, entries, 1000):
            stop = min(entries, start + 1000)
            cache.put_many(batches.as_new_entry(base_write(i)) for i in range(start, stop))
    assert not Path(f"{db}-wal").exists()


def managed(root: Path) -> Path:
    """The cache file of DEVICE at tunecache's own location under `root`: the only place a
    damaged cache is moved aside (one named by `path=` is never touched)."""
    db = paths.database_path(DEVICE, root)
    db.parent.mkdir(parents=True, exist_ok=True)
    return db


def salvage_warning(messages: list[str]) -> str:
    """The one warning that says a damaged cache was moved aside."""
    found = [m for m in messages if "moved aside" in m]
    if len(found) != 1:
        raise AssertionError(f"expected one 'moved aside' warning, got {messages}")
    return found[0]


def open_recording(root: Path) -> tuple[Cache, list[str]]:
    """Open DEVICE's cache under `root`, with the TunecacheWarnings the open gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = Cache.open(device=DEVICE, root=root)
    return cache, [str(w.message) for w in caught if "SQLite 3." not in str(w.message)[:10]]


# -- 1. moved aside while writers write -----------------------------------------------------------


def writer_key(writer: int, seq: int) -> Key:
    """A key only this writer writes, sorting after every base key."""
    return make_key("conv_F32_writer", w=writer + 1, s=seq + 1)


def _writer(root: Path, writer: int, go: int, stop: int, send: Sender) -> None:
    """Put new entries until told to stop; ACK each one after `put` returned."""
    cache = Cache.open(device=DEVICE, root=root)
    send(READY)
    os.read(go, 1)  # returns when the parent closes the other end
    seq = 0
    while not select.select([stop], [], [], 0)[0]:
        try:
            harness.write_for(writer, seq, writer_key(writer, seq)).put(cache)
        except Exception as error:  # a put that fails is not acknowledged; count it
            send(ERROR, seq, text=f"{type(error).__name__}: {error}")
        else:
            send(ACK, seq)
        seq += 1
    send(COUNT, seq)
    cache.close()


def _mover(root: Path, send: Sender) -> None:
    """Open the cache, which finds the damage and moves it aside; report the warning."""
    cache, messages = open_recording(root)
    cache.close()
    send(MARK, OPENED, text=" | ".join(messages))


@dataclass
class MoveTrial:
    """One run of "move the cache aside while writers write", and what the checks found."""

    seed: int
    writers: int
    damaged: str
    acked: int = 0
    #: puts that raised (not acknowledged, so nothing is owed for them), and the first error
    failed: int = 0
    first_error: str = ""
    lost: list[str] = field(default_factory=list)
    #: writes acknowledged after the move was done: writers that went on into the live cache
    after_move: int = 0
    #: entries the cache held before the writers began, and how many the live cache kept whole
    base: int = 0
    base_kept: int = 0
    #: rows the damaged page held
    cells: int = 0
    warning: str = ""
    violations: list[str] = field(default_factory=list)


def move_while_writing(
    root: Path,
    seed: int,
    *,
    entries: int = 3000,
    writers: int = 0,
    target: str = "",
    template: Path | None = None,
) -> MoveTrial:
    """Writers keep putting into a cache at tunecache's location; one page of it is damaged; a
    second process opens it, finds the damage and moves it aside; the writers go on. Then
    every write a writer acknowledged must be in the live cache, byte for byte.

    The seed picks the number of writers (1 to 3, unless `writers`), the page (a middle leaf
    of the key-id index or of the entries table, unless `target` names one: pages the writers'
    appends never touch), and how many acknowledgements come before the move and after it.
    The cache starts as a copy of `template` where one is given (a filled cache), else with
    `entries` entries.
    """
    rng = random.Random(seed)
    writers = writers or rng.randint(1, 3)
    db = managed(root)
    harness.remove_database(db)
    if template is None:
        fill(db, entries)
    else:
        db.write_bytes(template.read_bytes())
    target = target or rng.choice([KEY_ID_INDEX, ENTRIES_TABLE])
    page = middle_leaf(db, target)
    trial = MoveTrial(seed, writers, f"{page.kind} page {page.number} of {target}")
    before = harness.rows(db)
    trial.base, trial.cells = len(before), page.cells
    go_r, go_w = os.pipe()
    stop_r, stop_w = os.pipe()
    kids = [
        Child(partial(_writer, root, w, go_r, stop_r), close=[go_w, stop_w]) for w in range(writers)
    ]
    try:
        harness.wait_for(kids, READY)
        # Damage appears while the writers hold the cache open, as a disk that lies would make it.
        garbage(db, page.number, seed)
    finally:
        os.close(go_w)  # the writers start (or, after a failure, end)
    try:
        _wait_acks(kids, rng.randint(1, 30))
        mover = Child(partial(_mover, root), close=[stop_w])
        mover.finish()
        trial.violations += [f"mover: {c}" for c in mover.crashes()]
        trial.warning = " | ".join(m.text for m in mover.messages if m.tag == MARK)
        moved_at = _acks(kids)
        _wait_acks(kids, moved_at + rng.randint(1, 30))
    finally:
        os.close(stop_w)
        for kid in kids:
            kid.finish()
        os.close(go_r)
        os.close(stop_r)
    _judge_moved(db, kids, trial, before)
    trial.after_move = trial.acked - moved_at
    return trial


def _acks(kids: list[Child]) -> int:
    return sum(m.tag == ACK for kid in kids for m in kid.messages)


def _wait_acks(kids: list[Child], count: int) -> None:
    """Wait until the writers together acknowledged `count` writes (or all ended)."""
    while _acks(kids) < count and not all(k.eof for k in kids):
        harness.pump(kids, 1.0)


def _judge_moved(
    db: Path, kids: list[Child], trial: MoveTrial, before: dict[str, tuple[object, ...]]
) -> None:
    if "moved aside" not in trial.warning:
        trial.violations.append(f"the mover did not move the damage aside: {trial.warning!r}")
    for writer, kid in enumerate(kids):
        trial.violations += [f"writer {writer}: {c}" for c in kid.crashes()]
        errors = [m.text for m in kid.messages if m.tag == ERROR]
        trial.failed += len(errors)
        trial.first_error = trial.first_error or (errors[0] if errors else "")
    trial.violations += harness.structure_problems(db)
    stored = harness.rows(db)
    for writer, kid in enumerate(kids):
        for m in kid.messages:
            if m.tag != ACK:
                continue
            trial.acked += 1
            write = harness.write_for(writer, m.a, writer_key(writer, m.a))
            if stored.get(write.key.text) != write.row():
                trial.lost.append(f"writer {writer} write {m.a} ({write.key.text})")
    # What was there before: all of it where an index was hit, all but the page's rows where
    # the table was, and every row kept as it was written.
    trial.base_kept = sum(1 for text, row in before.items() if stored.get(text) == row)
    allowed = trial.cells if trial.damaged.startswith("table") else 0
    if trial.base - trial.base_kept > allowed:
        trial.violations.append(
            f"{trial.base - trial.base_kept} of the {trial.base} entries there before were "
            f"lost ({trial.damaged}, {trial.cells} rows)"
        )


# -- 2. salvage of one garbage page ---------------------------------------------------------------


@dataclass
class SalvageTrial:
    """What opening a cache with one garbage page kept of it."""

    damaged: str
    #: rows the damaged page held
    cells: int
    entries: int
    #: entries in the live cache afterwards, and how many of them are byte-equal to the originals
    kept: int = 0
    intact: int = 0
    warning: str = ""
    violations: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        """Entries the cache had that it no longer has."""
        return self.entries - self.kept


def salvage_page(root: Path, template: Path, name: str, seed: int) -> SalvageTrial:
    """Copy the filled cache `template` to tunecache's location under `root`, put random
    bytes in a middle leaf of table or index `name`, open it, and compare what is left."""
    db = managed(root)
    harness.remove_database(db)
    db.write_bytes(template.read_bytes())
    original = harness.rows(template)
    page = middle_leaf(db, name)
    garbage(db, page.number, seed)
    trial = SalvageTrial(f"{page.kind} page {page.number} of {name}", page.cells, len(original))
    cache, messages = open_recording(root)
    cache.close()
    trial.warning = " | ".join(messages)
    trial.violations += harness.structure_problems(db)
    stored = harness.rows(db)
    trial.kept = len(stored)
    trial.intact = sum(1 for text, row in stored.items() if original.get(text) == row)
    if trial.intact != trial.kept:
        trial.violations.append(f"{trial.kept - trial.intact} entries kept but changed")
    return trial


# -- 3. a crash in the middle of a salvage --------------------------------------------------------

SALVAGING = 101


def _salvaging_child(root: Path, send: Sender) -> None:
    # Tracing, not mocking: the real salvage runs; the parent only learns when it begins.
    from tunecache.store import salvage

    real = salvage.salvage

    def traced(source: Path, target: Path, busy_timeout: float) -> salvage.Salvage:
        send(MARK, SALVAGING)
        return real(source, target, busy_timeout)

    salvage.salvage = traced  # type: ignore[assignment]
    cache, _ = open_recording(root)
    cache.close()
    send(MARK, OPENED)


def _marks(kid: Child) -> set[int]:
    return {m.a for m in kid.messages if m.tag == MARK}


def _damaged_copy(root: Path, template: Path, seed: int) -> tuple[Path, bytes, Page]:
    db = managed(root)
    harness.remove_database(db)
    db.write_bytes(template.read_bytes())
    page = middle_leaf(db, ENTRIES_TABLE)
    garbage(db, page.number, seed)
    return db, db.read_bytes(), page


def salvage_window(root: Path, template: Path) -> float:
    """Seconds from the start of a salvage to the end of the open that made it, measured once."""
    _damaged_copy(root, template, 0)
    kid = Child(partial(_salvaging_child, root))
    started = 0.0
    while not kid.eof:
        for _, m in harness.pump([kid], 1.0):
            if m.tag == MARK and m.a == SALVAGING:
                started = time.monotonic()
    kid.finish()
    if _marks(kid) != {SALVAGING, OPENED}:
        raise RuntimeError(f"calibration salvage did not run: {kid.crashes()}")
    return time.monotonic() - started


@dataclass
class CrashTrial:
    """One SIGKILL during a salvage: where it landed and what the checks found."""

    seed: int
    phase: str = ""
    violations: list[str] = field(default_factory=list)


def crash_salvage(root: Path, template: Path, seed: int, window: float) -> CrashTrial:
    """SIGKILL a process at a random point of salvaging a damaged cache and moving it aside:
    the damaged file is at its place or in quarantine, byte for byte, and at the cache's place
    there is either nothing or the whole replacement; the next open goes on from there."""
    rng = random.Random(seed)
    trial = CrashTrial(seed)
    db, damaged, page = _damaged_copy(root, template, seed)
    kid = Child(partial(_salvaging_child, root))
    while SALVAGING not in _marks(kid) and not kid.eof:
        harness.pump([kid], 1.0)
    time.sleep(rng.uniform(0, window * 1.2))  # a random instant, not a synchronisation
    kid.kill()
    kid.finish()
    trial.violations += [f"child failed: {c}" for c in kid.crashes()]
    moved = [p for p in (db.parent / "quarantine").glob(f"*/{db.name}") if p.is_file()]
    if moved:
        if [p.read_bytes() for p in moved] != [damaged]:
            trial.violations.append("the file in quarantine is not the damaged file")
    elif not db.exists() or db.read_bytes() != damaged:
        trial.violations.append("the damaged file is neither at its place nor in quarantine")
    original = harness.rows(template)
    if not db.exists():
        trial.phase = "moved, nothing in its place"
    elif not moved:
        trial.phase = "before the move"
    else:
        trial.phase = "replaced"
        _judge_replacement(db, original, page, trial)
    # The next open goes on: it salvages what is still at the place, or starts afresh there.
    cache, _ = open_recording(root)
    count = cache.count()
    cache.close()
    if trial.phase == "moved, nothing in its place":
        if count:
            trial.violations.append(f"a fresh cache holds {count} entries")
    else:
        _judge_replacement(db, original, page, trial)
    return trial


def _judge_replacement(
    db: Path, original: dict[str, tuple[object, ...]], page: Page, trial: CrashTrial
) -> None:
    problems = harness.structure_problems(db)
    if problems:
        trial.violations += [f"{trial.phase}: {p}" for p in problems]
        return
    stored = harness.rows(db)
    lost = len(original) - len(stored)
    if not 0 <= lost <= page.cells or any(original.get(t) != r for t, r in stored.items()):
        trial.violations.append(f"{trial.phase}: {len(stored)} entries, not the salvaged ones")
