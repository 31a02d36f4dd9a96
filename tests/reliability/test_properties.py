"""Property tests through the store: key and record round trips, and the store against a dict.

tests/test_keys.py and tests/test_codec.py prove parse(format(k)) == k and decode(encode(r)) == r
in memory; here the same strategies go through a real SQLite file and back. The stateful test
drives a cache with writes, reads, reopens, forks and imports, and checks it against a plain
dict after every step.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.reliability.harness import DEVICE, NAMES
from tests.test_codec import records
from tests.test_keys import keys
from tunecache.cache import Cache
from tunecache.codec import CandidateTiming, TimingRecord, encode
from tunecache.errors import BadRecordError
from tunecache.keys import Key, make_key, parse

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_TEMPLATE: list[Path] = []


@atexit.register
def _remove_template() -> None:
    for path in _TEMPLATE:
        shutil.rmtree(path.parent, ignore_errors=True)


class _Scratch:
    """A fresh cache in a temporary folder: a copy of one empty cache made once, since
    hypothesis makes many and creating the schema costs more than copying a file."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="tunecache-prop-"))
        db = self.folder / "cache.db"
        if not _TEMPLATE:
            template = Path(tempfile.mkdtemp(prefix="tunecache-template-")) / "cache.db"
            Cache.open(device=DEVICE, path=template).close()
            _TEMPLATE.append(template)
        shutil.copy(_TEMPLATE[0], db)
        self.cache = Cache.open(device=DEVICE, path=db)

    def close(self) -> None:
        self.cache.close()
        shutil.rmtree(self.folder)


_SHARED: list[_Scratch] = []


def _shared() -> Cache:
    """One cache for every example of the round-trip tests: each writes keys and reads them back,
    whatever earlier examples left (a later put of a key replaces its entry)."""
    if not _SHARED:
        _SHARED.append(_Scratch())
        atexit.register(_SHARED[0].close)
    return _SHARED[0].cache


@SETTINGS
@given(st.lists(keys, min_size=1, max_size=5, unique_by=lambda k: k.text))
def test_keys_round_trip_through_the_store(written: list[Key]) -> None:
    cache = _shared()
    for key in written:
        cache.put(key, choice=NAMES[0], candidates=NAMES)
    for key in written:
        got = cache.get(key.text, candidates=NAMES)
        assert got is not None and got.key == key and got.key.text == key.text
    assert set(written) <= {e.key for e in cache.entries()}
    # The resolver, which reads the file without SQLAlchemy, parses them back too.
    from tunecache.resolve import Table

    table = Table.open(device=DEVICE, path=cache.path, use="all")
    for key in written:
        assert table.resolve(key, NAMES, NAMES[1])[:2] == (NAMES[0], "exact")
    table.close()


# Candidate names the store accepts.
storable_records = records.filter(
    lambda r: all(c.name.isprintable() and len(c.name) <= 200 for c in r.candidates)
)


@SETTINGS
@given(storable_records)
def test_timing_records_round_trip_through_the_store_byte_for_byte(record: TimingRecord) -> None:
    names = [c.name for c in record.candidates] or ["only"]
    cache = _shared()
    entry = cache.put("conv_F32_h1_record", choice=names[0], candidates=names, record=record)
    back = cache.record(entry)
    assert back == record
    assert back is not None and encode(back) == encode(record)


def test_a_record_the_store_cannot_hold_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    record = TimingRecord((CandidateTiming("a", (1e-5,), inner_loops=2**63),))
    with Cache.open(device=DEVICE, path=tmp_path / "c.db") as cache:
        with pytest.raises(BadRecordError):
            cache.put("conv_F32_h1", choice="a", candidates=["a"], record=record)
        assert cache.count() == 0


# -- the store against a dict -------------------------------------------------------------------

KEYS = [make_key("conv_F32", h=h) for h in (1, 2, 3, 8)]
LISTS = [NAMES, NAMES[:3], ("a", "b")]


def _record(names: tuple[str, ...], seed: int) -> TimingRecord:
    return TimingRecord(
        tuple(
            CandidateTiming(n, (1e-5 * (seed + i + 1),), inner_loops=seed + 1)
            for i, n in enumerate(names)
        ),
        settings={"seed": seed},
    )


class StoreAgainstADict(RuleBasedStateMachine):
    """Writes, reads, reopens, forks and imports: the cache always holds what the dict holds."""

    def __init__(self) -> None:
        super().__init__()
        self.scratch = _Scratch()
        # (key text, candidate list) -> (choice, record bytes or None)
        self.model: dict[tuple[str, tuple[str, ...]], tuple[str, bytes | None]] = {}
        self.forks = 0

    @property
    def cache(self) -> Cache:
        return self.scratch.cache

    def _expect(self, key: Key, names: tuple[str, ...]) -> tuple[str, bytes | None] | None:
        return self.model.get((key.text, names))

    def _stored(
        self, cache: Cache, key: Key, names: tuple[str, ...]
    ) -> tuple[str, bytes | None] | None:
        entry = cache.get(key, candidates=names)
        if entry is None:
            return None
        record = cache.record(entry)
        return entry.choice, None if record is None else encode(record)

    @rule(
        key=st.sampled_from(KEYS),
        names=st.sampled_from(LISTS),
        data=st.data(),
        seed=st.integers(0, 1000),
        with_record=st.booleans(),
    )
    def write(
        self, key: Key, names: tuple[str, ...], data: st.DataObject, seed: int, with_record: bool
    ) -> None:
        choice = data.draw(st.sampled_from(names))
        record = _record(names, seed) if with_record else None
        self.cache.put(key, choice=choice, candidates=names, record=record)
        self.model[key.text, names] = (choice, None if record is None else encode(record))

    @rule(key=st.sampled_from(KEYS), names=st.sampled_from(LISTS))
    def read(self, key: Key, names: tuple[str, ...]) -> None:
        assert self._stored(self.cache, key, names) == self._expect(key, names)

    @rule()
    def reopen(self) -> None:
        path = self.cache.path
        self.cache.close()
        self.scratch.cache = Cache.open(device=DEVICE, path=path)

    @rule()
    def fork(self) -> None:
        # The child inherits this very Cache object: it must read what the parent committed,
        # through connections of its own, and its write must reach the parent.
        key = make_key("conv_F32_forked", n=self.forks + 1)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 1
            try:
                same = all(
                    self._stored(self.cache, parse(text), names) == want
                    for (text, names), want in self.model.items()
                )
                if same:
                    self.cache.put(key, choice=NAMES[1], candidates=NAMES)
                    status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        self.forks += 1
        self.model[key.text, NAMES] = (NAMES[1], None)

    @rule(
        writes=st.lists(
            st.tuples(st.sampled_from(KEYS), st.sampled_from(LISTS), st.integers(0, 1000)),
            min_size=1,
            max_size=3,
        )
    )
    def import_(self, writes: list[tuple[Key, tuple[str, ...], int]]) -> None:
        try:
            from tunecache.exchange import export_cache, import_cache
        except ImportError:
            return
        source = _Scratch()
        incoming = {}
        try:
            for key, names, seed in writes:
                choice = names[seed % len(names)]
                record = _record(names, seed)
                source.cache.put(key, choice=choice, candidates=names, record=record)
                incoming[key.text, names] = (choice, encode(record))
            data = export_cache(source.cache)
        finally:
            source.close()
        import_cache(self.cache, data)  # policy "local": an entry already here is kept
        for ident, value in incoming.items():
            self.model.setdefault(ident, value)

    @invariant()
    def same_number_of_entries(self) -> None:
        assert self.cache.count() == len(self.model)

    def teardown(self) -> None:
        self.scratch.close()


TestStoreAgainstADict = StoreAgainstADict.TestCase
TestStoreAgainstADict.settings = settings(
    max_examples=15,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
