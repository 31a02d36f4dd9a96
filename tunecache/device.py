"""Device identity: what a tuning decision is valid for.

A decision measured on one CPU, at one thread count, by one version of the client library, says
nothing about another. The identity is a declared list of checked fields (`CHECKED_FIELDS`); two
identities that differ in any of them never share entries, and data from one is refused by the
other (pyperf's `_CHECKED_METADATA` follows the same rule).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Unpack

from tunecache.errors import DeviceMismatchError
from tunecache.identity import (
    CHECKED_FIELDS,
    Fields,
    Identity,
    check_fields,
    cpu_model,
    detect_fields,
    dirname,
    fingerprint,
    slugify,
    usable_cpus,
)

__all__ = [
    "CHECKED_FIELDS",
    "Device",
    "cpu_model",
    "detect",
    "slugify",
    "usable_cpus",
]


@dataclass(frozen=True, slots=True)
class Device:
    """One device identity: the checked fields a decision is valid for."""

    cpu: str
    threads: int
    accelerator: str | None
    client: str
    client_version: str

    def __post_init__(self) -> None:
        check_fields(*self.fields)

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
        return {f.name: getattr(self, f.name) for f in fields(self)}

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

    def with_threads(self, threads: int) -> Device:
        """The same device at another thread-pool size (a different identity)."""
        return replace(self, threads=threads)


def detect(**identity: Unpack[Identity]) -> Device:
    """The identity of this machine for `client`, with explicit values taking precedence.

    `threads` is the size of the thread pool the client will run with; by default, every CPU this
    process may use. `client_version` defaults to tunecache's own version when the client is
    tunecache itself, and must be given for any other client. `cpu` and `accelerator` name
    other hardware than what is detected (see `tunecache.identity.detect_fields`).
    """
    from tunecache.paths import check_options

    check_options(identity, "detect", CHECKED_FIELDS)
    return Device(*detect_fields(**identity))
