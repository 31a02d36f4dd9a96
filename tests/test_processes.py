"""Whether a process of this host still runs (tunecache.processes)."""

from __future__ import annotations

import os
import subprocess
import sys

from tunecache.processes import pid_alive


def test_this_process_runs() -> None:
    assert pid_alive(os.getpid())


def test_a_process_that_ended_and_was_reaped_is_gone() -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert not pid_alive(int(child.stdout))


def test_an_id_no_process_can_have_is_gone() -> None:
    assert not pid_alive(2**80)
