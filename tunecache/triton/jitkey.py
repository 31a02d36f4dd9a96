"""Triton's installation hash, remembered between processes.

Before a process compiles or loads its first kernel, Triton hashes its own installation
(`triton.runtime.cache.triton_key`: every module of triton.compiler, triton.backends and
triton.language, and the whole of libtriton): about 0.4 s on the H200's host, in every process,
whatever its kernels are (tools/gpu/bench_triton.py --profile: 0.395 s of a 0.55 s warm first
call, 0.33 s of it in sha256). Triton keeps it in memory only. `remember(folder)` keeps it in a
small file there (`triton-key.json`, beside the device's cache), valid for one state of the
installation: the path, size, modification and change times, inode and device of every file
Triton reads for it (found as Triton finds them, a superset), with Triton's version. A process
whose installation matches serves Triton the remembered hash (`triton.runtime.cache.triton_key`
replaced by one that returns it); any other state (an upgrade, an edited file, a copied
environment: each changes a change time) computes it as Triton would, and remembers that.

It runs once per process, before the first launch of a decorated kernel, and only while Triton
has not computed the hash itself (then nothing is left to save). TUNECACHE_TRITON_KEY=0 turns it
off. A Triton without `triton_key` as 3.x has it, or a folder that cannot hold the file, leaves
Triton as it is.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tunecache.triton.warm import read_json, switched_off

__all__ = [
    "ENV",
    "FILE",
    "KEPT",
    "SETTLED",
    "fingerprint",
    "fingerprint_files",
    "outcome",
    "pending",
    "remember",
]

#: the environment variable that turns remembering off ("0", "off", "false", "no")
ENV = "TUNECACHE_TRITON_KEY"
#: the file's name in the folder `remember` is given
FILE = "triton-key.json"
#: states of installations the file keeps (several environments may share a cache folder)
KEPT = 8
#: the file's format
_FORMAT = 1

_lock = threading.Lock()

#: what this process's `remember` did ("remembered", "computed", "left"; None: not called)
outcome: str | None = None


def pending() -> bool:
    """Whether this process's Triton has yet to hash its installation (and remembering is on):
    a look at `sys.modules`, nothing imported."""
    if switched_off(ENV):
        return False
    found = _key_function()
    # Served a kept hash, its function has answered once (`_serve`): nothing is pending then.
    return found is not None and found.cache_info().currsize == 0


def _key_function() -> Any:
    """Triton's `triton_key`, if it is 3.x's: a function of no argument under lru_cache."""
    module = sys.modules.get("triton.runtime.cache")
    found = getattr(module, "triton_key", None)
    if callable(found) and callable(getattr(found, "cache_info", None)):
        return found
    return None


def _suffixes() -> tuple[str, ...]:
    """The file suffixes a module can have under this interpreter (`.py`, `.pyc`, extension
    modules' own), as `pkgutil` accepts them."""
    import importlib.machinery

    return tuple(importlib.machinery.all_suffixes())


def _modules(folder: str, suffixes: tuple[str, ...], seen: set[str]) -> Iterator[str]:
    """Every module file under `folder` that `pkgutil.walk_packages` could find: files with a
    module suffix, in folders that are packages (an `__init__` file), recursively; a folder
    met twice (a symbolic link's loop) is walked once."""
    real = os.path.realpath(folder)
    if real in seen:
        return
    seen.add(real)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError:
            continue
        if is_dir:
            if entry.name != "__pycache__" and any(
                n.startswith("__init__.") for n in _names(entry.path)
            ):
                yield from _modules(entry.path, suffixes, seen)
        elif entry.name.endswith(suffixes):
            yield entry.path


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def fingerprint_files(cache_file: str) -> list[str]:
    """The files whose state `fingerprint` takes, for the Triton installation whose
    `triton/runtime/cache.py` is `cache_file`: that module, every module file of its compiler,
    backends and language packages (a superset of what `pkgutil.walk_packages` finds there,
    which is what Triton's own hash reads), and libtriton."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(cache_file)))
    files = [os.path.abspath(cache_file)]
    suffixes, seen = _suffixes(), set[str]()
    for sub in ("compiler", "backends", "language"):
        files.extend(_modules(os.path.join(package, sub), suffixes, seen))
    native = os.path.join(package, "_C")
    files.extend(os.path.join(native, n) for n in sorted(_names(native)) if "libtriton" in n)
    return files


def fingerprint(cache_file: str, version: str) -> tuple[str, float]:
    """The state of the Triton installation whose `triton/runtime/cache.py` is `cache_file`:
    a hash of Triton's `version`, the interpreter's extension suffix and the path, size, times,
    inode and device of every file of `fingerprint_files`; with the newest of those files'
    modification and change times (seconds since the epoch)."""
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    digest = hashlib.sha256(f"triton {version} {suffix}\n".encode())
    newest = 0.0
    for path in fingerprint_files(cache_file):
        try:
            st = os.stat(path)
        except OSError:
            digest.update(f"{path} missing\n".encode("utf-8", "surrogateescape"))
            continue
        newest = max(newest, st.st_mtime, st.st_ctime)
        line = f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino} {st.st_dev}\n"
        digest.update(line.encode("utf-8", "surrogateescape"))
    return digest.hexdigest(), newest


def _read(path: Path) -> dict[str, str]:
    data = read_json(path)
    keys = data.get("keys") if isinstance(data, dict) and data.get("format") == _FORMAT else None
    if not isinstance(keys, dict):
        return {}
    return {k: v for k, v in keys.items() if isinstance(k, str) and isinstance(v, str)}


def _keep(path: Path, keys: dict[str, str]) -> None:
    """Write the KEPT most recently used of `keys` to `path` whole (`jsonfile.replace`), where
    the folder takes it."""
    from tunecache.triton import jsonfile

    with contextlib.suppress(OSError):
        kept = dict(list(keys.items())[-KEPT:])
        jsonfile.replace(path, {"format": _FORMAT, "keys": kept}, _TEMPORARY)


#: the prefix of the temporary files renamed over the file
_TEMPORARY = ".triton-key-"


def _serve(value: str, original: Callable[[], str]) -> None:
    """Make Triton's `triton_key` return `value`, in every loaded module that holds it by name
    (triton.runtime.cache, and those that imported it from there: Triton's autotuner, torch's
    inductor). It answers once at once, so that its cache says it is hashed (`pending`)."""

    @functools.lru_cache
    def triton_key() -> str:
        return value

    triton_key()

    for module in list(sys.modules.values()):
        try:
            held = vars(module).get("triton_key")
        except TypeError:  # not a module (a stand-in some program put there)
            continue
        if held is original:
            setattr(module, "triton_key", triton_key)  # noqa: B010 (a module, not typed)


def remember(folder: Path) -> str:
    """Serve Triton its installation hash from `folder`'s file, or compute it (as Triton would
    have, on its first compile) and keep it there. Says what it did: "remembered",
    "computed", or "left" (off, already hashed or served, not a Triton it knows), as `outcome`
    does."""
    global outcome
    with _lock:
        outcome = _remember(folder)
        return outcome


#: files this recent may still be being written (an install under way): a hash computed now is
#: not kept, as a timestamp's coarse tick could hide a change made after it read them
SETTLED = 2.0


def _remember(folder: Path) -> str:
    """`remember`, under its lock."""
    import time

    if not pending():
        return "left"
    original = _key_function()
    module = sys.modules["triton.runtime.cache"]
    version = str(getattr(sys.modules.get("triton"), "__version__", "?"))
    cache_file = str(getattr(module, "__file__", ""))
    state, _ = fingerprint(cache_file, version)
    path = Path(folder) / FILE
    keys = _read(path)
    value = keys.get(state)
    if value is not None:
        _serve(value, original)
        if list(keys).index(state) < len(keys) // 2:
            # The states are kept roughly most recently used last: one in the older half moves
            # to the end, so an environment in use is not the one the next new state pushes
            # out (and two in use in turn do not rewrite the file at every process's start).
            keys[state] = keys.pop(state)
            _keep(path, keys)
        return "remembered"
    value = original()
    # Kept only for a state that held still while Triton read it, and is not so recent that
    # a change within the same timestamp tick could look like no change (git's "racy" files).
    after, newest = fingerprint(cache_file, version)
    if after == state and newest < time.time() - SETTLED:
        keys[state] = value  # a new state (a kept one was served above): the newest, last
        _keep(path, keys)
    return "computed"
