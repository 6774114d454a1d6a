#!/usr/bin/env bash
# The file service on the GPU machine: build, the file and GPU file tests,
# gpu_cat against cat, gpu_cp, and the file benchmark. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
eval "$(scripts/device-build --env 2>/dev/null)"
log "build"
{ meson setup build-gpu -Dgpu=enabled && ninja -k 0 -C build-gpu; } >"$OUT/build.txt" 2>&1 || { grep -E "error|FAILED" "$OUT/build.txt" | head -20 | tee -a "$OUT/summary.txt"; }
for t in daemon/gpusysd tests/file_test_file tests/gpu_test_gpu_file examples/gpu_cat examples/gpu_cp bench/gpusys-bench; do
	[ -x build-gpu/$t ] || echo "MISSING build-gpu/$t" | tee -a "$OUT/summary.txt"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"

log "meson test --suite file"
meson test -C build-gpu --no-rebuild --suite file --print-errorlogs >"$OUT/test_file.txt" 2>&1
echo "rc=$?" | tee -a "$OUT/summary.txt"; grep -E "MiB|PASSED|FAILED|OK|SKIP" build-gpu/meson-logs/testlog.txt | head -20 >>"$OUT/summary.txt"

log "gpu test_gpu_file"
timeout 240 build-gpu/tests/gpu_test_gpu_file >"$OUT/test_gpu_file.txt" 2>&1
echo "rc=$?" | tee -a "$OUT/summary.txt"; grep -v "^gpusysd:" "$OUT/test_gpu_file.txt" | tail -15 >>"$OUT/summary.txt"

log "gpu_cat vs cat, gpu_cp"
R=$(mktemp -d /tmp/gr.XXXXXX)
printf 'channel_bulk_bytes = 1G\nworkers = 8\n' >"$R/conf"
build-gpu/daemon/gpusysd --runtime-dir "$R/run" --config "$R/conf" >"$OUT/gpusysd_examples.txt" 2>&1 &
DP=$!
for i in $(seq 100); do [ -S "$R/run/gpusysd.sock" ] && break; sleep 0.05; done
export GPUSYS_RUNTIME_DIR=$R/run
cat daemon/*.c include/gpusys/*.h >"$R/text.txt"
for f in README.md "$R/text.txt" /etc/os-release build-gpu/daemon/gpusysd; do
	[ -e "$f" ] || continue
	build-gpu/examples/gpu_cat "$f" >"$R/gpu.out" 2>"$R/gpu.err"; rc=$?
	cat "$f" >"$R/cat.out"
	if cmp -s "$R/gpu.out" "$R/cat.out"; then echo "gpu_cat $f: identical to cat ($(stat -c %s "$f") bytes, rc $rc)"; else echo "gpu_cat $f: DIFFERS rc $rc $(head -c 300 "$R/gpu.err")"; fi
done | tee -a "$OUT/summary.txt"
build-gpu/examples/gpu_cat "$R/missing" >/dev/null 2>"$R/gpu.err"; echo "gpu_cat missing: rc $? $(cat "$R/gpu.err")" | tee -a "$OUT/summary.txt"
head -c 1073741824 /dev/urandom >"$R/big.bin" 2>/dev/null
build-gpu/examples/gpu_cp "$R/big.bin" "$R/big.copy" 2>&1 | tee -a "$OUT/summary.txt"
cmp "$R/big.bin" "$R/big.copy" && echo "gpu_cp 1 GiB: identical" | tee -a "$OUT/summary.txt"
rm -f "$R/big.bin" "$R/big.copy"
kill $DP; wait $DP
unset GPUSYS_RUNTIME_DIR

log "gpusys-bench file"
timeout 200 build-gpu/bench/gpusys-bench file --daemon build-gpu/daemon/gpusysd >"$OUT/bench_file.txt" 2>&1
echo "rc=$?" | tee -a "$OUT/summary.txt"; grep -v "^gpusysd:" "$OUT/bench_file.txt" >>"$OUT/summary.txt"
GPUSYSD_FILE_IO_THREADS=8 timeout 120 build-gpu/bench/gpusys-bench file --blocks 32 --daemon build-gpu/daemon/gpusysd >"$OUT/bench_file32.txt" 2>&1
echo "rc=$? (32 blocks, 8 I/O threads)" | tee -a "$OUT/summary.txt"; grep -v "^gpusysd:" "$OUT/bench_file32.txt" >>"$OUT/summary.txt"
timeout 100 build-gpu/bench/gpusys-bench file --emulate --daemon build-gpu/daemon/gpusysd >"$OUT/bench_file_emu.txt" 2>&1
echo "rc=$?" | tee -a "$OUT/summary.txt"; grep -v "^gpusysd:" "$OUT/bench_file_emu.txt" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
