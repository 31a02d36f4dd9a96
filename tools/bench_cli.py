"""The read commands as a user runs them: whole `tunecache` processes, timed side by side.

    python tools/bench_cli.py [--install dev|wheel|both] [--entries 100000] [--rounds 15]
                              [--base PATH]

Every figure is a whole process, started as a user would start it, with bytecode compiled as a
normal install has it (PYTHONDONTWRITEBYTECODE is dropped from the environment and every
command runs once before it is timed). Targets (issue 15):

- `tunecache where` and `tunecache list` on a cache of 1,000 entries: at most 3x
  `python3 -c 'import sqlite3'` run by the same interpreter, in the same rounds;
- `tunecache list --json` of 100,000 entries to a file: at most 3 s (its peak RSS is printed);
- `tunecache list` on a terminal shows its first screen within 0.3 s at any size: the time to
  its first row on a pseudo-terminal, for 1,000 and 100,000 entries.

Also printed, without a target: `list` and `prune --dry-run --unvalidated` of 100,000 entries
to a file (47.6 s and 160 s before issue 15).

`--install dev` times the `tunecache` script beside this interpreter (an editable install in a
checkout's venv: its site start-up loads the editable finder, which the baseline pays too);
`--install wheel` builds a wheel of this checkout and installs it in a fresh venv under the
temporary folder, as a user's `pip install` would (site loads nothing of tunecache's, so the
baseline is the bare interpreter's). `both` (the default) prints both. `--base PATH`, a checkout
of another tunecache (`mkdir /tmp/base && git archive 79e7d55 | tar -x -C /tmp/base`, the commit
before the read commands left SQLAlchemy), adds its `where` and `list` of 1,000 entries, run by
this interpreter, beside this checkout's run the same way.

The caches are real files filled through `Cache.put_many`: 20 signatures, a 4-candidate x
10-sample timing record on every entry and a model's verdict on every third.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run a checkout's command line by this interpreter (for --base, and this checkout beside it).
LAUNCH = "import sys; sys.path.insert(0, sys.argv.pop(1)); from tunecache.cli import main; "
LAUNCH += "sys.argv[0] = 'tunecache'; sys.exit(main())"

#: the targets, as (what, limit, unit)
TARGETS = {
    "ratio": 3.0,  # where and list on 1k, against import sqlite3
    "json_s": 3.0,  # list --json of 100k to a file
    "first_row_s": 0.3,  # list on a terminal, to its first row
}


@dataclass(frozen=True)
class Code:
    """One way to run the command: a name, its interpreter and the argv that starts it."""

    name: str
    python: str
    argv: tuple[str, ...]


@dataclass
class Timed:
    """A process's time, peak resident memory and, on a terminal, time to its first row."""

    seconds: float
    rss_mib: float
    first_row_s: float | None = None
    #: the peak resident memory of each child process it started
    children_mib: tuple[float, ...] = ()


def env_for(root: Path) -> dict[str, str]:
    """The environment of a command run on the cache under `root`, bytecode as installed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["TUNECACHE_DIR"] = str(root)
    env.pop("COLUMNS", None)
    return env


class Peaks:
    """The peak resident memory of a process and of each child it starts, read from their
    VmHWM while they live. Not getrusage: a child's ru_maxrss starts from the size of the
    process that forked it (a bench holding 100,000 entries made a 20 MiB command read 683)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, float] = {}

    def sample(self) -> None:
        """Read the peaks of the process and its children now."""
        for pid in [self.pid, *_children(self.pid)]:
            peak = _vm_hwm_mib(pid)
            if peak is not None:
                self.seen[pid] = max(self.seen.get(pid, 0.0), peak)

    def own(self) -> float:
        """The process's own peak, in MiB."""
        return self.seen.get(self.pid, 0.0)

    def children(self) -> tuple[float, ...]:
        """Each child's peak, in MiB, in the order they were first seen."""
        return tuple(v for pid, v in self.seen.items() if pid != self.pid)


def _vm_hwm_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def run(argv: Sequence[str], env: dict[str, str], out: Path) -> Timed:
    """Run `argv` to completion with its output in the file `out`, its memory sampled every
    20 ms."""
    with open(out, "wb") as sink, open(out.with_suffix(".err"), "wb") as err:
        start = time.perf_counter()
        child = subprocess.Popen(list(argv), stdout=sink, stderr=err, env=env)
        peaks = Peaks(child.pid)
        while child.poll() is None:
            peaks.sample()
            time.sleep(0.02)
        seconds = time.perf_counter() - start
    if child.returncode != 0:
        said = out.with_suffix(".err").read_text()[-500:]
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}: {said}")
    return Timed(seconds, peaks.own(), children_mib=peaks.children())


def run_on_terminal(argv: Sequence[str], env: dict[str, str]) -> Timed:
    """Run `argv` with its standard output on a pseudo-terminal: the time to its first row
    (the second line, after the header) and to its end."""
    leader, follower = pty.openpty()
    start = time.perf_counter()
    child = subprocess.Popen(
        list(argv), stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.PIPE, env=env
    )
    os.close(follower)
    peaks = Peaks(child.pid)
    seen = b""
    first = None
    quiet = 0.0
    while True:
        peaks.sample()
        ready, _, _ = select.select([leader], [], [], 0.02)
        if not ready:
            quiet += 0.02
            if quiet > 60:
                raise SystemExit(f"{' '.join(argv)} printed nothing for 60 s")
            continue
        quiet = 0.0
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        if first is None:
            seen += chunk
            if seen.count(b"\n") >= 2:
                first = time.perf_counter() - start
    status = child.wait()
    seconds = time.perf_counter() - start
    os.close(leader)
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed on a terminal")
    return Timed(seconds, peaks.own(), first)


def fill(root: Path, entries: int) -> None:
    """A cache of this machine's device under `root` with `entries` entries."""
    code = f"""
import os, sys, warnings
warnings.simplefilter("ignore")  # this SQLite's WAL-defect warning, once per fill
os.environ["TUNECACHE_DIR"] = {str(root)!r}
sys.path.insert(0, {str(ROOT)!r})
import tunecache
from tunecache.cache import NewEntry, NewVerdict
from tunecache.codec import CandidateTiming, TimingRecord
names = ["blas", "blocked4x4", "blocked8x8", "naive"]
record = TimingRecord(candidates=tuple(
    CandidateTiming(n, tuple(1e-5 * (i + 1) * (1 + j / 100) for j in range(10)))
    for i, n in enumerate(names)))
verdict = [NewVerdict("resnet", "r1", "validated", gain=1.1, rounds=3, confirmations=3)]
with tunecache.open() as cache:
    for start in range(0, {entries}, 10_000):
        cache.put_many([
            NewEntry(f"matmul{{i % 20}}_F32_m{{i}}_n64", "blocked4x4", names, heuristic="blas",
                     record=record, speedup=1.5, verdicts=verdict if i % 3 == 0 else [])
            for i in range(start, min(start + 10_000, {entries}))
        ])
"""
    subprocess.run([sys.executable, "-c", code], check=True, env=env_for(root))


def wheel_install(work: Path) -> Code:
    """This checkout built as a wheel and installed in a fresh venv, as `pip install` would."""
    dist, venv = work / "dist", work / "venv"
    print("building a wheel of this checkout and installing it in a fresh venv ...", flush=True)
    python = str(venv / "bin" / "python")
    for argv in (
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        [sys.executable, "-m", "venv", str(venv)],
    ):
        subprocess.run(argv, check=True, capture_output=True)
    wheel = next(dist.glob("tunecache-*.whl"))
    subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True
    )
    return Code("wheel", python, (str(venv / "bin" / "tunecache"),))


def median(values: list[float]) -> float:
    """The median of some timings."""
    return statistics.median(values)


def interleaved(cases: dict[str, Callable[[], Timed]], rounds: int) -> dict[str, list[Timed]]:
    """Each case once per round, in the same order every round, after one warm-up run each."""
    for call in cases.values():
        call()
    out: dict[str, list[Timed]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, call in cases.items():
            out[name].append(call())
    return out


def quick_cases(code: Code, small: Path, scratch: Path) -> dict[str, Callable[[], Timed]]:
    """The 1k cases of one way to run the command, with its interpreter's baseline."""
    env = env_for(small)
    out = scratch / f"{code.name}.out"
    return {
        f"{code.name}: python -c 'import sqlite3'": lambda: run(
            [code.python, "-c", "import sqlite3"], env, out
        ),
        f"{code.name}: tunecache where": lambda: run([*code.argv, "where"], env, out),
        f"{code.name}: tunecache list (1k, to a file)": lambda: run([*code.argv, "list"], env, out),
    }


def report_quick(results: dict[str, list[Timed]], code: str) -> None:
    """The 1k figures of one way to run the command, as ratios to its baseline."""
    base = median([t.seconds for t in results[f"{code}: python -c 'import sqlite3'"]])
    for name, timed in results.items():
        if not name.startswith(f"{code}:"):
            continue
        times = [t.seconds for t in timed]
        ratio = median(times) / base
        target = "" if "import sqlite3" in name else f"  target <= {TARGETS['ratio']:.0f}x"
        met = "" if not target else ("  met" if ratio <= TARGETS["ratio"] else "  NOT MET")
        print(
            f"  {name:52s} median {median(times) * 1e3:6.1f} ms  min {min(times) * 1e3:6.1f} ms"
            f"  {ratio:5.2f}x{target}{met}"
        )


def main() -> None:
    """Fill the caches, time every case, print each figure with its target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", choices=("dev", "wheel", "both"), default="both")
    parser.add_argument("--entries", type=int, default=100_000, help="the large cache's size")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the 1k cases")
    parser.add_argument("--heavy-rounds", type=int, default=3, help="rounds of the large cases")
    parser.add_argument("--base", type=Path, help="another tunecache checkout, run beside")
    parser.add_argument(
        "--huge",
        type=int,
        default=0,
        help="also a cache of this many entries (e.g. 1000000), for list's first screen only",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        work = Path(tmp)
        small, large = work / "small", work / "large"
        print(f"filling caches of 1,000 and {args.entries:,} entries ...", flush=True)
        fill(small, 1000)
        fill(large, args.entries)
        codes = []
        if args.install in ("dev", "both"):
            script = Path(sys.executable).with_name("tunecache")
            codes.append(Code("dev", sys.executable, (str(script),)))
        if args.install in ("wheel", "both"):
            codes.append(wheel_install(work))
        quick: dict[str, Callable[[], Timed]] = {}
        for code in codes:
            quick.update(quick_cases(code, small, work))
        if args.base is not None:
            for name, path in (("this checkout, -c", ROOT), ("base, -c", args.base)):
                code = Code(name, sys.executable, (sys.executable, "-c", LAUNCH, str(path)))
                quick.update(quick_cases(code, small, work))
        print(f"\n1,000 entries, {args.rounds} rounds, each case once a round, interleaved:")
        results = interleaved(quick, args.rounds)
        for code in codes:
            report_quick(results, code.name)
        if args.base is not None:
            report_quick(results, "this checkout, -c")
            report_quick(results, "base, -c")
        heavy(codes[0], small, large, work, args)
        if args.huge:
            huge = work / "huge"
            print(f"\nfilling a cache of {args.huge:,} entries ...", flush=True)
            fill(huge, args.huge)
            code = codes[0]
            cases = {
                f"list on a terminal ({args.huge // 1000}k)": lambda: run_on_terminal(
                    [*code.argv, "list"], env_for(huge)
                ),
                f"where ({args.huge // 1000}k)": lambda: run(
                    [*code.argv, "where"], env_for(huge), work / "huge.out"
                ),
            }
            print_heavy(interleaved(cases, args.heavy_rounds))


def heavy(code: Code, small: Path, large: Path, work: Path, args: argparse.Namespace) -> None:
    """The large cases and the terminal's first screen, by one way to run the command."""
    out = work / "large.out"
    size = f"{args.entries // 1000}k"
    cases = {
        f"list --json ({size}, to a file)": lambda: run(
            [*code.argv, "list", "--json"], env_for(large), out
        ),
        f"list ({size}, to a file)": lambda: run([*code.argv, "list"], env_for(large), out),
        f"prune --dry-run --unvalidated ({size}, to a file)": lambda: run(
            [*code.argv, "prune", "--dry-run", "--unvalidated"], env_for(large), out
        ),
        "list on a terminal (1k)": lambda: run_on_terminal([*code.argv, "list"], env_for(small)),
        f"list on a terminal ({size})": lambda: run_on_terminal(
            [*code.argv, "list"], env_for(large)
        ),
    }
    print(f"\n{size} entries ({code.name}), {args.heavy_rounds} rounds, interleaved:")
    print_heavy(interleaved(cases, args.heavy_rounds))


def print_heavy(results: dict[str, list[Timed]]) -> None:
    """Each large case's median time and peak memory, with its target where it has one."""
    for name, timed in results.items():
        seconds = median([t.seconds for t in timed])
        rss = max(t.rss_mib for t in timed)
        line = f"  {name:52s} median {seconds:7.3f} s  peak RSS {rss:6.1f} MiB"
        if name.startswith("list --json"):
            met = "met" if seconds <= TARGETS["json_s"] else "NOT MET"
            line += f"  target <= {TARGETS['json_s']:.0f} s  {met}"
        if "terminal" in name:
            first = median([t.first_row_s or 0.0 for t in timed])
            met = "met" if first <= TARGETS["first_row_s"] else "NOT MET"
            line += f"  first row {first:.3f} s  target <= {TARGETS['first_row_s']} s  {met}"
        print(line)


if __name__ == "__main__":
    main()
