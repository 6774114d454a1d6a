#!/usr/bin/env bash
# bench/device-alloc-bisect.sh: bisect test_gpu_alloc's fault in its random
# kernel (Xid 31, CUDA_ERROR_ILLEGAL_ADDRESS on the H100) in one call on the
# GPU machine. Builds gpusysd and the test only, then runs the random kernel
# alone (GT_ALLOC_SKIP_KILL, GT_ALLOC_ONLY_RANDOM) under each configuration
# below, one knob changed at a time (tests/gpu/test_gpu_alloc.cu lists
# them). Logs under $OUT; a summary line per run on stdout.
#
#   RUNS="base premapped ..." bench/device-alloc-bisect.sh   (default: all)
#   MEMCHECK=1: also the run under compute-sanitizer memcheck (slow)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
GPUSYS_BUILD_TARGETS="daemon/gpusysd tests/alloc/gpu_test_gpu_alloc" scripts/device-build > "$OUT/build.log" 2>&1 ||
	{ tail -40 "$OUT/build.log"; exit 1; }
echo "built in $(($(date +%s) - t0)) s"
eval "$(bash scripts/device-build --env 2>/dev/null)"
T=build-gpu/tests/alloc/gpu_test_gpu_alloc

# name, then the environment of the run
run() {
	local name=$1; shift
	echo "== $name: $*"
	env GT_ALLOC_SKIP_KILL=1 GT_ALLOC_ONLY_RANDOM=1 "$@" timeout 150 $T > "$OUT/$name.log" 2>&1
	echo "rc=$?"
	grep -E "^random|^trace|FAIL|ok \(random only\)" "$OUT/$name.log" | head -24
	dmesg 2>/dev/null | grep -i xid | tail -2
}

all="base premapped no-realloc uniform2 uniform1 sizes-s sizes-m sizes-l grid1"
for r in ${RUNS:-$all}; do case $r in
# the fault as it is, with every block bounded before it is touched and a
# per-thread trace dumped when the kernel dies
base) run base GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# no mapping while the kernel runs: the whole limit mapped and granted first
premapped) run premapped GT_ALLOC_INITIAL_MIB=2048 GT_ALLOC_CHUNK_MIB=2048 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# malloc and free only (the bench's operations)
no-realloc) run no-realloc GT_ALLOC_OPS=malloc,free GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# every lane of a warp makes the same call (op, slot; 2: size too): no
# divergent calls, no mixed classes in one call
uniform2) run uniform2 GT_ALLOC_UNIFORM=2 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
uniform1) run uniform1 GT_ALLOC_UNIFORM=1 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# one size band at a time: 1 B-2 KiB; 2-8 KiB (whole-chunk slabs of 4 and
# 8 words); 16-64 KiB (whole-chunk slabs of 1-2 words)
sizes-s) run sizes-s GT_ALLOC_SIZES=s GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
sizes-m) run sizes-m GT_ALLOC_SIZES=m GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
sizes-l) run sizes-l GT_ALLOC_SIZES=l GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# a warp's calls one kind at a time (1) or one call at a time (2): partial
# masks without two calls of one warp at once
serial1) run serial1 GT_ALLOC_SERIAL=1 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
serial2) run serial2 GT_ALLOC_SERIAL=2 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# one warp per SM: divergent calls without the contention of 16 warps
lowc) run lowc GT_ALLOC_BLOCKS_PER_SM=1 GT_ALLOC_THREADS=32 GT_ALLOC_ITERS=200 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
# half the threads
grid1) run grid1 GT_ALLOC_BLOCKS_PER_SM=1 GT_ALLOC_CHECK=1 GT_ALLOC_TRACE=1 ;;
*) echo "unknown run $r" ;;
esac; done

if [[ ${MEMCHECK:-0} == 1 ]]; then
	# The faulting instruction's file:line (the test is built with
	# -lineinfo). Premapped: memcheck did not know the VMM mappings the
	# mapping thread made while k_keep ran (it flagged every 1 MiB block).
	echo "== memcheck (premapped, one block per SM)"
	env GT_ALLOC_SKIP_KILL=1 GT_ALLOC_ONLY_RANDOM=1 GT_ALLOC_INITIAL_MIB=2048 GT_ALLOC_CHUNK_MIB=2048 \
		GT_ALLOC_BLOCKS_PER_SM=1 timeout 300 compute-sanitizer --tool memcheck --show-backtrace device \
		--print-limit 5 $T > "$OUT/memcheck.log" 2>&1
	echo "rc=$?"
	grep -E "Invalid|at 0x|by thread|Address|ERROR SUMMARY|^random|FAIL" "$OUT/memcheck.log" | head -30
fi
