"""tunecache: a persistent, per-device autotuning cache.

For every optimisable op a runtime runs, tunecache records which of its legal implementations is
fastest on this machine, at this shape and thread count, with the evidence.

Importing this package is cheap on purpose: SQLAlchemy and Alembic load only when a cache is
opened for writing (`tunecache.open`), never on the read path.
"""

from __future__ import annotations

# Nothing is imported here at run time: `import tunecache` (and so applying the Triton
# decorator, `tunecache.triton.autotune`) loads this file alone. Every name below loads its
# module on first use (`__getattr__`), the errors and the version included.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tunecache._version import __version__
    from tunecache.bucketing import Bucketing
    from tunecache.cache import Cache, Entry
    from tunecache.cache import open_cache as open
    from tunecache.codec import CandidateTiming, TimingRecord
    from tunecache.config import configure
    from tunecache.device import Device, detect
    from tunecache.dispatch import Tunable, profile, tunable

    # Every exception and warning tunecache raises, as tunecache.errors lists them.
    from tunecache.errors import *  # noqa: F403
    from tunecache.fleet import sync
    from tunecache.keys import Key, format_key, make_key, parse
    from tunecache.resolve import Answer, Table, current, set_default, using
    from tunecache.resolve.misses import record_misses

# `tunecache.errors.__all__`, in its order, spelled out so that `import tunecache` defines no
# exception class (tests/test_import.py keeps the two equal). One string, not a list: errors.py
# holds the list a name a line, and this is no second place to read or edit it.
_ERRORS = (  # noqa: SIM905 (see above)
    "BadArgumentError BadKeyError BadOutputError BadRecordError CodecError DeviceMismatchError"
    " NoCacheError NotFoundError ReadOnlyStoreError SchemaTooNewError StoreBusyError"
    " SQLiteDefectWarning StoreError StoreMovedError StoreUnreachableError TuneInterrupted"
    " TunecacheError TunecacheWarning"
).split()

__all__ = [
    "__version__",
    # keys and devices (pure values)
    "Bucketing",
    "Device",
    "Key",
    "configure",
    "detect",
    "format_key",
    "make_key",
    "parse",
    # the store
    "Cache",
    "CandidateTiming",
    "Entry",
    "TimingRecord",
    "open",
    "sync",
    # the hot path
    "Answer",
    "Table",
    "Tunable",
    "current",
    "profile",
    "record_misses",
    "set_default",
    "tunable",
    "using",
    # errors: every exception and warning
    *_ERRORS,
]

_LAZY = {
    "__version__": ("tunecache._version", "__version__"),
    **{name: ("tunecache.errors", name) for name in _ERRORS},
    "Key": ("tunecache.keys", "Key"),
    "format_key": ("tunecache.keys", "format_key"),
    "make_key": ("tunecache.keys", "make_key"),
    "parse": ("tunecache.keys", "parse"),
    "Device": ("tunecache.device", "Device"),
    "detect": ("tunecache.device", "detect"),
    "configure": ("tunecache.config", "configure"),
    "Bucketing": ("tunecache.bucketing", "Bucketing"),
    "Cache": ("tunecache.cache", "Cache"),
    "Entry": ("tunecache.cache", "Entry"),
    "open": ("tunecache.cache", "open_cache"),
    "sync": ("tunecache.fleet", "sync"),
    "CandidateTiming": ("tunecache.codec", "CandidateTiming"),
    "TimingRecord": ("tunecache.codec", "TimingRecord"),
    "Answer": ("tunecache.resolve", "Answer"),
    "Table": ("tunecache.resolve", "Table"),
    "current": ("tunecache.resolve", "current"),
    "set_default": ("tunecache.resolve", "set_default"),
    "using": ("tunecache.resolve", "using"),
    "record_misses": ("tunecache.resolve.misses", "record_misses"),
    "Tunable": ("tunecache.dispatch", "Tunable"),
    "profile": ("tunecache.dispatch", "profile"),
    "tunable": ("tunecache.dispatch", "tunable"),
}


#: submodules reachable as attributes of the package without importing them first
_SUBMODULES = frozenset({"accept", "bench", "errors", "keys", "stats", "triton", "tune"})


def __dir__() -> list[str]:
    """The package's names, those loaded on first use included (for completion in a shell)."""
    return sorted({*globals(), *__all__, *_SUBMODULES})


def __getattr__(name: str) -> Any:
    # PEP 562: the store's names load SQLAlchemy, so they are imported on first use only; the
    # resolver's load sqlite3, which a program that never consults a cache need not pay for;
    # the keys' module, which `tunecache where` and `list` never use; and the
    # errors' classes cost a process that only applies the Triton decorator more than the rest
    # of what that loads (about 0.3 ms).
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        # `tunecache.tune.Model(...)` after a plain `import tunecache`, as with numpy.linalg.
        import importlib

        return importlib.import_module(f"tunecache.{name}")
    raise AttributeError(f"module 'tunecache' has no attribute {name!r}")
