"""SHA-256 without OpenSSL's start-up cost.

`hashlib` initialises OpenSSL when imported (~5 ms here), which a resolver's cold start would pay
for two short digests (the device fingerprint and the candidate-list checksum). CPython's own
builtin SHA-256 module gives the same digest at no start-up cost; `hashlib` is the fallback for
interpreters built without it, and is used where something else has imported it already.
"""

from __future__ import annotations

import sys

# typing.TYPE_CHECKING would cost the import this module exists to avoid; mypy treats any name
# TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING or "hashlib" in sys.modules:
    # Where hashlib is loaded already (torch and Triton load it), its SHA-256 costs nothing
    # more, and loading the builtin module would (about 0.1 ms): the digests are the same.
    from hashlib import sha256
else:
    try:
        from _sha2 import sha256  # CPython 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:  # pragma: no cover - interpreters without the builtin module
            from hashlib import sha256

__all__ = ["sha256"]
