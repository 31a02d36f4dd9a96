#!/usr/bin/env bash
# Every GPU check and benchmark of tunecache.triton in one command, for the lent GPU machine:
#
#   bash tools/gpu/run.sh            (run with carry=[".whl"]; writes under $OUT)
#   TUNECACHE_COMMIT=abc1234 SKIP_CHECK=1 BENCH_ARGS="--parts 1,3" bash tools/gpu/run.sh
#                                    (the commit sent, no checks, only some parts)
#
# $OUT/check.txt: tools/gpu/check_triton.py's output; $OUT/bench.txt: bench_triton.py's, both
# verbatim with a header naming the commit; $OUT/timing.txt: how long each step took. Each step
# has a deadline (100 s and 440 s: the bench took 322-360 s before part 3 ran a fourth mode, about
# 25 s more): the whole stays under 9 minutes (the device allows 10 a command), and a step cut
# short keeps what it printed so far. The wheels in .whl/ (SQLAlchemy, Alembic, Mako, cbor2, platformdirs) go to /tmp/site first. Python's
# bytecode is compiled once beforehand, as an installed package has it, so that import times are
# those of a normal install, not of compiling every module in every fresh process.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/tc-gpu-out}"
mkdir -p "$out"
start=$(date +%s)
step() { echo "$1: $(( $(date +%s) - start )) s" >> "$out/timing.txt"; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -3
export PYTHONPATH="/tmp/site:$PWD"
python3 -m compileall -q -j 0 /tmp/site tunecache tools/gpu > "$out/compileall.txt" 2>&1 || true
export TUNECACHE_DIR=/tmp/tc-gpu TRITON_CACHE_DIR=/tmp/tc-gpu-triton
rm -rf "$TUNECACHE_DIR" "$TRITON_CACHE_DIR"
# A copied tree (`git archive`, as the lent machine gets one) names its commit in COMMIT: it
# wins over git, which would name whatever repository the copy happens to sit in.
# The device machine's copy of the checkout may also carry an older .git than its files: there
# the caller names the commit it sent (TUNECACHE_COMMIT).
if [ -n "${TUNECACHE_COMMIT:-}" ]; then
  commit=$TUNECACHE_COMMIT
elif [ -f COMMIT ]; then
  commit=$(cat COMMIT)
else
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
fi
step "installed"
[ -n "${SKIP_CHECK:-}" ] || {
  echo "# TUNECACHE_DIR=$TUNECACHE_DIR python3 tools/gpu/check_triton.py (tunecache at $commit; verbatim output, $(date -u +%F))"
  timeout 100 python3 tools/gpu/check_triton.py 2>&1
  echo "# exit status $?"
} > "$out/check.txt"
step "check_triton.py"
{
  echo "# TUNECACHE_DIR=$TUNECACHE_DIR python3 tools/gpu/bench_triton.py ${BENCH_ARGS:+$BENCH_ARGS }(tunecache at $commit; verbatim output, $(date -u +%F))"
  timeout 440 python3 tools/gpu/bench_triton.py ${BENCH_ARGS:-} 2>&1
  echo "# exit status $?"
} > "$out/bench.txt"
step "bench_triton.py"
tail -25 "$out/bench.txt"
cat "$out/timing.txt"
