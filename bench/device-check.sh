#!/usr/bin/env bash
# bench/device-check.sh: one device call's checks of a tree (bench/RESULTS.md,
# "Allocator, callback storm, heads and sockets on the H100"), each step with
# its own time limit, the most important first, so that a call that runs out
# of time loses only the last ones:
#   build       scripts/device-build (needs .debs/)
#   suite       the gpu suite (every GPU test, the allocator's and the
#               callback storm's included)
#   alloc       test_gpu_alloc without the give-back churn
#               (GT_ALLOC_TRIM_DELAY_MS=1000), gpusys-bench alloc
#   trace       gpusys-bench trace with GPUSYS_ANSWER_PUSH none and cldemote
#               (the early column: words seen before their heads)
#   storm       gpusys-bench calls --storm (33,792 threads of bytes callbacks)
#   echo        one connection's 64 B round trips against tcp_echo with 1 and
#               1056 warps and echo_cpu; 1000 and 10,000 connections echoing
#               1 B-64 KiB through tcp_echo; gpu_httpd under curl
#   rtt         gpusys-bench rtt (NOOPs from one warp and from the whole GPU)
#   diverge     bench/device-diverge.sh (the allocator's claim pattern with
#               lane groups of one warp at once, optimised and -Xptxas -O0)
#   block       gpusys-bench file --reads-only: the block-call rows of a
#               kernel declaring nothing beside the declared ones
# STEPS picks some (default: all, in that order). Output under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STEPS=${STEPS:-"build suite alloc trace storm echo"}
t0=$SECONDS
B=build-gpu
stamp() { echo "-- $1: $((SECONDS - t0)) s"; }

for s in $STEPS; do
	case $s in
	build)
		nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
		scripts/device-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
		eval "$(bash scripts/device-build --env 2>/dev/null)"
		;;
	suite)
		timeout 200 meson test -C $B --suite gpu --num-processes 1 --print-errorlogs > "$OUT/suite.log" 2>&1
		grep -E "^ *[0-9]+/[0-9]+ |^Ok|^Fail" "$OUT/suite.log"
		;;
	alloc)
		GT_ALLOC_TRIM_DELAY_MS=1000 timeout 90 $B/tests/alloc/gpu_test_gpu_alloc > "$OUT/alloc.log" 2>&1
		echo "test_gpu_alloc, trim delay 1000 ms: rc=$?"
		tail -5 "$OUT/alloc.log"
		timeout 120 $B/bench/gpusys-bench alloc --daemon $B/daemon/gpusysd 2>&1 | grep -v "^gpusysd:" |
			tee "$OUT/bench-alloc.log" | tail -25
		;;
	trace)
		for m in none cldemote; do
			echo "== GPUSYS_ANSWER_PUSH=$m"
			GPUSYS_ANSWER_PUSH=$m timeout 60 $B/bench/gpusys-bench trace --iters 10000 --daemon $B/daemon/gpusysd 2>&1 |
				grep -v "^gpusysd:"
		done | tee "$OUT/trace.log"
		;;
	storm)
		timeout 90 $B/bench/gpusys-bench calls --storm --daemon $B/daemon/gpusysd 2>&1 | grep -v "^gpusysd:" |
			tee "$OUT/storm.log" | tail -20
		;;
	echo)
		bash bench/socket-echo.sh $B 2>&1 | tee "$OUT/echo.log"
		;;
	rtt)
		timeout 120 $B/bench/gpusys-bench rtt --daemon $B/daemon/gpusysd 2>&1 | grep -v "^gpusysd:" |
			tee "$OUT/rtt.log" | tail -30
		;;
	diverge)
		timeout 120 bash bench/device-diverge.sh
		;;
	block)
		timeout 150 $B/bench/gpusys-bench file --reads-only --daemon $B/daemon/gpusysd 2>&1 | grep -v "^gpusysd:" |
			tee "$OUT/bench-file.log" | tail -30
		;;
	*) echo "device-check: unknown step $s"; exit 2 ;;
	esac
	stamp "$s"
done
