"""The claims' SQL: who tunes a key of a device identity now, on either backend.

A claim is a row of `claims` (migration 0005) per (device, key): its holder (host, pid and a
token of its own) and when it expires unless renewed. Taking one reads the row and writes it in
the caller's write transaction, which holds the store's writers' lock (SQLite's BEGIN IMMEDIATE
behind the write queue, PostgreSQL's transaction-level advisory lock): two tuners, in two
processes or on two hosts of one fleet store, never both take a key. The row outlives its
release (its expiry set to the release time), so the next tuner of the key learns who tuned it
last and reads what that one wrote.

Each function takes the Connection of a transaction the caller holds (`Cache.transaction`, with
`write=True` for the writes); times are timezone-aware datetimes in UTC.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, insert, select, update

from tunecache.store.models import CLAIMS

__all__ = ["FIELDS", "ClaimFields", "holder", "put", "release", "renew"]


#: a claim row as `holder` reads it: host, pid, token, claimed_at, expires_at
ClaimFields = tuple[str, int, str, datetime, datetime]
#: the columns of ClaimFields, in order
FIELDS = ("host", "pid", "token", "claimed_at", "expires_at")


def _where(device: str, key: str) -> ColumnElement[bool]:
    return and_(CLAIMS.c.device == device, CLAIMS.c.key == key)


def holder(conn: Connection, device: str, key: str, *, lock: bool = False) -> ClaimFields | None:
    """The claim row of `key` on `device`, live or not, or None where nobody ever claimed it;
    `lock`: read it `FOR UPDATE` on PostgreSQL, in a write transaction (whose writers' lock
    already keeps other claimers out; SQLite has no row locks, and needs none under it)."""
    query = select(*(CLAIMS.c[name] for name in FIELDS)).where(_where(device, key))
    row = conn.execute(query.with_for_update() if lock else query).first()
    return None if row is None else (row[0], row[1], row[2], row[3], row[4])


def put(conn: Connection, device: str, key: str, claim: ClaimFields, *, exists: bool) -> None:
    """Write `claim` as the claim of `key` on `device`: over the row `holder` found (`exists`),
    or as a new one."""
    values = dict(zip(FIELDS, claim, strict=True))
    if exists:
        conn.execute(update(CLAIMS).where(_where(device, key)).values(**values))
    else:
        conn.execute(insert(CLAIMS).values(device=device, key=key, **values))


def renew(conn: Connection, token: str, until: datetime, keys: list[str]) -> int:
    """Move the expiry of `token`'s claims of `keys` to `until`; how many it still holds (a
    claim another holder took over after it expired is theirs)."""
    where = and_(CLAIMS.c.token == token, CLAIMS.c.key.in_(keys))
    return conn.execute(update(CLAIMS).where(where).values(expires_at=until)).rowcount


def release(conn: Connection, token: str, now: datetime, keys: list[str] | None = None) -> int:
    """Let go of `token`'s claims (those of `keys` only, if given) at `now`: the rows stay, as
    the record of who tuned each key last; how many were live."""
    where = and_(CLAIMS.c.token == token, CLAIMS.c.expires_at > now)
    if keys is not None:
        where = and_(where, CLAIMS.c.key.in_(keys))
    return conn.execute(update(CLAIMS).where(where).values(expires_at=now)).rowcount
