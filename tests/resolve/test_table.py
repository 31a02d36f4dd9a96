"""Tables: exact answers, forced entries, what a table remembers, forks, light imports."""

from __future__ import annotations

import gc
import multiprocessing
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.resolve.conftest import CANDS, SIG, mm, put, table
from tunecache.cache import Cache, Entry
from tunecache.device import Device
from tunecache.errors import BadArgumentError, TunecacheWarning
from tunecache.resolve import Answer, Table, using


def test_an_exact_key_answers_its_choice(store: Cache, db: Path, device: Device) -> None:
    entry = put(store, mm(256), "blocked")
    answer = table(db, device).resolve(mm(256), CANDS, "blas")
    assert answer == Answer("blocked", "exact", entry.id, 0.0, None)


def test_exact_hits_agree_before_and_after_the_signature_is_loaded(
    store: Cache, db: Path, device: Device
) -> None:
    # Before a miss, an exact hit is one indexed query; after it, the in-memory index answers.
    entries = {m: put(store, mm(m), choice) for m, choice in [(64, "naive"), (512, "blocked")]}
    t = table(db, device)
    before = t.resolve(mm(64), CANDS, "blas")
    assert t.resolve(mm(5000), CANDS, "blas").source == "heuristic"  # loads the signature
    after = t.resolve(mm(512), CANDS, "blas")
    assert before == Answer("naive", "exact", entries[64].id, 0.0)
    assert after == Answer("blocked", "exact", entries[512].id, 0.0)


def test_the_heuristic_must_be_one_of_the_candidates(db: Path, device: Device) -> None:
    with pytest.raises(BadArgumentError, match="heuristic"):
        table(db, device).resolve(mm(256), CANDS, "cublas")


# -- forced entries ------------------------------------------------------------------------------


def test_derive_forces_entries_in_and_out_without_writing(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    before = db.read_bytes()
    base = table(db, device)
    fresh = judged["fresh"].id
    with_fresh = base.derive(include=[fresh])
    without_shared = base.derive(exclude=[judged["shared"].id])
    assert base.resolve(mm(4096), CANDS, "blas").source == "heuristic"
    assert with_fresh.resolve(mm(4096), CANDS, "blas") == Answer("naive", "exact", fresh, 0.0)
    assert without_shared.resolve(mm(256), CANDS, "blas").source == "heuristic"
    added = base.derive(add=[(mm(8192), CANDS, "blocked")])
    assert added.resolve(mm(8192), CANDS, "blas") == Answer("blocked", "exact", None, 0.0)
    assert added.resolve(mm(6000), CANDS, "blas").choice == "blocked"
    with pytest.raises(BadArgumentError):
        base.derive(add=[(mm(8192), CANDS, "cublas")])
    assert db.read_bytes() == before


def test_derive_mask_answers_as_a_stored_mask_does_where_exclude_lets_a_neighbour_serve(
    store: Cache, db: Path, device: Device
) -> None:
    near = put(store, mm(256), "blocked")
    far = put(store, mm(512), "naive")
    base = table(db, device, model="bert")
    excluded = base.derive(exclude=[near.id])
    masked = base.derive(mask=[near.id])
    # Excluded: the key borrows its neighbour's choice. Masked: the heuristic, as for gpt above.
    assert excluded.resolve(mm(256), CANDS, "blas") == Answer(
        "naive", "nearest", far.id, 1.0, mm(512)
    )
    assert masked.resolve(mm(256), CANDS, "blas") == Answer("blas", "masked", near.id, 0.0)
    # A mask also stops borrowing from the entry, and wins over include.
    assert masked.resolve(mm(200), CANDS, "blas").entry_id != near.id
    assert base.derive(include=[near.id], mask=[near.id]).resolve(
        mm(256), CANDS, "blas"
    ).source == ("masked")
    # Derived tables keep the mask.
    assert masked.derive().resolve(mm(256), CANDS, "blas").source == "masked"


def test_derive_keeps_the_options_unless_told_otherwise(db: Path, device: Device) -> None:
    base = table(db, device, model="bert", use="all", max_distance=2, scenarios={"m": (1,)})
    same = base.derive()
    assert (same.path, same.model, same.use, same.max_distance, same.scenarios) == (
        db,
        "bert",
        "all",
        2.0,
        {"m": (1,)},
    )
    assert base.derive(use="validated", model=None).use == "validated"


# -- what a table remembers ----------------------------------------------------------------------


def test_a_keys_answer_holds_for_the_life_of_a_table_until_reloaded(
    store: Cache, db: Path, device: Device
) -> None:
    t = table(db, device)
    assert t.resolve(mm(256), CANDS, "blas").source == "heuristic"
    put(store, mm(256), "blocked")
    assert t.resolve(mm(256), CANDS, "blas").source == "heuristic"
    assert t.reload().resolve(mm(256), CANDS, "blas").choice == "blocked"


def test_remembered_is_the_answer_a_table_keeps(store: Cache, db: Path, device: Device) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    assert t.remembered(mm(256), CANDS, "blas") is None  # not asked yet
    answer = t.resolve(mm(256), CANDS, "blas")
    assert t.remembered(mm(256), CANDS, "blas") is answer
    assert t.remembered(mm(256), CANDS, "naive") is None  # another question


def test_memo_for_keeps_one_memo_per_token_and_damage_empties_them(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    first, second = object(), object()
    memo = t.memo_for(first)
    assert t.memo_for(first) is memo and t.memo_for(second) is not memo
    memo["shape"] = "function"
    t.resolve(mm(256), CANDS, "blas")
    store.close()
    db.write_bytes(b"garbage" * 1000)
    Path(f"{db}-wal").unlink(missing_ok=True)
    Path(f"{db}-shm").unlink(missing_ok=True)
    t.close()
    with pytest.warns(TunecacheWarning, match="every answer is the heuristic"):
        t.resolve(mm(300), CANDS, "blas")
    assert memo == {} and t.memo_for(first) is memo
    assert t.remembered(mm(256), CANDS, "blas") is None


def test_a_dropped_table_is_freed_at_once_with_its_connection(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    assert t.resolve(mm(256), CANDS, "blas").source == "exact"  # the connection is open
    dropped = weakref.ref(t)
    gc.disable()  # freed by its reference count alone: no cycle through the reader's callback
    try:
        del t
        assert dropped() is None
    finally:
        gc.enable()


def _resolve_in_child(t: Table, queue: multiprocessing.Queue[str]) -> None:
    queue.put(t.resolve(mm(300), CANDS, "blas").choice)


def test_a_table_used_before_fork_works_in_the_child(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    assert t.resolve(mm(256), CANDS, "blas").source == "exact"  # the parent's connection is open
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[str] = ctx.Queue()
    child = ctx.Process(target=_resolve_in_child, args=(t, queue))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == "blocked"
    assert t.resolve(mm(300), CANDS, "blas").choice == "blocked"


def test_counters_count_answers_by_source(
    judged: dict[str, Entry], db: Path, device: Device
) -> None:
    t = table(db, device, model="gpt")
    for _ in range(3):
        t.resolve(mm(256), CANDS, "blas")  # masked, asked thrice: answered once
    t.resolve(mm(4096), CANDS, "blas")  # unvalidated: heuristic
    t.resolve(mm(100_000), CANDS, "blas")
    assert t.counters() == {"exact": 0, "nearest": 0, "masked": 1, "heuristic": 2}


def _returns(name: str) -> Callable[[int, int, int], str]:
    return lambda m, k, n: name


def test_a_busy_cache_answers_the_heuristic_for_now_and_the_entry_once_free(
    locked: Callable[[], object], db: Path, device: Device
) -> None:
    from tunecache.dispatch import Tunable

    t = Table.open(path=db, device=device, timeout=0.05)
    op = Tunable(
        SIG,
        dims=("m", "k", "n"),
        shape=lambda m, k, n: (m, k, n),
        candidates={name: _returns(name) for name in CANDS},
        heuristic="blas",
        register=False,
    )
    with pytest.warns(TunecacheWarning, match="busy"), using(t):
        assert t.resolve(mm(256), CANDS, "blas") == Answer("blas", "heuristic")
        assert op(256, 256, 256) == "blas"
    assert t.remembered(mm(256), CANDS, "blas") is None
    locked()
    # Neither the table nor the tunable kept the answer given while the file was locked.
    with using(t):
        assert t.resolve(mm(256), CANDS, "blas").choice == "blocked"
        assert op(256, 256, 256) == "blocked"


# -- the read path stays light ---------------------------------------------------------------------


def test_the_read_path_imports_neither_sqlalchemy_nor_alembic_nor_numpy_on_a_hit(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    probe = f"""
import sys
from tunecache import Device, Table, make_key
device = Device(**{device.as_dict()!r})
t = Table.open(path={str(db)!r}, device=device)
assert t.resolve(make_key("{SIG}", m=256, k=256, n=256), {CANDS!r}, "blas").source == "exact"
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"sqlalchemy", "alembic", "numpy"}}))
assert t.resolve(make_key("{SIG}", m=300, k=256, n=256), {CANDS!r}, "blas").source == "nearest"
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"sqlalchemy", "alembic", "numpy"}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    # Device is a dataclass; importing it is the probe's choice, not the resolver's.
    assert done.stdout.split("\n")[:2] == ["[]", "['numpy']"]
