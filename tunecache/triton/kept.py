"""What a kernel's flow learns from its store, kept at exit for the next process's warm start.

`warm.WarmStart.learn` notes each key the store answered (through the kernel's reader), in the
device's `warm.Answers`; at exit (`atexit`, or `write_learned()` when asked) each device's
answers are written to its file (`warm`'s module text says where, and when one is valid),
merged with the answers of a file that is still valid, where the store held still from the 2 s
before the reader's first look to now. What is kept here is those `Answers` alone (their file,
names, the reader's path and state): never a kernel or a store, so a kernel that is dropped is
freed, with its connections. Loaded by the first key a store answers, never by a warm start's
first call.
"""

from __future__ import annotations

from _thread import allocate_lock  # threading costs ~2 ms to import; its Lock is this one
from pathlib import Path

from tunecache.triton.warm import (
    FORMAT,
    SETTLED,
    Answers,
    Signature,
    as_lists,
    code_witness,
    read_answers,
    store_signature,
)

__all__ = ["keep", "write", "write_learned"]

#: the prefix of the temporary files renamed over an answers' file
_TEMPORARY = ".warm-"

#: the answers learned in this process, written at exit (kernels of several threads learn)
_LEARNING: list[Answers] = []
_lock = allocate_lock()


def keep(device: Answers) -> None:
    """Write `device`'s answers at exit (once)."""
    with _lock:
        if device.kept:
            return
        if not _LEARNING:
            import atexit

            atexit.register(write_learned)
        device.kept = True
        _LEARNING.append(device)


def _newest(signature: Signature) -> float:
    """The latest modification or change time in a signature, in seconds."""
    times = [max(s[3:]) for s in signature if s is not None]
    return max(times, default=0) / 1e9


def write(device: Answers) -> bool:
    """Write the device's file where this process learned answers from a store that held
    still from the 2 s before its reader's first look to now; whether it was written. An
    error of the file system leaves it unwritten, silently: the file is a cache."""
    if device.reader is None or not device.learned or device.file is None:
        return False
    store, signature, signed_at = device.reader
    if (
        signature[0] is None
        or _newest(signature) > signed_at - SETTLED
        or store_signature(store) != signature
    ):
        return False
    recorded = as_lists(signature)
    # The file as it is now: another process may have kept answers of this state since.
    found = read_answers(device.file, device.root, device.names)
    answers = found[2] if found is not None and found[0] == store else {}
    value = {
        "format": FORMAT,
        "code": code_witness(),
        "store": store,
        "signature": recorded,
        "answers": {**answers, **device.learned},
    }
    from tunecache.triton import jsonfile

    try:
        # The folder under the root, not the root: a root removed meanwhile stays so.
        file = Path(device.file)
        file.parent.mkdir(exist_ok=True)
        jsonfile.replace(file, value, _TEMPORARY)
    except OSError:
        return False
    return True


def write_learned() -> None:
    """Write every device's answers' file (`write`): at exit, or when asked. One that fails
    for any reason is left unwritten, and the others are still written: at exit, nothing of a
    cache's may print a traceback over the program's own last words."""
    for device in list(_LEARNING):
        try:
            write(device)
        except Exception:
            continue
