#!/usr/bin/env bash
# bench/device-stats-cost.sh: what per-opcode counting costs, on the GPU machine, in one
# run: gpusys-bench rtt (GPU) and rtt --emulate with counting on and off
# (GPUSYSD_STATS=0), alternating ROUNDS times; then the pending-calls and gpusysctl
# tests on its 16 cores, and the print and file benchmarks (counting on).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}
bash scripts/device-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
eval "$(bash scripts/device-build --env 2>/dev/null)"
B=build-gpu
for r in $(seq "$ROUNDS"); do
	for s in 1 0; do
		echo "== round $r: rtt, stats=$s"
		GPUSYSD_STATS=$s timeout 240 $B/bench/gpusys-bench rtt --daemon $B/daemon/gpusysd 2>&1 |
			grep -E "8448 warps|1056 warps|1 warp x 32 lanes +memfd|best one-warp"
		echo "== round $r: rtt --emulate, stats=$s"
		GPUSYSD_STATS=$s timeout 120 $B/bench/gpusys-bench rtt --emulate --daemon $B/daemon/gpusysd --iters 200000 2>&1 |
			grep -E "floor|NOOP|ratio"
	done
done
echo "== tests on 16 cores"
meson test -C $B test_later test_inspect -v 2>&1 | grep -E "^# NOOP|OK|FAIL" | tail -8
echo "== print"
timeout 200 $B/bench/gpusys-bench print --daemon $B/daemon/gpusysd 2>&1 | tail -8
echo "== file"
timeout 200 $B/bench/gpusys-bench file --daemon $B/daemon/gpusysd 2>&1 | tail -12
