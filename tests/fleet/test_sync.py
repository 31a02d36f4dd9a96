"""Sync between local caches and a fleet store: this device's entries only, incremental and
idempotent, conflicts settled by evidence and counted, origins kept, the resolver's rules kept,
a read-only role that pulls and cannot push."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import ROOT, PgSchema
from tunecache import fleet
from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.candidates import checksum
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.errors import BadArgumentError, ReadOnlyStoreError
from tunecache.fleet.rules import settle
from tunecache.resolve import Table
from tunecache.store import syncing

NAMES = ["a", "b", "c"]
#: an identity the command line names exactly (its CPU already in slug form)
NAMED = Device("syncbox-9", 4, None, "tunecache", "0.1.0")


def record(samples: int = 3) -> TimingRecord:
    """A record with `samples` samples of each candidate (c the fastest)."""
    return TimingRecord(
        candidates=tuple(
            CandidateTiming(n, tuple(1e-5 * (3 - i) for _ in range(samples)))
            for i, n in enumerate(NAMES)
        )
    )


def entry(i: int, choice: str = "c", *, samples: int = 3, **more: Any) -> NewEntry:
    """The entry of key number `i`."""
    return NewEntry(f"op_F32_m{i}", choice, NAMES, heuristic="a", record=record(samples), **more)


def validated(rounds: int = 3) -> list[NewVerdict]:
    """A model's validation with `rounds` confirmed rounds."""
    return [NewVerdict("net", "f1", "validated", gain=1.2, rounds=rounds, confirmations=rounds)]


@pytest.fixture
def local_at(device: Device, tmp_path: Path) -> Iterator[Callable[[str], Cache]]:
    """Local caches of the test's device, by name (host)."""
    opened: list[Cache] = []

    def open_at(name: str, who: Device = device) -> Cache:
        cache = Cache.open(device=who, path=tmp_path / f"{name}.db")
        opened.append(cache)
        return cache

    yield open_at
    for c in opened:
        c.close()


@pytest.fixture
def store(pg: PgSchema, device: Device) -> Iterator[Cache]:
    """The fleet store on the test server, for the test's device."""
    with Cache.open(url=pg.url, device=device) as cache:
        yield cache


def test_a_pull_copies_this_device_only_incrementally_and_a_second_changes_nothing(
    store: Cache, pg: PgSchema, device: Device, local_at: Callable[..., Cache]
) -> None:
    tuner, other_kind = local_at("tuner"), device.replace(threads=device.threads + 1)
    tuner.put_many([entry(i, verdicts=validated()) for i in range(1, 11)])
    first = fleet.sync(tuner, store, direction="push").directions[0]
    assert (first.read, first.counts["added"]) == (10, 10)
    with Cache.open(url=pg.url, device=other_kind) as theirs:
        theirs.put_many([entry(i) for i in range(100, 105)])

    host = local_at("host")
    pulled = fleet.sync(host, store, direction="pull").directions[0]
    assert (pulled.read, pulled.counts["added"], pulled.written) == (10, 10, 10)
    assert host.count() == 10 and {e.key.text for e in host.entries()} == {
        f"op_F32_m{i}" for i in range(1, 11)
    }
    assert host.verdicts("net") and host.record(host.entries()[0]) == record()
    # Nothing new: nothing read, nothing written, and the report says so.
    again = fleet.sync(host, store)
    assert not again.changed and [d.read for d in again.directions] == [0, 0]
    assert again.summary().splitlines()[-1] == "nothing changed on either side"
    # Only what changed since: one new entry is one read.
    tuner.put_many([entry(11)])
    fleet.sync(tuner, store, direction="push")
    third = fleet.sync(host, store, direction="pull").directions[0]
    assert (third.read, third.counts["added"], host.count()) == (1, 1, 11)
    # Another identity only when asked: a cache opened for it pulls its rows.
    with Cache.open(url=pg.url, device=other_kind) as theirs:
        mine = local_at("other", other_kind)
        assert fleet.sync(mine, theirs, direction="pull").directions[0].counts["added"] == 5
    with pytest.raises(BadArgumentError, match="one device identity"):
        fleet.sync(local_at("wrong", other_kind), store)


def test_a_sync_both_ways_ends_with_both_sides_equal_and_a_second_idle(
    local_at: Callable[..., Cache],
) -> None:
    remote, one, two = local_at("remote"), local_at("one"), local_at("two")
    one.put_many([entry(i) for i in range(1, 6)])
    two.put_many([entry(i) for i in range(4, 9)])  # 4 and 5 on both, the same content
    for host in (one, two, one):
        fleet.sync(host, remote)
    keys = {e.key.text for e in remote.entries()}
    assert keys == {e.key.text for e in one.entries()} == {e.key.text for e in two.entries()}
    assert len(keys) == 8
    for host in (one, two):
        report = fleet.sync(host, remote)
        assert not report.changed and all(d.read == 0 for d in report.directions), report


def _sync_one(
    here: NewEntry, incoming: NewEntry, local_at: Callable[..., Cache], name: str = ""
) -> Any:
    """Push `incoming` from one host to a store holding `here` (new caches named after
    `name`); the push's report, the store's entry afterwards, and the store."""
    remote, host = local_at(f"remote{name}"), local_at(f"host{name}")
    remote.put_many([here])
    host.put_many([incoming])
    report = fleet.sync(host, remote, direction="push").directions[0]
    return report, remote.entries()[0], remote


def test_a_validated_entry_beats_an_unvalidated_one_whatever_the_samples(
    local_at: Callable[..., Cache],
) -> None:
    report, found, _ = _sync_one(
        entry(1, "b", samples=30), entry(1, "c", verdicts=validated()), local_at
    )
    assert found.choice == "c"
    assert report.counts["replaced"] == 1 and report.conflicts["validated"] == {"replaced": 1}
    here, incoming = entry(1, "b", status="accepted"), entry(1, "c", samples=30)
    report, found, _ = _sync_one(here, incoming, local_at, "2")
    assert found.choice == "b" and report.conflicts["validated"] == {"kept": 1}


def test_a_models_own_mask_is_never_overwritten_by_another_hosts_entry(
    local_at: Callable[..., Cache],
) -> None:
    masked = [NewVerdict("net", "f1", "masked", rounds=3, confirmations=0)]
    report, found, remote = _sync_one(
        entry(1, "b", verdicts=masked), entry(1, "c", samples=50, verdicts=validated(9)), local_at
    )
    assert found.choice == "b" and remote.verdicts_on(found) == {"net": "masked"}
    assert report.conflicts["mask"] == {"kept": 1} and report.counts["kept"] == 1


def test_the_stronger_evidence_wins_and_a_tie_keeps_the_entry_there(
    local_at: Callable[..., Cache],
) -> None:
    report, found, _ = _sync_one(entry(1, "b", samples=3), entry(1, "c", samples=9), local_at)
    assert found.choice == "c" and report.conflicts["evidence"] == {"replaced": 1}
    same = (entry(1, "b", samples=3), entry(1, "c", samples=3))
    report, found, _ = _sync_one(*same, local_at, "2")
    assert found.choice == "b" and report.conflicts["tie"] == {"kept": 1}


def test_verdicts_on_one_decision_merge_and_never_lose_evidence(
    local_at: Callable[..., Cache],
) -> None:
    here = entry(1, "c", verdicts=[*validated(5), NewVerdict("cnn", "f2", "validated", rounds=1)])
    incoming = entry(1, "c", verdicts=[*validated(2), NewVerdict("mlp", "f3", "masked", rounds=3)])
    report, found, remote = _sync_one(here, incoming, local_at)
    assert report.counts["merged"] == 1 and report.conflicts["verdicts"] == {"merged": 1}
    assert remote.verdicts_on(found) == {"net": "validated", "cnn": "validated", "mlp": "masked"}
    with remote.transaction() as tx:
        (mine,) = syncing.entries(tx.conn, [found.id])
    net = next(v for v in mine.verdicts if v.model == "net")
    assert net.rounds == 5  # the stronger of the two stayed
    assert mine.record is not None and mine.record.samples_count == 9  # the record kept


def test_settle_says_unchanged_for_the_same_content(local_at: Callable[..., Cache]) -> None:
    a = local_at("a")
    a.put_many([entry(1)])
    with a.transaction() as tx:
        (one,) = syncing.entries(tx.conn, [a.entries()[0].id])
    assert settle(one, one).action == "unchanged" and settle(one, None).action == "added"


def test_pulled_entries_carry_their_origin_and_are_served_only_under_the_resolvers_rules(
    pg: PgSchema, local_at: Callable[..., Cache]
) -> None:
    device = NAMED
    tuner = local_at("tuner", device)
    with tuner.run("tune") as run_id:
        tuner.put_many([entry(1, run_id=run_id, status="accepted")])
    with Cache.open(url=pg.url, device=device) as store:
        fleet.sync(tuner, store, direction="push")
        host = local_at("host", device)
        fleet.sync(host, store, direction="pull")
        where = store.where
    with host.transaction() as tx:
        (pulled,) = syncing.entries(tx.conn, [host.entries()[0].id])
    assert pulled.origin == (os.uname().nodename, where)
    assert "***" in where and "tunecache_writer:" in where
    table = Table.open(device=device, path=host.path)
    assert table.resolve("op_F32_m1", tuple(NAMES), "a").choice == "c"
    # Another candidate list: another checksum, so the pulled entry does not answer.
    other = table.resolve("op_F32_m1", ("a", "c", "b"), "a")
    assert (other.choice, other.source) == ("a", "heuristic")
    shown = _command("inspect", "op_F32_m1", "--db", str(host.path), *_identity(device), env={})
    assert shown.returncode == 0, shown.stderr
    assert f"origin: {os.uname().nodename}, synced from {where}" in shown.stdout
    assert str(make_url(pg.url).password) not in shown.stdout
    # A decision made again here is this host's own: its origin goes.
    with host.run("tune") as run_id:
        host.put("op_F32_m1", choice="b", candidates=NAMES, run_id=run_id)
    with host.transaction() as tx:
        (mine,) = syncing.entries(tx.conn, [host.entries()[0].id])
    assert mine.origin is None


def test_a_read_only_role_pulls_and_its_push_fails_in_one_line_writing_nothing(
    store: Cache, pg: PgSchema, device: Device, local_at: Callable[..., Cache]
) -> None:
    tuner = local_at("tuner")
    tuner.put_many([entry(i) for i in range(1, 4)])
    fleet.sync(tuner, store, direction="push")
    before = store.count()
    with Cache.open(url=pg.ro_url, device=device) as reader:
        host = local_at("host")
        assert fleet.sync(host, reader, direction="pull").directions[0].counts["added"] == 3
        host.put_many([entry(9)])
        with pytest.raises(ReadOnlyStoreError) as raised:
            fleet.sync(host, reader, direction="push")
    message = str(raised.value)
    assert "\n" not in message and "INSERT" in message and "nothing was written" in message
    assert "***" in message
    assert store.count() == before
    # Nothing to push is refused the same way: the role, not the data, decides.
    with Cache.open(url=pg.ro_url, device=device) as reader, pytest.raises(ReadOnlyStoreError):
        fleet.sync(local_at("empty"), reader, direction="push")


def _identity(device: Device) -> list[str]:
    """The device options that name `device` on the command line."""
    return [
        "--cpu",
        device.cpu,
        "--threads",
        str(device.threads),
        "--client-version",
        device.client_version,
    ]


def _command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250", **env},
    )


def test_the_command_syncs_with_the_remote_variable_and_never_prints_the_password(
    pg: PgSchema, tmp_path: Path
) -> None:
    device = NAMED
    password = str(make_url(pg.url).password)
    db = tmp_path / "cli.db"
    with Cache.open(device=device, path=db) as local:
        local.put_many([entry(1), entry(2)])
    named = ["--db", str(db), *_identity(device)]
    first = _command("sync", *named, "--remote", pg.url, env={})
    assert first.returncode == 0, first.stderr
    assert "push: 2 read, 2 added" in first.stdout and password not in first.stdout
    again = _command("sync", "pull", *named, "--json", env={fleet.REMOTE_VAR: pg.url})
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["changed"] is False and report["directions"][0]["read"] == 0
    assert password not in again.stdout
    missing = _command("sync", *named, env={fleet.REMOTE_VAR: ""})
    assert missing.returncode != 0 and "TUNECACHE_REMOTE" in missing.stderr
    refused = _command("sync", "push", *named, "--remote", pg.ro_url, env={})
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert str(make_url(pg.ro_url).password) not in refused.stderr


@pytest.mark.parametrize("command", ["list", "inspect 1", "models", "sql", "doctor", "where"])
def test_a_read_command_given_a_store_url_refuses_in_one_line_without_the_password(
    command: str, tmp_path: Path
) -> None:
    url = "postgresql+psycopg://someone:hunter2@/db?host=" + str(tmp_path)
    for given, env in (([], {"TUNECACHE_URL": url}), (["--db", url], {})):
        if command == "where" and not given:
            continue  # where reports on the fleet store itself (tests/fleet/test_cli.py)
        done = _command(*command.split(), *given, env=env)
        assert done.returncode == 2, (command, given, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "hunter2" not in done.stderr
        assert "someone:***@" in done.stderr


def test_an_upgraded_cache_pushes_the_entries_it_had_before_revision_0006(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old.db"
    shutil.copy(ROOT / "tests" / "golden" / "rev0003.db", old)
    golden = Device("golden-cpu", 4, None, "tunecache", "0.1.0")
    # The golden file's fingerprints and checksums are placeholders (a sync refuses an entry
    # whose list does not hash to its checksum): its first device and its lists get real ones.
    with sqlite3.connect(old) as conn:
        conn.execute("UPDATE devices SET fingerprint = ? WHERE id = 1", (golden.fingerprint,))
        for (set_id,) in conn.execute("SELECT id FROM candidate_sets").fetchall():
            names = [
                n
                for (n,) in conn.execute(
                    "SELECT name FROM candidates WHERE set_id = ? ORDER BY position", (set_id,)
                )
            ]
            real = checksum(names)
            conn.execute("UPDATE candidate_sets SET checksum = ? WHERE id = ?", (real, set_id))
    conn.close()
    with (
        Cache.open(device=golden, path=old) as upgraded,
        Cache.open(device=golden, path=tmp_path / "remote.db") as remote,
    ):
        before = {e.key.text: e.choice for e in upgraded.entries()}
        done = fleet.sync(upgraded, remote, direction="push").directions[0]
        assert (done.read, done.counts["added"]) == (len(before), len(before)) == (2, 2)
        assert {e.key.text: e.choice for e in remote.entries()} == before
        assert remote.verdicts_on(remote.entries()[0]) == upgraded.verdicts_on(
            upgraded.entries()[0]
        )


def test_revision_0006_upgrades_a_postgresql_store_with_entries_and_pulls_them_all(
    pg: PgSchema, device: Device, local_at: Callable[..., Cache]
) -> None:
    from alembic import command
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from tunecache.store import migrate

    with Cache.open(url=pg.url, device=device) as store:
        store.put_many([entry(i, verdicts=validated()) for i in range(1, 8)])
    engine = create_engine(pg.url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            command.downgrade(migrate.alembic_config(conn), "0004")
    finally:
        engine.dispose()
    with Cache.open(url=pg.url, device=device) as store:
        assert store.outcome is migrate.Outcome.UPGRADED
        host = local_at("host")
        done = fleet.sync(host, store, direction="pull").directions[0]
        assert (done.read, done.counts["added"]) == (7, 7)
        # The triggers are back: a new entry is the next pull's only one.
        store.put_many([entry(9)])
        again = fleet.sync(host, store, direction="pull").directions[0]
        assert (again.read, again.counts["added"]) == (1, 1)


def test_bad_arguments_are_one_line_errors_and_write_nothing(
    local_at: Callable[..., Cache],
) -> None:
    host = local_at("host")
    for bad in (
        lambda: fleet.sync(host, local_at("r"), direction="sideways"),
        lambda: fleet.sync(host, 42),  # type: ignore[arg-type]
        lambda: fleet.sync("host.db", local_at("r2")),  # type: ignore[arg-type]
        lambda: fleet.sync(host, "mysql://u:pw@h/db"),
        lambda: fleet.sync(host, host),
    ):
        with pytest.raises(BadArgumentError) as raised:
            bad()
        assert "\n" not in str(raised.value) and "pw@" not in str(raised.value)
    assert host.count() == 0


def test_a_store_that_is_not_there_fails_in_one_line_and_creates_no_local_cache(
    tmp_path: Path,
) -> None:
    db = tmp_path / "never.db"
    url = f"postgresql+psycopg://someone:hunter2@/db?host={tmp_path}&connect_timeout=2"
    done = _command("sync", "pull", "--db", str(db), *_identity(NAMED), "--remote", url, env={})
    assert done.returncode == 5, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "unreachable" in done.stderr
    assert "hunter2" not in done.stderr and not db.exists()
