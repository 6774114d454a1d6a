#!/usr/bin/env bash
# bench/device-session.sh: one device call that checks a tree after a day's
# merges and measures what they were for, on GPU 0 (and both GPUs where the
# machine has two), the most important first, each step with its own time
# limit and skipped when it would end past BUDGET seconds:
#   build     scripts/device-build (needs .debs/)
#   suite     the gpu suite on GPU 0 (50-60 s when it passes; 150 s at most)
#   alloc     test_gpu_alloc without the give-back churn, gpusys-bench alloc
#             (issue 29: pairs/s against CUDA's device malloc, the memory
#             manager, the chunk-taking malloc's p99)
#   streams   gpusys-bench trace --streams (one warp's 32 x 4 KiB and
#             32 x 64 KiB ECHO, where each packet's time goes), then
#             gpusys-bench calls (the stream rows against the NOOP; issue 27),
#             then its stream rows with GPUSYS_DMA=0 and with 4 callback
#             workers
#   twogpu    gpusys-bench multigpu --op file, then --op noop, with both
#             GPUs (issue 34), on a gpusysd with the budgets of
#             bench/device-multigpu.sh; only where there are two GPUs
#   print     where a printed line's time goes at the whole GPU (issue 30):
#             gpusys-bench print against a gpusysd of its own, then that
#             daemon's `gpusysctl pollers` (busy share, scan and serve ns a
#             port) and `status`: busy pollers say the daemon's per-line
#             work bounds the rate, idle ones the device side or the writer
#             (the GPU machine has no perf); the bench line and --long-line
#             (a record past a lane's 64 inline bytes) interleaved. Not in
#             the default steps.
#   async     test_gpu_async ASYNC_RUNS (10) times with GPUSYS_DEBUG=1 (it hung in 4 of 9
#             runs on 2026-11-28: bench/RESULTS.md, "Sixth session"), stopping
#             at the first failure with its dump. Not in the default steps.
#   heap      test_gpu_alloc three ways (issue 29, the heap's shrink): by
#             default (the memory back at gpusys_heap_release), with
#             GPUSYS_HEAP_UNMAP=1 (back at the shrink), and with a kernel
#             left running through the unmap (GT_ALLOC_SPIN=1: does
#             cuMemUnmap wait for it?). Not in the default steps.
#   sockets   bench/socket-matrix.sh: one connection's echo with 1 and 1056
#             warps and gpu_httpd under wrk, over gpusysd settings and device
#             sleep caps, with the CPU peers (issue 28). Not in the default
#             steps.
# STEPS picks some (default: all but print, in that order). Output under $OUT.
#   OUT=/tmp/out bench/device-session.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STEPS=${STEPS:-"build suite alloc streams twogpu"}
BUDGET=${BUDGET:-570}
B=build-gpu
D=$B/daemon/gpusysd
t0=$SECONDS
has() { [[ " $STEPS " == *" $1 "* ]]; }
# fits LIMIT: whether a step of LIMIT seconds ends within BUDGET
fits() { (((SECONDS - t0) + $1 <= BUDGET)) || { echo "-- skipped: $2 ($1 s would pass the ${BUDGET} s budget)"; return 1; }; }
stamp() { echo "-- $1: $((SECONDS - t0)) s"; }

nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
ngpu=$(nvidia-smi -L | grep -c '^GPU')
if has build; then
	scripts/device-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
	stamp build
fi
eval "$(bash scripts/device-build --env 2>/dev/null)"
export CUDA_VISIBLE_DEVICES=0

if has suite && fits 150 suite; then
	timeout 150 meson test -C $B --suite gpu --num-processes 1 --print-errorlogs > "$OUT/suite.log" 2>&1
	grep -E "^ *[0-9]+/[0-9]+ |^Ok|^Fail" "$OUT/suite.log"
	grep -E "FAIL|test_gpu_alloc: |random: " "$OUT/suite.log" | head -8
	stamp suite
fi
if has alloc && fits 150 alloc; then
	GT_ALLOC_TRIM_DELAY_MS=1000 timeout 40 $B/tests/alloc/gpu_test_gpu_alloc > "$OUT/alloc.log" 2>&1
	echo "test_gpu_alloc, trim delay 1000 ms: rc=$?"
	grep -E "^random|FAIL" "$OUT/alloc.log" | head -4
	timeout 110 $B/bench/gpusys-bench alloc --daemon $D 2>&1 | grep -v "^gpusysd:" | tee "$OUT/bench-alloc.log" | tail -25
	stamp alloc
fi
if has streams && fits 150 streams; then
	timeout 45 $B/bench/gpusys-bench trace --streams --iters 200 --daemon $D 2>&1 | grep -v "^gpusysd:" |
		tee "$OUT/trace-streams.log" | tail -20
	timeout 100 $B/bench/gpusys-bench calls --daemon $D --iters 500 2>&1 | grep -v "^gpusysd:" |
		tee "$OUT/calls.log" | tail -40
	# The stream rows again: the warps copying everything (GPUSYS_DMA=0),
	# and the callback server with 4 workers, the default before the tenth
	# session (now three in four of the CPUs: 12 on these machines).
	for v in GPUSYS_DMA=0 GPUSYS_CALLBACK_THREADS=4; do
		fits 40 "calls with $v" || break
		echo "-- calls, $v:"
		env $v timeout 40 $B/bench/gpusys-bench calls --daemon $D --iters 200 2>&1 | grep -E "^  stream,"
	done
	stamp streams
fi
if has twogpu && ((ngpu >= 2)) && fits 130 twogpu; then
	unset CUDA_VISIBLE_DEVICES
	run=$(mktemp -d /tmp/gpusys-s.XXXXXX)
	printf 'client_mem_budget = 4G\nuser_mem_budget = 16G\n' > "$run.conf"
	$D --foreground --runtime-dir "$run" --config "$run.conf" > "$OUT/daemon-two.log" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do [[ -S $run/control.sock ]] && break; sleep 0.1; done
	for op in file noop; do
		timeout 60 $B/bench/gpusys-bench multigpu --op $op --runtime-dir "$run" 2>&1 | grep -v "^gpusysd:" |
			tee -a "$OUT/multigpu.txt"
	done
	$B/tools/gpusysctl --runtime-dir "$run" status > "$OUT/status-two.txt" 2>&1
	kill $dpid
	wait $dpid
	grep -E "workers|pollers of its own" "$OUT/daemon-two.log" | head -6
	stamp twogpu
fi
if has print && fits 100 print; then
	export CUDA_VISIBLE_DEVICES=0
	run=$(mktemp -d /tmp/gpusys-p.XXXXXX)
	$D --foreground --runtime-dir "$run" > "$OUT/daemon-print.log" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do [[ -S $run/control.sock ]] && break; sleep 0.1; done
	# The bench line (a 62-byte record: one exchange a call) and the long
	# line (65 bytes: a second exchange for the records' tails), interleaved.
	for r in 1 2; do
		for long in "" --long-line; do
			timeout 40 $B/bench/gpusys-bench print $long --runtime-dir "$run" \
				--out /dev/shm/gpusys-print.txt 2>&1 | grep -v "^gpusysd:" | tee -a "$OUT/print.txt" |
				grep -E "^gpusys-bench print|^gpusysd gpusys|^CUDA|^ratio"
		done
	done
	{ $B/tools/gpusysctl --runtime-dir "$run" pollers; $B/tools/gpusysctl --runtime-dir "$run" status; } |
		tee "$OUT/print-pollers.txt" | head -40
	kill $dpid
	wait $dpid
	rm -f /dev/shm/gpusys-print.txt
	stamp print
fi
if has heap && fits 200 heap; then
	for how in "" "GPUSYS_HEAP_UNMAP=1" "GPUSYS_HEAP_UNMAP=1 GT_ALLOC_SPIN=1"; do
		env $how timeout -k 5 60 $B/tests/alloc/gpu_test_gpu_alloc > "$OUT/heap.log" 2>&1
		echo "test_gpu_alloc ${how:-(default)}: rc=$?"
		grep -E "^trim|^spin|^limit|FAIL" "$OUT/heap.log" | head -6
	done
	stamp heap
fi

if has async && fits 200 async; then
	for i in $(seq "${ASYNC_RUNS:-10}"); do
		GPUSYS_DEBUG=1 timeout -k 5 100 meson test -C $B --suite gpu test_gpu_async --print-errorlogs \
			> "$OUT/async-$i.log" 2>&1
		rc=$?
		echo "test_gpu_async run $i: rc=$rc"
		if ((rc != 0)); then
			grep -E "^ok|FAIL|gpusys: " "$OUT/async-$i.log" | head -20
			break
		fi
	done
	stamp async
fi
if has sockets && fits 330 sockets; then
	export CUDA_VISIBLE_DEVICES=0
	timeout 330 bash bench/socket-matrix.sh $B 2>&1 | tee "$OUT/socket-matrix.txt" | grep -v 'errno'
	stamp sockets
fi
