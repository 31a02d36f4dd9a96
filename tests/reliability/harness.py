"""Scenarios with real processes and real files, at any size, and the checks that judge them.

The tests in this folder run each scenario small; tools/bench_reliability.py runs the same code
full size and prints the figures. Children are forked, not spawned: a fork costs milliseconds
where a fresh interpreter costs half a second of imports, which is what lets dozens of crash
trials fit in CI. A forked child is still a separate process with its own SQLite connections
(the engine drops inherited ones), and SIGKILL ends it as abruptly as a power cut ends a writer
(short of the operating system's own buffers, which only a machine crash loses).

A child reports to its parent through a pipe, one small message per event; a message no longer
than PIPE_BUF is written atomically, so a kill never leaves half a message. A writer reports an
entry only after `put` returned, so "acknowledged" means "its commit returned".
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import select
import shutil
import signal
import sqlite3
import statistics
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tunecache.cache import Cache
from tunecache.codec import CandidateTiming, TimingRecord, encode
from tunecache.device import Device
from tunecache.errors import TunecacheError
from tunecache.keys import Key, make_key
from tunecache.store import migrate

#: the device every scenario writes as
DEVICE = Device(
    cpu="test-cpu-9000",
    threads=4,
    accelerator=None,
    client="tunecache",
    client_version="0.1.0",
)
#: the candidate list of every entry the scenarios write
NAMES = ("mmm_4x4", "mmm_8x8", "mmv_serial", "packed_nt4")
GOLDEN = Path(__file__).resolve().parent.parent / "golden"

# -- messages from a child ------------------------------------------------------------------------

READY, ACK, ERROR, VIOLATION, MARK, COUNT, CRASH = range(1, 8)
# MARK kinds
CKPT_START, CKPT_DONE, MIGRATING, OPENED, IMPORTING, IMPORTED = range(1, 7)

_HEADER = struct.Struct("<BqqqH")
_MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Message:
    """One event a child reported."""

    tag: int
    a: int = 0
    b: int = 0
    c: int = 0
    text: str = ""


class Sender:
    """The child's end of the pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __call__(self, tag: int, a: int = 0, b: int = 0, c: int = 0, text: str = "") -> None:
        raw = text.encode("utf-8", "replace")[:_MAX_TEXT]
        os.write(self.fd, _HEADER.pack(tag, a, b, c, len(raw)) + raw)


class Child:
    """A forked child process running `body(send)`, and the messages it sent."""

    def __init__(self, body: Callable[[Sender], None], *, close: Iterable[int] = ()) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            status = 0
            send = Sender(write_fd)
            try:
                os.close(read_fd)
                for fd in close:
                    os.close(fd)
                body(send)
            except BaseException as error:
                status = 1
                with contextlib.suppress(BaseException):
                    send(CRASH, text=f"{type(error).__name__}: {error}")
            finally:
                os._exit(status)
        os.close(write_fd)
        self.pid = pid
        self.fd = read_fd
        self.messages: list[Message] = []
        self.eof = False
        self.status: int | None = None
        self._buffer = bytearray()

    def _feed(self, data: bytes) -> list[Message]:
        self._buffer += data
        out = []
        while len(self._buffer) >= _HEADER.size:
            tag, a, b, c, n = _HEADER.unpack_from(self._buffer)
            if len(self._buffer) < _HEADER.size + n:
                break
            text = bytes(self._buffer[_HEADER.size : _HEADER.size + n]).decode("utf-8", "replace")
            del self._buffer[: _HEADER.size + n]
            out.append(Message(tag, a, b, c, text))
        self.messages.extend(out)
        return out

    def read_available(self) -> list[Message]:
        """What the child has sent since the last read, without waiting."""
        out: list[Message] = []
        while not self.eof and select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 65536)
            if not data:
                self.eof = True
                break
            out += self._feed(data)
        return out

    def kill(self) -> None:
        """SIGKILL the child (it may have exited already)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def finish(self, timeout: float = 120.0) -> int:
        """Read everything the child sent until it closed the pipe, then reap it."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise TimeoutError(f"child {self.pid} still running after {timeout} s")
            if select.select([self.fd], [], [], min(left, 1.0))[0]:
                data = os.read(self.fd, 65536)
                if data:
                    self._feed(data)
                else:
                    self.eof = True
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        self.status = status
        return status

    def crashes(self) -> list[str]:
        """What the child reported as an unexpected exception."""
        return [m.text for m in self.messages if m.tag == CRASH]


def pump(children: Sequence[Child], timeout: float) -> list[tuple[Child, Message]]:
    """Wait up to `timeout` for any child to send something; return what arrived."""
    open_ = {c.fd: c for c in children if not c.eof}
    if not open_:
        return []
    ready, _, _ = select.select(list(open_), [], [], timeout)
    out = []
    for fd in ready:
        child = open_[fd]
        for message in child.read_available():
            out.append((child, message))
    return out


def wait_for(children: Sequence[Child], tag: int, timeout: float = 120.0) -> None:
    """Wait until every child has sent `tag` (or crashed)."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = [
            c for c in children if not any(m.tag in (tag, CRASH) for m in c.messages) and not c.eof
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} children never reported {tag}")
        pump(waiting, 1.0)


# -- what the writers write -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Write:
    """One `put`, fully determined by who wrote it and its sequence number."""

    key: Key
    choice: str
    heuristic: str
    speedup: float
    record: TimingRecord

    def put(self, cache: Cache) -> None:
        """Write it through the Cache API."""
        cache.put(
            self.key,
            choice=self.choice,
            candidates=NAMES,
            heuristic=self.heuristic,
            record=self.record,
            speedup=self.speedup,
        )

    def row(self) -> tuple[object, ...]:
        """The stored row it must leave, byte for byte: see `rows`."""
        return (self.choice, self.heuristic, "unvalidated", self.speedup, encode(self.record))


def record_for(writer: int, seq: int, samples: int = 8) -> TimingRecord:
    """A timing record that names its writer and sequence number."""
    base = 1e-5 * (1 + (writer * 7 + seq) % 13)
    return TimingRecord(
        candidates=tuple(
            CandidateTiming(
                name,
                tuple(base * (i + 1) * (1 + k / 64) for k in range(samples)),
                inner_loops=8 + i,
            )
            for i, name in enumerate(NAMES)
        ),
        settings={"writer": writer, "seq": seq},
        env={"harness": "reliability"},
    )


def write_for(writer: int, seq: int, key: Key, samples: int = 8) -> Write:
    """The write number `seq` of `writer`: its choice and speedup encode both numbers, so a
    row that mixes two writes, or two writers, is seen."""
    return Write(
        key=key,
        choice=NAMES[(writer + seq) % len(NAMES)],
        heuristic=NAMES[(writer + seq + 1) % len(NAMES)],
        speedup=1.0 + writer + seq / 1_000_000,
        record=record_for(writer, seq, samples),
    )


def origin(speedup: float) -> tuple[int, int]:
    """The (writer, seq) a stored speedup came from."""
    writer = int(speedup - 1.0)
    return writer, round((speedup - 1.0 - writer) * 1_000_000)


def own_key(writer: int, seq: int) -> Key:
    """A key only this writer writes."""
    return make_key("conv_F32_own", w=writer + 1, s=seq + 1)


def shared_key(index: int) -> Key:
    """A key every writer writes."""
    return make_key("conv_F32_shared", h=index + 1)


# -- reading back ---------------------------------------------------------------------------------


def connect_ro(db: Path) -> sqlite3.Connection:
    """A read-only stdlib connection: the checks never go through the code they check."""
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)


def rows(db: Path) -> dict[str, tuple[object, ...]]:
    """Every entry of DEVICE by key text: choice, heuristic, status, speedup, record bytes."""
    with contextlib.closing(connect_ro(db)) as conn:
        found = conn.execute(
            "SELECT k.text, e.choice, e.heuristic, e.status, e.speedup, t.data "
            "FROM entries e JOIN keys k ON k.id = e.key_id "
            "JOIN devices d ON d.id = e.device_id "
            "LEFT JOIN timing_records t ON t.entry_id = e.id WHERE d.fingerprint = ?",
            (DEVICE.fingerprint,),
        ).fetchall()
    out: dict[str, tuple[object, ...]] = {}
    for text, *rest in found:
        if text in out:
            out[text] = ("DUPLICATE",)
        else:
            out[text] = (
                rest[0],
                rest[1],
                rest[2],
                rest[3],
                None if rest[4] is None else bytes(rest[4]),
            )
    return out


def structure_problems(db: Path, *, every_entry_has_a_record: bool = True) -> list[str]:
    """What is wrong with the file as a whole: integrity, references, half-written entries."""
    problems = []
    with contextlib.closing(connect_ro(db)) as conn:
        check = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if check != ["ok"]:
            problems.append(f"integrity_check: {check[:3]}")
            return problems
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            problems.append(f"foreign_key_check: {broken[:3]}")
        queries = {
            "keys without an entry": (
                "SELECT count(*) FROM keys WHERE id NOT IN (SELECT key_id FROM entries)"
            ),
            "entries stored twice": (
                "SELECT count(*) FROM (SELECT 1 FROM entries "
                "GROUP BY device_id, key_id, candidate_set_id HAVING count(*) > 1)"
            ),
            "candidate sets with missing candidates": (
                "SELECT count(*) FROM candidate_sets s "
                "WHERE s.size != (SELECT count(*) FROM candidates c WHERE c.set_id = s.id)"
            ),
            "timing records with missing candidate rows": (
                "SELECT count(*) FROM timing_records t WHERE t.candidates_count != "
                "(SELECT count(*) FROM candidate_timings c WHERE c.record_id = t.id)"
            ),
        }
        if every_entry_has_a_record:
            queries["entries without their timing record"] = (
                "SELECT count(*) FROM entries WHERE id NOT IN (SELECT entry_id FROM timing_records)"
            )
        for what, sql in queries.items():
            n = conn.execute(sql).fetchone()[0]
            if n:
                problems.append(f"{n} {what}")
    return problems


def schema(db: Path) -> list[tuple[object, ...]]:
    """The file's schema objects and their SQL: two files at one revision have equal ones."""
    with contextlib.closing(connect_ro(db)) as conn:
        return conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()


def all_rows(db: Path, tables: Iterable[str] | None = None) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table (or of `tables`), sorted: equal dicts mean equal content."""
    with contextlib.closing(connect_ro(db)) as conn:
        if tables is None:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version'"
                )
            ]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"'), key=repr) for t in tables}


def revisions(db: Path) -> list[str]:
    """The revisions stamped in the file (exactly one for a sound cache)."""
    with contextlib.closing(connect_ro(db)) as conn:
        return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]


def goldens() -> list[Path]:
    """The golden database of every released schema revision, oldest first."""
    return sorted(GOLDEN.glob("rev*.db"))


def golden_revision(path: Path) -> str:
    """The revision a golden file is named after: rev0001.db -> '0001'."""
    return path.stem.removeprefix("rev")


def new_cache(db: Path) -> None:
    """Create an empty cache at `db` (schema at HEAD, WAL mode)."""
    Cache.open(device=DEVICE, path=db).close()


def remove_database(db: Path) -> None:
    """Delete a database with its -wal and -shm."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def p99(values: Sequence[float]) -> float:
    """The 99th percentile (nearest rank) of `values`, or 0.0 when there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]


# -- 1. concurrent writers ------------------------------------------------------------------------


#: the checks of the concurrent-writers scenario, as issue 7 lists them
ACKED_PRESENT = "every acknowledged entry present, byte-equal"
ONE_ROW = "overlapping keys end with one row each, holding the last write"
NOT_LOCKED = "no error (in particular 'database is locked') reached a caller"
INTEGRITY = "integrity_check ok, nothing half-written"
WHOLE_READS = "readers saw only whole writes, no process crashed"
CHECKS = (ACKED_PRESENT, ONE_ROW, NOT_LOCKED, INTEGRITY, WHOLE_READS)


@dataclass
class Concurrency:
    """What N writers and M readers did to one cache, and what the checks found."""

    writers: int
    readers: int
    puts: int
    seconds: float = 0.0
    acked: int = 0
    latencies: list[float] = field(default_factory=list)
    caller_errors: list[str] = field(default_factory=list)
    reads: int = 0
    #: each check of the scenario, with what it found wrong (empty: passed)
    checks: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CHECKS})

    @property
    def violations(self) -> list[str]:
        """Everything every check found wrong."""
        return [f"{check}: {v}" for check, found in self.checks.items() for v in found]

    @property
    def locked_errors(self) -> int:
        """How many 'database is locked' (or busy) errors reached a caller."""
        return sum(
            1
            for e in self.caller_errors
            if "locked" in e.lower() or "busy" in e.lower() or "StoreBusyError" in e
        )

    @property
    def writes_per_s(self) -> float:
        """Acknowledged writes per second of wall time, all writers together."""
        return self.acked / self.seconds if self.seconds else 0.0

    @property
    def p99_ms(self) -> float:
        """The 99th percentile time of one `put`, from call to commit returned, in ms."""
        return p99(self.latencies) * 1000

    def summary(self) -> str:
        """One line with the figures."""
        return (
            f"{self.writers} writers x {self.puts} puts, {self.readers} readers: "
            f"{self.acked} acknowledged in {self.seconds:.2f} s = {self.writes_per_s:.0f} "
            f"writes/s, p99 commit {self.p99_ms:.1f} ms (median "
            f"{statistics.median(self.latencies) * 1000 if self.latencies else 0:.1f} ms), "
            f"{self.reads} reads, {len(self.caller_errors)} errors reached a caller "
            f"({self.locked_errors} 'database is locked'), {len(self.violations)} violations"
        )


def _writer(db: Path, writer: int, puts: int, shared: int, go: int, send: Sender) -> None:
    with Cache.open(device=DEVICE, path=db) as cache:
        send(READY)
        os.read(go, 1)  # returns when the parent closes the other end: everyone starts at once
        for seq in range(puts):
            key = shared_key(seq // 2 % shared) if seq % 2 else own_key(writer, seq)
            write = write_for(writer, seq, key)
            start = time.monotonic_ns()
            try:
                write.put(cache)
            except Exception as error:  # anything that reaches the caller is counted
                send(ERROR, seq, text=f"{type(error).__name__}: {error}")
                continue
            send(ACK, seq, start, time.monotonic_ns())


def _reader(db: Path, index: int, shared: int, go: int, stop: int, send: Sender) -> None:
    """Read shared keys until told to stop, checking every answer is one that was written."""
    import warnings

    resolver = index % 2 == 1
    rng = random.Random(index)
    reads = 0
    cache = None if resolver else Cache.open(device=DEVICE, path=db)
    table: Any = None
    if resolver:
        from tunecache.resolve import Table

        table = Table.open(device=DEVICE, path=db, use="all")
    send(READY)
    os.read(go, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Up to 500 reads a second, as a busy server might ask: a reader in a tight loop takes
        # a whole core on a small machine and measures the scheduler, not the store.
        while not select.select([stop], [], [], 0.002)[0]:
            key = shared_key(rng.randrange(shared))
            try:
                if table is not None:
                    if reads % 20 == 0:
                        table = table.reload()
                    answer = table.resolve(key, NAMES, NAMES[0])
                    if answer.choice not in NAMES or answer.source == "masked":
                        send(VIOLATION, text=f"resolver answered {answer} for {key.text}")
                elif cache is not None:
                    _check_read(cache, key, reads, shared, send)
            except Exception as error:
                send(ERROR, text=f"reader: {type(error).__name__}: {error}")
            reads += 1
    for w in caught:
        send(ERROR, text=f"reader warning: {w.message}")
    send(COUNT, reads)
    if cache is not None:
        cache.close()


def _check_read(cache: Cache, key: Key, reads: int, shared: int, send: Sender) -> None:
    entry = cache.get(key, candidates=NAMES)
    if entry is None or entry.speedup is None:
        return
    writer, seq = origin(entry.speedup)
    want = write_for(writer, seq, key)
    if (entry.choice, entry.heuristic) != (want.choice, want.heuristic):
        send(VIOLATION, text=f"{key.text}: choice of one write, speedup of another")
    if reads % 8 == 0:
        # A second transaction: the key may have been written again meanwhile, so the record
        # need not be this entry's, but it must be whole and belong to a write of this key.
        record = cache.record(entry)
        if record is not None:
            w, s = record.settings["writer"], record.settings["seq"]
            assert isinstance(w, int) and isinstance(s, int)
            if record != record_for(w, s) or s % 2 == 0 or shared_key(s // 2 % shared) != key:
                send(VIOLATION, text=f"{key.text}: a timing record of another key or mixed")


def concurrent_writers(
    db: Path, *, writers: int, puts: int, readers: int = 2, shared: int = 50
) -> Concurrency:
    """N processes write `puts` entries each (half on keys every writer shares) while readers
    read; then every check of issue 7's first test."""
    new_cache(db)
    result = Concurrency(writers=writers, readers=readers, puts=puts)
    go_r, go_w = os.pipe()
    stop_r, stop_w = os.pipe()
    parent_only = (go_w, stop_w)
    writer_kids = [
        Child(partial(_writer, db, w, puts, shared, go_r), close=parent_only)
        for w in range(writers)
    ]
    reader_kids = [
        Child(partial(_reader, db, r, shared, go_r, stop_r), close=parent_only)
        for r in range(readers)
    ]
    everyone = writer_kids + reader_kids
    wait_for(everyone, READY)
    start = time.monotonic()
    os.close(go_w)
    while not all(k.eof for k in writer_kids):
        pump(writer_kids, 1.0)
    result.seconds = time.monotonic() - start
    os.close(stop_w)
    for kid in everyone:
        kid.finish()
    os.close(go_r)
    os.close(stop_r)

    acked: dict[str, list[tuple[int, int, int, int]]] = {}  # key -> (writer, seq, start, end)
    for writer, kid in enumerate(writer_kids):
        for m in kid.messages:
            if m.tag == ACK:
                key = shared_key(m.a // 2 % shared) if m.a % 2 else own_key(writer, m.a)
                acked.setdefault(key.text, []).append((writer, m.a, m.b, m.c))
                result.latencies.append((m.c - m.b) / 1e9)
            elif m.tag == ERROR:
                result.caller_errors.append(m.text)
        result.checks[WHOLE_READS] += [f"writer {writer} crashed: {c}" for c in kid.crashes()]
        if os.waitstatus_to_exitcode(kid.status or 0) != 0:
            result.checks[WHOLE_READS].append(f"writer {writer} exited with {kid.status}")
    for kid in reader_kids:
        for m in kid.messages:
            if m.tag == COUNT:
                result.reads += m.a
            elif m.tag == ERROR:
                result.caller_errors.append(m.text)
            elif m.tag == VIOLATION:
                result.checks[WHOLE_READS].append(m.text)
        result.checks[WHOLE_READS] += [f"reader crashed: {c}" for c in kid.crashes()]
    result.acked = sum(len(v) for v in acked.values())
    result.checks[NOT_LOCKED] += result.caller_errors
    _lost_or_stale(db, acked, result.checks)
    result.checks[INTEGRITY] += structure_problems(db)
    return result


def _lost_or_stale(
    db: Path, acked: dict[str, list[tuple[int, int, int, int]]], checks: dict[str, list[str]]
) -> None:
    """Every acknowledged entry is present; a shared key holds a write no later write beat."""
    stored = rows(db)
    if len(stored) != len(acked):
        checks[ONE_ROW].append(f"{len(stored)} entries stored for {len(acked)} keys written")
    for text, writes in acked.items():
        row = stored.get(text)
        if row is None:
            checks[ACKED_PRESENT].append(f"acknowledged entry lost: {text}")
            continue
        if row == ("DUPLICATE",):
            checks[ONE_ROW].append(f"two rows for {text}")
            continue
        speedup = row[3]
        assert isinstance(speedup, float)
        writer, seq = origin(speedup)
        mine = [w for w in writes if (w[0], w[1]) == (writer, seq)]
        if not mine:
            checks[ACKED_PRESENT].append(f"{text} holds a write nobody acknowledged: {seq}")
            continue
        if row != write_for(writer, seq, _key_of(text)).row():
            checks[ACKED_PRESENT].append(f"{text}: the stored row differs from {writer}/{seq}")
        ended = mine[0][3]
        # A write that began after this one's commit returned committed after it: it must win.
        later = [w for w in writes if w[2] > ended]
        if later:
            checks[ONE_ROW].append(f"{text}: {writer}/{seq} beat a later write {later[0][:2]}")


def _key_of(text: str) -> Key:
    from tunecache.keys import parse

    return parse(text)


# -- 2. lock discipline ---------------------------------------------------------------------------


def second_writer_refused(db: Path) -> tuple[str, float]:
    """Hold a write transaction that has written nothing; a second process writes with a zero
    busy timeout. Returns what the second writer got and how long it took, in seconds."""
    new_cache(db)
    with Cache.open(device=DEVICE, path=db) as cache, cache.transaction(write=True):
        # Nothing written: only BEGIN IMMEDIATE takes the lock this early.

        def second(send: Sender) -> None:
            with Cache.open(device=DEVICE, path=db, busy_timeout=0) as other:
                start = time.monotonic_ns()
                try:
                    write_for(1, 0, shared_key(0)).put(other)
                    send(ACK, 0, time.monotonic_ns() - start)
                except TunecacheError as error:
                    send(ERROR, 0, time.monotonic_ns() - start, text=type(error).__name__)

        kid = Child(second)
        kid.finish()
    got = [m for m in kid.messages if m.tag in (ACK, ERROR)]
    if not got:
        return f"no answer ({kid.crashes()})", 0.0
    m = got[0]
    return ("written" if m.tag == ACK else m.text), (m.b / 1e9 if m.tag == ERROR else m.a / 1e9)


# -- 3. crashes -----------------------------------------------------------------------------------


@dataclass
class Trial:
    """One SIGKILL trial: where the kill landed and what the checks found."""

    kind: str
    seed: int
    acked: int = 0
    phase: str = ""
    violations: list[str] = field(default_factory=list)


def _crash_key(i: int) -> Key:
    return make_key("conv_F32_crash", h=i + 1)


def _crash_writer(db: Path, keys: int, samples: int, batch: int, send: Sender) -> None:
    cache = Cache.open(device=DEVICE, path=db)
    checkpointer = sqlite3.connect(db, isolation_level=None) if batch else None
    send(READY)
    for seq in itertools.count():
        write_for(0, seq, _crash_key(seq % keys), samples).put(cache)
        send(ACK, seq)
        if checkpointer is not None and (seq + 1) % batch == 0:
            send(MARK, CKPT_START, seq)
            checkpointer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            send(MARK, CKPT_DONE, seq)


def crash_writes(db: Path, seed: int, *, keys: int = 40, most: int = 120) -> Trial:
    """SIGKILL a tuning writer after a random number of acknowledged writes plus up to 4 ms."""
    rng = random.Random(seed)
    trial = Trial("writes", seed)
    new_cache(db)
    target = rng.randrange(0, most)
    kid = Child(lambda s: _crash_writer(db, keys, 8, 0, s))
    deadline = time.monotonic() + 120
    while sum(m.tag == ACK for m in kid.messages) < target and not kid.eof:
        if time.monotonic() > deadline:
            break
        pump([kid], 1.0)
    time.sleep(rng.uniform(0, 0.004))
    kid.kill()
    kid.finish()
    trial.phase = "writing"
    _judge_writes(db, kid, keys, 8, trial)
    return trial


def crash_checkpoint(db: Path, seed: int, *, batch: int = 40, samples: int = 256) -> Trial:
    """SIGKILL a writer while it runs a WAL checkpoint of a few MB."""
    rng = random.Random(seed)
    trial = Trial("checkpoint", seed)
    new_cache(db)
    target_round = rng.randrange(2, 4)
    keys = batch * 8
    kid = Child(lambda s: _crash_writer(db, keys, samples, batch, s))
    durations: list[float] = []
    started = 0.0
    round_ = 0
    deadline = time.monotonic() + 120
    killed = False
    while not killed and not kid.eof and time.monotonic() < deadline:
        for _, m in pump([kid], 1.0):
            if m.tag == MARK and m.a == CKPT_START:
                round_ += 1
                started = time.monotonic()
                if round_ == target_round:
                    estimate = statistics.median(durations) if durations else 0.005
                    time.sleep(rng.uniform(0, estimate))
                    kid.kill()
                    killed = True
                    break
            elif m.tag == MARK and m.a == CKPT_DONE:
                durations.append(time.monotonic() - started)
    kid.finish()
    done = sum(1 for m in kid.messages if m.tag == MARK and m.a == CKPT_DONE)
    trial.phase = "in checkpoint" if done < target_round else "after checkpoint"
    if not killed:
        trial.violations.append(f"never reached checkpoint {target_round}: {kid.crashes()}")
    _judge_writes(db, kid, keys, samples, trial)
    return trial


def _judge_writes(db: Path, kid: Child, keys: int, samples: int, trial: Trial) -> None:
    trial.violations += [f"writer failed: {c}" for c in kid.crashes()]
    acks = [m.a for m in kid.messages if m.tag == ACK]
    trial.acked = len(acks)
    if acks != list(range(len(acks))):
        trial.violations.append("acknowledgements out of order")
    problems = structure_problems(db)
    if problems:
        trial.violations += problems
        return
    stored = rows(db)
    # At most one write can have committed without its acknowledgement: the one in flight.
    attempted = len(acks) + 1
    for k in range(keys):
        text = _crash_key(k).text
        row = stored.pop(text, None)
        acked_here = [s for s in acks if s % keys == k]
        if row is None:
            if acked_here:
                trial.violations.append(f"acknowledged {text} (write {acked_here[-1]}) lost")
            continue
        speedup = row[3]
        assert isinstance(speedup, float)
        _, seq = origin(speedup)
        if seq % keys != k or seq >= attempted or (acked_here and seq < acked_here[-1]):
            trial.violations.append(f"{text} holds write {seq}, acknowledged {acked_here[-1:]}")
        elif row != write_for(0, seq, _crash_key(k), samples).row():
            trial.violations.append(f"{text}: write {seq} is not stored byte for byte")
    if stored:
        trial.violations.append(f"entries nobody wrote: {sorted(stored)[:3]}")
    _still_usable(db, trial)


def _still_usable(db: Path, trial: Trial) -> None:
    """The cache opens and takes a write after the crash."""
    try:
        with Cache.open(device=DEVICE, path=db) as cache:
            write_for(9, 0, make_key("conv_F32_after", h=1)).put(cache)
    except Exception as error:
        trial.violations.append(f"cannot use the cache after the crash: {error}")


@dataclass
class GoldenFacts:
    """What a golden file holds and the two schemas an upgrade may leave."""

    path: Path
    revision: str
    rows: dict[str, list[tuple[object, ...]]]
    old_schema: list[tuple[object, ...]]
    new_schema: list[tuple[object, ...]]


def golden_facts(golden: Path, scratch: Path) -> GoldenFacts:
    """Read a golden file and upgrade a scratch copy for the schema a finished upgrade has."""
    copy = scratch / f"reference-{golden.name}"
    remove_database(copy)
    shutil.copy(golden, copy)
    old_schema = schema(copy)
    new_cache(copy)
    facts = GoldenFacts(golden, golden_revision(golden), all_rows(golden), old_schema, schema(copy))
    remove_database(copy)
    return facts


def _migrating_child(db: Path, send: Sender) -> None:
    # Tracing, not mocking: the real upgrade runs; the parent only learns when it begins.
    upgrade = migrate._upgrade

    def traced(conn: Any, path: Path) -> None:
        send(MARK, MIGRATING)
        upgrade(conn, path)

    migrate._upgrade = traced
    send(READY)
    with Cache.open(device=DEVICE, path=db) as cache:
        send(MARK, OPENED, text=cache.outcome.value if cache.outcome else "")


def migration_window(facts: GoldenFacts, db: Path) -> float:
    """Seconds from the start of an upgrade to its open returning, measured once."""
    remove_database(db)
    shutil.copy(facts.path, db)
    return _window(Child(lambda s: _migrating_child(db, s)), MIGRATING, OPENED, "upgrade")


def _window(kid: Child, start: int, end: int, what: str) -> float:
    """Seconds between a child's `start` and `end` marks, for timing kills inside that span."""
    marks: dict[int, float] = {}
    while not kid.eof:
        for _, m in pump([kid], 1.0):
            if m.tag == MARK:
                marks[m.a] = time.monotonic()
    kid.finish()
    if start not in marks or end not in marks:
        raise RuntimeError(f"calibration {what} did not run: {kid.crashes()}")
    return marks[end] - marks[start]


def crash_migration(db: Path, facts: GoldenFacts, seed: int, window: float) -> Trial:
    """SIGKILL a process at a random point of upgrading a copy of a golden database."""
    rng = random.Random(seed)
    trial = Trial("migration", seed)
    remove_database(db)
    shutil.copy(facts.path, db)
    kid = Child(lambda s: _migrating_child(db, s))
    deadline = time.monotonic() + 120
    while not any(m.tag == MARK and m.a == MIGRATING for m in kid.messages) and not kid.eof:
        if time.monotonic() > deadline:
            break
        pump([kid], 1.0)
    time.sleep(rng.uniform(0, window))
    kid.kill()
    kid.finish()
    trial.violations += [f"child failed: {c}" for c in kid.crashes()]
    stamped = revisions(db)
    if stamped == [facts.revision]:
        want, outcome = facts.old_schema, migrate.Outcome.UPGRADED
        trial.phase = f"{facts.revision}: before commit"
    elif stamped == [migrate.HEAD]:
        want, outcome = facts.new_schema, migrate.Outcome.CURRENT
        trial.phase = f"{facts.revision}: after commit"
    else:
        trial.violations.append(f"schema stamped {stamped}: neither old nor new")
        return trial
    if schema(db) != want:
        trial.violations.append(f"stamped {stamped} but the schema is not that revision's")
    trial.violations += structure_problems(db, every_entry_has_a_record=False)
    if all_rows(db, facts.rows) != facts.rows:
        trial.violations.append("rows of the golden file changed")
    try:
        with Cache.open(device=DEVICE, path=db) as cache:
            if cache.outcome is not outcome:
                trial.violations.append(f"reopening did {cache.outcome}, expected {outcome}")
    except Exception as error:
        trial.violations.append(f"cannot open after the crash: {error}")
        return trial
    if revisions(db) != [migrate.HEAD] or all_rows(db, facts.rows) != facts.rows:
        trial.violations.append("the finished upgrade lost rows or its stamp")
    return trial


# -- 6. upgrades under concurrency ----------------------------------------------------------------


def open_all_at_once(db: Path, processes: int) -> list[str]:
    """`processes` processes open `db` at the same instant; what opening did, in each."""
    go_r, go_w = os.pipe()

    def body(send: Sender) -> None:
        send(READY)
        os.read(go_r, 1)
        with Cache.open(device=DEVICE, path=db) as cache:
            send(MARK, OPENED, text=cache.outcome.value if cache.outcome else "read-only")

    kids = [Child(body, close=[go_w]) for _ in range(processes)]
    wait_for(kids, READY)
    os.close(go_w)
    for kid in kids:
        kid.finish()
    os.close(go_r)
    out = []
    for kid in kids:
        opened = [m.text for m in kid.messages if m.tag == MARK and m.a == OPENED]
        out += opened or [f"failed: {kid.crashes()}"]
    return sorted(out)


# -- 3. crashes during an import ------------------------------------------------------------------


@dataclass
class ImportSource:
    """An export of `entries` entries, and the rows it must leave when imported."""

    data: bytes
    rows: dict[str, tuple[object, ...]]


def import_source(scratch: Path, entries: int) -> ImportSource:
    """Write `entries` entries into a scratch cache and export them."""
    from tunecache.exchange import export_cache

    db = scratch / "import-source.db"
    remove_database(db)
    with Cache.open(device=DEVICE, path=db) as cache:
        for seq in range(entries):
            write_for(5, seq, make_key("conv_F32_imported", h=seq + 1)).put(cache)
        data = export_cache(cache)
    source = ImportSource(data, rows(db))
    remove_database(db)
    return source


def _importing_child(db: Path, data: bytes, send: Sender) -> None:
    from tunecache.exchange import import_cache

    with Cache.open(device=DEVICE, path=db) as cache:
        # Tracing, not mocking: decoding the export takes most of an import's time, so the
        # parent times its kills from the moment the write transaction begins.
        transaction = cache.transaction

        @contextlib.contextmanager
        def traced(*, write: bool = False) -> Iterator[Any]:
            if write:
                send(MARK, IMPORTING)
            with transaction(write=write) as tx:
                yield tx

        cache.transaction = traced  # type: ignore[method-assign]
        send(READY)
        import_cache(cache, data)
        send(MARK, IMPORTED)


def _local_cache(db: Path) -> dict[str, tuple[object, ...]]:
    remove_database(db)
    with Cache.open(device=DEVICE, path=db) as cache:
        for seq in range(10):
            write_for(6, seq, make_key("conv_F32_local", h=seq + 1)).put(cache)
    return rows(db)


def import_window(source: ImportSource, db: Path) -> float:
    """Seconds from the start of an import to its end, measured once."""
    _local_cache(db)
    return _window(
        Child(lambda s: _importing_child(db, source.data, s)), IMPORTING, IMPORTED, "import"
    )


def crash_import(db: Path, source: ImportSource, seed: int, window: float) -> Trial:
    """SIGKILL a process at a random point of importing an export: all of it or none lands."""
    rng = random.Random(seed)
    trial = Trial("import", seed)
    local = _local_cache(db)
    kid = Child(lambda s: _importing_child(db, source.data, s))
    deadline = time.monotonic() + 120
    while not any(m.tag == MARK and m.a == IMPORTING for m in kid.messages) and not kid.eof:
        if time.monotonic() > deadline:
            break
        pump([kid], 1.0)
    # A quarter past the window: some kills land after the commit too.
    time.sleep(rng.uniform(0, window * 1.25))
    kid.kill()
    kid.finish()
    trial.violations += [f"child failed: {c}" for c in kid.crashes()]
    finished = any(m.tag == MARK and m.a == IMPORTED for m in kid.messages)
    problems = structure_problems(db)
    if problems:
        trial.violations += problems
        return trial
    stored = rows(db)
    if {k: stored.pop(k, None) for k in local} != local:
        trial.violations.append("entries that were there before the import changed")
    if stored == source.rows:
        trial.phase = "after commit"
    elif not stored:
        trial.phase = "before commit"
        if finished:
            trial.violations.append("the import returned but its entries are missing")
    else:
        trial.violations.append(
            f"half an import: {len(stored)} of {len(source.rows)} entries, or changed ones"
        )
    _still_usable(db, trial)
    return trial


class Checks:
    """The checks a reliability benchmark runs, printed as they pass or fail, and counted."""

    def __init__(self) -> None:
        #: how many checks failed so far
        self.failures = 0

    def check(self, name: str, problems: list[str]) -> None:
        """Print `name` as passed, or as failed with how many problems and the first."""
        if problems:
            self.failures += 1
            print(f"  FAIL  {name}: {len(problems)} problems, first: {problems[0][:300]}")
        else:
            print(f"  PASS  {name}")
