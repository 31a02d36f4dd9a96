"""One tuner per key across the hosts of a fleet store (tunecache.tune.claims on PostgreSQL):
hosts that tune into one fleet store hold claims against each other, a killed host's claim
expires, and a tuner into the fleet store takes its claims there. Real processes stand for
hosts (tests/tune/claims_child.py with a host name of its own), synchronised on their pipes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests import tune_models as tm
from tests.conftest import ROOT, PgSchema
from tests.tune.support import NORM, Clock
from tunecache import tune
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.tune.claims import Claims, Holder, pid_alive

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
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.tune.claims_child", "hold", pg.url, KEY, *HOST_A],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == [b"claimed", str(child.pid).encode()]
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
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
    assert {o.key for o in report.keys} | {"guard encoder"} >= set(claimed)
    assert KEY in claimed and claimed[KEY] == (os.getpid(), True)  # released when done
    # The local file a pull would fill holds no claim: the fleet store is where they live.
    assert not store.path.exists()
