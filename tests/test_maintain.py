"""Listing, inspecting, pruning and checking a cache, against real databases."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tunecache import maintain
from tunecache.cache import Cache, Entry
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.errors import BadArgumentError, BadKeyError

NAMES = ("direct", "im2col", "winograd")
OLD = datetime(2020, 1, 1, tzinfo=UTC)


def _record() -> TimingRecord:
    return TimingRecord(
        candidates=(
            CandidateTiming("direct", (3e-5, 3.2e-5, 2.9e-5), inner_loops=10),
            CandidateTiming("im2col", (1e-5, 1.5e-5, 1.1e-5)),
            CandidateTiming("winograd", error="RuntimeError: unsupported stride"),
        ),
        settings={"min_time": 0.01},
        env={"python": "3.11"},
    )


def _sql(path: Path, statement: str, *params: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(statement, params).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def _age(cache: Cache, entry: Entry, when: datetime) -> None:
    """Backdate an entry: the store keeps UTC without a zone, as the UTCDateTime type does."""
    stamp = when.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
    _sql(cache.path, "UPDATE entries SET updated_at = ? WHERE id = ?", stamp, entry.id)


class Filled:
    """A cache with one entry of each kind prune and list tell apart."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        with cache.run("tune") as run_id:
            #: validated by resnet, masked by bert; recorded; old
            self.mixed = cache.put(
                "conv_F32_m64_k3",
                choice="im2col",
                candidates=NAMES,
                heuristic="direct",
                record=_record(),
                speedup=2.5,
                status="accepted",
                run_id=run_id,
            )
        #: masked by every model that judged it
        self.masked = cache.put("conv_F32_m128_k3", choice="winograd", candidates=NAMES)
        #: never judged, tuned against an older list of the same signature
        self.stale = cache.put("conv_F32_m256_k3", choice="direct", candidates=NAMES[:2])
        #: never judged, another op
        self.matmul = cache.put("matmul_F32_m8_n8", choice="direct", candidates=NAMES)
        cache.validate(
            self.mixed,
            model="resnet",
            fingerprint="r1",
            verdict="validated",
            gain=1.2,
            rounds=3,
            confirmations=3,
        )
        cache.validate(self.mixed, model="bert", fingerprint="b1", verdict="masked", rounds=3)
        cache.validate(self.masked, model="bert", fingerprint="b1", verdict="masked", rounds=3)
        cache.validate(self.masked, model="gpt", fingerprint="g1", verdict="masked", rounds=2)
        _age(cache, self.mixed, OLD)


@pytest.fixture
def filled(cache: Cache) -> Filled:
    return Filled(cache)


def _keys(entries: list[maintain.EntryInfo]) -> list[str]:
    return sorted(e.key for e in entries)


# --- list ------------------------------------------------------------------------------------


def test_list_shows_every_entry_with_its_verdicts(filled: Filled) -> None:
    found = maintain.list_entries(filled.cache)
    assert len(found) == 4
    mixed = next(e for e in found if e.id == filled.mixed.id)
    assert (mixed.choice, mixed.heuristic, mixed.speedup) == ("im2col", "direct", 2.5)
    assert mixed.validated_by == ("resnet",) and mixed.masked_by == ("bert",)
    assert mixed.updated_at == OLD
    assert found[-1].id == filled.mixed.id  # most recently updated first


def test_list_filters(filled: Filled) -> None:
    c = filled.cache
    assert _keys(maintain.list_entries(c, op="matmul")) == ["matmul_F32_m8_n8"]
    assert len(maintain.list_entries(c, op="conv")) == 3
    # "_" is a LIKE wildcard; an op that is a prefix of another matches nothing.
    assert maintain.list_entries(c, op="con") == []
    assert maintain.list_entries(c, signature="conv") == []
    assert len(maintain.list_entries(c, signature="conv_F32")) == 3
    assert _keys(maintain.list_entries(c, model="gpt")) == ["conv_F32_m128_k3"]
    assert len(maintain.list_entries(c, model="bert")) == 2
    assert _keys(maintain.list_entries(c, status="accepted")) == ["conv_F32_m64_k3"]
    assert _keys(maintain.list_entries(c, older_than=OLD + timedelta(days=1))) == [
        "conv_F32_m64_k3"
    ]
    assert len(maintain.list_entries(c, newer_than=OLD + timedelta(days=1))) == 3
    assert len(maintain.list_entries(c, limit=2)) == 2


def test_list_refuses_bad_filters(filled: Filled) -> None:
    with pytest.raises(BadArgumentError, match="status"):
        maintain.list_entries(filled.cache, status="golden")
    with pytest.raises(BadArgumentError, match="timezone"):
        maintain.list_entries(filled.cache, older_than=datetime(2020, 1, 1))


def test_list_sees_only_this_device(filled: Filled, tmp_path: Path) -> None:
    twin = Device("test-cpu-9000", 8, None, "tunecache", "0.1.0")
    with Cache.open(device=twin, path=filled.cache.path) as other:
        other.put("gemm_F32_m1", choice="direct", candidates=NAMES)
        assert _keys(maintain.list_entries(other)) == ["gemm_F32_m1"]
    assert len(maintain.list_entries(filled.cache)) == 4


# --- inspect ---------------------------------------------------------------------------------


def test_inspect_shows_the_record_verdicts_and_run(filled: Filled) -> None:
    [item] = maintain.inspect(filled.cache, filled.mixed.id)
    assert item.entry.key == "conv_F32_m64_k3" and item.has_record and item.record_error is None
    by_name = {c.name: c for c in item.candidates}
    assert by_name["im2col"].chosen and by_name["direct"].heuristic
    assert by_name["im2col"].median_s == pytest.approx(1.1e-5)
    assert (by_name["direct"].min_s, by_name["direct"].max_s) == (2.9e-5, 3.2e-5)
    assert (by_name["direct"].samples, by_name["direct"].inner_loops) == (3, 10)
    assert by_name["winograd"].error == "RuntimeError: unsupported stride"
    assert item.settings == {"min_time": 0.01} and item.env == {"python": "3.11"}
    assert [(v.model, v.verdict) for v in item.verdicts] == [
        ("bert", "masked"),
        ("resnet", "validated"),
    ]
    assert item.run is not None and item.run.kind == "tune" and item.run.status == "finished"
    assert item.as_dict()["candidates"][1]["median_s"] == pytest.approx(1.1e-5)


def test_inspect_by_key_shows_every_candidate_set(filled: Filled) -> None:
    c = filled.cache
    c.put("conv_F32_m64_k3", choice="direct", candidates=NAMES[:2])
    found = maintain.inspect(c, "conv_F32_m64_k3")
    assert len(found) == 2
    bare = next(i for i in found if not i.has_record)
    assert [x.measured for x in bare.candidates] == [False, False]
    assert bare.run is None and bare.verdicts == ()


def test_inspect_of_nothing_and_of_nonsense(filled: Filled) -> None:
    with pytest.raises(maintain.NotFoundError, match="entry 999"):
        maintain.inspect(filled.cache, 999)
    with pytest.raises(maintain.NotFoundError, match="key gemm_F32_m1"):
        maintain.inspect(filled.cache, "gemm_F32_m1")
    with pytest.raises(BadKeyError):
        maintain.inspect(filled.cache, "gemm__F32")


def test_inspect_reports_an_unreadable_record_instead_of_failing(filled: Filled) -> None:
    _sql(filled.cache.path, "UPDATE timing_records SET data = x'ff'")
    [item] = maintain.inspect(filled.cache, filled.mixed.id)
    assert item.has_record and item.record_error is not None
    assert not any(c.measured for c in item.candidates)


# --- models ----------------------------------------------------------------------------------


def test_models_count_verdicts_on_this_device(filled: Filled) -> None:
    summary = {m.name: m for m in maintain.models(filled.cache)}
    assert (summary["bert"].validated, summary["bert"].masked) == (0, 2)
    assert (summary["resnet"].validated, summary["resnet"].masked) == (1, 0)
    assert (summary["gpt"].validated, summary["gpt"].masked) == (0, 1)
    assert summary["gpt"].last_verdict is not None


# --- prune: entries --------------------------------------------------------------------------


def _pruned(report: maintain.PruneReport) -> dict[str, tuple[str, ...]]:
    return {e.key: e.reasons for e in report.entries}


def test_each_kind_selects_its_entries(filled: Filled) -> None:
    c = filled.cache
    assert _pruned(maintain.prune(c, stale=True, dry_run=True)) == {
        "conv_F32_m64_k3": ("stale",),
        "conv_F32_m128_k3": ("stale",),
    }
    assert _pruned(maintain.prune(c, unvalidated=True, dry_run=True)) == {
        "conv_F32_m128_k3": ("unvalidated",),
        "conv_F32_m256_k3": ("unvalidated",),
        "matmul_F32_m8_n8": ("unvalidated",),
    }
    assert _pruned(maintain.prune(c, older_than=OLD + timedelta(days=1), dry_run=True)) == {
        "conv_F32_m64_k3": ("older",)
    }
    assert _pruned(maintain.prune(c, masked=True, dry_run=True)) == {
        "conv_F32_m128_k3": ("masked",)
    }


def test_stale_against_the_current_lists_given(filled: Filled) -> None:
    # The client's list is the full one: the entry tuned against the shorter list is stale,
    # and matmul, whose list was not given, is not judged.
    report = maintain.prune(filled.cache, stale=True, current={"conv_F32": NAMES}, dry_run=True)
    assert _pruned(report) == {"conv_F32_m256_k3": ("stale",)}
    with pytest.raises(BadArgumentError, match="appears twice"):
        maintain.prune(filled.cache, stale=True, current={"conv_F32": ["a", "a"]})


def test_a_dry_run_removes_nothing_and_matches_the_real_run(filled: Filled) -> None:
    c = filled.cache
    before = _sql(c.path, "SELECT * FROM entries ORDER BY id")
    dry = maintain.prune(c, unvalidated=True, masked=True, dry_run=True)
    assert _sql(c.path, "SELECT * FROM entries ORDER BY id") == before
    real = maintain.prune(c, unvalidated=True, masked=True)
    assert not real.dry_run
    assert real.entries == dry.entries and real.orphans == dry.orphans
    assert _pruned(dry)["conv_F32_m128_k3"] == ("unvalidated", "masked")
    assert _keys(maintain.list_entries(c)) == ["conv_F32_m64_k3"]
    # Their keys, candidate sets, records and verdicts went with them.
    # (the shorter conv list and matmul's list: conv's full list still has an entry)
    assert real.orphans == {"keys": 3, "candidate_sets": 2}
    assert _sql(c.path, "SELECT count(*) FROM keys") == [(1,)]
    assert _sql(c.path, "SELECT count(*) FROM candidate_sets") == [(1,)]
    assert _sql(c.path, "SELECT count(*) FROM validations") == [(2,)]


def test_entries_of_a_run_still_open_are_spared(cache: Cache) -> None:
    with cache.run("tune") as run_id:
        cache.put("conv_F32_m1", choice="direct", candidates=NAMES, run_id=run_id)
        report = maintain.prune(cache, unvalidated=True)
        assert report.entries == () and report.spared_active == 1
    assert len(maintain.prune(cache, unvalidated=True).entries) == 1
    assert cache.count() == 0


def test_prune_leaves_other_devices_alone(filled: Filled) -> None:
    twin = Device("test-cpu-9000", 8, None, "tunecache", "0.1.0")
    with Cache.open(device=twin, path=filled.cache.path) as other:
        other.put("conv_F32_m64_k3", choice="direct", candidates=NAMES)
        maintain.prune(filled.cache, unvalidated=True, masked=True, stale=True)
        assert other.count() == 1


# --- prune: version folders ------------------------------------------------------------------


def _version(root: Path, version: str) -> Path:
    device = Device("test-cpu-9000", 4, None, "tunecache", version)
    with Cache.open(device=device, root=root) as old:
        old.put("conv_F32_m1", choice="direct", candidates=NAMES)
        return old.path


def test_old_version_folders_are_removed_and_the_current_one_kept(
    filled: Filled, tmp_path: Path
) -> None:
    root = tmp_path / "store"  # where the cache fixture lives
    old = _version(root, "0.0.9")
    current = filled.cache.path
    dry = maintain.prune(filled.cache, versions=True, root=root, dry_run=True)
    assert [(v.version, v.removed, v.skipped) for v in dry.versions] == [("0.0.9", False, None)]
    assert dry.versions[0].bytes > 0 and old.exists()
    report = maintain.prune(filled.cache, versions=True, root=root)
    assert [(v.version, v.removed) for v in report.versions] == [("0.0.9", True)]
    assert not old.parent.parent.exists()
    assert current.exists() and filled.cache.count() == 4


def test_a_version_folder_in_use_is_skipped(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.8")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(old)!r}, isolation_level=None)\n"
            "c.execute('SELECT count(*) FROM entries').fetchall()\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "c.execute(\"UPDATE entries SET choice = 'im2col'\")\n"
            "c.execute('COMMIT')\n"
            "print('written', flush=True)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "ready"
        report = maintain.prune_versions(filled.cache.device, root=root)
        assert len(report) == 1 and not report[0].removed
        assert report[0].skipped is not None and "in use" in report[0].skipped
        # The writer that held it open still writes, and its write is there.
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "written"
    finally:
        holder.communicate(timeout=30)
    assert _sql(old, "SELECT choice FROM entries") == [("im2col",)]
    assert _sql(old, "PRAGMA journal_mode") == [("wal",)]
    # Once nobody holds it, it goes.
    assert maintain.prune_versions(filled.cache.device, root=root)[0].removed


def test_a_version_folder_with_quarantined_databases_goes(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.6")
    aside = old.parent / "quarantine" / "cache.db.20260101T000000.42"
    aside.mkdir(parents=True)
    (aside / "cache.db").write_bytes(b"damaged" * 10)
    [found] = maintain.prune_versions(filled.cache.device, root=root)
    assert found.removed and not old.parent.parent.exists()


def test_a_version_folder_with_foreign_files_is_left(filled: Filled, tmp_path: Path) -> None:
    root = tmp_path / "store"
    old = _version(root, "0.0.7")
    (old.parent / "notes.txt").write_text("mine")
    [found] = maintain.prune_versions(filled.cache.device, root=root)
    assert not found.removed and found.skipped is not None and "notes.txt" in found.skipped
    assert (old.parent / "notes.txt").read_text() == "mine"


# --- doctor ----------------------------------------------------------------------------------


def test_a_sound_cache_is_healthy(filled: Filled) -> None:
    report = maintain.doctor(filled.cache)
    assert report.healthy and report.integrity == ("ok",) and report.problems == ()
    assert (report.revision, report.entries, report.devices) == (report.head, 4, 1)


def _damage(filled: Filled) -> int:
    """Rows of every kind doctor looks for; returns the pid of a process that is gone."""
    path = filled.cache.path
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(gone.stdout)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(
        "INSERT INTO keys (text, signature, dims) VALUES ('pool_F32_m1', 'pool_F32', 'm=1')"
    )
    conn.execute(
        "INSERT INTO runs (kind, status, tool_version, hostname, platform, python_version, pid,"
        " started_at) SELECT 'tune', 'running', '0', hostname, '', '', ?, started_at FROM runs",
        (pid,),
    )
    conn.execute("UPDATE entries SET choice = 'gone' WHERE id = ?", (filled.matmul.id,))
    conn.execute("UPDATE timing_records SET data = x'ff'")
    conn.execute("DELETE FROM entries WHERE id = ?", (filled.stale.id,))
    conn.execute(
        "INSERT INTO validations (model_id, entry_id, verdict, rounds, confirmations,"
        " created_at, updated_at) VALUES (1, 9999, 'masked', 0, 0, '2020-01-01', "
        "'2020-01-01')"
    )
    conn.commit()
    conn.close()
    return pid


def test_doctor_reports_without_repairing_then_repairs_when_asked(filled: Filled) -> None:
    _damage(filled)
    before = _sql(filled.cache.path, "SELECT count(*) FROM keys")
    report = maintain.doctor(filled.cache)
    found = {p.kind: p for p in report.problems}
    assert not report.healthy
    assert set(found) == {
        "dangling-rows",
        "orphaned-keys",
        "orphaned-candidate-sets",
        "stale-runs",
        "illegal-choices",
        "unreadable-records",
    }
    assert found["dangling-rows"].count == 1
    assert found["orphaned-keys"].count == 2  # the inserted key and the deleted entry's
    assert not any(p.repaired for p in report.problems)
    assert _sql(filled.cache.path, "SELECT count(*) FROM keys") == before

    repaired = maintain.doctor(filled.cache, repair=True)
    assert all(p.repaired for p in repaired.problems) and repaired.healthy
    assert repaired.checkpointed and repaired.wal_bytes == 0
    again = maintain.doctor(filled.cache)
    assert again.healthy and again.problems == ()
    # The entry with the unreadable record stays; only its record went.
    assert filled.cache.get("conv_F32_m64_k3") is not None
    assert filled.cache.record(filled.mixed) is None
    assert _sql(filled.cache.path, "SELECT status FROM runs WHERE status = 'running'") == []


# --- sql -------------------------------------------------------------------------------------


def test_every_example_query_runs(filled: Filled) -> None:
    for title, query in maintain.EXAMPLE_QUERIES:
        result = maintain.run_query(filled.cache.path, query)
        assert result.columns and result.rows, title


def test_a_query_returns_rows_and_is_cut_at_max_rows(filled: Filled) -> None:
    result = maintain.run_query(filled.cache.path, "SELECT key FROM decisions ORDER BY key")
    assert result.columns == ("key",) and len(result.rows) == 4 and not result.truncated
    cut = maintain.run_query(filled.cache.path, "SELECT key FROM decisions", max_rows=2)
    assert len(cut.rows) == 2 and cut.truncated
    blob = maintain.run_query(filled.cache.path, "SELECT data FROM timing_records")
    assert isinstance(blob.as_dict()["rows"][0][0], str)


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM entries",
        "UPDATE entries SET choice = 'x'",
        "DROP VIEW decisions",
        "CREATE TABLE t (x)",
        "ATTACH DATABASE 'elsewhere.db' AS e",
        "PRAGMA query_only = 0",
        "PRAGMA wal_checkpoint",
        "SELECT 1; DELETE FROM entries",
        "SELEC nonsense",
    ],
)
def test_a_query_can_only_read(
    filled: Filled, query: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = _sql(filled.cache.path, "SELECT * FROM entries ORDER BY id")
    with pytest.raises(BadArgumentError, match="query"):
        maintain.run_query(filled.cache.path, query)
    assert _sql(filled.cache.path, "SELECT * FROM entries ORDER BY id") == before
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_runaway_query_is_interrupted(filled: Filled) -> None:
    forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    with pytest.raises(BadArgumentError, match="interrupted"):
        maintain.run_query(filled.cache.path, forever, timeout=0.2)
