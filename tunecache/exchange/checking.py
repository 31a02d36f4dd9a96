"""The timing records of an import, checked in batches: in this process, or in a worker process
beside it, so that a large import decodes its records on a second CPU while this one reads the
export.

Checking a record is most of what reading an export costs (a whole `codec.decode`, the bounded
pre-scan and every value against the record's schema, then the summary rows the store keeps
beside the bytes), and each record is checked alone: batches of records go to a worker
process and come back, in order, as their rows or the reason each was refused. The worker is
a fresh interpreter (spawned, never forked: the host may have threads, or a connection open),
which ignores Ctrl-C: the process that started it stops it.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import signal
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool

from tunecache import codec
from tunecache.errors import CodecError, StoreError
from tunecache.store.bulk import record_row

__all__ = [
    "WORKER_FROM",
    "Checked",
    "Checker",
    "Summary",
    "Task",
    "Timing",
    "check_records",
    "summary",
]

#: the fewest entries an export holds for a worker process to be worth its start (~0.5 s)
WORKER_FROM = 20_000

#: a TimingRow's values, in a plain tuple
Timing = tuple[str, int, int, float | None, float | None, float | None, bool, str | None]
#: a record's rows as an import stages them: RecordRow's values but its bytes, in plain
#: tuples (best, best median, heuristic median, candidates, samples, failures, timings)
Summary = tuple[str | None, float | None, float | None, int, int, int, tuple[Timing, ...]]
#: what checking one record gives: its rows, or the reason it was refused
Checked = Summary | str
#: one record to check: its bytes, the names of its candidate set, the entry's heuristic
Task = tuple[bytes, tuple[str, ...], str | None]


def summary(record: codec.TimingRecord, blob: bytes, heuristic: str | None) -> Summary:
    """The rows the store keeps of a decoded record, as an import stages them."""
    row = record_row(record, blob, heuristic)
    return (
        row.best,
        row.best_median_s,
        row.heuristic_median_s,
        row.candidates_count,
        row.samples_count,
        row.failures_count,
        tuple(tuple(t) for t in row.timings),  # type: ignore[misc]
    )


def check_records(tasks: Sequence[Task]) -> list[Checked]:
    """Check each record: a valid v1 record whose candidates are all of its set gives its
    rows; any other gives the one-line reason, to be said of its entry."""
    out: list[Checked] = []
    for blob, names, heuristic in tasks:
        try:
            record = codec.decode(blob)
        except CodecError as error:
            out.append(str(error))
            continue
        if any(c.name not in names for c in record.candidates):
            out.append("its timing record names unknown candidates")
            continue
        out.append(summary(record, blob, heuristic))
    return out


def _ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group: the worker leaves it to its parent, which
    stops it, instead of printing a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Checker:
    """Checks batches of records, with `workers` worker processes (0: in this process), and
    gives each batch's results when asked, in the order the batches were given."""

    def __init__(self, workers: int) -> None:
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        if workers > 0:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_interrupts,
            )

    @property
    def parallel(self) -> bool:
        """Whether records are checked by worker processes, not by this one."""
        return self._pool is not None

    def close(self) -> None:
        """Stop the worker processes, dropping the batches they have not begun."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, tasks: list[Task]) -> concurrent.futures.Future[list[Checked]]:
        """Start checking a batch; its results, in its order, come from the future."""
        if self._pool is None:
            done: concurrent.futures.Future[list[Checked]] = concurrent.futures.Future()
            done.set_result(check_records(tasks))
            return done
        try:
            return self._pool.submit(check_records, tasks)
        except (BrokenProcessPool, RuntimeError) as error:
            # A worker killed (the OOM killer, say) breaks the pool for every later batch.
            raise StoreError(f"the process checking timing records stopped: {error}") from None

    @staticmethod
    def results(future: concurrent.futures.Future[list[Checked]]) -> list[Checked]:
        """A batch's results, waiting for them; a worker that died is a StoreError."""
        try:
            return future.result()
        except BrokenProcessPool as error:
            raise StoreError(f"the process checking timing records stopped: {error}") from None
