"""Device identity: what a tuning decision is valid for.

A decision measured on one CPU, at one thread count, by one version of the client library, says
nothing about another. The identity is a declared list of checked fields (`CHECKED_FIELDS`); two
identities that differ in any of them never share entries, and data from one is refused by the
other (pyperf's `_CHECKED_METADATA` follows the same rule).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from tunecache._version import __version__
from tunecache.errors import BadArgumentError, DeviceMismatchError

__all__ = [
    "CHECKED_FIELDS",
    "Device",
    "cpu_model",
    "detect",
    "slugify",
    "usable_cpus",
]

#: the fields that make two devices different; every one is compared, none is advisory
CHECKED_FIELDS = ("cpu", "threads", "accelerator", "client", "client_version")

_SLUG_MAX = 64
_SLUG_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!-]{0,63}$")
_CLIENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def slugify(text: str) -> str:
    """Turn a free-form hardware name into a short, filesystem-safe, lowercase slug."""
    # Trademark marks and "CPU @ 2.40GHz" tails differ between kernels and hypervisors for the
    # same silicon; dropping them keeps one chip on one slug.
    text = re.sub(r"\((r|tm|c)\)", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"\b(cpu|processor)\b", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"@.*$", " ", text)
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"-+", "-", slug)[:_SLUG_MAX].strip("-")
    return slug or "unknown"


def _is_slug(value: object) -> bool:
    return isinstance(value, str) and len(value) <= _SLUG_MAX and bool(_SLUG_RE.match(value))


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


@dataclass(frozen=True, slots=True)
class Device:
    """One device identity: the checked fields a decision is valid for."""

    cpu: str
    threads: int
    accelerator: str | None
    client: str
    client_version: str

    def __post_init__(self) -> None:
        if not _is_slug(self.cpu):
            raise BadArgumentError(f"device cpu must be a slug like 'amd-epyc', got {self.cpu!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int):
            raise BadArgumentError(f"device threads must be an int, got {self.threads!r}")
        if not 1 <= self.threads <= 65536:
            raise BadArgumentError(
                f"device threads must be between 1 and 65536, got {self.threads}"
            )
        if self.accelerator is not None and not _is_slug(self.accelerator):
            raise BadArgumentError(
                f"device accelerator must be a slug like 'nvidia-h200' or None, "
                f"got {self.accelerator!r}"
            )
        if not isinstance(self.client, str) or not _CLIENT_RE.match(self.client):
            raise BadArgumentError(
                f"client name must be letters, digits, '.', '_' or '-', got {self.client!r}"
            )
        if not isinstance(self.client_version, str) or not _VERSION_RE.match(self.client_version):
            raise BadArgumentError(
                f"client version must be letters, digits, '.', '+', '!' or '-', "
                f"got {self.client_version!r}"
            )

    @property
    def dirname(self) -> str:
        """The folder name of this device's store under its version folder: `<cpu>-t<threads>`."""
        return f"{self.cpu}-t{self.threads}"

    @property
    def fingerprint(self) -> str:
        """A stable digest of every checked field; equal fingerprints mean the same device."""
        text = "\n".join(f"{name}={getattr(self, name)!r}" for name in CHECKED_FIELDS)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, str | int | None]:
        """The checked fields by name, for display and for export."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def differences(self, other: Device) -> list[str]:
        """The checked fields on which `other` differs from this device."""
        return [name for name in CHECKED_FIELDS if getattr(self, name) != getattr(other, name)]

    def require_same(self, other: Device, what: str = "data") -> None:
        """Raise DeviceMismatchError unless `other` is this very device."""
        diff = self.differences(other)
        if diff:
            shown = ", ".join(
                f"{name} {getattr(other, name)!r} != {getattr(self, name)!r}" for name in diff
            )
            raise DeviceMismatchError(f"{what} is for another device: {shown}")

    def with_threads(self, threads: int) -> Device:
        """The same device at another thread-pool size (a different identity)."""
        return replace(self, threads=threads)


def detect(
    *,
    client: str = "tunecache",
    client_version: str | None = None,
    threads: int | None = None,
    accelerator: str | None = None,
    cpu: str | None = None,
) -> Device:
    """The identity of this machine for `client`, with explicit values taking precedence.

    `threads` is the size of the thread pool the client will run with; by default, every CPU this
    process may use. `client_version` defaults to tunecache's own version when the client is
    tunecache itself, and must be given for any other client.
    """
    if client_version is None:
        if client != "tunecache":
            raise BadArgumentError(
                f"client {client!r} needs a client_version: decisions are kept per version"
            )
        client_version = __version__
    return Device(
        cpu=slugify(cpu if cpu is not None else cpu_model()),
        threads=usable_cpus() if threads is None else threads,
        accelerator=None if accelerator is None else slugify(accelerator),
        client=client,
        client_version=client_version,
    )
