"""Many processes writing batches (`Cache.put_many`) into one cache at once, and the checks
that judge what they leave: the scenario of tests/reliability/test_batches.py, and the one
tools/bench_store.py times full size.

Each writer builds its batches before it says it is ready, so the time between the parent's
"go" and the last writer's end is the time of the `put_many` calls alone. A writer reports a
batch only after `put_many` returned: "acknowledged" means "its commit returned". Writers use
the harness's processes, pipes and rows (`harness.Child`, `harness.write_for`, `harness.rows`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tests.reliability import harness
from tunecache.cache import Cache, NewEntry
from tunecache.keys import Key, make_key

#: samples per candidate of every record the batch writers write (4 candidates, as NAMES)
SAMPLES = 10


@dataclass
class Batches:
    """What N writers of batches did to one cache, and what the checks found."""

    writers: int
    batches: int
    size: int
    seconds: float = 0.0
    #: entries in batches whose `put_many` returned
    acked: int = 0
    caller_errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def entries_per_s(self) -> float:
        """Acknowledged entries per second of wall time, all writers together."""
        return self.acked / self.seconds if self.seconds else 0.0


def batch_key(writer: int, batch: int, index: int) -> Key:
    """The key of entry `index` of a writer's batch: only that writer writes it."""
    return make_key("conv_F32_batch", w=writer + 1, b=batch + 1, i=index + 1)


def batch_write(writer: int, batch: int, index: int, size: int) -> harness.Write:
    """The entry `index` of a writer's batch, fully determined by those numbers."""
    seq = batch * size + index
    return harness.write_for(writer, seq, batch_key(writer, batch, index), SAMPLES)


def as_new_entry(write: harness.Write) -> NewEntry:
    """A harness write as `put_many` takes it."""
    return NewEntry(
        write.key,
        write.choice,
        harness.NAMES,
        heuristic=write.heuristic,
        record=write.record,
        speedup=write.speedup,
    )


def _writer(db: Path, writer: int, batches: int, size: int, go: int, send: harness.Sender) -> None:
    work = [
        [as_new_entry(batch_write(writer, b, i, size)) for i in range(size)] for b in range(batches)
    ]
    with Cache.open(device=harness.DEVICE, path=db) as cache:
        send(harness.READY)
        os.read(go, 1)  # returns when the parent closes the other end: everyone starts at once
        for b, entries in enumerate(work):
            try:
                cache.put_many(entries)
            except Exception as error:  # anything that reaches the caller is counted
                send(harness.ERROR, b, text=f"{type(error).__name__}: {error}")
                continue
            send(harness.ACK, b)


def batch_writers(db: Path, *, writers: int, batches: int, size: int) -> Batches:
    """`writers` processes each write `batches` batches of `size` entries at once; then every
    acknowledged entry must be there, byte for byte, and the file whole."""
    harness.new_cache(db)
    result = Batches(writers=writers, batches=batches, size=size)
    go_r, go_w = os.pipe()
    kids = [
        harness.Child(partial(_writer, db, w, batches, size, go_r), close=[go_w])
        for w in range(writers)
    ]
    harness.wait_for(kids, harness.READY)
    start = time.monotonic()
    os.close(go_w)
    while not all(k.eof for k in kids):
        harness.pump(kids, 1.0)
    result.seconds = time.monotonic() - start
    for kid in kids:
        kid.finish()
    os.close(go_r)
    for writer, kid in enumerate(kids):
        result.violations += [f"writer {writer} crashed: {c}" for c in kid.crashes()]
        result.caller_errors += [m.text for m in kid.messages if m.tag == harness.ERROR]
    _check(db, result, [{m.a for m in kid.messages if m.tag == harness.ACK} for kid in kids])
    return result


def _check(db: Path, result: Batches, acked: list[set[int]]) -> None:
    """Every batch is whole or absent, every acknowledged one is there byte for byte, and the
    file is sound; `acked` holds the acknowledged batches of each writer."""
    stored = harness.rows(db)
    whole = 0
    for writer in range(result.writers):
        result.acked += len(acked[writer]) * result.size
        for b in range(result.batches):
            writes = [batch_write(writer, b, i, result.size) for i in range(result.size)]
            found = [stored.get(w.key.text) for w in writes]
            there = sum(row is not None for row in found)
            if there not in (0, result.size):
                result.violations.append(f"batch {writer}/{b}: {there} of {result.size} there")
            elif there == 0 and b in acked[writer]:
                result.violations.append(f"acknowledged batch {writer}/{b} lost")
            elif there:
                whole += 1
                if any(row != w.row() for row, w in zip(found, writes, strict=True)):
                    result.violations.append(f"batch {writer}/{b}: a stored row differs")
    if len(stored) != whole * result.size:
        result.violations.append(f"{len(stored)} entries stored, {whole} whole batches")
    result.violations += harness.structure_problems(db)


def killed_writer(db: Path, *, batches: int, size: int) -> Batches:
    """One writer, SIGKILLed after it acknowledged its first batch and was told to go on: the
    kill lands in its second `put_many` or soon after, wherever the scheduler puts it."""
    harness.new_cache(db)
    result = Batches(writers=1, batches=batches, size=size)
    answer_r, answer_w = os.pipe()

    def body(send: harness.Sender) -> None:
        work = [
            [as_new_entry(batch_write(0, b, i, size)) for i in range(size)] for b in range(batches)
        ]
        with Cache.open(device=harness.DEVICE, path=db) as cache:
            for b, entries in enumerate(work):
                cache.put_many(entries)
                send(harness.ACK, b)
                os.read(answer_r, 1)  # the parent's word to go on

    kid = harness.Child(body, close=[answer_w])
    harness.wait_for([kid], harness.ACK)
    os.write(answer_w, b"c")
    kid.kill()
    kid.finish()
    os.close(answer_r)
    os.close(answer_w)
    result.violations += [f"writer crashed: {c}" for c in kid.crashes()]
    _check(db, result, [{m.a for m in kid.messages if m.tag == harness.ACK}])
    return result
