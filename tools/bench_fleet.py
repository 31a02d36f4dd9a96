"""The fleet store's figures (issue 19), against a real PostgreSQL server:

    eval "$(tools/pg_test_server.sh start)"     # or any server: TUNECACHE_TEST_PG_URL=...
    python tools/bench_fleet.py                 # full size
    python tools/bench_fleet.py --quick         # a smoke run: small sizes

Each run works in a schema of its own on the server named by TUNECACHE_TEST_PG_URL, dropped at
the end. Sections:

1. HOSTS processes acting as hosts push at once (each its own keys, and keys every host shares
   with another, decided differently), started together on one event; then one host pulls into
   an empty cache. Printed: entries pushed a second, acknowledged entries absent from the store
   (lost), errors, entries present more than once, and the resolver's answers on the pulling host
   against each pushing host's (a key only one host decided must answer the same; a shared key
   answers what the conflict rule settled).
2. A pull of N entries with their records into an empty local cache (target: at most 10 s), and
   a pull with nothing new (target: at most 0.2 s).
3. The resolver on a host that pulled against one that wrote the same entries itself: a fresh
   table's first answer (cold start) and a repeated answer (hit), side by side, ratio printed
   (target: unchanged, the fleet adds nothing to the hot path).

Figures on a shared machine swing by about 10%: compare the ratios measured in the same run, and
repeat. The exit status is 1 if a target was not met.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tunecache import fleet
from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.keys import Key, parse
from tunecache.resolve import Table

DEVICE = Device("benchbox", 8, None, "tunecache", "0.1.0")
NAMES = ("k1", "k2", "k3", "k4")


def record(seed: int, samples: int = 5) -> TimingRecord:
    """A timing record of four candidates, `samples` each, k4 (or another) fastest."""
    base = (seed % 7) * 1e-7
    return TimingRecord(
        candidates=tuple(
            CandidateTiming(name, tuple(1e-5 * (4 - i) + base + j * 1e-8 for j in range(samples)))
            for i, name in enumerate(NAMES)
        ),
        settings={"max_samples": 10},
    )


def key_text(prefix: str, i: int) -> str:
    """A key of signature `prefix`, with dims from `i`."""
    return f"{prefix}_F32_m{i % 997 + 1}_n{i // 997 + 1}"


def host_entries(host: int, own: int, shared: int) -> list[NewEntry]:
    """What host `host` decided: `own` keys of its own, and `shared` keys every host decides,
    each with a choice and evidence of its own (host h takes candidate h % 4, with h + 1
    samples, and even hosts a validation)."""
    out = []
    for i in range(own):
        out.append(
            NewEntry(key_text(f"h{host}op", i), "k4", NAMES, heuristic="k1", record=record(i))
        )
    for i in range(shared):
        verdicts = (
            [NewVerdict("net", "f", "validated", rounds=3, confirmations=3)] if host % 2 else []
        )
        out.append(
            NewEntry(
                key_text("sharedop", i),
                NAMES[host % 4],
                NAMES,
                heuristic="k1",
                record=record(i, samples=host + 1),
                verdicts=verdicts,
            )
        )
    return out


def _schema_url(url: str, schema: str) -> str:
    parsed = make_url(url)
    query = {**parsed.query, "options": f"-csearch_path={schema}"}
    return parsed.set(query=query).render_as_string(hide_password=False)


def _pusher(host: int, folder: str, url: str, own: int, shared: int, go: Any, out: Any) -> None:
    """One host: fill its local cache, wait for the start, push, say what it pushed."""
    path = Path(folder) / f"host{host}.db"
    try:
        with Cache.open(device=DEVICE, path=path) as local:
            local.put_many(host_entries(host, own, shared))
            keys = [e.key.text for e in local.entries()]
            out.put(("ready", host, 0.0, 0, None))
            go.wait()
            start = time.perf_counter()
            report = fleet.sync(local, url, direction="push")
            took = time.perf_counter() - start
            written = report.directions[0].read
        out.put(("done", host, took, written, keys))
    except Exception as error:  # every failure is counted, not raised
        out.put(("error", host, 0.0, 0, f"{type(error).__name__}: {error}"))


def concurrent_push(url: str, folder: Path, hosts: int, own: int, shared: int) -> dict[str, Any]:
    """Section 1."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_pusher, args=(h, str(folder), url, own, shared, go, out))
        for h in range(hosts)
    ]
    for p in procs:
        p.start()
    errors: list[str] = []
    ready = 0
    while ready < hosts:
        kind, host, _, _, detail = out.get(timeout=600)
        if kind == "error":
            errors.append(f"host {host}: {detail}")
            ready += 1
        else:
            ready += 1
    start = time.perf_counter()
    go.set()
    acknowledged: dict[int, list[str]] = {}
    pushed = 0
    for _ in range(hosts - len(errors)):
        kind, host, _took, written, detail = out.get(timeout=600)
        if kind == "error":
            errors.append(f"host {host}: {detail}")
            continue
        acknowledged[host] = detail
        pushed += written
    wall = time.perf_counter() - start
    for p in procs:
        p.join(timeout=60)
    with Cache.open(url=url, device=DEVICE) as store:
        held = [e.key.text for e in store.entries()]
    present = set(held)
    wanted = {k for keys in acknowledged.values() for k in keys}
    lost = sorted(wanted - present)
    twice = len(held) - len(present)
    # One host pulls everything into an empty cache.
    puller = folder / "puller.db"
    with Cache.open(device=DEVICE, path=puller) as local:
        pull = fleet.sync(local, url, direction="pull").directions[0]
    same = differ = settled = 0
    pulled = Table.open(device=DEVICE, path=puller, use="all")
    # The conflict rule's winner of a shared key: a validated host (the odd ones) beats an
    # unvalidated one, then the most samples (the highest host number) wins.
    validated = [h for h in acknowledged if h % 2] or list(acknowledged)
    winner = NAMES[max(validated) % 4] if acknowledged else None
    for host, keys in acknowledged.items():
        own_table = Table.open(device=DEVICE, path=folder / f"host{host}.db", use="all")
        for k in keys:
            key = parse(k)
            mine = own_table.resolve(key, NAMES, "k1").choice
            theirs = pulled.resolve(key, NAMES, "k1").choice
            if k.startswith("sharedop"):
                settled += theirs == winner
            elif mine == theirs:
                same += 1
            else:
                differ += 1
    print(
        f"concurrent push: {hosts} hosts, {pushed} entries pushed in {wall:.2f} s: "
        f"{pushed / wall:,.0f} entries/s; lost {len(lost)}, errors {len(errors)}, "
        f"present twice {twice}; store holds {len(held)} entries"
    )
    for e in errors:
        print("  error:", e)
    print(
        f"  pull into an empty cache: {pull.read} read, {pull.written} written in "
        f"{pull.seconds:.2f} s"
    )
    print(
        f"  resolver on the pulling host against the pushing hosts': own keys {same} the same, "
        f"{differ} different; shared keys: {settled} of {shared * len(acknowledged)} answers "
        f"the conflict rule's winner ({winner}, the validated host with the most samples)"
    )
    wrong = shared * len(acknowledged) - settled
    return {"lost": len(lost), "errors": len(errors), "twice": twice, "differ": differ + wrong}


def _fill(path: Path, n: int) -> None:
    with Cache.open(device=DEVICE, path=path) as cache:
        batch = []
        for i in range(n):
            batch.append(
                NewEntry(key_text(f"bulk{i % 16}", i // 16), NAMES[i % 4], NAMES, "k1", record(i))
            )
            if len(batch) == 20000:
                cache.put_many(batch)
                batch = []
        cache.put_many(batch)


def big_pull(url: str, folder: Path, n: int, repeats: int) -> dict[str, float]:
    """Section 2: returns the seconds of the pull and of the idle pull."""
    tuner = folder / "tuner.db"
    _fill(tuner, n)
    with Cache.open(device=DEVICE, path=tuner) as local, Cache.open(url=url, device=DEVICE) as s:
        start = time.perf_counter()
        fleet.sync(local, s, direction="push")
        took = time.perf_counter() - start
        print(f"push of {n:,} entries with records: {took:.2f} s ({n / took:,.0f} entries/s)")
        with s.engine.connect() as conn:
            size = conn.execute(
                text(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace"
                    " ns ON ns.oid = c.relnamespace WHERE ns.nspname = current_schema()"
                    " AND c.relkind = 'r'"
                )
            ).scalar_one()
        print(f"  on PostgreSQL: {int(size) / 2**20:.1f} MiB, {int(size) / n:,.0f} bytes an entry")
    fulls, idles = [], []
    for r in range(repeats):
        target = folder / f"pulled{r}.db"
        with Cache.open(device=DEVICE, path=target) as local:
            start = time.perf_counter()
            with Cache.open(url=url, device=DEVICE) as store:
                done = fleet.sync(local, store, direction="pull").directions[0]
            fulls.append(time.perf_counter() - start)
            assert done.written == n, done
            for _ in range(5):
                start = time.perf_counter()
                with Cache.open(url=url, device=DEVICE) as store:
                    idle = fleet.sync(local, store, direction="pull").directions[0]
                idles.append(time.perf_counter() - start)
                assert idle.read == 0
    print(
        f"pull of {n:,} entries with records into an empty cache (open + pull + close): "
        f"best {min(fulls):.2f} s, runs {', '.join(f'{t:.2f}' for t in fulls)} (target 10 s)"
    )
    print(
        f"pull with nothing new (open + pull + close): best {min(idles) * 1000:.1f} ms, median "
        f"{statistics.median(idles) * 1000:.1f} ms (target 200 ms)"
    )
    return {"pull": min(fulls), "idle": statistics.median(idles)}


def _resolver_costs(path: Path, keys: list[Key]) -> tuple[float, float]:
    """A fresh table's first answer, and the median of a repeated one (seconds)."""
    start = time.perf_counter()
    table = Table.open(device=DEVICE, path=path, use="all")
    table.resolve(keys[0], NAMES, "k1")
    cold = time.perf_counter() - start
    for k in keys:
        table.resolve(k, NAMES, "k1")
    loops = 20000
    start = time.perf_counter()
    for _ in range(loops // len(keys) or 1):
        for k in keys:
            table.resolve(k, NAMES, "k1")
    hit = (time.perf_counter() - start) / max(loops, len(keys))
    return cold, hit


def resolver_side_by_side(folder: Path, repeats: int) -> float:
    """Section 3: the worse of the two ratios, pulled over written here."""
    pulled, own = folder / "pulled0.db", folder / "tuner.db"
    keys = [parse(key_text(f"bulk{i % 16}", i // 16)) for i in range(0, 16 * 64, 1)]
    colds: dict[str, list[float]] = {"pulled": [], "own": []}
    hits: dict[str, list[float]] = {"pulled": [], "own": []}
    for _ in range(repeats):
        for name, path in (("pulled", pulled), ("own", own)):
            cold, hit = _resolver_costs(path, keys)
            colds[name].append(cold)
            hits[name].append(hit)
    cold_ratio = min(colds["pulled"]) / min(colds["own"])
    hit_ratio = min(hits["pulled"]) / min(hits["own"])
    print(
        f"resolver, a host that pulled against one that wrote the same entries: cold start "
        f"{min(colds['pulled']) * 1000:.2f} ms vs {min(colds['own']) * 1000:.2f} ms "
        f"({cold_ratio:.2f}x); hit {min(hits['pulled']) * 1e9:.0f} ns vs "
        f"{min(hits['own']) * 1e9:.0f} ns ({hit_ratio:.2f}x)"
    )
    return max(cold_ratio, hit_ratio)


def main() -> int:
    """Run every section; 1 if a target was not met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--hosts", type=int, default=8)
    options = parser.parse_args()
    base = os.environ.get("TUNECACHE_TEST_PG_URL")
    if not base:
        print("set TUNECACHE_TEST_PG_URL (tools/pg_test_server.sh start prints it)")
        return 2
    own, shared = (200, 50) if options.quick else (5000, 1000)
    n, repeats = (5000, 1) if options.quick else (100_000, 3)
    schema = f"bench_{secrets.token_hex(4)}"
    admin = create_engine(base, poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = _schema_url(base, schema)
    failed = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            first = concurrent_push(url, folder, options.hosts, own, shared)
            if first["lost"] or first["errors"] or first["twice"] or first["differ"]:
                failed.append("concurrent push")
            with admin.begin() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
                conn.execute(text(f"CREATE SCHEMA {schema}"))
            second = big_pull(url, folder, n, repeats)
            if second["pull"] > 10 or second["idle"] > 0.2:
                failed.append("pull")
            if resolver_side_by_side(folder, max(repeats, 3)) > 1.15:
                failed.append("resolver")
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()
    print("targets not met: " + ", ".join(failed) if failed else "every target met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
