"""Whether a process of this host still runs, for the callers that find a process id in the store
(a tuner's claim on a key, a run the doctor may call stale).

Standard library only and imported by nothing at `import tunecache`: the claims and the doctor
import it when they are imported.
"""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether the process `pid` of this host may still run: False only where there is none."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, ValueError):
        return False  # no process can have that id
    except OSError:
        return True  # someone else's live process (PermissionError), or one that cannot be told
    return True
