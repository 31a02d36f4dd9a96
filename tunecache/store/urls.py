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


def _split(url: str) -> urllib.parse.SplitResult:
    return urllib.parse.urlsplit(url)


def mask(url: str) -> str:
    """`url` with its password and secret query parameters replaced by `MASK`: what every
    message shows of it. Text that is no URL is shown as `MASK` whole."""
    try:
        parts = _split(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{host}" if ":" in userinfo else f"{user}@{host}"
        query = [
            (key, MASK if key.lower() in _SECRET_PARAMETERS else value)
            for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ]
        text = urllib.parse.urlencode(query, safe="/:,=*", quote_via=urllib.parse.quote)
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, text, ""))
    except ValueError:
        return MASK


def secrets(url: str) -> tuple[str, ...]:
    """The secrets `url` carries (its password, decoded and as written, and the values of
    secret query parameters): what `scrub` takes out of a message."""
    try:
        parts = _split(url)
    except ValueError:
        return (url,)
    found: list[str] = []
    if parts.password:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found += [userinfo.split(":", 1)[1], urllib.parse.unquote(parts.password)]
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in _SECRET_PARAMETERS and value:
            found += [value, urllib.parse.quote(value, safe="")]
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
    try:
        parts = _split(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as error:
        raise BadArgumentError(f"store URL {mask(url)} is malformed: {error}") from None
    if not parts.path.strip("/"):
        raise BadArgumentError(f"store URL {mask(url)} names no database (…/DBNAME)")
    # psycopg 3 is the only PostgreSQL driver tunecache is tested with.
    return "postgresql+psycopg" + url[len(scheme) :] if scheme == "postgresql" else url


def from_environment() -> str | None:
    """The store URL that TUNECACHE_URL names, checked, or None where it is unset or empty."""
    found = os.environ.get(ENV_VAR, "").strip()
    return check(found) if found else None
