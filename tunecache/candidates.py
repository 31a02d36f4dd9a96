"""Candidate sets: the ordered list of an op's legal alternatives, and its checksum.

An entry is tuned against one candidate set. When the client's list changes (a kernel added,
dropped, renamed or reordered), its checksum changes and entries tuned against the old list no
longer answer for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from tunecache._digest import sha256
from tunecache.errors import BadRecordError

__all__ = ["MAX_NAME_LEN", "candidate_names", "checksum"]

#: longest candidate name accepted
MAX_NAME_LEN = 200


def candidate_names(names: Iterable[str]) -> tuple[str, ...]:
    """The names as a validated tuple: non-empty, unique, printable, at most MAX_NAME_LEN long."""
    if isinstance(names, str | bytes):
        raise BadRecordError("candidates must be a list of names, not one string")
    out = tuple(names)
    if not out:
        raise BadRecordError("a candidate set needs at least one candidate")
    seen: set[str] = set()
    for position, name in enumerate(out):
        if not isinstance(name, str) or not name:
            raise BadRecordError(f"candidate {position} must be a non-empty string, got {name!r}")
        if len(name) > MAX_NAME_LEN or not name.isprintable():
            raise BadRecordError(
                f"candidate {position} must be printable and at most {MAX_NAME_LEN} "
                f"characters, got {name[:40]!r}"
            )
        if name in seen:
            raise BadRecordError(f"candidate {name!r} appears twice")
        seen.add(name)
    return out


def checksum(names: Iterable[str]) -> str:
    """The checksum of an ordered candidate list: equal lists, equal checksums."""
    digest = sha256()
    for name in candidate_names(names):
        # Length-prefixed, so ["ab", "c"] and ["a", "bc"] can never collide.
        raw = name.encode()
        digest.update(len(raw).to_bytes(4, "big"))
        digest.update(raw)
    return digest.hexdigest()[:32]
