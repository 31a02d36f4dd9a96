"""The high-water marks of sync: a salvaged copy starts from zero, a remote restored from a
backup is read again from the start (and the report says so)."""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import PgSchema
from tests.fleet.test_sync import entry, validated
from tunecache import fleet, maintain
from tunecache.cache import Cache, NewVerdict
from tunecache.device import Device
from tunecache.errors import ReadOnlyStoreError, TunecacheWarning
from tunecache.store import salvage, syncing


@pytest.fixture
def local_at(device: Device, tmp_path: Path) -> Iterator[Callable[[str], Cache]]:
    """Cache files of the test's device, by name."""
    opened: list[Cache] = []

    def open_at(name: str) -> Cache:
        opened.append(Cache.open(device=device, path=tmp_path / f"{name}.db"))
        return opened[-1]

    yield open_at
    for c in opened:
        c.close()


def test_a_salvaged_copy_starts_from_zero_and_pulls_back_what_salvage_lost(
    local_at: Callable[..., Cache], tmp_path: Path
) -> None:
    remote = local_at("remote")
    remote.put_many([entry(i) for i in range(5)])
    host = local_at("host")
    assert fleet.sync(host, remote, direction="pull").directions[0].counts["added"] == 5
    host.close()
    copy = tmp_path / "salvaged.db"
    salvage.salvage(tmp_path / "host.db", copy, 5.0)
    # What a damaged page costs: two entries the salvage could not read.
    with sqlite3.connect(copy) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM entries WHERE id IN (SELECT id FROM entries LIMIT 2)")
    with Cache.open(device=host.device, path=copy) as salvaged:
        assert salvaged.count() == 3
        pulled = fleet.sync(salvaged, remote, direction="pull").directions[0]
        assert (pulled.mark_before, pulled.read, pulled.counts["added"]) == (0, 5, 2)
        assert salvaged.count() == 5


def test_a_remote_restored_from_a_backup_is_read_from_zero_with_a_warning(
    local_at: Callable[..., Cache], tmp_path: Path
) -> None:
    remote = local_at("remote")
    remote.put_many([entry(i) for i in range(2)])
    remote.close()
    shutil.copyfile(tmp_path / "remote.db", tmp_path / "backup.db")
    remote = local_at("remote")
    remote.put_many([entry(i) for i in range(2, 6)])
    host = local_at("host")
    assert fleet.sync(host, remote, direction="pull").directions[0].counts["added"] == 6
    remote.close()
    # The store is restored from the backup (its id with it), and a tuner writes new entries
    # there: numbered below the host's mark.
    shutil.copyfile(tmp_path / "backup.db", tmp_path / "remote.db")
    remote = local_at("remote")
    remote.put_many([entry(i, "b") for i in range(10, 12)])
    with pytest.warns(TunecacheWarning, match="restored from a backup"):
        pulled = fleet.sync(host, remote, direction="pull").directions[0]
    assert pulled.mark_reset and pulled.as_dict()["mark_reset"]
    assert "mark reset" in pulled.summary()
    assert (pulled.read, pulled.counts["added"], pulled.counts["unchanged"]) == (4, 2, 2)
    assert host.count() == 8
    again = fleet.sync(host, remote, direction="pull").directions[0]
    assert (again.read, again.mark_reset) == (0, False)


def test_a_merge_that_keeps_the_fields_here_keeps_the_entrys_origin(
    local_at: Callable[..., Cache],
) -> None:
    remote = local_at("remote")
    remote.put_many([entry(1, verdicts=validated())])
    host = local_at("host")
    fleet.sync(host, remote, direction="pull")
    origin = _origin(host)
    assert origin is not None
    # Another model's verdict on the same decision, with no more evidence: merged into the
    # entry here, whose own fields (and so its origin) stay.
    more = [*validated(), NewVerdict("other", "f2", "masked")]
    remote.put_many([entry(1, verdicts=more)])
    pulled = fleet.sync(host, remote, direction="pull").directions[0]
    assert pulled.counts["merged"] == 1 and pulled.conflicts["verdicts"] == {"merged": 1}
    assert len(host.verdicts("other")) == 1
    assert _origin(host) == origin


def _origin(cache: Cache) -> tuple[str, str] | None:
    with cache.transaction() as tx:
        (found,) = syncing.entries(tx.conn, [cache.entries()[0].id])
    return found.origin


def test_a_record_doctor_deletes_gives_its_entry_a_change_that_syncs(
    local_at: Callable[..., Cache],
) -> None:
    tuner, remote = local_at("tuner"), local_at("remote")
    tuner.put_many([entry(1), entry(2)])
    assert fleet.sync(tuner, remote, direction="push").directions[0].read == 2
    with sqlite3.connect(tuner.path) as conn:
        conn.execute(
            "UPDATE timing_records SET data = x'a1' WHERE id = (SELECT min(id) FROM timing_records)"
        )
    repaired = maintain.doctor(tuner, repair=True)
    assert [(p.kind, p.count) for p in repaired.problems] == [("unreadable-records", 1)]
    # The entry lost its record: a change of the entry, which the next push reads.
    pushed = fleet.sync(tuner, remote, direction="push").directions[0]
    assert pushed.read == 1


def test_a_role_that_may_write_the_tables_but_not_number_changes_fails_in_one_line(
    pg: PgSchema, device: Device, local_at: Callable[..., Cache]
) -> None:
    with Cache.open(url=pg.url, device=device) as store:
        store.put_many([entry(1)])
        with store.transaction(write=True) as tx:
            # Every table's write privileges, and not the sequence that numbers changes.
            tx.conn.exec_driver_sql(
                f"GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {pg.schema} "
                f"TO {make_url(pg.ro_url).username}"
            )
    tuner = local_at("tuner")
    tuner.put_many([entry(i) for i in range(2, 5)])
    with Cache.open(url=pg.ro_url, device=device) as writer:
        with pytest.raises(ReadOnlyStoreError) as raised:
            fleet.sync(tuner, writer, direction="push")
        assert writer.count() == 1
    message = str(raised.value)
    assert "\n" not in message and "USAGE privilege on" in message and "_seq" in message
    assert "INSERT" not in message and "***" in message


def test_deleting_the_newest_entry_of_a_fleet_store_is_no_restore(
    pg: PgSchema, device: Device, local_at: Callable[..., Cache]
) -> None:
    # A prune of the store's newest entries lowers the highest number its entries hold; the
    # sequence that gave them does not go back, so no host takes the prune for a restore and
    # reads the whole store again.
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    with Cache.open(url=pg.url, device=device) as remote:
        remote.put_many([entry(i) for i in range(5)])
        host = local_at("host")
        assert fleet.sync(host, remote, direction="pull").directions[0].read == 5
        engine = create_engine(pg.url, poolclass=NullPool)
        with engine.begin() as conn:
            newest = "SELECT entry_id FROM entry_changes ORDER BY seq DESC LIMIT 1"
            conn.execute(text(f"DELETE FROM entries WHERE id = ({newest})"))
        engine.dispose()
        with warnings.catch_warnings():
            warnings.simplefilter("error", TunecacheWarning)
            pulled = fleet.sync(host, remote, direction="pull").directions[0]
        assert (pulled.read, pulled.mark_reset) == (0, False)
    # A role that may not read the sequence still pulls, from what the entries hold.
    with Cache.open(url=pg.ro_url, device=device) as reader:
        assert fleet.sync(local_at("reader"), reader, direction="pull").directions[0].read == 4
