"""Parts 3 and 4 of tools/gpu/bench_triton.py: fresh processes (tools/gpu/fresh.py's children),
the first new key of a process and the first call of a stored key in a warm one.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fresh
from common import TARGET_DECORATE, TARGET_PRELOADED, TARGET_TUNE, TARGET_WARM, say, verdict

#: a child's copy of a store folder: its cache files through SQLite's backup, the rest as files
_COPY = """
import shutil, sqlite3, sys
from pathlib import Path
source, target = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.db", "*.db-wal", "*.db-shm"))
for db in source.rglob("*.db"):
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    dst = sqlite3.connect(target / db.relative_to(source))
    src.backup(dst)
    dst.close()
    src.close()
"""


def copy_store(source: Path, target: Path) -> None:
    """Copy the store folder `source` to `target`, in a child process, its databases through
    SQLite's backup. Never with a file copy in this process: it holds the store open, and
    closing any descriptor of a database file drops every POSIX lock the process holds on it
    (SQLite's "how to corrupt" list, 2.2), and a child writing meanwhile can then damage the
    store. The one run that copied it so (session 3's run 4) found it "malformed" in the next
    family's part 1; a CPU reproduction did not damage a store, so that is the likely cause,
    not a proven one."""
    subprocess.run([sys.executable, "-c", _COPY, str(source), str(target)], check=True)


def first_new_key(family: Any, scratch: Path, runs: int) -> dict[str, float]:
    """Part 3: the first new key of a fresh process, each run a key nobody has seen; tunecache
    with the output check on (as everywhere here) and off, side by side, so that what the
    check's first use costs a fresh process (the torch kernels it loads) is measured."""
    say()
    say(f"3. {family.NAME}: the first new key of a fresh process (every config launched once")
    say(
        "   directly first; each run a new key, shape "
        f"{family.FIRST}+run; the store on disk holds part 1's keys)"
    )
    rows: dict[str, list[dict[str, Any]]] = {
        "triton": [],
        "tunecache": [],
        "tunecache no store": [],
        "tunecache no check": [],
    }
    modes = list(rows)
    # Each run's key is one shape in every mode: the two modes with a store on disk each get
    # their own (the check-off one a copy of it, made now), or the second to run would find
    # the key the first just stored and bench nothing.
    store = os.environ.get("TUNECACHE_DIR")
    unchecked_root = None
    if store:
        unchecked_root = Path(tempfile.mkdtemp(prefix="tc-nocheck-", dir=scratch)) / "store"
        copy_store(Path(store), unchecked_root)
    for r in range(runs):
        shape = family.FIRST + r
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            root = None
            if mode == "tunecache no store":
                root = Path(tempfile.mkdtemp(prefix="tc-nostore-", dir=scratch))
            elif mode == "tunecache no check":
                root = unchecked_root or Path(tempfile.mkdtemp(prefix="tc-nocheck-", dir=scratch))
            check = mode != "tunecache no check"
            got = fresh.run("first", family.NAME, mode.split()[0], shape, root, check=check)
            rows[mode].append(got)
    ratios = {}
    for mode, got in rows.items():
        med = statistics.median(g["first"] for g in got)
        line = (
            f"   {mode:<19} first call {med * 1e3:8.1f} ms (runs: "
            + ", ".join(f"{g['first'] * 1e3:.1f}" for g in got)
            + f"); decoration {statistics.median(g['decorate'] for g in got) * 1e3:.2f} ms"
        )
        if mode != "triton":
            flush = statistics.median(g["flush"] for g in got) * 1e3
            line += (
                f"; bench {statistics.median(g['bench_time'] for g in got) * 1e3:.0f} ms;"
                f" then the flush {flush:.1f} ms; SQLAlchemy/Alembic by the first call:"
                f" {got[0]['imported'] or 'no'},"
                f" by the flush: {got[0]['imported_by_flush'] or 'no'}"
            )
            ratios[mode] = statistics.median(
                g["first"] / t["first"] for g, t in zip(got, rows["triton"], strict=True)
            )
        say(line + f"; output error {max(g['error'] for g in got):.1e}")
    for mode, ratio in ratios.items():
        say(
            f"   {mode} / triton: {ratio:.3f};"
            f" target <= {TARGET_TUNE}: {verdict(ratio <= TARGET_TUNE)}"
        )
    # Each run's key is the same shape in every mode: the check's cost is the paired difference.
    paired = [
        (on["first"] - off["first"]) * 1e3
        for on, off in zip(rows["tunecache"], rows["tunecache no check"], strict=True)
    ]
    spent = [g["outputs_time"] * 1e3 for g in rows["tunecache"] if g.get("outputs_time")]
    say(
        "   the output check's first use in a fresh process: first call with it - without it"
        f" = {statistics.median(paired):.1f} ms (runs: {', '.join(f'{d:.1f}' for d in paired)});"
        " the check's own time (outputs_time): "
        + (f"{statistics.median(spent):.1f} ms" if spent else "not measured")
    )
    probes = [g["check_first_use"] for g in rows["tunecache no check"] if "check_first_use" in g]
    if probes:
        say(
            "   the check's torch work on the output after a first key tuned without it, ms"
            " (medians): "
            + "; ".join(f"{k} {statistics.median(p[k] for p in probes):.2f}" for k in probes[0])
        )
    return ratios


def warm_first_call(family: Any, part1: Any, runs: int, profile: bool) -> dict[str, float]:
    """Part 4: the first call of a stored key in a fresh process, both persistent paths."""
    import tunecache.triton as tct
    from tunecache.triton.warm import SETTLED

    shape = family.STORED
    if profile:
        for mode in ("tunecache", "triton"):
            fresh.run("warm", family.NAME, mode, shape, profile=True)
    names = [tct.config_name(c) for c in family.CONFIGS]
    picked = {
        tct.config_name(part1["picks"][n][shape]) for n in ("tunecache", "triton cache_results")
    }
    preload = ",".join(str(names.index(p)) for p in sorted(picked))
    say()
    say(
        f"4. {family.NAME}: first call in a warm process"
        f" (fresh subprocess, {shape} on disk; {runs} runs)"
    )
    # The first tunecache process of a store hashes Triton's installation as Triton does, and
    # keeps the hash beside the store (tunecache.triton.jitkey): one process runs before the
    # timed ones (which then find the hash kept), and is shown on its own.
    # It also keeps its answers for the warm start (tunecache.triton.warm), where the store
    # has held still for warm.SETTLED seconds before it reads it: part 1 wrote it just now.
    time.sleep(SETTLED + 0.5)
    first = fresh.run("warm", family.NAME, "tunecache", shape)
    say(
        f"   one tunecache process before the timed runs: first call {first['first'] * 1e3:.1f} ms"
        f" (Triton's installation hash: {first.get('triton key')}; answered by"
        f" {first.get('answered by')}, which keeps the answer for the warm start at exit)"
    )
    out = {}
    for label, loaded in (("end to end", ""), ("kernel module preloaded", preload)):
        got: dict[str, list[dict[str, Any]]] = {"tunecache": [], "triton": []}
        for r in range(runs):
            for mode in ["tunecache", "triton"] if r % 2 == 0 else ["triton", "tunecache"]:
                got[mode].append(fresh.run("warm", family.NAME, mode, shape, preload=loaded))
        both = {m: statistics.median(g["decorate"] + g["first"] for g in v) for m, v in got.items()}
        say(f"   {label}:")
        for mode, v in got.items():
            firsts = ", ".join(f"{g['first'] * 1e3:.1f}" for g in v)
            decorate = statistics.median(g["decorate"] for g in v)
            out[f"decorate {mode}"] = max(out.get(f"decorate {mode}", 0.0), decorate)
            benched = any((g["stats"] or {}).get("tuned") or g.get("benched") for g in v)
            say(
                f"     {mode:<10} first call"
                f" {statistics.median(g['first'] for g in v) * 1e3:8.1f} ms"
                f" (runs: {firsts}); decoration {decorate * 1e3:.2f} ms; decoration + first call"
                f" {both[mode] * 1e3:.1f} ms; second call"
                f" {statistics.median(g['second'] for g in v) * 1e3:.2f} ms; benched: {benched};"
                f" SQLAlchemy/Alembic imported: {v[0]['imported'] or 'no'}"
                + (
                    "; Triton's installation hash per run: "
                    + ", ".join(str(g.get("triton key")) for g in v)
                    + "; answered by: "
                    + ", ".join(str(g.get("answered by")) for g in v)
                    if mode == "tunecache"
                    else ""
                )
            )
        if loaded:
            mods = got["tunecache"][0]["modules"]
            ours = [m for m in mods["decoration"] + mods["first call"] if "tunecache" in m]
            say(
                f"     modules tunecache loaded: by decoration {len(mods['decoration'])}, by the"
                f" first call {len(mods['first call'])} ({len(ours)} of them tunecache's);"
                f" sqlite3 imported before: {mods['sqlite3 before']};"
                f" first call: {', '.join(mods['first call'])}"
            )
            fresh.run("warm", family.NAME, "tunecache", shape, preload=loaded, importtime=True)
        out[label] = both["tunecache"] / both["triton"]
        say(f"     tunecache / triton cache_results, decoration + first call: {out[label]:.3f}")
    say(
        f"   targets: decoration <= {TARGET_DECORATE * 1e3:.0f} ms:"
        f" {verdict(out['decorate tunecache'] <= TARGET_DECORATE)}; end to end <= {TARGET_WARM}:"
        f" {verdict(out['end to end'] <= TARGET_WARM)}; preloaded <= {TARGET_PRELOADED}:"
        f" {verdict(out['kernel module preloaded'] <= TARGET_PRELOADED)}"
    )
    return out
