"""The fields of a device identity: detecting, checking and hashing them.

`tunecache.device.Device` is the public value built from these. This module is kept free of
dataclasses (whose import pulls in `inspect`, ~15 ms) and of `typing` because the resolver's
cold start needs a device fingerprint and nothing else; `Identity`, the TypedDict of the
identity's keyword options, lives in `tunecache.keywords` and loads on first use.
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache

from tunecache._digest import sha256
from tunecache._version import __version__
from tunecache.checks import is_int
from tunecache.errors import BadArgumentError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Unpack

    from tunecache.keywords import Identity

__all__ = [
    "CHECKED_FIELDS",
    "Fields",
    "Identity",
    "check_field",
    "check_fields",
    "cpu_model",
    "detect_fields",
    "dirname",
    "fingerprint",
    "settle",
    "as_slug",
    "slugify",
    "usable_cpus",
]

#: the checked fields' values, in CHECKED_FIELDS order
Fields = tuple[str, int, "str | None", str, str]


#: the fields that make two devices different; every one is compared, none is advisory
CHECKED_FIELDS = ("cpu", "threads", "accelerator", "client", "client_version")

_SLUG_MAX = 64
_DIGITS = "0123456789"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_ALNUM = _DIGITS + _LOWER + _LOWER.upper()
# Every ASCII character that is not a letter, a digit or "_" (what regular expressions call a
# word character) as a space: a name's words are then what str.split() gives.
_NOT_WORD = {n: " " for n in range(128) if not (chr(n).isalnum() or chr(n) == "_")}


def _matches(value: object, first: str, rest: str, most: int) -> bool:
    """Whether `value` is a str of one character of `first`, then at most `most` - 1 of `rest`,
    and nothing else: as `re.match(f"^[{first}][{rest}]{{0,{most - 1}}}$", value)` (so it also
    allows one trailing newline, as `$` does), without compiling a pattern at every start."""
    if not isinstance(value, str):
        return False
    body = value[:-1] if value.endswith("\n") else value
    return 0 < len(body) <= most and body[0] in first and not body[1:].strip(rest)


def _slug_of_ascii(text: str) -> str:
    """`slugify` of text that is ASCII, on one line (what /proc/cpuinfo and drivers give),
    without its patterns, which cost a process's start a quarter of a millisecond to compile:
    the same steps, in terms of words (runs of letters, digits and "_")."""
    low = text.lower()
    for mark in ("(r)", "(tm)", "(c)"):
        low = low.replace(mark, " ")
    at = low.find("@")
    words = (low if at < 0 else low[:at]).translate(_NOT_WORD).split()
    kept = [w for w in words if w not in ("cpu", "processor")]
    # "_" is a word character, but no slug character: it separates as the rest do.
    slug = "-".join(part for word in kept for part in word.split("_") if part)
    return slug[:_SLUG_MAX].strip("-")


def slugify(text: str) -> str:
    """Turn a free-form hardware name into a short, filesystem-safe, lowercase slug."""
    # Trademark marks and "CPU @ 2.40GHz" tails differ between kernels and hypervisors for the
    # same silicon; dropping them keeps one chip on one slug.
    if isinstance(text, str) and text.isascii() and "\n" not in text:
        return _slug_of_ascii(text) or "unknown"
    text = re.sub(r"\((r|tm|c)\)", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"\b(cpu|processor)\b", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"@.*$", " ", text)
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"-+", "-", slug)[:_SLUG_MAX].strip("-")
    return slug or "unknown"


def as_slug(text: str) -> str:
    """`text` itself where it is already a slug (a device named by the slug a folder or a
    listing shows: `test-cpu-9000` stays itself), else `slugify(text)`."""
    return text if _is_slug(text) and not text.endswith("\n") else slugify(text)


def _is_slug(value: object) -> bool:
    """Whether `value` is a slug: `^[a-z0-9]+(-[a-z0-9]+)*$` (re.match), at most _SLUG_MAX."""
    if not isinstance(value, str) or len(value) > _SLUG_MAX:
        return False
    body = value[:-1] if value.endswith("\n") else value
    return (
        body[:1] not in ("", "-")
        and not body.endswith("-")
        and "--" not in body
        and not body.strip(_DIGITS + _LOWER + "-")
    )


def _from_proc_cpuinfo(text: str) -> str | None:
    """The CPU model named in /proc/cpuinfo text, or None."""
    wanted = ("model name", "hardware", "cpu model", "processor")
    found: dict[str, str] = {}
    arm_ids: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name, value = name.strip().lower(), value.strip()
        if name in wanted and name not in found and value and not value.isdigit():
            found[name] = value
        elif name in ("cpu implementer", "cpu part") and name not in arm_ids:
            arm_ids[name] = value
    for name in wanted:
        if name in found:
            return found[name]
    # Arm kernels often print no model name, only the implementer and part numbers.
    if arm_ids:
        import platform  # only here: ~5 ms at import, and most machines never need it

        return "{}-{}-{}".format(
            platform.machine() or "arm",
            arm_ids.get("cpu implementer", "0"),
            arm_ids.get("cpu part", "0"),
        )
    return None


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The human name of this machine's CPU model, as the operating system reports it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            model = _from_proc_cpuinfo(fh.read())
        if model:
            return model
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess  # only here: it costs a runtime's import ~10 ms elsewhere

        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            ).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask, not the machine's total)."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13+
        count = os.process_cpu_count()
    elif hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    else:  # pragma: no cover - macOS and Windows before 3.13
        count = os.cpu_count()
    return max(1, count or 1)


def dirname(cpu: str, threads: int) -> str:
    """The folder name of a device's store under its version folder: `<cpu>-t<threads>`."""
    return f"{cpu}-t{threads}"


def check_field(name: str, value: object) -> None:
    """Raise BadArgumentError unless `value` is legal for the checked field `name`."""
    if name == "cpu" and not _is_slug(value):
        raise BadArgumentError(f"device cpu must be a slug like 'amd-epyc', got {value!r}")
    if name == "threads":
        if not is_int(value):
            raise BadArgumentError(f"device threads must be an int, got {value!r}")
        if not 1 <= value <= 65536:
            raise BadArgumentError(f"device threads must be between 1 and 65536, got {value}")
    if name == "accelerator" and value is not None and not _is_slug(value):
        raise BadArgumentError(
            f"device accelerator must be a slug like 'nvidia-h200' or None, got {value!r}"
        )
    if name == "client" and not _matches(value, _ALNUM, _ALNUM + "._-", 64):
        raise BadArgumentError(
            f"client name must be letters, digits, '.', '_' or '-', got {value!r}"
        )
    if name == "client_version" and not _matches(value, _ALNUM, _ALNUM + ".+!-", 64):
        raise BadArgumentError(
            f"client version must be letters, digits, '.', '+', '!' or '-', got {value!r}"
        )


def check_fields(
    cpu: object, threads: object, accelerator: object, client: object, client_version: object
) -> None:
    """Raise BadArgumentError unless these are a legal device identity."""
    for name, value in zip(
        CHECKED_FIELDS, (cpu, threads, accelerator, client, client_version), strict=True
    ):
        check_field(name, value)


def fingerprint(values: Fields) -> str:
    """A stable digest of every checked field; equal fingerprints mean the same device."""
    pairs = zip(CHECKED_FIELDS, values, strict=True)
    text = "\n".join(f"{name}={value!r}" for name, value in pairs)
    return sha256(text.encode()).hexdigest()[:32]


def settle(
    *,
    client: str | None = None,
    client_version: str | None = None,
    threads: int | None = None,
    accelerator: str | None = None,
    cpu: str | None = None,
) -> tuple[Fields, dict[str, str], str | None]:
    """The checked fields these options name, each one not given settled as
    `tunecache.config` says (the configuration, the environment, then the default); where
    each came from (a `tunecache.config.SOURCES` word by field); and, where the threads are
    the default, what was counted ("usable CPUs", "the BLAS pools"), else None."""
    from tunecache import config

    client, client_version, threads, sources = config.identity(client, client_version, threads)
    if client_version is None:
        client_version = __version__  # tunecache itself: config refuses any other client
    counted = None
    if threads is None:
        from tunecache.pools import default_threads

        threads, counted = default_threads(usable_cpus())
    values: Fields = (
        as_slug(cpu if cpu is not None else cpu_model()),
        threads,
        None if accelerator is None else as_slug(accelerator),
        client,
        client_version,
    )
    check_fields(*values)
    sources["cpu"] = "argument" if cpu is not None else "default"
    sources["accelerator"] = "argument" if accelerator is not None else "default"
    return values, sources, counted


def detect_fields(**identity: Unpack[Identity]) -> Fields:
    """The checked fields of this machine for `client` (see `tunecache.device.detect`); each
    field not given is settled by `tunecache.config` (`settle`)."""
    return settle(**identity)[0]


def __getattr__(name: str) -> Any:
    # PEP 562: Identity is a TypedDict, and `typing` is no part of the resolver's start.
    if name == "Identity":
        from tunecache.keywords import Identity

        return Identity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
