#!/usr/bin/env bash
# bench/device-compare.sh: this tree against an older one on the GPU machine, in one
# run: the gpu test suite of this tree, then `gpusys-bench rtt` (GPU) and `rtt --emulate`
# (host CPU) alternating old, new and new with request counting off (GPUSYSD_STATS=0),
# ROUNDS times, so that drift of the machine hits all three alike.
#   OLD=.wt/old ROUNDS=2 bench/device-compare.sh     (OLD: a checkout with its .debs/)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
OLD=${OLD:-.wt/old}
ROUNDS=${ROUNDS:-2}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( cd "$OLD" && bash scripts/device-build ) > "$OUT/build-old.log" 2>&1 || { echo "old build failed"; tail -20 "$OUT/build-old.log"; }
bash scripts/device-build --test --suite gpu > "$OUT/test-gpu.log" 2>&1
echo "== gpu suite (this tree): $(tail -1 "$OUT/test-gpu.log")"
grep -E "^ *[0-9]+/[0-9]+ " "$OUT/test-gpu.log" | sed 's/^/   /'
eval "$(bash scripts/device-build --env 2>/dev/null)"
NEW=build-gpu
rtt() { # label dir [env...]
	local label=$1 dir=$2; shift 2
	echo "== rtt $label"
	env "$@" timeout 240 "$dir/bench/gpusys-bench" rtt --daemon "$dir/daemon/gpusysd" 2>&1 | tail -n 25
	echo "== rtt --emulate $label"
	env "$@" timeout 120 "$dir/bench/gpusys-bench" rtt --emulate --daemon "$dir/daemon/gpusysd" --iters 200000 2>&1 | tail -n 12
}
for r in $(seq "$ROUNDS"); do
	echo "######## round $r"
	rtt old "$OLD/build-gpu"
	rtt new "$NEW"
	rtt new-stats-off "$NEW" GPUSYSD_STATS=0
done
