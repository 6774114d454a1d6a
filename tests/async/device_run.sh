#!/usr/bin/env bash
# Futures and user callbacks on the GPU machine: build what they need, the
# GPU test, the regression tests of the synchronous path (test_basic,
# test_allwarps), both examples, gpusys-bench calls. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
eval "$(scripts/device-build --env 2>/dev/null)"
log "build"
T="daemon/gpusysd tests/async/gpu_test_gpu_async tests/gpu_test_basic tests/gpu_test_allwarps examples/gpusys-progress-callback examples/gpusys-cpu-compute bench/gpusys-bench"
{ meson setup build-gpu -Dgpu=enabled && ninja -k 0 -C build-gpu $T; } >"$OUT/build.txt" 2>&1 || { grep -E "error|FAILED" "$OUT/build.txt" | head -20 | tee -a "$OUT/summary.txt"; }
for t in $T; do [ -x build-gpu/$t ] || echo "MISSING build-gpu/$t" | tee -a "$OUT/summary.txt"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"

for t in async/gpu_test_gpu_async gpu_test_basic gpu_test_allwarps; do
	log "$t"
	timeout 150 build-gpu/tests/$t >"$OUT/$(basename $t).txt" 2>&1
	echo "rc=$?" | tee -a "$OUT/summary.txt"; grep -v "^gpusysd:" "$OUT/$(basename $t).txt" | tail -12 >>"$OUT/summary.txt"
done

log "examples"
R=$(mktemp -d /tmp/gr.XXXXXX)
: >"$R/conf"
build-gpu/daemon/gpusysd --runtime-dir "$R/run" --config "$R/conf" >"$OUT/gpusysd_examples.txt" 2>&1 &
DP=$!
for i in $(seq 100); do [ -S "$R/run/gpusysd.sock" ] && break; sleep 0.05; done
export GPUSYS_RUNTIME_DIR=$R/run
timeout 60 build-gpu/examples/gpusys-progress-callback --steps $((1 << 26)) >"$OUT/progress.txt" 2>"$OUT/progress_bar.txt"
echo "progress rc=$?" | tee -a "$OUT/summary.txt"; cat "$OUT/progress.txt" >>"$OUT/summary.txt"
tr '\r' '\n' <"$OUT/progress_bar.txt" | grep -c '%' | sed 's/^/bar redraws: /' >>"$OUT/summary.txt"
timeout 60 build-gpu/examples/gpusys-cpu-compute >"$OUT/cpu_compute.txt" 2>&1
echo "cpu_compute rc=$?" | tee -a "$OUT/summary.txt"; cat "$OUT/cpu_compute.txt" >>"$OUT/summary.txt"
kill $DP; wait $DP 2>/dev/null

log "gpusys-bench calls"
timeout 200 build-gpu/bench/gpusys-bench calls --daemon build-gpu/daemon/gpusysd --iters 20000 >"$OUT/bench_calls.txt" 2>"$OUT/bench_calls_err.txt"
echo "rc=$?" | tee -a "$OUT/summary.txt"; cat "$OUT/bench_calls.txt" >>"$OUT/summary.txt"
grep -v "^gpusysd:" "$OUT/bench_calls_err.txt" | tail -5 >>"$OUT/summary.txt"
log "gpusys-bench calls --emulate (this host's CPUs)"
timeout 100 build-gpu/bench/gpusys-bench calls --emulate --daemon build-gpu/daemon/gpusysd --iters 30000 2>/dev/null | tee -a "$OUT/summary.txt" >/dev/null
timeout 100 build-gpu/bench/gpusys-bench calls --emulate --daemon build-gpu/daemon/gpusysd --iters 30000 --lanes 1 2>/dev/null | tee -a "$OUT/summary.txt" >/dev/null
