"""One tuner per key: claims on the keys of a cache's device identity, in the store itself.

A tuner claims a key before it benches it (`Claims.claim`); a second tuner that meets the key
while the claim is live tunes other keys meanwhile and then waits for it (`Claims.wait`, up to a
deadline), and reads what the holder wrote. A claim expires `ttl` seconds after it was taken or
last renewed; a live holder renews its claims from a thread of its own (`Claims.renewing`), so
a claim outlives a long bench, and a killed holder's claim expires. On one host a claim whose
process is gone is taken over at once (`pid_alive`); on another host only its expiry counts,
so hosts' clocks must agree to well within `ttl`. A wait's deadline is measured on a monotonic
timer (a wall clock stepped back or forward would shorten or lengthen it).

A claim can still be lost: a holder whose renewals fail (a store busy for longer than `ttl`)
sees its claims expire, and another tuner take them over. So a holder confirms its claim
before it writes what it tuned (`Claims.confirm`, one read): a key another live holder has
now is left to that holder (`ClaimLost`), and one nobody took is claimed again. Renewals that
keep failing are warned of (`TunecacheWarning`), once, after `FAILED_BEATS` in a row.

The claims live in the store the tuner writes: a SQLite file's writers share its writers' lock,
and the tuners of a fleet (`tunecache.open(url=...)`) its PostgreSQL database. `Claims` takes
any open, writable `Cache`.

Besides its keys, a tuning session claims its model on its host (`session_key`) before it
profiles anything: a second tuner of the same model and device on the same host waits for that
session (bounded as a key's wait is, and taken over when its holder dies or its claim expires),
then finds in the cache what the first one tuned. The session holds a flock of this host too
(`tunecache.tune.measuring.session_lock`), so that a waiter sleeps on it rather than reading
the claim every `POLL` seconds. Tuners on one host share its cores, so
running beside each other they would only contend with the one that measures; on other hosts
of a fleet store they tune different keys at once, as before.
"""

from __future__ import annotations

import os
import platform
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from tunecache import hostlock, processes
from tunecache.errors import BadArgumentError, TunecacheError, TunecacheWarning

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = [
    "CLAIM_TTL",
    "CLAIM_WAIT",
    "FAILED_BEATS",
    "Claim",
    "ClaimLost",
    "Claims",
    "Holder",
    "pid_alive",
    "session_key",
]

#: seconds between two looks at a claim another tuner holds: a lock's (`tunecache.hostlock`)
POLL = hostlock.POLL
#: seconds a claim stands unless renewed (its holder renews it every third of that)
CLAIM_TTL = 30.0
#: seconds a tuner waits, at most, for a key another tuner holds
CLAIM_WAIT = 600.0
#: renewals failed in a row before a holder is warned that its claims may lapse
FAILED_BEATS = 3


class Holder(NamedTuple):
    """Who holds (or last held) a claim: host, process, token, and the claim's times."""

    host: str
    pid: int
    #: the holder's own token (`Claims.token`): a pid is reused, and hosts share pids
    token: str
    claimed_at: datetime
    #: when the claim lapses unless renewed (a released one: when it was released)
    expires_at: datetime

    @property
    def named(self) -> str:
        """The holder as messages name it: `host pid N`."""
        return f"{self.host} pid {self.pid}"


class Claim(NamedTuple):
    """What asking for a key's claim gave: whether it is ours now, and the other holder (the
    live one that keeps it; or the one this claim took over, whose writes are worth reading)."""

    key: str
    taken: bool
    holder: Holder | None


class ClaimLost(TunecacheError):
    """This holder's claim on a key lapsed, and another live holder has the key now."""

    def __init__(self, key: str, holder: Holder) -> None:
        super().__init__(f"the claim on {key} lapsed and {holder.named} claims it now")
        self.key = key
        self.holder = holder


def pid_alive(holder: Holder) -> bool:
    """Whether a claim's process may still run: False only for a process of this host that is
    gone (another host's process cannot be seen from here; its claim's expiry counts)."""
    return holder.host != platform.node() or processes.pid_alive(holder.pid)


def session_key(model: str, host: str) -> str:
    """The claim a tuning session of `model` on `host` holds for as long as it runs."""
    return f"session {model} on {host}"


def _instant(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class Claims:
    """One tuner's claims on keys of `cache`'s device identity.

    `clock` gives seconds since the epoch (time.time: claims are compared across processes and
    hosts), and `timer` the seconds a wait's deadline is measured in (time.monotonic); `alive`
    says whether another holder's process may still run; `host` and `pid` name
    this holder (platform.node() and os.getpid() unless given).
    """

    def __init__(
        self,
        cache: Cache,
        *,
        ttl: float = CLAIM_TTL,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
        alive: Callable[[Holder], bool] = pid_alive,
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 < ttl < 1e9:
            raise BadArgumentError(f"a claim's ttl is a number of seconds > 0, got {ttl!r}")
        self.cache = cache
        self.ttl = float(ttl)
        self.clock = clock
        self.timer = timer
        self.alive = alive
        self.host = platform.node() if host is None else host
        self.pid = os.getpid() if pid is None else pid
        #: this holder's own token: a pid is reused, and one process may hold two sessions
        self.token = secrets.token_hex(16)
        self._held: set[str] = set()
        #: keys a renewal found taken over or gone: `confirm` still looks at them
        self._lost: set[str] = set()
        self._lock = threading.Lock()

    @property
    def held(self) -> frozenset[str]:
        """The keys this holder claims now."""
        with self._lock:
            return frozenset(self._held)

    def claim(self, key: str) -> Claim:
        """Claim `key` unless another live holder has it (one write transaction)."""
        from tunecache.store import claims as sql

        now = self.clock()
        device = self.cache.device.fingerprint
        with self.cache.transaction(write=True) as tx:
            row = sql.holder(tx.conn, device, key, lock=True)
            found = None if row is None else Holder(*row)
            other = None if found is None or found.token == self.token else found
            if other is not None and self._live(other, now):
                return Claim(key, False, other)
            since = found.claimed_at if found is not None and other is None else _instant(now)
            mine = (self.host, self.pid, self.token, since, _instant(now + self.ttl))
            sql.put(tx.conn, device, key, mine, exists=found is not None)
        with self._lock:
            self._held.add(key)
        return Claim(key, True, other)

    def _live(self, other: Holder, now: float) -> bool:
        """Whether another holder's claim stands: not expired, its process not known gone."""
        return other.expires_at > _instant(now) and self.alive(other)

    def holder(self, key: str) -> Holder | None:
        """The live holder of `key` other than this one, or None where nobody else holds it."""
        from tunecache.store import claims as sql

        with self.cache.transaction() as tx:
            row = sql.holder(tx.conn, self.cache.device.fingerprint, key)
        found = None if row is None else Holder(*row)
        if found is None or found.token == self.token or not self._live(found, self.clock()):
            return None
        return found

    def last(self, key: str) -> Holder | None:
        """Who holds or last held `key`'s claim (this holder included), or None."""
        from tunecache.store import claims as sql

        with self.cache.transaction() as tx:
            row = sql.holder(tx.conn, self.cache.device.fingerprint, key)
        return None if row is None else Holder(*row)

    def wait(
        self,
        key: str,
        deadline: float = CLAIM_WAIT,
        *,
        sleep: Callable[[float], object] = time.sleep,
        poll: float = POLL,
        waiting: Callable[[Holder], object] | None = None,
    ) -> Claim:
        """Claim `key`, waiting up to `deadline` seconds of `timer` while another live holder
        has it; `waiting` hears of each holder waited for. Not taken at the deadline: the claim
        says who still holds it."""
        end = self.timer() + deadline
        told = None
        while True:
            claim = self.claim(key)
            if claim.taken or claim.holder is None:
                return claim
            if claim.holder.token != told and waiting is not None:
                waiting(claim.holder)
                told = claim.holder.token
            # Looks between two attempts are reads: waiters take no writers' lock until the
            # claim looks free.
            while True:
                left = end - self.timer()
                if left <= 0:
                    return claim
                sleep(min(poll, left))
                if self.holder(key) is None:
                    break

    def renew(self) -> int:
        """Push back the expiry of every claim this holder has; how many it still holds. A
        claim another holder took over after it expired is theirs: this holder lets go of it."""
        from tunecache.store import claims as sql

        keys = sorted(self.held)
        if not keys:
            return 0
        until = _instant(self.clock() + self.ttl)
        with self.cache.transaction(write=True) as tx:
            renewed = sql.renew(tx.conn, self.token, until, keys)
            if renewed == len(keys):
                return renewed
            device = self.cache.device.fingerprint
            lost = set()
            for key in keys:
                row = sql.holder(tx.conn, device, key)
                if row is None or Holder(*row).token != self.token:
                    lost.add(key)
        with self._lock:
            self._held -= lost
            self._lost |= lost
        return renewed

    def confirm(self, key: str) -> None:
        """Make sure this holder still has `key`'s claim before it writes what it tuned: a
        claim that lapsed with nobody taking it is claimed again; ClaimLost where another live
        holder has the key now (one read, and a write only where the claim lapsed). A key this
        holder never claimed (or released) is not its to confirm: nothing is read. A key another
        holder claimed since, even one that has let go of it, is lost: its result is newer."""
        from tunecache.store import claims as sql

        with self._lock:
            if key not in self._held and key not in self._lost:
                return

        with self.cache.transaction() as tx:
            row = sql.holder(tx.conn, self.cache.device.fingerprint, key)
        found = None if row is None else Holder(*row)
        now = _instant(self.clock())
        if found is not None and found.token == self.token and found.expires_at > now:
            return  # still ours
        if found is not None and found.token != self.token:
            # Another tuner held the key since (held it still, or tuned it and let go): what
            # it wrote is newer than what this one benched.
            with self._lock:
                self._held.discard(key)
                self._lost.discard(key)
            raise ClaimLost(key, found)
        claim = self.claim(key)
        if not claim.taken:
            assert claim.holder is not None
            with self._lock:
                self._held.discard(key)
                self._lost.discard(key)
            raise ClaimLost(key, claim.holder)
        with self._lock:
            self._lost.discard(key)

    def release(self, *keys: str) -> None:
        """Let go of these claims (every one held, if none is named)."""
        from tunecache.store import claims as sql

        with self._lock:
            names = sorted(self._held if not keys else self._held & set(keys))
            self._held -= set(names)
            self._lost -= set(keys) if keys else set(self._lost)
        if names:
            with self.cache.transaction(write=True) as tx:
                sql.release(tx.conn, self.token, _instant(self.clock()), names)

    @contextmanager
    def renewing(self, every: float | None = None) -> Iterator[Claims]:
        """Renew this holder's claims every `every` seconds (a third of the ttl unless given)
        from a thread of its own while the block runs; every claim is released when it ends."""
        stop = threading.Event()
        interval = self.ttl / 3 if every is None else every

        def beat() -> None:
            failed = 0
            while not stop.wait(interval):
                try:
                    self.renew()
                except TunecacheError as error:
                    # A busy store: the next beat tries again, well before the expiry; one
                    # that stays busy is said, once (a write confirms each claim: `confirm`).
                    failed += 1
                    if failed == FAILED_BEATS:
                        warnings.warn(
                            f"{failed} renewals of this tuner's claims failed in a row "
                            f"({error}): another tuner may take its keys over once they "
                            "expire",
                            TunecacheWarning,
                            stacklevel=1,
                        )
                else:
                    failed = 0

        thread = threading.Thread(target=beat, name="tunecache-claims", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.release()
