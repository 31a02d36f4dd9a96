"""tunecache.triton.state: the store per device, read without SQLAlchemy, written once per key."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.triton.fake import GPU, CpuKernel, TableTimer, backend, blocks, launch, tuner
from tunecache.device import Device
from tunecache.errors import BadArgumentError, TunecacheWarning
from tunecache.keys import make_key
from tunecache.triton import stored
from tunecache.triton.autotuner import Options
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


#: a process that makes stand-ins for torch (one H200) and Triton 3.6.0, as a process that
#: launched its kernel before has them loaded, then decorates a kernel-shaped object with the GPU
#: backend and calls it once: "tune" tunes the key and writes its record, "warm" prints the
#: modules the decoration and the first call (of the key stored by "tune") imported
_GPU_PROCESS = """
import json, sys, types
mode = sys.argv[1]
props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132)
stream = types.SimpleNamespace(synchronize=lambda: None)
cuda = types.SimpleNamespace(current_device=lambda: 0, get_device_properties=lambda i: props,
                             current_stream=lambda: stream)
class Dtype:
    def __str__(self): return "torch.float16"
class Tensor:
    shape, dtype = (64, 64), Dtype()
sys.modules["torch"] = types.SimpleNamespace(
    cuda=cuda, version=types.SimpleNamespace(hip=None),
    _C=types.SimpleNamespace(_cuda_getDriverVersion=lambda: 12080))
sys.modules["triton"] = types.SimpleNamespace(
    __version__="3.6.0", TritonError=type("TritonError", (Exception,), {}))
class Config:
    def __init__(self, block):
        self.kwargs, self.num_warps, self.num_stages, self.num_ctas = {"BLOCK": block}, 4, 3, 1
        self.maxnreg = self.pre_hook = self.ir_override = None
class Kernel:
    arg_names = ["x", "out", "n"]
    src = "def scale(x, out, n, BLOCK): ..."
    __name__ = "scale"
    def run(self, *args, grid, warmup, **meta): pass
args = (Tensor(), Tensor(), 64)
before = set(sys.modules)
import tunecache.triton as tct
kernel = tct.autotune([Config(32), Config(64)], key=["n"], unseen=mode, flush_l2=False,
                      do_bench=lambda fn, quantiles: (fn(), [1.0, 0.9, 1.1])[1])(Kernel())
decorated = set(sys.modules)
kernel[(1,)](*args)
called = set(sys.modules)
assert kernel.wait_pending(timeout=60)
print(json.dumps({"stats": kernel.stats, "decoration": sorted(decorated - before),
                  "first call": sorted(called - decorated),
                  "waited": sorted(set(sys.modules) - called)}))
"""

#: every module of tunecache that the first call of a stored key imports in a process that applied
#: the decorator, answered by the store (no warm start: its store was written in the last 2 s,
#: `warm.SETTLED`): the warm start's modules (which found no answers, and keep the store's), the
#: GPU backend and the machinery a call resolves through, the device identity's checked fields, the
#: store's location, the key, the candidate list's checksum and the kernel's own reader. Not the
#: Device (its fields are checked and hashed as it would), the store's modules (its schema: the
#: view is known by its text), the writer, the pending keys, the bench or the resolver: nothing is
#: written, borrowed or tuned
FIRST_CALL = {
    *("tunecache._digest", "tunecache._version", "tunecache.candidates", "tunecache.checks"),
    *("tunecache.config", "tunecache.errors", "tunecache.identity", "tunecache.keys"),
    "tunecache.paths",
    *("tunecache.triton.backend", "tunecache.triton.configs", "tunecache.triton.flow"),
    *("tunecache.triton.gpu", "tunecache.triton.keys", "tunecache.triton.state"),
    *("tunecache.triton.kept", "tunecache.triton.stored", "tunecache.triton.warm"),
}


def _gpu_process(mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _GPU_PROCESS, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    import json

    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_the_first_call_of_a_stored_key_imports_only_what_one_read_needs() -> None:
    assert _gpu_process("tune")["stats"]["tuned"] == 1
    warm = _gpu_process("borrow")
    assert warm["stats"]["exact"] == 1 and warm["stats"]["tuned"] == 0
    first = set(warm["first call"])
    assert {m for m in first if m.startswith("tunecache")} == FIRST_CALL
    # Nothing was queued: waiting for the pending keys and the writer loads neither.
    assert warm["waited"] == []
    # Else SQLite's C module (not sqlite3's DB-API module around it) and what Python brings
    # with the modules above (typing and threading are loaded already in a process that
    # imported torch and Triton).
    assert {m.split(".")[0] for m in first} - {"tunecache"} <= ALSO_FIRST_CALL


def test_the_reader_reads_through_sqlites_c_module_which_sqlite3_wraps() -> None:
    import _sqlite3
    import sqlite3

    # What the reader takes from it (where sqlite3 is not loaded yet) is sqlite3's own.
    assert sqlite3.connect is _sqlite3.connect and sqlite3.Error is _sqlite3.Error
    assert sqlite3.Connection is _sqlite3.Connection


#: the first call's other modules (their top-level names), where this Python has not loaded them
#: (atexit: the warm start's answers are written at exit)
ALSO_FIRST_CALL = {
    *("_sqlite3", "_sha2", "_sha256", "typing", "_typing", "threading", "_weakrefset"),
    "atexit",
}


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


def test_a_backends_identity_fields_locate_the_store_as_its_device_would(tmp_path: Path) -> None:
    from tunecache import paths
    from tunecache.triton import Backend

    built: list[int] = []

    def device(index: int) -> Device:
        built.append(index)
        return GPU

    by_fields = Backend(device=device, fields=lambda index: GPU.fields)
    for options in (Options(blocks(16), ["M"], root=tmp_path), Options(blocks(16), ["M"])):
        state = KernelStore("mm", options, by_fields, WarnOnce()).open(0)
        found = KernelStore("mm", options, backend(), WarnOnce()).open(0)
        assert built == [] and state.fields == found.fields == GPU.fields
        located = paths.locate(device=GPU, root=options.root)[1]
        assert state.reader.path == found.reader.path == located
        assert state.reader.device == found.reader.device == GPU.fingerprint
        assert state.root == found.root
        assert state.device == GPU and built == []  # built from the fields, when first asked
    named = Options(blocks(16), ["M"], path=tmp_path / "mine.db")
    state = KernelStore("mm", named, by_fields, WarnOnce()).open(0)
    assert (state.reader.path, state.root) == (tmp_path / "mine.db", None)
    # Fields a Device would refuse are refused as it refuses them, before any store is found.
    bad = Backend(device=device, fields=lambda index: ("no/slash", *GPU.fields[1:]))
    with pytest.raises(BadArgumentError):
        KernelStore("mm", Options(blocks(16), ["M"], root=tmp_path), bad, WarnOnce()).open(0)


def test_a_device_with_no_store_yet_has_no_old_entries(tmp_path: Path) -> None:
    store = KernelStore("mm", Options(blocks(16), ["M"], root=tmp_path), backend(), WarnOnce())
    state = store.open(0)
    assert state.device == GPU and state.memo == {}
    assert state.destination is not None and not state.destination.db.exists()
    key = make_key("mm_F32", [("m", 64)])
    assert store.old_entries(Target(state, key, ("BLOCK=16",))) == []
    assert store.previous(Target(state, key, ("BLOCK=16",)), ["BLOCK=16"]) is None
    assert not state.destination.db.exists()  # nothing read created it
