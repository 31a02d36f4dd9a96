"""A process that holds a claim, or tunes a model, for the claims tests (test_claims.py and
tests/fleet/test_claims.py).

    python -m tests.tune.claims_child hold STORE KEY [--host HOST] [--ttl SECONDS] [--session M]
    python -m tests.tune.claims_child tune STORE
    python -m tests.tune.claims_child pending STORE

STORE is a cache file's path, or a fleet store's URL. `hold` claims KEY for the test device,
says `claimed PID`, and waits for a line on stdin: `release` lets go of the claim (and says
`released`); anything else, or the parent's SIGKILL, leaves it. With `--session MODEL`, it
takes that model's session lock on this host first (`measuring.session_lock`, beside STORE's
file) and lets go of it after the claim, as a tuning session does. `tune` says `ready`, waits for
a line on stdin (`go`), tunes tests.tune_models' encoder (every key, share 0) and prints its
report as JSON; `pending` does the same around `tune.pending` (the device's pending keys, no
stored record benched again). This process's CPU waits are unknown, as the test process's
are (conftest), so no bench is doubted for how busy the machine is.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import tunecache.evidence
from tests import tune_models as tm
from tunecache import tune
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.tune.claims import Claims
from tunecache.tune.measuring import session_lock

#: the checkout, where the child runs as `python -m tests.tune.claims_child`
ROOT = Path(__file__).resolve().parent.parent.parent
#: the test device of tests/conftest.py
DEVICE = Device("test-cpu-9000", 4, None, "tunecache", "0.1.0")


def _open(store: str) -> Cache:
    """The cache at STORE: a URL opens the fleet store."""
    if "://" in store:
        return Cache.open(device=DEVICE, url=store)
    return Cache.open(device=DEVICE, path=store)


def main() -> None:
    """Hold a claim, or tune, as the arguments say."""
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("hold", "tune", "pending"))
    parser.add_argument("store")
    parser.add_argument("key", nargs="?")
    parser.add_argument("--host")
    parser.add_argument("--ttl", type=float, default=300.0)
    parser.add_argument("--session")
    args = parser.parse_args()
    tunecache.evidence.cpu_wait = lambda: None
    cache = _open(args.store)
    if args.what == "hold":
        lock = None if args.session is None else session_lock(cache.path, args.session)
        if lock is not None:
            assert lock.acquire(0.0)
        claims = Claims(cache, ttl=args.ttl, host=args.host)
        assert claims.claim(args.key).taken
        print(f"claimed {os.getpid()}", flush=True)
        if sys.stdin.readline().strip() == "release":
            claims.release(args.key)
            if lock is not None:
                lock.release()
            print("released", flush=True)
        return
    print("ready", flush=True)
    sys.stdin.readline()
    if args.what == "pending":
        print(json.dumps(tune.pending(cache=cache, rebench=0).as_dict()), flush=True)
        return
    report = tune.tune(tm.ENCODER, cache=cache, share=0.0)
    print(json.dumps(report.as_dict()), flush=True)


class Lines:
    """A child's stdout, read line by line as its bytes come."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream

    def readline(self) -> str:
        """The next line, decoded ("" at the end)."""
        return self.stream.readline().decode()


@contextmanager
def spawn(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], Lines]]:
    """This script as a child process, with pipes on stdin and stdout; killed if still
    running at the end, its pipes closed."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.tune.claims_child", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        yield child, Lines(child.stdout)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def tune_at_once(store: str, what: str = "tune") -> list[dict[str, Any]]:
    """Two `tune` (or `pending`) children on STORE, started together once both are ready:
    their reports."""
    with spawn(what, store) as (a, a_out), spawn(what, store) as (b, b_out):
        assert a_out.readline().strip() == b_out.readline().strip() == "ready"
        for child in (a, b):
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.flush()
        return [json.loads(a_out.readline()), json.loads(b_out.readline())]


def benches(reports: list[dict[str, Any]]) -> dict[str, int]:
    """Key text -> how many of the reports benched it (its evidence fresh, not "stored")."""
    counts: dict[str, int] = {}
    for report in reports:
        for outcome in report["keys"]:
            fresh = outcome["bench_stopped"] not in (None, "stored")
            counts[outcome["key"]] = counts.get(outcome["key"], 0) + fresh
    return counts


if __name__ == "__main__":
    main()
