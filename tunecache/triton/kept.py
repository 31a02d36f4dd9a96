"""What a kernel's flow learns from its store, kept at exit for the next process's warm start.

`warm.WarmStart.learn` notes each key the store answered (through the kernel's reader); at exit
(`atexit`, or `write_learned()` when asked) every device's answers are written to its file
(`warm`'s module text says where, and when one is valid), merged with the answers a still-valid
file has, where the store held still from the 2 s before the reader's first look to now. Loaded
by the first key a store answers, never by a warm start's first call.
"""

from __future__ import annotations

import os
from pathlib import Path

from tunecache.triton.warm import (
    FORMAT,
    SETTLED,
    Answers,
    Signature,
    WarmStart,
    as_lists,
    store_signature,
)

__all__ = ["keep", "write", "write_learned"]

#: the prefix of the temporary files renamed over an answers' file
_TEMPORARY = ".warm-"

#: the warm starts that learned answers in this process, written at exit
_LEARNING: list[WarmStart] = []


def keep(warm: WarmStart) -> None:
    """Write `warm`'s answers at exit (once per kernel)."""
    if warm in _LEARNING:
        return
    if not _LEARNING:
        import atexit

        atexit.register(write_learned)
    _LEARNING.append(warm)


def _newest(signature: Signature) -> float:
    """The latest modification or change time in a signature, in seconds."""
    times = [max(s[3:]) for s in signature if s is not None]
    return max(times, default=0) / 1e9


def write(warm: WarmStart) -> None:
    """Write each device's file where this process learned answers from a store that held
    still from the 2 s before its first read to now."""
    for device in warm.devices.values():
        state = device.state
        if state is None or not device.learned or device.file is None:
            continue
        reader = state.reader
        signature, signed_at = reader.signature, reader.signed_at
        if (
            reader.path is None
            or signature is None
            or signature[0] is None
            or _newest(signature) > signed_at - SETTLED
            or store_signature(reader.path) != signature
        ):
            continue
        store, recorded = os.fspath(reader.path), as_lists(signature)
        if device.store == store and device.signature == recorded:
            answers = device.answers
        else:
            # Read again: another process may have written the file since this one did.
            fresh = Answers(device.file)
            warm.read(fresh)
            answers = fresh.answers if fresh.store == store else {}
        answers = {**answers, **device.learned}
        value = {"format": FORMAT, "store": store, "signature": recorded, "answers": answers}
        from tunecache.triton import jsonfile

        try:
            # The folder under the root, not the root: a root removed meanwhile stays so.
            file = Path(device.file)
            file.parent.mkdir(exist_ok=True)
            jsonfile.replace(file, value, _TEMPORARY)
        except OSError:
            continue


def write_learned() -> None:
    """Write every kernel's answers' files (`write`): at exit, or when asked."""
    for warm in list(_LEARNING):
        write(warm)
