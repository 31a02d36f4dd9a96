"""tunecache.triton.warm: a warm process's first call answered from the answers' file that an
earlier process kept at exit, with real processes (tests/triton/warm_child.py: the GPU backend
with stand-ins for torch and Triton) and a real SQLite store.

A file is kept only where the store had not changed in the `warm.SETTLED` seconds before the
process first looked at it. So the module tunes one store per backend once, copies it for each
test that needs one of its own, and waits SETTLED once (`pool`); a test takes a copy
(`gpu_store`, `cpu_store`, or `pool.take("default")`: one under a user cache folder) and the
processes it runs answer from it as a warm process would.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, python_output
from tests.triton.fake import Config, CpuKernel, configs, grid, launch, operands, tuner
from tunecache.triton import Autotuner, kept, warm
from tunecache.triton.stored import StoreReader


def config(block: int) -> str:
    """The name of warm_child's config BLOCK=`block`."""
    return f"BLOCK={block},num_warps=4,num_stages=3,num_ctas=1"


#: the config the child's timer makes fastest (what its store holds for every key), and the
#: other: what a wrong answer would launch
FAST, SLOW = config(64), config(32)

#: every module of tunecache that the first call of a key answered from the file imports, in a
#: process that applied the decorator: the warm start's own, and the digest of the file's name
#: a warm start's first call, in a process that has not loaded hashlib (torch and Triton load it:
#: there, tunecache.triton.warm alone)
WARM_FIRST_CALL = {"tunecache.triton.warm", "tunecache._digest"}
#: what the first call of a key answered from the store imports, among others
STORE_FIRST_CALL = {"tunecache.triton.flow", "tunecache.triton.stored", "_sqlite3"}

#: the keys warm_child's store is tuned for (the values of its key argument `n`)
TUNED = (64, 128)


def _torch_float16(self: object) -> str:
    return "torch.float16"


def child_raw_text(n: int) -> str:
    """The text of warm_child's Triton key for `n`: its value, and its tensors' dtype (its
    `__main__`'s class `Dtype`, whose text is torch's)."""
    dtype = type("Dtype", (), {"__module__": "__main__", "__str__": _torch_float16})()
    return warm.raw_text((n, dtype, dtype))


def child_env(root: Path, **more: str) -> dict[str, str]:
    """This environment for a child whose cache root is `root`: no identity, fleet or warm
    start setting of the developer's own, and its own user cache folder."""
    from tunecache import config as settings

    dropped = {*settings.ENV_VARS.values(), settings.DISABLE_VAR, warm.ENV}
    dropped |= {"TUNECACHE_URL", "TUNECACHE_REMOTE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["TUNECACHE_DIR"] = str(root)
    env["XDG_CACHE_HOME"] = str(root.parent / f"{root.name}-xdg")
    env.update(more)
    return env


def child_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.triton.warm_child", *args]


def run_child(root: Path, *args: str, **env: str) -> dict[str, Any]:
    """What warm_child reports (it calls the kernel once per `--n`), with `root` its cache
    root and `env` added to its environment; it must exit 0 with nothing on stderr."""
    return run_child_in(child_env(root, **env), *args)


def run_child_in(env: dict[str, str], *args: str) -> dict[str, Any]:
    """What warm_child reports, run with `env` its whole environment; it must exit 0 with
    nothing on stderr."""
    done = subprocess.run(
        child_command(*args), capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return dict(json.loads(done.stdout.splitlines()[-1]))


def lists(signature: warm.Signature) -> list[list[int] | None]:
    """A store's signature as an answers' file keeps it."""
    return [None if s is None else list(s) for s in signature]


def tunecache_modules(modules: list[str]) -> set[str]:
    return {m for m in modules if m.startswith("tunecache")}


@dataclass(frozen=True)
class Store:
    """A tuned store under a cache root of its own: its database file, and what its kernel
    reads in it for the first key it was tuned for (warm_child's n=64, fake.CpuKernel's m=96):
    the key's text, the config list's checksum, the device's fingerprint."""

    root: Path
    db: Path
    key: str
    checksum: str
    device: str

    @property
    def folder(self) -> Path:
        """The folder of the root's answers' files."""
        return self.root / warm.FOLDER

    def files(self) -> list[Path]:
        """The answers' files kept under the root."""
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []

    def file(self) -> Path:
        """The one answers' file kept under the root."""
        found = self.files()
        assert len(found) == 1, found
        return found[0]

    def kept(self) -> dict[str, Any]:
        return dict(json.loads(self.file().read_text()))

    def valid(self, answers: dict[str, str]) -> dict[str, Any]:
        """The file a process keeps for `answers` of this store as it is now."""
        signature = lists(warm.store_signature(self.db))
        return {
            "format": warm.FORMAT,
            "code": warm.code_witness(),
            "store": str(self.db),
            "signature": signature,
            "answers": answers,
        }

    def choice(self) -> str | None:
        """The config the store holds for the first key, read by the kernel's own reader."""
        reader = StoreReader(self.db, self.device)
        try:
            return reader.choice(self.key, self.checksum)
        finally:
            reader.close()

    def set_choice(self, choice: str | None) -> None:
        """Change (or, for None, delete) the first key's entry, through plain sqlite3: a real
        write."""
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            conn.execute("PRAGMA foreign_keys = ON")  # its record and verdicts go with it
            with conn:
                (entry,) = conn.execute(
                    "SELECT entry_id FROM read_entries_v1 WHERE key = ? AND checksum = ?",
                    (self.key, self.checksum),
                ).fetchone()
                if choice is None:
                    conn.execute("DELETE FROM entries WHERE id = ?", (entry,))
                else:
                    conn.execute("UPDATE entries SET choice = ? WHERE id = ?", (choice, entry))


#: what tunes the CPU kernel's store (tests/triton/fake.py) for m=96 and m=64, and describes it
#: as warm_child's `--describe` does
_CPU_TUNE = """
import json
from tests.triton.fake import CpuKernel, launch, operands, tuner
kernel = tuner(CpuKernel(), unseen="tune")
launch(kernel, 96)
launch(kernel, 64)
assert kernel.stats["tuned"] == 2, kernel.stats
assert kernel.wait_pending(timeout=60)
reader = kernel._ready().states[0].reader
key = kernel.key(*operands(96), 96, 40, 48).text
print(json.dumps({"describe": {"key": key, "checksum": kernel.checksum,
                               "db": str(reader.path), "device": reader.device}}))
"""

#: how many copies of each tuned store the module makes (one per test or case that needs one);
#: "default" ones are the GPU store's, each under a user cache folder of its own (the root a
#: kernel of the GPU backend has where none is named: `<XDG_CACHE_HOME>/triton`)
COPIES = {"gpu": 40, "cpu": 10, "default": 1}


class Pool:
    """Copies of the tuned stores, settled: each handed out once."""

    def __init__(self, stores: dict[str, list[Store]]) -> None:
        self.stores = stores

    def take(self, kind: str) -> Store:
        assert self.stores[kind], f"more tests need a {kind} store than COPIES makes"
        return self.stores[kind].pop()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Pool:
    """Each backend's store tuned once, by a process of its own, copied COPIES times and left
    alone for `warm.SETTLED` seconds (once, for every copy): a store a warm process finds."""
    base = tmp_path_factory.mktemp("warm")
    sizes = [arg for n in TUNED for arg in ("--n", str(n))]
    tuning = {
        "gpu": subprocess.Popen(
            child_command(*sizes, "--unseen", "tune", "--describe"),
            **_pipes(base / "gpu"),
        ),
        "cpu": subprocess.Popen([sys.executable, "-c", _CPU_TUNE], **_pipes(base / "cpu")),
    }
    outputs = {}
    for kind, process in tuning.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs[kind] = out
    reports = {kind: json.loads(out.splitlines()[-1]) for kind, out in outputs.items()}
    tuned = reports["gpu"]
    assert tuned["stats"]["tuned"] == len(TUNED) and tuned["chosen"] == [FAST] * len(TUNED)
    stores: dict[str, list[Store]] = {}
    for kind, count in COPIES.items():
        tuned_as = "cpu" if kind == "cpu" else "gpu"
        described, where = reports[tuned_as]["describe"], base / tuned_as
        db = Path(described["db"]).relative_to(where)
        stores[kind] = []
        for i in range(count):
            copy = base / f"xdg-{i}" / "triton" if kind == "default" else base / f"{kind}-{i}"
            shutil.copytree(where, copy)
            entry = (described["key"], described["checksum"], described["device"])
            stores[kind].append(Store(copy, copy / db, *entry))
    time.sleep(warm.SETTLED + 0.3)
    return Pool(stores)


def _pipes(root: Path) -> dict[str, Any]:
    return {
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
        "cwd": ROOT,
        "env": child_env(root),
    }


@pytest.fixture
def gpu_store(pool: Pool) -> Store:
    """A store of warm_child's kernel (n=64 and n=128 tuned) that has settled."""
    return pool.take("gpu")


@pytest.fixture
def cpu_store(pool: Pool, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A store of fake.CpuKernel's (m=96 and m=64 tuned) that has settled, this process's cache
    root for the test."""
    store = pool.take("cpu")
    monkeypatch.setenv("TUNECACHE_DIR", str(store.root))
    return store


# -- a file kept, and used ----------------------------------------------------------------------


def test_a_process_answered_by_a_settled_store_keeps_a_file_the_next_one_answers_from(
    gpu_store: Store,
) -> None:
    store = gpu_store
    second = run_child(store.root)
    assert second["stats"]["exact"] == 1 and second["stats"]["tuned"] == 0
    assert set(second["first"]) >= STORE_FIRST_CALL  # no file yet: the store answered
    # At its exit: the store's file, its state, and the answer, by the call's Triton key.
    assert store.kept() == store.valid({child_raw_text(64): FAST})
    kept = os.stat(store.file())

    third = run_child(store.root)
    assert third["stats"] == {"exact": 1, "borrowed": 0, "reused": 0, "tuned": 0, "single": 0}
    first = set(third["first"])
    assert tunecache_modules(third["first"]) == WARM_FIRST_CALL
    assert not first & {"sqlite3", "_sqlite3"}
    assert not {"sqlite3", "_sqlite3", "tunecache.triton.flow"} & set(third["loaded"])
    assert third["warm"]
    assert third["waited"] == []  # nothing queued: waiting loads nothing (not the store's)
    # What the store holds, read by a real reader, is what both launched.
    assert third["chosen"] == second["chosen"] == [store.choice()] == [FAST]
    # It learned nothing from the store: the file is the one the second process kept.
    after = os.stat(store.file())
    assert (after.st_ino, after.st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)


def test_what_the_store_answers_next_is_kept_with_the_files_answers(gpu_store: Store) -> None:
    store = gpu_store
    run_child(store.root, "--n", "64")
    assert set(store.kept()["answers"]) == {child_raw_text(64)}
    # 64 from the file, then 128 (not in it) from the store: kept with 64's answer at exit.
    both = run_child(store.root, "--n", "64", "--n", "128")
    assert tunecache_modules(both["first"]) == WARM_FIRST_CALL
    assert both["stats"]["exact"] == 2 and both["chosen"] == [FAST, FAST]
    assert store.kept() == store.valid({child_raw_text(n): FAST for n in TUNED})
    again = run_child(store.root, "--n", "128", "--n", "64")
    assert again["stats"]["exact"] == 2 and again["stats"]["tuned"] == 0
    assert tunecache_modules(again["first"]) == WARM_FIRST_CALL
    assert "tunecache.triton.flow" not in again["loaded"]  # both answered from the file
    assert again["chosen"] == [FAST, FAST]


@pytest.mark.parametrize("touched", ["configs", "key"])
def test_a_flow_built_before_the_first_call_keeps_what_the_store_answered(
    gpu_store: Store, touched: str
) -> None:
    store = gpu_store
    # The kernel's configs (or a call's key) asked first: the flow is built before any call.
    built = run_child(store.root, "--touch", touched)
    assert built["warm"] and built["stats"]["exact"] == 1 and built["chosen"] == [FAST]
    assert store.kept() == store.valid({child_raw_text(64): FAST})
    nxt = run_child(store.root)
    assert tunecache_modules(nxt["first"]) == WARM_FIRST_CALL
    assert nxt["chosen"] == [FAST]


def test_the_default_root_keeps_a_file_and_answers_from_it(
    pool: Pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No root named: the GPU backend's store is under platformdirs' user cache folder of its
    # client, which XDG_CACHE_HOME places (on Linux); HOME too is one of the test's own.
    if not sys.platform.startswith("linux"):
        pytest.skip("platformdirs takes the user cache folder from XDG_CACHE_HOME on Linux")
    store = pool.take("default")
    xdg, home = store.root.parent, tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    import platformdirs

    assert platformdirs.user_cache_dir("triton", appauthor=False) == str(store.root)
    home.mkdir()
    env = {**child_env(store.root), "XDG_CACHE_HOME": str(xdg), "HOME": str(home)}
    del env["TUNECACHE_DIR"]
    second = run_child_in(env)
    assert set(second["first"]) >= STORE_FIRST_CALL
    assert second["stats"]["exact"] == 1 and second["chosen"] == [FAST]
    assert store.kept() == store.valid({child_raw_text(64): FAST})

    third = run_child_in(env)
    first = set(third["first"])
    # The root costs the first call platformdirs and tunecache.paths: never the store's modules.
    assert {"tunecache.triton.warm", "tunecache.paths", "platformdirs"} <= first
    assert not {"sqlite3", "_sqlite3", "tunecache.triton.flow"} & (first | set(third["loaded"]))
    assert third["stats"]["exact"] == 1 and third["chosen"] == [FAST]
    # Nothing was written but under the root.
    assert list(home.iterdir()) == [] and [p.name for p in xdg.iterdir()] == ["triton"]


# -- the store changed --------------------------------------------------------------------------


def test_a_process_that_writes_the_store_keeps_nothing_and_its_file_is_not_used_again(
    gpu_store: Store,
) -> None:
    store = gpu_store
    run_child(store.root)
    kept = os.stat(store.file())
    recorded = store.kept()["signature"]
    # A new key tuned (its record written to the store), then 64 answered by the store.
    writer = run_child(store.root, "--n", "256", "--n", "64", "--unseen", "tune")
    assert writer["stats"]["tuned"] == 1 and writer["stats"]["exact"] == 1
    assert lists(warm.store_signature(store.db)) != recorded
    # Its store changed since it first read it: it kept no file (the old one is as it was).
    after = os.stat(store.file())
    assert (after.st_ino, after.st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)
    assert store.kept()["signature"] == recorded

    nxt = run_child(store.root)
    assert set(nxt["first"]) >= STORE_FIRST_CALL  # the file speaks for a store that is gone
    assert nxt["stats"]["exact"] == 1 and nxt["stats"]["tuned"] == 0
    assert nxt["chosen"] == [FAST] == [store.choice()]


@pytest.mark.parametrize("change", ["altered", "deleted"])
def test_a_file_never_answers_what_its_store_no_longer_holds(gpu_store: Store, change: str) -> None:
    store = gpu_store
    run_child(store.root)
    assert store.kept()["answers"] == {child_raw_text(64): FAST}
    store.set_choice(SLOW if change == "altered" else None)
    assert store.choice() == (SLOW if change == "altered" else None)

    nxt = run_child(store.root, "--unseen", "tune")
    assert set(nxt["first"]) >= STORE_FIRST_CALL
    if change == "altered":
        # The store's answer now, not the file's.
        assert nxt["stats"]["exact"] == 1 and nxt["stats"]["tuned"] == 0
        assert nxt["chosen"] == [SLOW]
    else:
        # Nothing stored: tuned again, not served from the file.
        assert nxt["stats"]["exact"] == 0 and nxt["stats"]["tuned"] == 1
        assert nxt["chosen"] == [FAST]


def test_a_key_new_to_a_running_process_is_answered_as_its_store_holds_it_now(
    gpu_store: Store,
) -> None:
    store = gpu_store
    run_child(store.root, "--n", "64", "--n", "128")
    assert store.kept() == store.valid({child_raw_text(n): FAST for n in TUNED})
    # A process answers 128 from the file (which answers 64 too); then 64's entry changes.
    held = subprocess.Popen(
        child_command("--n", "128", "--hold"), stdin=subprocess.PIPE, **_pipes(store.root)
    )
    try:
        assert held.stdin is not None and held.stdout is not None
        report = json.loads(held.stdout.readline())
        assert tunecache_modules(report["first"]) == WARM_FIRST_CALL
        assert report["stats"]["exact"] == 1 and report["chosen"] == [FAST]
        store.set_choice(SLOW)  # a real write, by another process
        held.stdin.write("64\n")  # the process's first call of 64
        held.stdin.flush()
        called = json.loads(held.stdout.readline())
        _, err = held.communicate("exit\n", timeout=60)
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
    assert held.returncode == 0 and err == ""
    # What the store holds now, asked through the flow: not the file's answer of before.
    assert called["chosen"] == SLOW == store.choice()
    assert called["stats"]["exact"] == 2 and "tunecache.triton.flow" in called["loaded"]


def test_the_process_right_after_the_tuning_one_keeps_no_file(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    tuned = run_child(root, "--unseen", "tune", "--describe")
    assert tuned["stats"]["tuned"] == 1
    assert not (root / warm.FOLDER).exists()  # it wrote the store: nothing kept
    db = Path(tuned["describe"]["db"])
    for _ in range(3):
        answered = run_child(root, "--describe")
        described = answered["describe"]
        changed = max(max(s[3:]) for s in described["signature"] if s is not None) / 1e9
        if changed > described["signed_at"] - warm.SETTLED:
            break
        # A machine so slow that SETTLED passed before this process's first read (which kept
        # a file, rightly): the store changes now (a real change of its state), and the next
        # process reads it just after.
        shutil.rmtree(root / warm.FOLDER, ignore_errors=True)
        os.utime(db)
    else:
        pytest.fail(f"no process read the store within {warm.SETTLED} s of its last change")
    assert answered["stats"]["exact"] == 1 and answered["stats"]["tuned"] == 0
    assert answered["chosen"] == [FAST]
    assert not (root / warm.FOLDER).exists()


# -- a file that cannot be used -----------------------------------------------------------------


def _not_json(data: dict[str, Any]) -> str:
    return "{not json"


def _cut_short(data: dict[str, Any]) -> str:
    text = json.dumps(data)
    return text[: len(text) // 2]


def _foreign_config(data: dict[str, Any]) -> str:
    return json.dumps({**data, "answers": dict.fromkeys(data["answers"], config(128))})


def _other_format(data: dict[str, Any]) -> str:
    # A format this version does not know, answering what the kernel could launch.
    answers = dict.fromkeys(data["answers"], SLOW)
    return json.dumps({**data, "format": warm.FORMAT + 1, "answers": answers})


def _a_list(data: dict[str, Any]) -> str:
    return json.dumps([data])


def _unhashable_answer(data: dict[str, Any]) -> str:
    return json.dumps({**data, "answers": {key: [SLOW] for key in data["answers"]}})


@pytest.mark.parametrize(
    "damage",
    [
        _not_json,
        _cut_short,
        _foreign_config,
        _other_format,
        _a_list,
        _unhashable_answer,
    ],
    ids=lambda damage: damage.__name__.strip("_"),
)
def test_a_damaged_file_is_ignored_and_kept_again_valid(
    gpu_store: Store, damage: Callable[[dict[str, Any]], str]
) -> None:
    store = gpu_store
    run_child(store.root)
    store.file().write_text(damage(store.kept()))
    nxt = run_child(store.root)  # exit 0, nothing on stderr
    assert set(nxt["first"]) >= STORE_FIRST_CALL
    assert nxt["stats"]["exact"] == 1 and nxt["stats"]["tuned"] == 0
    assert nxt["chosen"] == [FAST]
    assert store.kept() == store.valid({child_raw_text(64): FAST})
    again = run_child(store.root)
    assert tunecache_modules(again["first"]) == WARM_FIRST_CALL
    assert again["chosen"] == [FAST]


def test_a_damaged_file_met_at_exit_is_ignored(gpu_store: Store) -> None:
    store = gpu_store
    held = subprocess.Popen(child_command("--hold"), stdin=subprocess.PIPE, **_pipes(store.root))
    try:
        assert held.stdout is not None
        report = json.loads(held.stdout.readline())
        assert report["stats"]["exact"] == 1 and not store.files()  # the store answered
        run_child(store.root)  # another process of the kernel keeps its file meanwhile
        damaged = {**store.kept(), "answers": {child_raw_text(64): [FAST]}}
        store.file().write_text(json.dumps(damaged))
        _, err = held.communicate("exit\n", timeout=120)  # and at its exit, merges with it
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
    assert held.returncode == 0
    assert err == ""
    assert store.kept() == store.valid({child_raw_text(64): FAST})


def _nested_too_deep(store: Store) -> None:
    store.file().write_text("[" * 200_000)  # deeper than the JSON parser goes


def _sparse_past_the_limit(store: Store) -> None:
    with store.file().open("wb") as fh:
        fh.truncate(warm.MAX_FILE + 1)  # a hole: no byte written


def _valid_past_the_limit(store: Store) -> None:
    # A valid file that answers what the kernel could launch, padded with white space.
    text = json.dumps(store.valid({child_raw_text(64): SLOW}))
    store.file().write_text(text.ljust(warm.MAX_FILE + 1))


@pytest.mark.parametrize(
    "hostile",
    [_nested_too_deep, _sparse_past_the_limit, _valid_past_the_limit],
    ids=lambda hostile: hostile.__name__.strip("_"),
)
def test_a_file_nested_too_deep_or_too_big_is_no_file(
    gpu_store: Store, hostile: Callable[[Store], None]
) -> None:
    store = gpu_store
    run_child(store.root)
    hostile(store)
    nxt = run_child(store.root)  # exit 0, nothing on stderr
    assert nxt["warm"]  # the warm start stays on: what the store answers is kept
    assert set(nxt["first"]) >= STORE_FIRST_CALL
    assert nxt["stats"]["exact"] == 1 and nxt["stats"]["tuned"] == 0
    assert nxt["chosen"] == [FAST]
    assert store.kept() == store.valid({child_raw_text(64): FAST})


@pytest.mark.parametrize("touched", [None, "configs"], ids=["first call", "flow built first"])
def test_a_file_naming_a_path_no_file_can_have_is_no_file(
    gpu_store: Store, touched: str | None
) -> None:
    store = gpu_store
    run_child(store.root)
    # <root>/tune/<version>/<device>\0/cache.db: the shape of a store's path, and no path.
    named = f"{store.db.parent}\0{os.sep}{warm.DATABASE_NAME}"
    store.file().write_text(json.dumps({**store.kept(), "store": named}))
    nxt = run_child(store.root, *(["--touch", touched] if touched else []))  # nothing on stderr
    assert nxt["warm"] and nxt["stats"]["exact"] == 1 and nxt["chosen"] == [FAST]
    assert store.kept() == store.valid({child_raw_text(64): FAST})


def _copy_of_the_store(store: Store, copy: Path) -> dict[str, Any]:
    """A valid file answering the slow config for a copy of the store at `copy`, in the
    state the copy is in."""
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(store.db, copy)
    signature = lists(warm.store_signature(copy))
    return {**store.valid({child_raw_text(64): SLOW}), "store": str(copy), "signature": signature}


def _a_nested_roots(store: Store) -> dict[str, Any]:
    # <root>/sub/tune/<version>/<device>/cache.db: the store of the root <root>/sub
    return _copy_of_the_store(store, store.root / "sub" / store.db.relative_to(store.root))


def _another_file_name(store: Store) -> dict[str, Any]:
    return _copy_of_the_store(store, store.db.with_name("copy.db"))


def _not_under_tune(store: Store) -> dict[str, Any]:
    return _copy_of_the_store(
        store, store.root / "elsewhere" / store.db.relative_to(store.root / "tune")
    )


def _other_code(store: Store) -> dict[str, Any]:
    # The store itself, as it is: kept by other code (an upgrade may have moved the store).
    other = [n + 1 for n in warm.code_witness()]
    return {**store.valid({child_raw_text(64): SLOW}), "code": other}


@pytest.mark.parametrize(
    "named",
    [_a_nested_roots, _another_file_name, _not_under_tune, _other_code],
    ids=lambda named: named.__name__.strip("_"),
)
def test_a_file_answers_only_for_its_roots_store_and_the_code_that_kept_it(
    gpu_store: Store, named: Callable[[Store], dict[str, Any]]
) -> None:
    store = gpu_store
    run_child(store.root)
    store.file().write_text(json.dumps(named(store)))
    nxt = run_child(store.root)
    assert set(nxt["first"]) >= STORE_FIRST_CALL
    assert nxt["stats"]["exact"] == 1 and nxt["chosen"] == [FAST]
    assert store.kept() == store.valid({child_raw_text(64): FAST})


def test_the_environment_turns_the_warm_start_off(gpu_store: Store) -> None:
    store = gpu_store
    off = run_child(store.root, TUNECACHE_TRITON_WARM="0")
    assert off["stats"]["exact"] == 1 and not off["warm"]
    assert not store.folder.exists()  # nothing kept
    run_child(store.root)
    # A valid file that answers the other config: what a process that reads it launches.
    store.file().write_text(json.dumps(store.valid({child_raw_text(64): SLOW})))
    kept = store.file().read_text()
    for value in ("0", "off", "False", " no "):
        off = run_child(store.root, TUNECACHE_TRITON_WARM=value)
        assert set(off["first"]) >= STORE_FIRST_CALL and not off["warm"]
        assert off["stats"]["exact"] == 1 and off["chosen"] == [FAST]
    assert store.file().read_text() == kept
    used = run_child(store.root, TUNECACHE_TRITON_WARM="1")
    assert tunecache_modules(used["first"]) == WARM_FIRST_CALL and used["chosen"] == [SLOW]


@pytest.mark.parametrize(
    "changed",
    [
        ["--blocks", "32,64,128"],
        ["--blocks", "64,32"],
        ["--src", "def scale(x, out, n, BLOCK): return"],
    ],
    ids=["more configs", "configs reordered", "source edited"],
)
def test_another_config_list_or_source_has_a_file_of_its_own(
    gpu_store: Store, changed: list[str]
) -> None:
    store = gpu_store
    run_child(store.root)
    same = run_child(store.root)
    assert tunecache_modules(same["first"]) == WARM_FIRST_CALL  # the file, as it is
    other = run_child(store.root, *changed)
    assert set(other["first"]) >= STORE_FIRST_CALL
    # Not an exact answer (the file's would have been one): the store holds none for it.
    assert other["stats"]["exact"] == 0
    assert other["chosen"] == [FAST]


@pytest.mark.parametrize("obstacle", ["a file in its place", "a read-only root"])
def test_a_root_that_takes_no_folder_changes_nothing_else(gpu_store: Store, obstacle: str) -> None:
    store = gpu_store
    if obstacle == "a read-only root":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        store.root.chmod(0o555)
    else:
        store.folder.write_text("not a folder")
    try:
        for _ in range(2):  # and the second looks where the file would be
            nxt = run_child(store.root)  # exit 0, nothing on stderr
            assert set(nxt["first"]) >= STORE_FIRST_CALL
            assert nxt["stats"]["exact"] == 1 and nxt["stats"]["tuned"] == 0
            assert nxt["chosen"] == [FAST]
    finally:
        store.root.chmod(0o755)
    if obstacle == "a read-only root":
        assert not store.folder.exists()
    else:
        assert store.folder.read_text() == "not a folder"


def test_a_copied_roots_file_answers_for_the_copys_store(gpu_store: Store, tmp_path: Path) -> None:
    store = gpu_store
    run_child(store.root)
    root = tmp_path / "copied-root"
    shutil.copytree(store.root, root)
    copy = Store(
        root, root / store.db.relative_to(store.root), store.key, store.checksum, store.device
    )
    copy.set_choice(SLOW)  # the copy's store changes; the original's does not
    assert copy.choice() == SLOW and store.choice() == FAST
    nxt = run_child(root)
    assert nxt["chosen"] == [SLOW]


def test_a_fifo_in_the_files_place_does_not_block_the_first_call(gpu_store: Store) -> None:
    store = gpu_store
    run_child(store.root)
    fifo = store.file()
    fifo.unlink()
    os.mkfifo(fifo)
    # Nothing here ever opens the FIFO: a child that opened it blocking would wait forever
    # (it is opened twice: by the first call, and at exit, to merge what it learned).
    process = subprocess.Popen(child_command(), **_pipes(store.root))
    try:
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0 and err == "", err
    assert json.loads(out.splitlines()[-1])["chosen"] == [FAST]
    # Its exit kept its file in the FIFO's place.
    assert store.kept() == store.valid({child_raw_text(64): FAST})


# -- in this process: the flow after a warm answer ----------------------------------------------


def _keep_file(store: Store, sizes: tuple[int, ...] = (96,)) -> None:
    """Keep a valid file for fake.CpuKernel's `sizes` (m=96 unless given: m=64 is the other
    key its store holds) under the store's root, as a process that read them from the store
    would at exit."""
    answered = tuner(CpuKernel())
    for m in sizes:
        launch(answered, m)
    assert answered.stats["exact"] == len(sizes) and answered.stats["tuned"] == 0
    assert answered.warm_start is not None
    assert kept.write(answered.warm_start.devices[0])  # what its exit would do
    assert len(store.kept()["answers"]) == len(sizes)


def _kernel_with_a_file(store: Store, monkeypatch: pytest.MonkeyPatch) -> Autotuner:
    """A kernel of fake.CpuKernel's whose warm start finds the file `_keep_file` kept (m=96)."""
    _keep_file(store)
    # This process's writer (other tests' tunings) would keep the warm start off.
    monkeypatch.delitem(sys.modules, "tunecache.triton.writer", raising=False)
    return tuner(CpuKernel())


def test_the_flow_built_after_a_warm_answer_keeps_it_answered(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = _kernel_with_a_file(cpu_store, monkeypatch)
    out = launch(kernel, 96)  # from the file
    assert kernel.warm_start is not None
    assert kernel.stats["exact"] == 1
    a, b, _ = operands(96)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    launch(kernel, 64)  # not in the file: the flow is built, and the store answers it
    assert kernel.stats["exact"] == 2
    # The flow's memo starts with what the file answered: 96 is not asked of the store again.
    assert {c.kwargs["BLOCK"] for c in kernel.cache.values()} == {64} and len(kernel.cache) == 2
    launch(kernel, 96)
    launch(kernel, 64)
    assert kernel.stats == {"exact": 2, "borrowed": 0, "reused": 0, "tuned": 0, "single": 0}
    assert [each["BLOCK"] for each in kernel.fn.launches] == [64, 64, 64, 64]


def test_a_process_whose_writer_is_loaded_asks_the_store(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keep_file(cpu_store)
    # A valid file that answers the slow config: what a kernel that reads it launches.
    data = cpu_store.kept()
    slow = "BLOCK=32,WORK=40,num_warps=4,num_stages=3,num_ctas=1"
    cpu_store.file().write_text(
        json.dumps({**data, "answers": dict.fromkeys(data["answers"], slow)})
    )
    import tunecache.triton.writer  # noqa: F401  (decisions of this process may be on their way)

    asks = tuner(CpuKernel())
    launch(asks, 96)
    assert asks.stats["exact"] == 1 and asks.fn.launches[-1]["BLOCK"] == 64
    monkeypatch.delitem(sys.modules, "tunecache.triton.writer")
    reads = tuner(CpuKernel())
    launch(reads, 96)
    assert reads.stats["exact"] == 1 and reads.fn.launches[-1]["BLOCK"] == 32


#: the CPU kernel's fast config (tests/triton/fake.py): what its store holds for every key
CPU_FAST = warm.config_name(configs()[1])
#: how many kernels the test of their freeing drops
KERNELS = 16


def _learned_from_the_store() -> weakref.ref[Autotuner]:
    """A weak reference to a kernel, dropped, that learned m=96's answer from the store (its
    warm start kept it for the exit)."""
    kernel = tuner(CpuKernel())
    launch(kernel, 96)
    assert kernel.stats["exact"] == 1 and kernel._flow is not None  # the store answered
    return weakref.ref(kernel)


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_kernels_that_learned_from_the_store_are_freed_and_what_they_learned_kept(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd to count this process's open files by")
    dropped = [_learned_from_the_store()]
    gc.collect()
    files = _open_files()
    dropped += [_learned_from_the_store() for _ in range(KERNELS)]
    gc.collect()
    assert [ref for ref in dropped if ref() is not None] == []
    # Their stores' connections closed with them: no file left open per kernel.
    assert _open_files() - files < KERNELS // 2
    assert not cpu_store.files()  # kept at exit, or when asked:
    kept.write_learned()
    assert list(cpu_store.kept()["answers"].values()) == [CPU_FAST]
    monkeypatch.delitem(sys.modules, "tunecache.triton.writer", raising=False)
    nxt = tuner(CpuKernel())
    launch(nxt, 96)
    assert nxt.stats["exact"] == 1 and nxt._flow is None  # answered from the file


def test_a_flow_that_learns_neither_reads_the_file_nor_raises_into_the_launch(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keep_file(cpu_store)
    answers = cpu_store.kept()["answers"]
    cpu_store.file().write_text("[" * 200_000)  # deeper than the JSON parser goes
    monkeypatch.delitem(sys.modules, "tunecache.triton.writer", raising=False)
    kernel = tuner(CpuKernel())
    assert len(kernel.configs) == 3  # the flow built first: no call asks the file
    out = launch(kernel, 96)  # the store answers, and the warm start learns it
    a, b, _ = operands(96)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert kernel.stats["exact"] == 1 and kernel.warm_start is not None
    assert kept.write(kernel.warm_start.devices[0])  # its exit: the file valid again
    assert cpu_store.kept() == cpu_store.valid(answers)


def test_the_kernels_cache_lists_what_the_warm_start_answered(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = _kernel_with_a_file(cpu_store, monkeypatch)
    launch(kernel, 96)
    assert kernel.stats["exact"] == 1 and kernel._flow is None  # from the file
    before = kernel.cache  # (it builds the flow, which opened no device's state yet)
    assert [warm.raw_text(raw) for raw in before] == list(cpu_store.kept()["answers"])
    assert [c.kwargs["BLOCK"] for c in before.values()] == [64]
    launch(kernel, 64)  # a miss: the store answers it
    after = kernel.cache
    assert kernel.stats["exact"] == 2 and len(after) == 2 and set(before) < set(after)
    assert {c.kwargs["BLOCK"] for c in after.values()} == {64}


#: how many times two threads race to the first call of a key the file answers
ROUNDS = 5


class Rendezvous(dict[str, str]):
    """A file's answers (`warm.Answers.answers`) whose lookups wait for each other: two
    threads that look a key up are both past what the kernel answered so far before either
    goes on. (A lookup met by no other goes on after a while: code that looks up under the
    kernel's lock is not held up for long.)"""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__(answers)
        self.barrier = threading.Barrier(2)

    def get(self, key: str, default: Any = None) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait(timeout=10)
        return super().get(key, default)


def _race(kernel: Autotuner, threads: ThreadPoolExecutor) -> None:
    """Two threads make the kernel's first call of m=64 at once."""
    barrier = threading.Barrier(2)
    args = operands(64)

    def call() -> None:
        barrier.wait(timeout=60)
        kernel[grid](*args, 64, 40, 48)

    for done in [threads.submit(call) for _ in range(2)]:
        done.result(timeout=60)


def test_two_threads_first_calling_a_key_the_file_answers_count_it_once(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keep_file(cpu_store, (96, 64))
    monkeypatch.delitem(sys.modules, "tunecache.triton.writer", raising=False)
    with ThreadPoolExecutor(2) as threads:
        for _ in range(ROUNDS):
            kernel = tuner(CpuKernel())
            launch(kernel, 96)  # the warm start made, its file read and answering
            assert kernel.warm_start is not None
            device = kernel.warm_start.devices[0]
            device.answers = Rendezvous(device.answers)
            _race(kernel, threads)  # then a key new to the process, twice at once
            assert kernel._flow is None  # all answered from the file
            assert kernel.stats["exact"] == 2, kernel.stats
            assert [each["BLOCK"] for each in kernel.fn.launches] == [64] * 3


@pytest.mark.parametrize(
    "options",
    [
        {"cfgs": [Config({"BLOCK": 64})]},
        {"path": "store.db"},
        {"prune_configs_by": {"early_config_prune": lambda configs, nargs, **kw: configs}},
        {"prune_configs_by": {"perf_model": lambda **kw: 1.0, "top_k": 2}},
    ],
    ids=["one config", "path", "early_config_prune", "perf_model"],
)
def test_a_kernel_whose_answers_depend_on_more_has_no_warm_start(
    options: dict[str, Any], tmp_path: Path
) -> None:
    if "path" in options:
        options = {"path": tmp_path / options["path"]}
    kernel = tuner(CpuKernel(), **options)
    launch(kernel, 96)
    assert kernel.warm_start is None


def test_the_environment_leaves_a_kernel_without_a_warm_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(warm.ENV, "off")
    kernel = tuner(CpuKernel())
    launch(kernel, 96)
    assert kernel.warm_start is None
    monkeypatch.delenv(warm.ENV)
    kernel = tuner(CpuKernel())
    launch(kernel, 96)
    assert kernel.warm_start is not None


# -- the parts ----------------------------------------------------------------------------------


def test_a_raw_keys_text_tells_apart_what_the_key_does() -> None:
    f16, f32 = np.dtype("float16"), np.dtype("float32")
    assert warm.raw_text((64, f16, "x")) == warm.raw_text((64, np.dtype("float16"), "x"))
    assert len({warm.raw_text((v,)) for v in (1, True, 1.0, "1", None)}) == 5
    assert warm.raw_text((64, f16)) != warm.raw_text((64, f32))
    # A dtype is its type and its text: not the string that reads the same.
    assert warm.raw_text((f16,)) != warm.raw_text(("float16",))
    assert warm.raw_text((1,)) != warm.raw_text((np.int64(1),))


def test_a_raw_keys_text_is_the_same_in_another_process() -> None:
    code = (
        "import numpy as np\n"
        "from tunecache.triton import warm\n"
        "print(warm.raw_text((64, 'x', True, 1.5, None, np.dtype('float16'))))"
    )
    here = warm.raw_text((64, "x", True, 1.5, None, np.dtype("float16")))
    assert python_output(code).strip() == here


literals = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)


@given(st.lists(literals, max_size=6).map(tuple))
def test_a_raw_key_of_literals_reads_back_from_its_text(raw: tuple[Any, ...]) -> None:
    # So two keys with the same text are the same values of the same types.
    back = ast.literal_eval(warm.raw_text(raw))
    assert back == raw and [type(v) for v in back] == [type(v) for v in raw]


#: `warm.named_root` against `tunecache.config.root`, in a process that has not loaded
#: tunecache.config (where it is loaded, `named_root` asks it: only here do the two differ)
_NAMED_ROOTS = """
import json, os, sys
from tunecache.triton import kept, warm

def answers(ask):
    out = []
    for given in (None, "given/root"):
        for env in (None, "", "/env/root"):
            if env is None:
                os.environ.pop("TUNECACHE_DIR", None)
            else:
                os.environ["TUNECACHE_DIR"] = env
            found = ask(given)
            out.append(None if found is None else os.fspath(found))
    return out

before = "tunecache.config" in sys.modules
alone = answers(warm.named_root)
after = "tunecache.config" in sys.modules
from tunecache import config
print(json.dumps([before, after, alone, answers(lambda given: config.root(given)[0])]))
"""


def test_the_named_root_is_the_configurations_where_it_is_not_loaded() -> None:
    before, after, alone, configured = json.loads(python_output(_NAMED_ROOTS))
    assert not before and not after
    assert alone == configured
    assert alone == [None, None, "/env/root"] + ["given/root"] * 3


def test_the_database_name_is_the_stores() -> None:
    from tunecache import paths

    assert warm.DATABASE_NAME == paths.DATABASE_NAME


def test_the_stores_signature_is_its_files_states_an_empty_log_none(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    log = Path(f"{db}-wal")
    assert warm.store_signature(db) == (None, None)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x BLOB)")
        conn.commit()
    assert not log.exists()  # the last connection closed: checkpointed, the log removed
    found = os.stat(db)
    quiet = warm.store_signature(db)
    assert quiet == (
        (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns),
        None,
    )
    log.write_bytes(b"")  # an empty log holds no page: the same state as none
    assert warm.store_signature(db) == quiet
    log.unlink()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO t VALUES (?)", (bytes(1 << 16),))
        conn.commit()
        written = warm.store_signature(db)
        assert written[1] is not None and written[1][2] > 0  # the row is in the log
        assert written != quiet
    # Checkpointed into the database file: more pages than before.
    settled = warm.store_signature(db)
    assert settled[1] is None and settled[0] is not None and quiet[0] is not None
    assert settled[0][2] > quiet[0][2] and settled != quiet


# -- the format names the key grammar -----------------------------------------------------------

#: per `warm.FORMAT`: a fixed call's tunecache key text, a fixed config's name and the call's raw
#: key text, as that format writes them. An answers' file of one format answers by these texts;
#: a change to any of them must move `warm.FORMAT` on (and add its row), or a process of the new
#: code would take answers kept by the old
GRAMMAR = {
    1: (
        "scale_F16_F16_R2DA02595_n4096",
        "BLOCK=64,num_warps=4,num_stages=3,num_ctas=1",
        "(4096, ('tests.triton.test_warm.Dtype', 'float16'), ('tests.triton.test_warm.Dtype',"
        " 'float16'))",
    )
}


class Dtype:
    def __str__(self) -> str:
        return "float16"


class Tensor:
    shape, dtype = (64, 64), Dtype()


def test_the_key_grammar_is_the_one_the_format_names() -> None:
    from tunecache.triton.keys import KeySpec, revision_token

    spec = KeySpec("scale", ["x", "out", "n"], ["n"], None, revision_token("def scale(): ..."))
    args = (Tensor(), Tensor(), 4096)
    config = Config({"BLOCK": 64})
    found = (spec.make(args, {}).text, warm.config_name(config), warm.raw_text(spec.raw(args, {})))
    assert GRAMMAR[warm.FORMAT] == found


# -- what the second review found ----------------------------------------------------------------


def _raw(kernel: Autotuner, m: int) -> tuple[Any, ...]:
    """The Triton tuning key of `launch(kernel, m)`."""
    assert kernel.warm_start is not None
    return kernel.warm_start.raw((*operands(m), m, 40, 48), {})


def test_a_key_the_file_does_not_answer_leaves_the_next_one_to_be_checked_again(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = _kernel_with_a_file(cpu_store, monkeypatch)  # the file answers m=96 only
    warm_start = kernel.warm_start
    assert warm_start is not None
    # The call that reads the file asks for a key it does not hold (a second thread's call,
    # or one whose flow failed to build, asks the warm start again afterwards).
    assert warm_start.choice(0, _raw(kernel, 64)) is None
    kept_answer = cpu_store.kept()["answers"]
    (old,) = kept_answer.values()
    other = next(name for name in warm_start.by_name if name != old)
    cpu_store.set_choice(other)  # another process re-tunes m=96 meanwhile
    assert warm_start.choice(0, _raw(kernel, 96)) is None  # not the file's old answer
    assert kernel.stats["exact"] == 0
    launch(kernel, 96)  # the flow: what the store holds now
    assert kernel.stats["exact"] == 1 and kernel.stats["tuned"] == 0
    assert kernel.best_config is warm_start.by_name[other]


def test_answers_under_a_changed_config_list_are_not_kept_for_the_kernels_own(
    cpu_store: Store,
) -> None:
    # A config more: the kernel's keys are decided against another list (its checksum).
    more = [*configs(), Config({"BLOCK": 16, "WORK": 50})]
    tuned = tuner(CpuKernel(), unseen="tune")
    tuned.configs = more
    launch(tuned, 96)  # tuned against the longer list, and written
    assert tuned.stats["tuned"] == 1 and tuned.wait_pending(timeout=60)
    kernel = tuner(CpuKernel())
    kernel.configs = more
    launch(kernel, 96)  # the store's answer for the longer list
    assert kernel.stats["exact"] == 1 and kernel.warm_start is not None
    device = kernel.warm_start.devices.get(0)
    assert device is None or not device.learned  # nothing kept under the original list's file


def test_the_exit_writes_every_devices_file_whatever_one_of_them_raises(
    cpu_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[warm.Answers] = []
    first, second = (warm.Answers(None, str(cpu_store.root), {}) for _ in range(2))

    def write(device: warm.Answers) -> bool:
        if device is first:
            raise RuntimeError("a bug of the first one's")
        written.append(device)
        return True

    monkeypatch.setattr(kept, "write", write)
    monkeypatch.setattr(kept, "_LEARNING", [first, second])
    kept.write_learned()  # nothing raised
    assert written == [second]


@pytest.mark.parametrize("part", ["", ".", ".."])
def test_a_file_whose_store_path_has_an_empty_or_dot_part_is_no_file(
    gpu_store: Store, part: str
) -> None:
    store = gpu_store
    run_child(store.root)
    version = store.db.parent.parent
    # <root>/tune/<version>/<part>/cache.db: a file's path of a store's shape, which names a
    # real database file (a copy put where it resolves to), in the state recorded.
    named = os.sep.join([str(version), part, warm.DATABASE_NAME])
    shutil.copyfile(store.db, os.path.normpath(named))
    names = {FAST: None, SLOW: None}
    data = {**store.kept(), "store": named, "signature": lists(warm.store_signature(named))}
    store.file().write_text(json.dumps(data))
    assert warm.read_answers(str(store.file()), str(store.root), names) is None
