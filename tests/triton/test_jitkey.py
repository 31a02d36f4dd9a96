"""tunecache.triton.jitkey: Triton's installation hash remembered between processes, checked
against a Triton installation of files on disk (its `triton_key` hashes them as 3.x's does),
each process a real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: a stand-in for triton/runtime/cache.py: 3.x's triton_key, over this installation's files
CACHE_PY = """
import functools, hashlib, os
CALLS = []

@functools.lru_cache()
def triton_key():
    CALLS.append(1)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256(open(__file__, "rb").read())
    for sub in ("compiler", "backends", "language", "_C"):
        for folder, dirs, files in sorted(os.walk(os.path.join(package, sub))):
            dirs.sort()
            for name in sorted(files):
                digest.update(open(os.path.join(folder, name), "rb").read())
    return "3.9.0-" + digest.hexdigest()
"""

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import triton.runtime.cache as cache
import triton.compiler.compiler as compiler
if sys.argv[3] == "hashed first":
    cache.triton_key()
from tunecache.triton import jitkey
if sys.argv[4] != "default":
    jitkey.SETTLED = float(sys.argv[4])  # the files here were all written just now
said = jitkey.remember(sys.argv[2])
print(json.dumps({"said": said, "calls": len(cache.CALLS), "key": cache.triton_key(),
                  "compiler's": compiler.triton_key(), "pending": jitkey.pending()}))
"""


def _installation(site: Path) -> None:
    files = {
        "triton/__init__.py": "__version__ = '3.9.0'\n",
        "triton/runtime/__init__.py": "",
        "triton/runtime/cache.py": CACHE_PY,
        "triton/compiler/__init__.py": "",
        "triton/compiler/compiler.py": "from ..runtime.cache import triton_key\n",
        "triton/backends/__init__.py": "",
        "triton/backends/nvidia/__init__.py": "",
        "triton/backends/nvidia/compiler.py": "ARCH = 'sm90'\n",
        "triton/language/__init__.py": "",
        "triton/_C/libtriton.so": "\x7fELF not really\n",
    }
    for name, text in files.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _child(
    site: Path, folder: Path, how: str = "", settled: str = "0", **env: str
) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(site), str(folder), how, settled],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_hash_is_computed_once_then_served_to_later_processes(tmp_path: Path) -> None:
    from tunecache.triton import jitkey

    site, folder = tmp_path / "site", tmp_path / "store"
    _installation(site)
    first = _child(site, folder)
    assert first["said"] == "computed" and first["calls"] == 1
    assert first["key"] == first["compiler's"] and not first["pending"]
    assert (folder / jitkey.FILE).is_file()
    second = _child(site, folder)
    # Served: Triton's own hash never ran, and every module that looks it up gets the same.
    assert second == {**first, "said": "remembered", "calls": 0}


def test_an_installation_that_changed_is_hashed_again(tmp_path: Path) -> None:
    site, folder = tmp_path / "site", tmp_path / "store"
    _installation(site)
    first = _child(site, folder)
    # The same size, other bytes: Triton's hash changes, and so does the file's change time.
    (site / "triton/backends/nvidia/compiler.py").write_text("ARCH = 'sm80'\n")
    again = _child(site, folder)
    assert again["said"] == "computed" and again["calls"] == 1
    assert again["key"] != first["key"]
    # Both states are kept: an environment that still has the first one is served it.
    assert _child(site, folder)["said"] == "remembered"


def test_a_hash_of_files_written_just_now_is_not_kept(tmp_path: Path) -> None:
    from tunecache.triton import jitkey

    site, folder = tmp_path / "site", tmp_path / "store"
    _installation(site)
    # An install under way could still change a file within the timestamp tick Triton read it
    # in: with the default settling time, files written just now are hashed, never kept.
    for _ in range(2):
        got = _child(site, folder, settled="default")
        assert got["said"] == "computed" and got["calls"] == 1
    assert not (folder / jitkey.FILE).exists()


def test_states_beyond_the_kept_number_are_dropped_oldest_first(tmp_path: Path) -> None:
    from tunecache.triton import jitkey

    site, folder = tmp_path / "site", tmp_path / "store"
    _installation(site)
    first = _child(site, folder)
    for n in range(jitkey.KEPT):
        (site / "triton/language/__init__.py").write_text(f"# state {n}\n")
        assert _child(site, folder)["said"] == "computed"
    kept = json.loads((folder / jitkey.FILE).read_text())["keys"]
    assert len(kept) == jitkey.KEPT and first["key"] not in kept.values()


def test_a_state_in_use_is_kept_before_newer_ones_and_abandoned_temporaries_are_swept(
    tmp_path: Path,
) -> None:
    from tunecache.triton import jitkey

    # Two environments (two installations) share one cache folder.
    site, other, folder = tmp_path / "site", tmp_path / "other", tmp_path / "store"
    _installation(site)
    _installation(other)
    (other / "triton/language/__init__.py").write_text("# another build\n")
    first, second = _child(site, folder), _child(other, folder)
    assert first["key"] != second["key"]
    kept = json.loads((folder / jitkey.FILE).read_text())["keys"]
    assert list(kept.values()) == [first["key"], second["key"]]
    # The first one in use again: it moves to the end, the most recently used.
    assert _child(site, folder)["said"] == "remembered"
    kept = json.loads((folder / jitkey.FILE).read_text())["keys"]
    assert list(kept.values()) == [second["key"], first["key"]]
    language = site / "triton/language/__init__.py"
    # A temporary file a killed writer left long ago is swept by the next write; a fresh
    # one (a writer at work) is not.
    old, new = folder / ".triton-key-old", folder / ".triton-key-new"
    old.write_text("{")
    new.write_text("{")
    os.utime(old, (1, 1))
    language.write_text("# state 3\n")
    assert _child(site, folder)["said"] == "computed"
    assert not old.exists() and new.exists()


def test_the_fingerprint_covers_every_module_pkgutil_finds(tmp_path: Path) -> None:
    import pkgutil

    from tunecache.triton import jitkey

    site = tmp_path / "site"
    _installation(site)
    triton = site / "triton"
    nested = triton / "language/extra/cuda"
    nested.mkdir(parents=True)
    for init in (triton / "language/extra/__init__.py", nested / "__init__.py"):
        init.write_text("")
    (nested / "libdevice.py").write_text("")
    (triton / "backends/nvidia/only_bytecode.pyc").write_bytes(b"")
    (triton / "language/not_a_package").mkdir()
    (triton / "language/not_a_package/x.py").write_text("")
    (triton / "language/looped").symlink_to(triton / "language", target_is_directory=True)
    files = jitkey.fingerprint_files(str(triton / "runtime/cache.py"))
    # A file is covered when its own state is taken, under whatever path (the looped link
    # names language/ again: pkgutil reads its files twice, the fingerprint once).
    real = {os.path.realpath(f) for f in files}
    # What Triton's own hash reads there: pkgutil's walk of each of the three packages.
    sys.path.insert(0, str(site))
    try:
        for sub in ("compiler", "backends", "language"):
            for found in pkgutil.walk_packages([str(triton / sub)], prefix=f"triton.{sub}."):
                spec = found.module_finder.find_spec(found.name)  # type: ignore[call-arg]
                assert spec is not None and os.path.realpath(str(spec.origin)) in real, found.name
    finally:
        sys.path.remove(str(site))
        for name in [n for n in sys.modules if n == "triton" or n.startswith("triton.")]:
            del sys.modules[name]
    assert str(triton / "_C/libtriton.so") in files
    assert not any("not_a_package" in f for f in files)


def test_nothing_is_done_where_triton_hashed_already_or_it_is_turned_off(tmp_path: Path) -> None:
    from tunecache.triton import jitkey

    site, folder = tmp_path / "site", tmp_path / "store"
    _installation(site)
    hashed = _child(site, folder, "hashed first")
    assert hashed["said"] == "left" and hashed["calls"] == 1
    off = _child(site, folder, **{jitkey.ENV: "0"})
    assert off["said"] == "left" and off["calls"] == 0 and not off["pending"]
    assert not (folder / jitkey.FILE).exists()


@pytest.mark.parametrize("damage", ["not json", "a folder"])
def test_a_damaged_or_unwritable_file_costs_only_the_hash(tmp_path: Path, damage: str) -> None:
    from tunecache.triton import jitkey

    site, folder = tmp_path / "site", tmp_path / "store"
    _installation(site)
    folder.mkdir()
    if damage == "not json":
        (folder / jitkey.FILE).write_text("{ half a file")
    else:
        (folder / jitkey.FILE).mkdir()  # neither read nor replaced
    got = _child(site, folder)
    assert got["said"] == "computed" and got["calls"] == 1 and got["key"] == got["compiler's"]
    if damage == "not json":
        assert _child(site, folder)["said"] == "remembered"  # replaced whole


def test_where_no_triton_of_3x_is_loaded_nothing_is_pending(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from tunecache.triton import jitkey

    monkeypatch.delitem(sys.modules, "triton.runtime.cache", raising=False)
    assert not jitkey.pending() and jitkey.remember(tmp_path) == "left"
    # A triton_key without lru_cache's cache_info is not 3.x's: left alone too.
    other = SimpleNamespace(triton_key=lambda: "?", __file__=str(tmp_path / "cache.py"))
    monkeypatch.setitem(sys.modules, "triton.runtime.cache", other)
    assert not jitkey.pending() and jitkey.remember(tmp_path) == "left"
    assert not list(tmp_path.iterdir())
