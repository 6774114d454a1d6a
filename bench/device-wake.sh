#!/usr/bin/env bash
# bench/device-wake.sh: the idle/wake-up measurements on the GPU machine (bench/RESULTS.md,
# "Idle cost and wake-up"): the project built without nvcc (C only), nvcc for
# the measuring programs and a GPU test. MODES picks what runs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODES=${MODES:-"paths vmm memfd naps basic emu"}
eval "$(bash scripts/device-build --env 2>/dev/null)"
B=/tmp/bw
{ meson setup $B -Dgpu=disabled && ninja -C $B; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
CO=$B/common/libgpusys_common.a.p/cuda_driver.c.o
NV="nvcc -O2 -arch=sm_90 -I. -Iinclude -I$B"
$NV bench/idle_gpu.cu bench/spawn.c bench/stats.c -o $B/idle_gpu -L$B/libclient -lgpusys -Xlinker -rpath=$B/libclient &
$NV bench/wake_paths.cu -o $B/wake_paths -lcuda &
$NV -DGPUSYSD_PATH="\"$B/daemon/gpusysd\"" tests/gpu/test_basic.cu $CO -o $B/test_basic -L$B/libclient -lgpusys -ldl -Xlinker -rpath=$B/libclient &
wait
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
for m in $MODES; do case $m in
paths) echo "== wake_paths"; timeout 60 $B/wake_paths ;;
vmm) echo "== idle_gpu: GPU doorbell watch, VMM channel"
	IDLE_DAEMON_LOG=$OUT/daemon-vmm.log timeout 90 $B/idle_gpu $B/daemon/gpusysd ;;
memfd) echo "== idle_gpu: GPU doorbell watch, memfd channel"
	GPUSYSD_CUDA_MEMORY=memfd IDLE_DAEMON_LOG=$OUT/daemon-memfd.log timeout 90 $B/idle_gpu $B/daemon/gpusysd ;;
naps) echo "== idle_gpu: timed naps (no watch)"
	GPUSYSD_GPU_WATCH=0 IDLE_DAEMON_LOG=$OUT/daemon-naps.log timeout 90 $B/idle_gpu $B/daemon/gpusysd ;;
basic) echo "== GPU test_basic"
	timeout 120 $B/test_basic > "$OUT/test_basic.log" 2>&1; echo "test_basic rc=$?"; tail -3 "$OUT/test_basic.log" ;;
emu) echo "== test_idle (emulated client)"
	meson test -C $B test_idle -v 2>&1 | grep -E "idle daemon|served|NOOP|OK \]|FAIL" ;;
esac; done
exit 0
