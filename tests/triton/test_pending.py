"""A borrowed key outlives its process: it is kept in the store's pending keys (source "triton"),
listed by `tunecache pending`, known to a later process that borrows it again, and cleared once
any process stores its decision. The processes are real (tests/triton/pending_child.py), and the
test reads what each one wrote after it has exited: no sleep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.conftest import ROOT
from tests.triton.fake import GPU, CpuKernel, launch, operands, stored, tuner
from tunecache import paths
from tunecache.cli import main
from tunecache.store.pending import Pending, pending_keys
from tunecache.triton import flush

#: the identity of fake.GPU on the command line
IDENTITY = [
    "--client", "triton", "--client-version", "3.6.0", "--cpu", "test-gpu",
    "--threads", "132", "--accelerator", "test-gpu-sm90-driver-1-0",
]  # fmt: skip


def _pending() -> list[Pending]:
    assert flush(timeout=60)
    return pending_keys(paths.locate(device=GPU)[1], GPU.fingerprint)


def _child(*flags: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.triton.pending_child", *flags],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_borrowed_key_is_kept_in_the_store_and_cleared_when_tuned() -> None:
    tuned = tuner(CpuKernel())
    launch(tuned, 96)
    launch(tuned, 80)
    launch(tuned, 80)  # the same key again: noted once
    (row,) = _pending()
    key = tuned.key(*operands(80), 80, 40, 48)
    assert (row.key, row.checksum) == (key.text, tuned.checksum)
    assert (row.source, row.op, row.asked) == ("triton", tuned.op, 1)
    assert row.candidates == tuned.candidates and row.heuristic == tuned.candidates[0]
    assert [p.earlier for p in tuned.pending] == [0]
    assert tuned.tune_pending() == [key]
    assert _pending() == []
    assert stored(80, tuned) is not None


def test_a_key_pending_from_before_is_cleared_by_whichever_process_tunes_it() -> None:
    borrower = tuner(CpuKernel())
    launch(borrower, 96)
    launch(borrower, 80)
    assert len(_pending()) == 1
    # Another kernel (another process, as far as the store knows) that tunes unseen keys now.
    launch(tuner(CpuKernel(), unseen="tune"), 80)
    assert _pending() == []


def test_a_pending_key_outlives_its_process(capsys: Any) -> None:
    (first,) = _child()
    ((text, earlier),) = json.loads(first)
    assert earlier == 0
    (row,) = pending_keys(paths.locate(device=GPU)[1], GPU.fingerprint)
    assert (row.key, row.source, row.asked) == (text, "triton", 1)

    assert main(["pending", *IDENTITY, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["source"], r["asked"]) for r in listed] == [(text, "triton", 1)]

    # A later process borrows it again, knows an earlier one did, and tunes it.
    second, tuned = _child("--tune")
    assert json.loads(second) == [[text, 1]] and tuned == "tuned 1"
    assert pending_keys(paths.locate(device=GPU)[1], GPU.fingerprint) == []
    assert main(["pending", *IDENTITY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_the_offline_tuner_leaves_a_triton_key_pending_with_a_note() -> None:
    from tunecache import tune
    from tunecache.cache import Cache

    tuned = tuner(CpuKernel())
    launch(tuned, 96)
    launch(tuned, 80)
    assert len(_pending()) == 1
    with Cache.open(device=GPU) as cache:
        report = tune.pending(cache=cache)
    (outcome,) = report.keys
    assert outcome.action == "left" and outcome.op == tuned.op
    assert "the kernel's own process tunes it" in outcome.note
    assert len(_pending()) == 1
