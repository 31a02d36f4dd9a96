"""The keyword options of the functions that name a device and its cache, as TypedDicts.

`tunecache.detect(**identity)`, `tunecache.open(**location)` and `Table.open(**location)` take
these; a type checker reads them here. They are `tunecache.identity.Identity` and
`tunecache.paths.Location`, which load this module on first use: `typing` costs every start of
`tunecache where` and `list` 2 ms, and each TypedDict another half.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from tunecache.device import Device

__all__ = ["Identity", "Location"]


class Identity(TypedDict, total=False):
    """The keyword options that name a device identity (`detect_fields`, `tunecache.detect`):
    each one left out (or None) is configured (`tunecache.configure`), detected, or takes the
    default `detect_fields` gives it. Their names are CHECKED_FIELDS."""

    client: str | None
    client_version: str | None
    threads: int | None
    accelerator: str | None
    cpu: str | None


class Location(Identity, total=False):
    """The keyword options that name a cache (`tunecache.open`, `Table.open`): a device
    identity, or `device` itself, and the folder (`root`) or the very file (`path`) of its
    database."""

    root: str | os.PathLike[str] | None
    path: str | os.PathLike[str] | None
    device: Device | None
