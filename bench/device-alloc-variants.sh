#!/usr/bin/env bash
# bench/device-alloc-variants.sh: test_gpu_alloc's random kernel with
# divergent calls of one warp (GT_ALLOC_BLOCKS_PER_SM=1 GT_ALLOC_THREADS=32:
# one warp per SM, which faulted), built three ways from the same source:
# as meson builds it, with -G (no device optimisation) and with ptxas -O0.
# Tells a fault of the allocator's logic (all three fail) from one of how
# the optimised code runs divergent groups of a warp. Also dumps the SASS
# of the optimised build's allocator functions into $OUT.
#   VARIANTS="AT_ONCE=-DGPUSYS_ALLOC_GROUPS_AT_ONCE" FULL=1 bench/device-alloc-variants.sh
# builds the allocator without its fix (one allocator call of a warp at a
# time, gpusys_alloc_warp_enter in include/gpusys/alloc.cuh), which faults,
# and runs the whole test with it too.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
GPUSYS_BUILD_TARGETS="daemon/gpusysd libclient/libgpusys.so.0.1.0 common/libgpusys_common.a" scripts/device-build > "$OUT/build.log" 2>&1 ||
	{ tail -40 "$OUT/build.log"; exit 1; }
echo "built in $(($(date +%s) - t0)) s"
eval "$(bash scripts/device-build --env 2>/dev/null)"
B=build-gpu
T=$B/tests/alloc/gpu_test_gpu_alloc
# the compile and link commands ninja used, with other flags and names
cmds=$(ninja -C $B -t commands tests/alloc/gpu_test_gpu_alloc | grep -E "test_gpu_alloc" | tail -2)
compile=$(echo "$cmds" | head -1); link=$(echo "$cmds" | tail -1)
variant() { # name, extra nvcc flags
	local name=$1 flags=$2 obj=tests/alloc/v_$1.o
	local c=${compile/ -o / $flags -o }
	c=$(echo "$c" | sed -E "s# -o [^ ]+# -o $obj#")
	local l=$(echo "$link" | sed -E "s# -o [^ ]+# -o tests/alloc/v_$name#; s#[^ ]*gpu_test_gpu_alloc\.p/[^ ]*\.o#$obj#")
	(cd $B && eval "$c" && eval "$l") > "$OUT/build-$name.log" 2>&1 && echo "variant $name built" || { echo "variant $name: build failed"; tail -5 "$OUT/build-$name.log"; }
}
# VARIANTS: name=flags;name=flags... (default: the runs of 2026-11-28's
# fourth call: -G and ptxas -O0 passed where the optimised build faulted)
IFS=';' read -ra vs <<< "${VARIANTS:-G=-G;O0=-Xptxas -O0}"
for v in "${vs[@]}"; do
	variant "${v%%=*}" "${v#*=}" &
done
wait
echo "variants built at $(($(date +%s) - t0)) s"
run() { # name, binary: one warp per SM (faulted), then the test's own grid
	echo "== $1"
	env GT_ALLOC_SKIP_KILL=1 GT_ALLOC_ONLY_RANDOM=1 GT_ALLOC_BLOCKS_PER_SM=1 GT_ALLOC_THREADS=32 GT_ALLOC_ITERS=200 \
		GT_ALLOC_CHECK=1 timeout 120 "$2" > "$OUT/run-$1.log" 2>&1
	echo "rc=$?"
	grep -E "^random|FAIL|ok \(random only\)" "$OUT/run-$1.log" | head -6
	[[ ${FULL:-0} == 1 ]] || return 0
	echo "== $1, the whole test"
	GT_ALLOC_TRIM_DELAY_MS=1 timeout 150 "$2" > "$OUT/full-$1.log" 2>&1
	echo "rc=$?"
	tail -4 "$OUT/full-$1.log"
}
[[ -x $T ]] && run opt $T
for v in "${vs[@]}"; do
	n=${v%%=*}
	[[ -x $B/tests/alloc/v_$n ]] && run "$n" $B/tests/alloc/v_$n
done
if [[ -x $T ]] && command -v cuobjdump > /dev/null; then
	cuobjdump -sass $T 2> /dev/null | gzip > "$OUT/opt.sass.gz"
	echo "sass: $(stat -c %s "$OUT/opt.sass.gz") bytes"
fi
