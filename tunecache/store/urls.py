"""Store URLs: which ones name a fleet store, and how one is shown without its credentials.

A fleet store is a PostgreSQL database named by a SQLAlchemy URL,
`postgresql+psycopg://user:password@host/db` (`?host=/socket/folder` for a Unix socket). Its
password, and any secret a query parameter carries, is never printed: every message, report and
log line that names the store names it by `mask(url)`, and `scrub` takes the secrets out of a
driver's own message before it is shown. Stdlib only: `tunecache where` names the store without
importing SQLAlchemy.
"""

from __future__ import annotations

import os
import urllib.parse

from tunecache.errors import BadArgumentError

__all__ = ["ENV_VAR", "MASK", "SCHEMES", "check", "from_environment", "mask", "scrub", "secrets"]

#: environment variable naming the store every command opens instead of the local SQLite cache
ENV_VAR = "TUNECACHE_URL"
#: what a password is shown as
MASK = "***"
#: the URL schemes of a fleet store (SQLAlchemy's names for PostgreSQL through psycopg 3)
SCHEMES = ("postgresql+psycopg", "postgresql")
# Query parameters of libpq whose value is a secret.
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


# A URL split as SQLAlchemy's `make_url` splits it: the user runs to the first ":" or "/", the
# password to the first "@" (so "/", "#" and "?" may stand in it as written, and "@" only
# percent-encoded), then the host, an optional port, the database and the query.
_URL_PATTERN = (
    r"(?P<scheme>[\w+]+)://"
    r"(?:(?P<user>[^:/]*)(?::(?P<password>[^@]*))?@)?"
    r"(?P<host>\[[^/?]+\]|[^/:?]*)?(?::(?P<port>[^/?]*))?"
    r"(?:/(?P<database>[^?]*))?(?:\?(?P<query>.*))?"
)


def _split(url: str) -> dict[str, str | None] | None:
    """The parts of `url` (scheme, user, password, host, port, database, query), as
    SQLAlchemy reads them; None where it is no URL. The pattern is compiled on first use, so
    that importing this module compiles nothing."""
    import re

    found = re.fullmatch(_URL_PATTERN, url, flags=re.DOTALL)
    if found is None:
        return None
    parts = found.groupdict()
    host = parts["host"] or ""
    if parts["password"] is not None and "@" in host:
        # A password with a raw "@": SQLAlchemy would take its tail for the host. All of it up
        # to the last "@" is the secret, and `check` refuses the URL.
        tail, parts["host"] = host.rsplit("@", 1)
        parts["password"] += "@" + tail
        parts["raw_at"] = "yes"
    return parts


def mask(url: str) -> str:
    """`url` with its password and secret query parameters replaced by `MASK`: what every
    message shows of it. Text that is no URL is shown as `MASK` whole."""
    parts = _split(url)
    if parts is None:
        return MASK
    shown = f"{parts['scheme']}://"
    if parts["user"] is not None:
        password = "" if parts["password"] is None else f":{MASK}"
        shown += f"{parts['user']}{password}@"
    shown += parts["host"] or ""
    if parts["port"] is not None:
        shown += f":{parts['port']}"
    if parts["database"] is not None:
        shown += f"/{parts['database']}"
    if parts["query"] is not None:
        query = [
            (key, MASK if key.lower() in _SECRET_PARAMETERS else value)
            for key, value in urllib.parse.parse_qsl(parts["query"], keep_blank_values=True)
        ]
        shown += "?" + urllib.parse.urlencode(query, safe="/:,=*", quote_via=urllib.parse.quote)
    return shown


def secrets(url: str) -> tuple[str, ...]:
    """The secrets `url` carries (its password, decoded and as written, and the values of
    secret query parameters): what `scrub` takes out of a message."""
    parts = _split(url)
    if parts is None:
        return (url,)
    found: list[str] = []
    if parts["password"]:
        found += [parts["password"], urllib.parse.unquote(parts["password"])]
    for key, value in urllib.parse.parse_qsl(parts["query"] or "", keep_blank_values=True):
        if key.lower() in _SECRET_PARAMETERS and value:
            found += [value, urllib.parse.quote(value, safe="")]
    for pair in (parts["query"] or "").split("&"):  # each as written too ("a+b", "x%2fy")
        name, _, written = pair.partition("=")
        if urllib.parse.unquote_plus(name).lower() in _SECRET_PARAMETERS and written:
            found.append(written)
    # The longest first: a secret that contains another is taken out whole.
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


def scrub(text: str, url: str) -> str:
    """`text` (a driver's message, a traceback line) with every secret of `url` taken out and
    the URL itself, wherever it appears, shown masked."""
    text = text.replace(url, mask(url))
    for secret in secrets(url):
        text = text.replace(secret, MASK)
    return text


def check(url: object) -> str:
    """`url` if it names a fleet store this tunecache can open; BadArgumentError (which shows
    the URL masked) if it does not."""
    if not isinstance(url, str) or not url.strip():
        raise BadArgumentError("a store URL is a non-empty string")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in SCHEMES:
        shown = scheme or mask(url)
        raise BadArgumentError(
            f"a store URL names PostgreSQL through psycopg 3 (postgresql+psycopg://user@host/db), "
            f"not {shown!r}; a local cache is named by a path, not a URL"
        )
    parts = _split(url)
    if parts is None:
        raise BadArgumentError(f"store URL {mask(url)} is malformed")
    if parts.get("raw_at"):
        raise BadArgumentError(
            f"store URL {mask(url)} is malformed: a password's own '@' is written %40"
        )
    port = parts["port"]
    if port is not None and not (port.isascii() and port.isdigit() and int(port) < 65536):
        raise BadArgumentError(
            f"store URL {mask(url)} is malformed: its port is not a number from 0 to 65535 "
            f"(a password's own '@' is written %40)"
        )
    if not (parts["database"] or "").strip("/"):
        raise BadArgumentError(f"store URL {mask(url)} names no database (…/DBNAME)")
    # psycopg 3 is the only PostgreSQL driver tunecache is tested with.
    return "postgresql+psycopg" + url[len(scheme) :] if scheme == "postgresql" else url


def from_environment() -> str | None:
    """The store URL that TUNECACHE_URL names, checked, or None where it is unset or empty."""
    found = os.environ.get(ENV_VAR, "").strip()
    return check(found) if found else None
