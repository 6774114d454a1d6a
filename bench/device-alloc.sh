#!/usr/bin/env bash
# bench/device-alloc.sh: the alloc service on the GPU machine (bench/RESULTS.md,
# "Device heap"): build with nvcc, the alloc suite (emulated and GPU), the
# memory_manager example against a daemon with 4 MiB first grants, and
# gpusys-bench alloc. Output under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STEPS=${STEPS:-"test example bench"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
scripts/device-build > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
eval "$(bash scripts/device-build --env 2>/dev/null)"
B=build-gpu
for s in $STEPS; do case $s in
test) echo "== alloc and gpu suites"
	timeout 240 meson test -C $B --suite alloc --suite gpu --print-errorlogs > "$OUT/test.log" 2>&1; echo "rc=$?"
	grep -E "^ *[0-9]+/|killed client|random:|trim:|limit:|daemon after" "$OUT/test.log" $B/meson-logs/testlog.txt | sort -u | head -30 ;;
example) echo "== memory_manager"
	d=$(mktemp -d)
	GPUSYSD_ALLOC_CHUNK_BYTES=4M $B/daemon/gpusysd --runtime-dir "$d" > "$OUT/daemon-mm.log" 2>&1 &
	dp=$!; sleep 0.5
	GPUSYS_RUNTIME_DIR=$d timeout 120 $B/examples/gpusys-memory-manager > "$OUT/mm.log" 2>&1; echo "rc=$?"
	kill $dp; wait $dp
	head -5 "$OUT/mm.log"; echo ...; tail -4 "$OUT/mm.log" ;;
bench) for args in "" "--hold 8" ""; do echo "== gpusys-bench alloc $args"
	timeout 120 $B/bench/gpusys-bench alloc --daemon $B/daemon/gpusysd $args 2>&1 | grep -v "^gpusysd:" | tee -a "$OUT/bench.log"; done ;;
esac; done
