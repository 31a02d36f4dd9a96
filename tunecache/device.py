"""Device identity: what a tuning decision is valid for.

A decision measured on one CPU, at one thread count, by one version of the client library, says
nothing about another. The identity is a declared list of checked fields (`CHECKED_FIELDS`); two
identities that differ in any of them never share entries, and data from one is refused by the
other (pyperf's `_CHECKED_METADATA` follows the same rule).
"""

from __future__ import annotations

from tunecache.errors import DeviceMismatchError
from tunecache.frozen import Frozen, fill
from tunecache.identity import (
    CHECKED_FIELDS,
    Fields,
    check_fields,
    cpu_model,
    detect_fields,
    dirname,
    fingerprint,
    slugify,
    usable_cpus,
)

# Not `typing` itself at run time: `tunecache where` and the resolver's start need none of it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypedDict, Unpack

    from tunecache.keywords import Identity

    class _Changes(TypedDict, total=False):
        cpu: str
        threads: int
        accelerator: str | None
        client: str
        client_version: str


__all__ = [
    "CHECKED_FIELDS",
    "Device",
    "cpu_model",
    "detect",
    "slugify",
    "usable_cpus",
]


class Device(Frozen):
    """One device identity: the checked fields a decision is valid for."""

    # A Frozen value rather than a frozen dataclass: every command and the resolver build one
    # at their start, and `dataclasses` costs a process about 6 ms to import.
    # CHECKED_FIELDS, written out: mypy checks a match statement against literals only.
    __match_args__ = ("cpu", "threads", "accelerator", "client", "client_version")
    __slots__ = __match_args__
    cpu: str
    threads: int
    accelerator: str | None
    client: str
    client_version: str

    def __init__(
        self, cpu: str, threads: int, accelerator: str | None, client: str, client_version: str
    ) -> None:
        check_fields(cpu, threads, accelerator, client, client_version)
        fill(self, cpu, threads, accelerator, client, client_version)

    @property
    def dirname(self) -> str:
        """The folder name of this device's store under its version folder: `<cpu>-t<threads>`."""
        return dirname(self.cpu, self.threads)

    @property
    def fingerprint(self) -> str:
        """A stable digest of every checked field; equal fingerprints mean the same device."""
        return fingerprint(self.fields)

    @property
    def fields(self) -> Fields:
        """The checked fields' values, in CHECKED_FIELDS order."""
        return (self.cpu, self.threads, self.accelerator, self.client, self.client_version)

    def as_dict(self) -> dict[str, str | int | None]:
        """The checked fields by name, for display and for export."""
        return dict(zip(CHECKED_FIELDS, self.fields, strict=True))

    def differences(self, other: Device) -> list[str]:
        """The checked fields on which `other` differs from this device."""
        return [name for name in CHECKED_FIELDS if getattr(self, name) != getattr(other, name)]

    def require_same(self, other: Device, what: str = "data") -> None:
        """Raise DeviceMismatchError unless `other` is this very device."""
        diff = self.differences(other)
        if diff:
            shown = ", ".join(
                f"{name} {getattr(other, name)!r} != {getattr(self, name)!r}" for name in diff
            )
            raise DeviceMismatchError(f"{what} is for another device: {shown}")

    def replace(self, **changes: Unpack[_Changes]) -> Device:
        """This device with the fields `changes` names set to new values (a different
        identity, checked as any other), as `dataclasses.replace` would build it."""
        # Unknown names fail as a call of Device with them would.
        return Device(**{**self.as_dict(), **changes})  # type: ignore[arg-type]

    def with_threads(self, threads: int) -> Device:
        """The same device at another thread-pool size (a different identity)."""
        return self.replace(threads=threads)


def detect(**identity: Unpack[Identity]) -> Device:
    """The identity of this machine for `client`, with explicit values taking precedence.

    Each of `client`, `client_version` and `threads` not given is what `tunecache.configure()`
    set, else what the environment says (TUNECACHE_CLIENT, TUNECACHE_CLIENT_VERSION,
    TUNECACHE_THREADS), else the default (`tunecache.config`). `threads` is the size of the
    thread pool the client runs with; by default, what the BLAS pools run once a BLAS is loaded
    (`tunecache.pools.default_threads`), else every CPU this process may use. `client_version`
    defaults to tunecache's own version when the client is tunecache itself, and must be given
    for any other client. `cpu` and `accelerator` name other hardware than what is detected
    (see `tunecache.identity.settle`).
    """
    from tunecache.paths import check_options

    check_options(identity, "detect", CHECKED_FIELDS)
    return Device(*detect_fields(**identity))
