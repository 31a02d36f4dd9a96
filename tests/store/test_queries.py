"""Every question of tunecache.store.queries, asked directly on a real cache file."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, event, select

from tests.store_helpers import NAMES, RESNET, backdate, judge, sql, timing
from tunecache import codec
from tunecache.cache import Cache, Entry
from tunecache.candidates import checksum
from tunecache.device import Device
from tunecache.keys import parse
from tunecache.store import queries, rows, upkeep
from tunecache.store.models import CANDIDATE_SETS, DEVICES, ENTRIES, KEYS, MODELS

OLD = datetime(2020, 1, 1, tzinfo=UTC)


class Stock:
    """A cache whose entries tell every filter of `queries.entries` apart."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.record = timing(3e-5, 2e-5)
        #: accepted, recorded; validated by resnet, masked by bert
        self.conv = cache.put(
            "conv_F32_m1", choice="direct", candidates=NAMES, record=self.record, status="accepted"
        )
        #: the same key against a shorter list
        self.short = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES[:2])
        #: signature "conv" itself; masked by bert; old
        self.plain = cache.put("conv_m2", choice="direct", candidates=NAMES)
        #: "convx" starts with "conv" but is another op
        self.convx = cache.put("convx_F32_m3", choice="direct", candidates=NAMES)
        #: an op named "%", which LIKE would read as "anything"
        self.percent = cache.put("%_F32_m4", choice="direct", candidates=NAMES)
        self.matmul = cache.put("matmul_F32_m8_n8", choice="im2col", candidates=NAMES)
        judge(cache, self.plain, ("bert", "masked", None, 2, 0))
        judge(cache, self.conv, RESNET, ("bert", "masked", None, 3, 0))
        backdate(cache, self.plain, OLD)
        with cache.transaction() as tx:
            device = tx.device_id()
        assert device is not None
        #: the device row of the cache
        self.device = device

    @property
    def all(self) -> list[Entry]:
        """Every entry, in the order they were written."""
        return [self.conv, self.short, self.plain, self.convx, self.percent, self.matmul]

    def ask(self, question: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One question of `queries`, in a read transaction, about the cache's device."""
        with self.cache.transaction() as tx:
            return question(tx.conn, self.device, *args, **kwargs)

    def ids(self, **where: Any) -> list[int]:
        """The ids `queries.entries` returns with these filters (EntryFilter's fields, or its
        order and limit), in its order."""
        options = {name: where.pop(name) for name in ("order", "limit") if name in where}
        found = self.ask(queries.entries, queries.EntryFilter(**where), **options)
        return [row.id for row in found]


@pytest.fixture
def stock(cache: Cache) -> Stock:
    """The `cache` fixture, stocked (see `Stock`)."""
    return Stock(cache)


def _ids(*entries: Entry) -> list[int]:
    return [e.id for e in entries]


# --- entries -----------------------------------------------------------------------------------


def test_an_op_is_a_first_token_and_its_underscore_is_not_a_wildcard(stock: Stock) -> None:
    s = stock
    assert sorted(s.ids(op="conv")) == _ids(s.conv, s.short, s.plain)
    assert s.ids(op="convx") == _ids(s.convx)
    assert s.ids(op="%") == _ids(s.percent)
    assert s.ids(op="con") == []
    assert s.ids(op="matmul_F32") == _ids(s.matmul)


def test_entries_by_id_key_checksum_and_signature(stock: Stock) -> None:
    s = stock
    assert s.ids(entry_id=s.plain.id) == _ids(s.plain)
    assert sorted(s.ids(key="conv_F32_m1")) == _ids(s.conv, s.short)
    assert s.ids(key="conv_F32_m1", checksum=s.short.checksum) == _ids(s.short)
    assert sorted(s.ids(signature="conv_F32")) == _ids(s.conv, s.short)
    assert s.ids(signature="conv") == _ids(s.plain)
    assert s.ids(entry_id=s.plain.id, key="conv_F32_m1") == []


def test_entries_a_model_judged_either_way(stock: Stock) -> None:
    s = stock
    assert s.ids(model="resnet") == _ids(s.conv)
    assert sorted(s.ids(model="bert")) == _ids(s.conv, s.plain)
    assert s.ids(model="gpt") == []
    assert s.ids(model="bert", status="accepted") == _ids(s.conv)


def test_entries_by_status_and_by_age_of_the_last_update(stock: Stock) -> None:
    s = stock
    assert s.ids(status="accepted") == _ids(s.conv)
    assert s.ids(status="rejected") == []
    assert s.ids(older_than=OLD + timedelta(days=1)) == _ids(s.plain)
    assert s.ids(older_than=OLD) == []  # strictly older
    assert len(s.ids(newer_than=OLD)) == len(s.all)  # from that moment on
    assert s.plain.id not in s.ids(newer_than=OLD + timedelta(days=1))


def test_entries_in_order_and_cut_at_a_limit(stock: Stock) -> None:
    s = stock
    # Last updated first: the old one last, the others newest first.
    recent = [e for e in reversed(s.all) if e is not s.plain] + [s.plain]
    assert s.ids() == _ids(*recent)
    assert s.ids(limit=2) == _ids(*recent[:2])
    by_key = sorted(s.all, key=lambda e: (e.key.text, e.checksum))
    assert s.ids(order="key") == _ids(*by_key)
    assert by_key[0] is s.percent and {by_key[1].id, by_key[2].id} == {s.conv.id, s.short.id}
    assert s.ids(order="key", limit=1) == _ids(s.percent)


def test_entries_carry_their_records_only_when_asked(stock: Stock) -> None:
    s = stock
    plain = {row.id: row for row in s.ask(queries.entries)}
    assert {(row.data, row.samples) for row in plain.values()} == {(None, 0)}
    found = {row.id: row for row in s.ask(queries.entries, records=True)}
    assert found[s.conv.id].data == codec.encode(s.record)
    assert found[s.conv.id].samples == 6
    assert {(found[e.id].data, found[e.id].samples) for e in s.all[1:]} == {(None, 0)}
    # Everything else is the same row.
    assert found[s.conv.id]._replace(data=None, samples=0) == plain[s.conv.id]
    row = plain[s.conv.id]
    assert (row.key, row.signature, row.dims, row.checksum) == (
        "conv_F32_m1",
        "conv_F32",
        "m=1",
        s.conv.checksum,
    )
    assert (row.choice, row.heuristic, row.status, row.speedup, row.run_id) == (
        "direct",
        None,
        "accepted",
        None,
        None,
    )


def test_entries_of_one_device_only(stock: Stock, twin: Cache) -> None:
    twin.put("conv_F32_m1", choice="winograd", candidates=NAMES)
    assert sorted(stock.ids()) == _ids(*stock.all)
    with stock.cache.transaction() as tx:
        assert queries.count_entries(tx.conn, stock.device) == len(stock.all)
        assert queries.count(tx.conn, KEYS) == 5  # of every device
        assert len(sql(stock.cache.path, "SELECT id FROM entries")) == len(stock.all) + 1
        # The devices that own entries, as stored.
        assert sorted(queries.devices_with_entries(tx.conn)) == sorted(
            tuple(d.as_dict().values()) for d in (stock.cache.device, twin.device)
        )


def test_an_entry_is_found_by_its_rows_and_owned_by_its_device(stock: Stock, twin: Cache) -> None:
    s = stock
    theirs = twin.put("conv_F32_m1", choice="winograd", candidates=NAMES)
    with s.cache.transaction() as tx:
        mine = s.device
        links = {
            row[0]: row[1:]
            for row in sql(s.cache.path, "SELECT id, key_id, candidate_set_id FROM entries")
        }
        (key_id, set_id), (short_key, short_set) = links[s.conv.id], links[s.short.id]
        # One key row, two candidate sets.
        assert key_id == short_key and set_id != short_set
        assert queries.entry_at(tx.conn, mine, key_id, set_id) == (s.conv.id, "direct")
        assert queries.entry_at(tx.conn, mine, key_id, short_set) == (s.short.id, "im2col")
        assert queries.entry_at(tx.conn, mine, key_id, -1) is None
        assert queries.entry_owned(tx.conn, s.conv.id, mine)
        assert not queries.entry_owned(tx.conn, theirs.id, mine)
        assert not queries.entry_owned(tx.conn, s.conv.id, None)
        assert queries.device_id(tx.conn, s.cache.device.fingerprint) == mine
        assert queries.device_id(tx.conn, "no-such-device") is None


# --- candidate sets and records ----------------------------------------------------------------


def test_set_names_keep_their_order_and_any_number_of_ids(stock: Stock) -> None:
    with stock.cache.transaction() as tx:
        found = {row.id: row.set_id for row in queries.entries(tx.conn, stock.device)}
        # More ids than one statement binds: they go in chunks, and unknown ids name nothing.
        names = queries.set_names(tx.conn, range(1, 2 * queries.CHUNK + 2))
        assert len(names) == 2 * queries.CHUNK + 1
        assert {set_id for set_id, got in names.items() if got} == set(found.values())
        assert names[found[stock.conv.id]] == NAMES
        assert names[found[stock.short.id]] == NAMES[:2]
        assert queries.set_names(tx.conn, []) == {}
        assert sorted(upkeep.set_checksums(tx.conn)) == sorted(
            {(found[e.id], e.checksum, e.candidates) for e in stock.all}
        )


def test_chunks_bind_at_most_chunk_ids() -> None:
    ids = list(range(2 * queries.CHUNK + 1))
    parts = list(queries.chunks(ids))
    assert [len(p) for p in parts] == [queries.CHUNK, queries.CHUNK, 1]
    assert [i for p in parts for i in p] == ids
    assert list(queries.chunks([])) == []


def test_a_record_is_read_only_for_its_own_device(stock: Stock, twin: Cache) -> None:
    with stock.cache.transaction() as tx:
        mine = stock.device
        assert queries.record_data(tx.conn, stock.conv.id, mine) == codec.encode(stock.record)
        assert queries.record_data(tx.conn, stock.short.id, mine) is None
        assert queries.record_data(tx.conn, stock.conv.id, None) is None
        streamed = list(upkeep.records(tx.conn))
    assert [bytes(data) for _, data in streamed] == [codec.encode(stock.record)]


# --- verdicts and models -----------------------------------------------------------------------


def _verdicts(stock: Stock, **where: Any) -> list[tuple[int, str]]:
    return [(v.entry_id, v.model) for v in stock.ask(queries.verdicts, **where)]


def test_verdicts_in_entry_order_and_in_the_order_they_were_given(stock: Stock) -> None:
    s = stock
    conv, plain = s.conv.id, s.plain.id
    assert _verdicts(s) == [(conv, "bert"), (conv, "resnet"), (plain, "bert")]
    assert _verdicts(s, order="updated") == [(plain, "bert"), (conv, "resnet"), (conv, "bert")]
    # A verdict given again moves to the end of the "updated" order, and keeps its creation.
    [first] = s.ask(queries.verdicts, entry_id=plain)
    judge(s.cache, s.plain, ("bert", "validated", 1.1, 3, 3))
    assert _verdicts(s, order="updated") == [(conv, "resnet"), (conv, "bert"), (plain, "bert")]
    [latest] = s.ask(queries.verdicts, entry_id=plain)
    assert (latest.model_id, latest.fingerprint, latest.verdict) == (
        first.model_id,
        "b1",
        "validated",
    )
    assert (latest.gain, latest.rounds, latest.confirmations) == (1.1, 3, 3)
    assert latest.created_at == first.created_at <= first.updated_at <= latest.updated_at


def test_verdicts_filtered_by_entry_model_fingerprint_and_device(stock: Stock, twin: Cache) -> None:
    s = stock
    judge(twin, twin.put("conv_F32_m1", choice="winograd", candidates=NAMES), RESNET)
    assert _verdicts(s, entry_id=s.conv.id) == [(s.conv.id, "bert"), (s.conv.id, "resnet")]
    assert _verdicts(s, model="resnet") == [(s.conv.id, "resnet")]
    assert _verdicts(s, model="bert", fingerprint="b1") == [
        (s.conv.id, "bert"),
        (s.plain.id, "bert"),
    ]
    assert _verdicts(s, model="bert", fingerprint="b2") == []
    with s.cache.transaction() as tx:
        assert queries.verdicts(tx.conn, None) == []
        # Models are of the whole file, every device's.
        assert [(m.name, m.fingerprint) for m in queries.models(tx.conn)] == [
            ("bert", "b1"),
            ("resnet", "r1"),
        ]


# --- runs --------------------------------------------------------------------------------------


def _open_run_touched(conn: Connection, device: int) -> set[int]:
    """Ids of the device's entries that a run still open wrote or judged."""
    e = ENTRIES.alias("e")
    query = select(e.c.id).where(e.c.device_id == device, upkeep.open_run_touched(e))
    return set(conn.execute(query).scalars())


def test_runs_by_id_by_notes_and_still_running(cache: Cache) -> None:
    with cache.run("tune", notes="first") as first:
        entry = cache.put("conv_F32_m1", choice="direct", candidates=NAMES, run_id=first)
        with cache.transaction() as tx:
            device = tx.device_id()
            assert device is not None
            assert upkeep.running_runs(tx.conn, socket.gethostname()) == [(first, os.getpid())]
            assert upkeep.running_runs(tx.conn, "another-host") == []
            assert _open_run_touched(tx.conn, device) == {entry.id}
    with cache.run("validate", notes="first") as second:
        # An entry judged by a run still open counts too.
        cache.validate(entry, model="m", fingerprint="f", verdict="masked", run_id=second)
        with cache.transaction() as tx:
            assert _open_run_touched(tx.conn, device) == {entry.id}
    with cache.transaction() as tx:
        assert _open_run_touched(tx.conn, device) == set()
        assert upkeep.running_runs(tx.conn, socket.gethostname()) == []
        assert queries.runs_noted(tx.conn, device, "first", "finished") == [first, second]
        assert queries.runs_noted(tx.conn, device, "first", "failed") == []
        assert queries.runs_noted(tx.conn, None, "first", "finished") == []
        assert queries.run_exists(tx.conn, first) and not queries.run_exists(tx.conn, 99)
        run = queries.run(tx.conn, second)
        assert queries.run(tx.conn, 99) is None
    assert run is not None
    assert (run["id"], run["kind"], run["status"], run["notes"]) == (
        second,
        "validate",
        "finished",
        "first",
    )
    assert (run["hostname"], run["pid"]) == (socket.gethostname(), os.getpid())
    assert run["finished_at"] is not None and run["started_at"] <= run["finished_at"]


# --- the whole file ----------------------------------------------------------------------------


def test_orphans_of_each_kind(cache: Cache, twin: Cache, device: Device) -> None:
    judge(cache, cache.put("conv_F32_m1", choice="direct", candidates=NAMES), RESNET)
    with twin.run("tune"):
        pass  # a device with a run and no entry is no orphan
    lonely = device.with_threads(2)
    with cache.transaction(write=True) as tx:
        made = {
            "orphaned-keys": rows.key_row(tx.conn, parse("pool_F32_m1")),
            "orphaned-candidate-sets": rows.candidate_set_row(tx.conn, "pool_F32", ["a"], "c"),
            "orphaned-models": rows.model_row(tx.conn, "gpt", "g1"),
            "orphaned-devices": rows.device_row(tx.conn, lonely),
        }
    assert set(upkeep.ORPHANS) == set(made)
    tables = {"orphaned-keys": KEYS, "orphaned-candidate-sets": CANDIDATE_SETS}
    tables |= {"orphaned-models": MODELS, "orphaned-devices": DEVICES}
    with cache.transaction() as tx:
        for kind, orphan in made.items():
            assert upkeep.ORPHANS[kind][0] is tables[kind]
            assert upkeep.orphans(tx.conn, kind, device.fingerprint) == [orphan], kind
        # The device the cache is opened for is never an orphan.
        assert upkeep.orphans(tx.conn, "orphaned-devices", lonely.fingerprint) == []


def test_integrity_and_dangling_rows(cache: Cache) -> None:
    cache.put("conv_F32_m1", choice="direct", candidates=NAMES)
    with cache.transaction() as tx:
        assert upkeep.integrity(tx.conn) == ("ok",)
        assert upkeep.foreign_key_violations(tx.conn) == []
    dangling = _dangling_verdict(cache)
    with cache.transaction() as tx:
        assert upkeep.foreign_key_violations(tx.conn) == [("validations", dangling)]


def _dangling_verdict(cache: Cache) -> int:
    """A verdict on an entry that does not exist, written by a connection without foreign keys
    (the stdlib's default); returns its rowid."""
    with cache.transaction(write=True) as tx:
        model = rows.model_row(tx.conn, "m", "f")
    sql(
        cache.path,
        "INSERT INTO validations (model_id, entry_id, verdict, rounds, confirmations, created_at,"
        " updated_at) VALUES (?, 9999, 'masked', 0, 0, '2020-01-01', '2020-01-01')",
        model,
    )
    [(rowid,)] = sql(cache.path, "SELECT rowid FROM validations WHERE entry_id = 9999")
    return int(rowid)


# --- query plans: every listing and maintenance question has its index (migration 0004) -------


def _plans(cache: Cache, run: Callable[[], object]) -> list[list[str]]:
    """SQLite's plan of every statement but PRAGMAs that `run()` makes on `cache`."""
    ran: list[tuple[str, Any]] = []

    def seen(conn: object, cursor: object, statement: str, params: Any, *rest: object) -> None:
        ran.append((statement, params))

    event.listen(cache.engine, "before_cursor_execute", seen)
    try:
        run()
    finally:
        event.remove(cache.engine, "before_cursor_execute", seen)
    plans = []
    with cache.transaction() as tx:
        for sql, params in ran:
            if not sql.lstrip().upper().startswith(("SELECT", "DELETE", "UPDATE")):
                continue
            # Each step is written after the steps it runs inside: "CORRELATED ... > SCAN x"
            # is a scan run once per outer row.
            steps: dict[int, str] = {}
            plan = []
            for node, parent, _, detail in tx.conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + sql, params
            ):
                steps[node] = f"{steps[parent]} > {detail}" if parent in steps else str(detail)
                plan.append(steps[node])
            plans.append(plan)
    return plans


def _asked(cache: Cache, question: Callable[[Connection], object]) -> list[list[str]]:
    """The plans of one question of `queries`, asked in a read transaction of `cache`."""

    def ask() -> None:
        with cache.transaction() as tx:
            question(tx.conn)

    return _plans(cache, ask)


def _unindexed(plans: list[list[str]], *allowed: str) -> list[str]:
    """The steps of `plans` that read a whole table, sort rows no index orders or build an
    index of their own, except the `allowed` ones (each the start of a step) where they run
    once: never within a correlated subquery, which runs once per row."""
    out = []
    for plan in plans:
        for path in plan:
            *outer, step = path.split(" > ")
            if step.startswith(("SCAN (subquery", "SCAN anon_")):
                continue  # reading back what a subquery made
            if step.startswith("SCAN ") or "TEMP B-TREE" in step or "AUTOMATIC" in step:
                once = not any("CORRELATED" in o for o in outer)
                if not (once and step.startswith(allowed)):
                    out.append(path)
    return out


def test_listing_reads_a_device_newest_first_from_its_index(stock: Stock) -> None:
    s = stock
    newest = queries.EntryFilter()
    for where in (newest, queries.EntryFilter(older_than=OLD), queries.EntryFilter(status="x")):
        plans = _asked(s.cache, lambda c, w=where: queries.entries(c, s.device, w, limit=50))
        assert _unindexed(plans) == [], plans
        assert "ix_entries_device_id_updated_at" in plans[0][0]
    assert _unindexed(_asked(s.cache, lambda c: queries.count_entries(c, s.device))) == []
    # A key's entries (what Cache.get asks) are looked up by the key, never found by walking
    # every entry of the device in time order.
    for where in (queries.EntryFilter(key="conv_F32_m1"), queries.EntryFilter(entry_id=1)):
        [plan] = _asked(s.cache, lambda c, w=where: queries.entries(c, s.device, w))
        [step] = [step for step in plan if step.startswith("SEARCH entries")]
        assert "key_id=?" in step or "PRIMARY KEY" in step, plan


def test_whole_file_checks_look_each_row_up_by_an_index(stock: Stock) -> None:
    s = stock
    for kind, (table, _) in upkeep.ORPHANS.items():
        # Every row of the table checked is read once (that is the question); what it is
        # checked against is looked up.
        plans = _asked(s.cache, lambda c, k=kind: upkeep.orphans(c, k, "fp"))
        assert _unindexed(plans, f"SCAN {table.name}") == [], (kind, plans)
    plans = _asked(s.cache, upkeep.illegal_choices)
    assert _unindexed(plans, "SCAN entries") == [], plans
    assert _unindexed(_asked(s.cache, lambda c: upkeep.running_runs(c, "host"))) == []


@pytest.mark.parametrize("kind", ["stale", "current", "unvalidated", "older", "masked"])
def test_prune_selects_through_indexes(stock: Stock, kind: str) -> None:
    s = stock

    def select(conn: Connection) -> None:
        stale = None
        if kind in ("stale", "current"):
            current = {"conv_F32": "x"} if kind == "current" else None
            stale = upkeep.stale_sets(conn, s.device, current)
        selection = upkeep.PruneSelection(
            s.device,
            stale,
            kind == "unvalidated",
            OLD if kind == "older" else None,
            kind == "masked",
        )
        found = upkeep.prunable(conn, selection)
        upkeep.orphaned_sets(conn, selection, {row.set_id for row in found} | {1})

    plans = _asked(s.cache, select)
    # Allowed: reading every candidate set (a handful per signature); sorting what prune
    # reports into key order, and the stale question's ranking of each signature's entries
    # by time: both order rows by columns of two tables, which no one index holds.
    assert _unindexed(plans, "SCAN candidate_sets", "USE TEMP B-TREE FOR ORDER BY") == [], plans
    assert not [step for step in plans[-1] if "TEMP B-TREE" in step], plans[-1]


def test_prune_and_doctor_read_each_table_at_most_once_and_look_up_the_rest(
    stock: Stock,
) -> None:
    from tunecache import maintain

    s = stock
    plans = _plans(s.cache, lambda: maintain.doctor(s.cache))
    # The whole-file checks read every row of what they check, once; nothing else.
    once = ["SCAN entries", "SCAN keys", "SCAN candidate", "SCAN models", "SCAN devices"]
    once += ["SCAN timing_records", "SCAN runs", "SCAN sqlite_master", "SCAN alembic_version"]
    assert _unindexed(plans, *once) == [], plans
    kinds = {"stale": True, "unvalidated": True, "older_than": OLD, "masked": True}
    plans = _plans(s.cache, lambda: maintain.prune(s.cache, **kinds))
    assert _unindexed(plans, "SCAN candidate_sets", "USE TEMP B-TREE FOR ORDER BY") == [], plans


def test_the_sets_prune_leaves_unused_among_those_it_was_given(stock: Stock) -> None:
    s = stock
    sets = {row.id: row.set_id for row in s.ask(queries.entries)}
    short, convx, matmul = sets[s.short.id], sets[s.convx.id], sets[s.matmul.id]
    with s.cache.transaction() as tx:
        selection = upkeep.PruneSelection(s.device, stale=(short, convx))
        # convx's set goes too, but was not asked about; matmul's keeps its entry.
        assert upkeep.orphaned_sets(tx.conn, selection, {short, matmul}) == [short]
        assert upkeep.orphaned_sets(tx.conn, selection, {short, convx}) == [short, convx]
        assert upkeep.orphaned_sets(tx.conn, selection, ()) == []


def test_stale_sets_against_the_lists_given_or_the_latest_tuned(stock: Stock) -> None:
    s = stock
    sets = {row.id: row.set_id for row in s.ask(queries.entries)}
    with s.cache.transaction() as tx:
        given = {"conv_F32": checksum(NAMES), "absent_F32": "x"}
        assert upkeep.stale_sets(tx.conn, s.device, given) == (sets[s.short.id],)
        given = {"conv_F32": checksum(NAMES[:2])}
        assert upkeep.stale_sets(tx.conn, s.device, given) == (sets[s.conv.id],)
        # Without lists: conv_F32's latest entry is the short one, every other signature has
        # one set only.
        assert upkeep.stale_sets(tx.conn, s.device) == (sets[s.conv.id],)
