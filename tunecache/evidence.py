"""What a timing record carries besides its samples: the environment it was measured in, and a
candidate's failure as one line of text. Shared by the bench and the Triton client's measure."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

from tunecache import codec

__all__ = ["environment", "error_text"]


def error_text(e: Exception) -> str:
    """An exception as one bounded line: its type, then its message."""
    message = " ".join(str(e).split())[:300]
    text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    # Lone surrogates have no UTF-8 form and the codec would refuse the record.
    return text.encode("utf-8", "replace").decode("utf-8")


def environment() -> dict[str, codec.Scalar]:
    """What the timings depend on besides the device identity, as CBOR scalars."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": _numpy_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def _numpy_version() -> str | None:
    """numpy's version, without importing numpy if the caller has not."""
    module = sys.modules.get("numpy")
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        return None
