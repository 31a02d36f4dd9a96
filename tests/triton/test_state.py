"""tunecache.triton.state: the store per device, read without SQLAlchemy, written once per key."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tests.triton.fake import GPU, CpuKernel, TableTimer, backend, blocks, launch, tuner
from tunecache.errors import TunecacheWarning
from tunecache.keys import make_key
from tunecache.triton import stored
from tunecache.triton.options import Options
from tunecache.triton.state import KernelStore, Target, WarnOnce


def test_a_warm_process_answers_a_stored_key_with_the_kernels_own_reader() -> None:
    tuned = tuner(CpuKernel())
    launch(tuned, 96)
    assert tuned.wait_pending(timeout=60)  # the record in the store before the child starts
    code = (
        "import sys\n"
        "from tests.triton.fake import CpuKernel, tuner, launch\n"
        "kernel = tuner(CpuKernel())\n"
        "launch(kernel, 96)\n"
        "assert kernel.stats['exact'] == 1, kernel.stats\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " {'sqlalchemy', 'alembic', 'cbor2', 'tunecache'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=os.environ
    )
    assert done.returncode == 0, done.stderr
    loaded = set(eval(done.stdout))
    assert not {m.split(".")[0] for m in loaded} & {"sqlalchemy", "alembic", "cbor2"}
    # One indexed read answers it: no resolver (its nearest-shape index), no writer, no bench,
    # no pending keys, no reuse rule.
    assert "tunecache.triton.stored" in loaded
    unused = {
        "tunecache.resolve",
        "tunecache.triton.writer",
        "tunecache.triton.measure",
        "tunecache.bench",
        "tunecache.triton.background",
        "tunecache.triton.reuse",
    }
    assert not loaded & unused


def test_a_store_whose_view_is_not_the_read_contracts_is_left_to_the_resolver() -> None:
    import sqlite3

    tuned = tuner(CpuKernel())
    launch(tuned, 96)
    db = stored_path(tuned)
    with sqlite3.connect(db) as conn:  # a damaged store: the view answers something else
        conn.execute("DROP VIEW read_entries_v1")
        conn.execute("CREATE VIEW read_entries_v1 AS SELECT * FROM entries WHERE 0")
    conn.close()
    again = tuner(CpuKernel())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(again, 96)
        again.wait_pending(timeout=60)
    # The resolver's guarded reader decides, and says why: nothing stored is served.
    assert again.stats["exact"] == 0 and again.stats["tuned"] == 1
    assert any("cannot read the cache" in str(w.message) for w in caught)


def _view_sql(db: Path) -> str:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        query = "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = 'read_entries_v1'"
        return str(conn.execute(query).fetchone()[0])
    finally:
        conn.close()


def test_the_views_text_as_tunecache_writes_it_is_the_contracts_and_is_known_by_its_digest(
    tmp_path: Path,
) -> None:
    import shutil

    from tunecache._digest import sha256
    from tunecache.cache import Cache
    from tunecache.store import schema

    fresh, upgraded = tmp_path / "fresh.db", tmp_path / "upgraded.db"
    with Cache.open(device=GPU, path=fresh):  # a new store: create_all
        pass
    shutil.copy(ROOT / "tests" / "golden" / "rev0002.db", upgraded)  # no view: the migrations'
    with Cache.open(device=GPU, path=upgraded):
        pass
    expected = schema.OBJECTS[("view", "read_entries_v1")][1]
    for db in (fresh, upgraded):
        sql = _view_sql(db)
        assert sha256(sql.encode()).hexdigest()[:32] == stored.VIEW_TEXT_DIGEST
        assert schema.digest("view", sql) == expected
        assert stored.is_contract_view(sql)
    # Spelt otherwise with the same meaning: still the contract, by its canonical form.
    respelt = "  " + _view_sql(fresh).replace(" ", "\n ")
    assert stored.is_contract_view(respelt)
    changed = _view_sql(fresh).replace("k.text AS key", "k.signature AS key")
    assert changed != _view_sql(fresh) and not stored.is_contract_view(changed)
    assert not stored.is_contract_view(None)


def test_a_store_whose_view_is_respelt_is_read_by_the_kernels_reader(tmp_path: Path) -> None:
    import sqlite3

    tuned = tuner(CpuKernel())
    launch(tuned, 96)
    db = stored_path(tuned)
    sql = _view_sql(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP VIEW read_entries_v1")
        conn.execute(sql.replace(" ", "\n  "))
    conn.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the resolver's guarded reader would warn
        again = tuner(CpuKernel())
        launch(again, 96)
    assert again.stats["exact"] == 1 and again.stats["tuned"] == 0


def stored_path(kernel: Any) -> Path:
    """The store file of the test GPU under the test's cache root, its records written."""
    from tunecache import paths

    assert kernel.wait_pending(timeout=60)
    return paths.locate(device=GPU)[1]


def test_a_store_whose_path_needs_quoting_still_finds_old_entries(tmp_path: Path) -> None:
    root = tmp_path / "my cache #1"
    kernel = CpuKernel()
    times = {16: 2.0, 32: 1.0, 48: 3.0}
    launch(tuner(kernel, blocks(16, 32, 48), do_bench=TableTimer(kernel, times), root=root), 64)
    timer = TableTimer(kernel, times)
    fewer = tuner(kernel, blocks(16, 32), do_bench=timer, root=root)
    launch(fewer, 64)
    assert (timer.benched, fewer.stats["reused"]) == ([], 1)


def test_an_unwritable_store_keeps_tunings_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache root should be")
    tuned = tuner(CpuKernel(), root=blocker)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(tuned, 96)
        launch(tuned, 96)
        assert tuned.wait_pending(timeout=60)  # the writer's warning, said from its thread
    assert tuned.stats["tuned"] == 1
    assert [str(w.message) for w in caught if "stay in memory" in str(w.message)]


def test_a_warning_is_said_once_per_topic() -> None:
    warn = WarnOnce()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn("open", "first")
        warn("open", "again")
        warn("write", "other")
    assert [(w.category, str(w.message)) for w in caught] == [
        (TunecacheWarning, "first"),
        (TunecacheWarning, "other"),
    ]
    assert warn.topics == {"open", "write"}


def test_a_device_with_no_store_yet_has_no_old_entries(tmp_path: Path) -> None:
    store = KernelStore("mm", Options(blocks(16), ["M"], root=tmp_path), backend(), WarnOnce())
    state = store.open(0)
    assert state.device == GPU and state.memo == {}
    assert state.destination is not None and not state.destination.db.exists()
    key = make_key("mm_F32", [("m", 64)])
    assert store.old_entries(Target(state, key, ("BLOCK=16",))) == []
    assert store.previous(Target(state, key, ("BLOCK=16",)), ["BLOCK=16"]) is None
    assert not state.destination.db.exists()  # nothing read created it
