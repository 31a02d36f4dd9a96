"""A process that borrows a key with the CPU kernel, for the pending-key tests (test_pending.py).

    python -m tests.triton.pending_child [--tune]

It tunes m=96 (if the store does not hold it yet), then launches m=80, which borrows 96's
config, and prints one line: the pending keys as JSON, [[key text, earlier], ...]. With `--tune`
it then tunes them (`tune_pending()`) and prints `tuned N`. It exits normally: what its writer
queued is written at exit. The store is the test's (TUNECACHE_DIR), for the device of fake.GPU.
"""

from __future__ import annotations

import json
import sys

from tests.triton.fake import CpuKernel, launch, tuner


def main(argv: list[str]) -> None:
    kernel = tuner(CpuKernel())
    launch(kernel, 96)
    launch(kernel, 80)
    print(json.dumps([[p.key.text, p.earlier] for p in kernel.pending]), flush=True)
    if "--tune" in argv:
        print(f"tuned {len(kernel.tune_pending())}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
