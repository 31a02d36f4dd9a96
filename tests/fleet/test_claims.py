"""One tuner per key across the hosts of a fleet store (tunecache.tune.claims on PostgreSQL):
hosts that tune into one fleet store hold claims against each other, a killed host's claim
expires, and a tuner into the fleet store takes its claims there. Real processes stand for
hosts (tests/tune/claims_child.py with a host name of its own), synchronised on their pipes.
"""

from __future__ import annotations

import os
import platform
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests import tune_models as tm
from tests.conftest import PgSchema
from tests.tune.claims_child import benches, spawn, tune_at_once
from tests.tune.support import NORM, NORM_NAMES, Clock
from tunecache import tune
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.resolve import Table
from tunecache.tune.claims import Claims, Holder, pid_alive, session_key
from tunecache.tune.mirror import Mirror

KEY = NORM.text
#: a claim child's options: it stands for host-a, with a minute's ttl
HOST_A = ("--host", "host-a", "--ttl", "60")


@pytest.fixture
def store(pg: PgSchema, device: Device) -> Iterator[Cache]:
    """This test's fleet store, opened for the test device."""
    with Cache.open(url=pg.url, device=device) as cache:
        yield cache


def _alive(holder: Holder) -> bool:
    return True


def test_two_hosts_on_one_fleet_store_hold_claims_against_each_other(
    store: Cache, pg: PgSchema, device: Device
) -> None:
    clock = Clock()
    clock.advance(1.8e9)
    with Cache.open(url=pg.url, device=device) as elsewhere:
        a = Claims(store, clock=clock, host="host-a", alive=_alive)
        b = Claims(elsewhere, clock=clock, host="host-b", alive=_alive)
        assert a.claim(KEY).taken
        refused = b.claim(KEY)
        assert not refused.taken and refused.holder is not None
        assert refused.holder.host == "host-a"
        clock.advance(a.ttl + 1)
        taken = b.claim(KEY)
        assert taken.taken and taken.holder is not None and taken.holder.host == "host-a"
        assert a.renew() == 0
        b.release()
        assert a.claim(KEY).taken


def test_a_killed_hosts_claim_on_the_fleet_store_stands_until_it_expires(
    store: Cache, pg: PgSchema
) -> None:
    with spawn("hold", pg.url, KEY, *HOST_A) as (child, out):
        assert out.readline().split() == ["claimed", str(child.pid)]
        child.send_signal(signal.SIGKILL)
        child.wait()
    clock = Clock()
    # host-b cannot see host-a's processes (pid_alive says alive for another host's).
    b = Claims(store, clock=clock, host="host-b", alive=pid_alive)
    holder = b.last(KEY)
    assert holder is not None and (holder.host, holder.pid) == ("host-a", child.pid)
    clock.now = holder.expires_at.timestamp() - 1
    assert not b.claim(KEY).taken
    clock.now = holder.expires_at.timestamp() + 1
    assert b.claim(KEY).taken


def test_a_tuner_into_the_fleet_store_claims_its_keys_there(store: Cache, tmp_path: Path) -> None:
    report = tune.tune(tm.ENCODER, cache=store, share=0.0)
    with store.transaction() as tx:
        rows = tx.conn.execute(text("SELECT key, pid, expires_at <= now() FROM claims")).all()
    claimed = {key: (pid, released) for key, pid, released in rows}
    session = session_key("encoder", platform.node())  # its session of the model, on its host
    assert {o.key for o in report.keys} | {"guard encoder", session} >= set(claimed)
    assert claimed[session] == (os.getpid(), True)
    assert KEY in claimed and claimed[KEY] == (os.getpid(), True)  # released when done
    # The local file a pull would fill holds no claim: the fleet store is where they live.
    assert not store.path.exists()


def test_a_tuner_into_the_fleet_store_serves_and_reports_what_it_holds(store: Cache) -> None:
    first = tune.tune(tm.ENCODER, cache=store, share=0.0)
    (norm,) = [o for o in first.keys if o.key == KEY]
    entry = store.get(NORM, candidates=NORM_NAMES)
    assert entry is not None and (norm.action, norm.choice) == ("accepted", entry.choice)
    assert entry.choice == "vectorized" and first.kept == (entry.id,)
    again = tune.tune(tm.ENCODER, cache=store, share=0.0)
    (norm,) = [o for o in again.keys if o.key == KEY]
    assert (norm.action, norm.choice) == ("known", "vectorized")


def test_two_hosts_tuning_into_the_fleet_store_bench_each_key_once(
    store: Cache, pg: PgSchema
) -> None:
    reports = tune_at_once(pg.url)
    benched = benches(reports)
    assert benched and set(benched.values()) == {1}, benched
    mirror = Mirror(store)
    try:
        table = Table.open(path=mirror.path, device=store.device, model="encoder")
        table = table.derive(fingerprint=reports[0]["fingerprint"])
        for report in reports:
            (norm,) = [o for o in report["keys"] if o["key"] == KEY]
            assert table.resolve(NORM, NORM_NAMES, "loop").choice == norm["choice"]
        table.close()
    finally:
        mirror.close()
