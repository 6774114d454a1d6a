#!/usr/bin/env bash
# Issue 17 on a machine with several GPUs (the device tool's nvidia-h200-x2),
# in one go; every result goes under $OUT (default ./multi-gpu-out).
#
#   tests/gpu/multi-gpu.sh [--quick]
#
# 1. the gpu suite on each GPU alone (CUDA_VISIBLE_DEVICES=N);
# 2. one daemon, two processes with opposite CUDA_VISIBLE_DEVICES orders
#    attached at once, each checking that the daemon places its clients on
#    the GPU it means (test_gpu_uuid: UUID and PCI bus id);
# 3. one process driving every GPU (test_gpu_uuid without a mask, and
#    gpusys-bench multigpu: each GPU alone, then all at once);
# 4. gpusys-bench rtt, print and file from every GPU at once against one
#    daemon, beside the same bench on one GPU alone.
# --quick: 1 only for GPU 0, and shorter benches (a one-GPU machine: the
# single-GPU path of everything else). --no-suite: skip 1.
# A step that outlives its limit gets the daemon's threads dumped (gdb, or
# /proc wchan) into $OUT/hang-*.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/multi-gpu-out}
mkdir -p "$OUT"
quick=0 suites=1
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--no-suite) suites=0 ;; # the gpu suite per GPU passed already
	esac
done

((suites)) || export GPUSYS_BUILD_TARGETS="daemon/gpusysd tools/gpusysctl tests/gpu_test_gpu_uuid bench/gpusys-bench"
scripts/device-build > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
eval "$(scripts/device-build --env)"
B=build-gpu
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
nvidia-smi topo -m >> "$OUT/gpus.txt" 2>&1
ngpu=$(nvidia-smi -L | grep -c '^GPU')
echo "GPUs: $ngpu"; cat "$OUT/gpus.txt"
status=0
step() { echo; echo "==> $*"; }

# 1. The gpu suite on each GPU alone.
last=$((ngpu - 1)); ((quick)) && last=0; ((suites)) || last=-1
for ((i = 0; i <= last; i++)); do
	step "gpu suite on GPU $i"
	CUDA_VISIBLE_DEVICES=$i meson test -C $B --suite gpu --num-processes 1 > "$OUT/suite-gpu$i.log" 2>&1 || status=1
	grep -E '^ *[0-9]+/[0-9]+ |^Ok:|^Fail:|^Skipped:' "$OUT/suite-gpu$i.log"
done

# One daemon for the rest, on a private runtime directory.
run=$(mktemp -d /tmp/gpusys-multi.XXXXXX)
$B/daemon/gpusysd --foreground --runtime-dir "$run" > "$OUT/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do [[ -S $run/gpusysd.sock ]] && break; sleep 0.1; done
export GPUSYS_RUNTIME_DIR=$run

# Where is the daemon stuck? (called when a step times out)
dump_daemon() {
	local f=$OUT/hang-$1.txt
	echo "step '$1' failed or timed out: daemon threads in $f"
	for t in /proc/$dpid/task/*; do
		echo "$t $(cat $t/comm) wchan=$(cat $t/wchan) $(cut -d' ' -f3 $t/stat)"
		cat $t/stack 2> /dev/null
	done > "$f"
	command -v gdb > /dev/null && timeout 20 gdb -p $dpid -batch -ex 'thread apply all bt' >> "$f" 2>&1
	head -40 "$f"
}
# limited SECONDS NAME CMD...: run CMD, dump the daemon if it takes longer.
limited() {
	local secs=$1 name=$2
	shift 2
	timeout "$secs" "$@"
	local rc=$?
	((rc != 0)) && dump_daemon "$name"
	return $rc
}

# 2. Opposite numberings at once.
if ((ngpu >= 2)); then
	step "two processes, CUDA_VISIBLE_DEVICES=0,1 and 1,0, one daemon, at once"
	GPUSYS_TEST_SHARED_DAEMON=$run GPUSYS_TEST_ROUNDS=400 CUDA_VISIBLE_DEVICES=0,1 \
		limited 60 opposite-01 $B/tests/gpu_test_gpu_uuid > "$OUT/opposite-01.log" 2>&1 &
	a=$!
	GPUSYS_TEST_SHARED_DAEMON=$run GPUSYS_TEST_ROUNDS=400 CUDA_VISIBLE_DEVICES=1,0 \
		limited 60 opposite-10 $B/tests/gpu_test_gpu_uuid > "$OUT/opposite-10.log" 2>&1 &
	b=$!
	sleep 1
	$B/tools/gpusysctl --runtime-dir "$run" status > "$OUT/gpusysctl-during.txt" 2>&1
	wait $a || status=1
	wait $b || status=1
	cat "$OUT/opposite-01.log" "$OUT/opposite-10.log"
	echo "-- gpusysctl status while both ran:"; cat "$OUT/gpusysctl-during.txt"
fi

# 3. One process, every GPU.
step "one process, every GPU: test_gpu_uuid"
GPUSYS_TEST_SHARED_DAEMON=$run limited 60 one-process $B/tests/gpu_test_gpu_uuid 2>&1 | tee "$OUT/one-process.log"
((PIPESTATUS[0] == 0)) || status=1
step "gpusys-bench multigpu"
limited 60 multigpu $B/bench/gpusys-bench multigpu --runtime-dir "$run" --iters $((quick ? 500 : 2000)) 2>&1 |
	tee "$OUT/multigpu.txt"

# 4. The benches from every GPU at once, beside one GPU alone.
iters=$((quick ? 5000 : 20000))
step "gpusys-bench rtt, GPU 0 alone"
CUDA_VISIBLE_DEVICES=0 limited 120 rtt-alone $B/bench/gpusys-bench rtt --runtime-dir "$run" --iters $iters \
	> "$OUT/rtt-alone.txt" 2>&1
cat "$OUT/rtt-alone.txt"
if ((ngpu >= 2)); then
	step "gpusys-bench rtt, every GPU at once"
	pids=()
	for ((i = 0; i < ngpu; i++)); do
		CUDA_VISIBLE_DEVICES=$i limited 120 rtt-gpu$i $B/bench/gpusys-bench rtt --runtime-dir "$run" \
			--iters $iters > "$OUT/rtt-gpu$i.txt" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	for ((i = 0; i < ngpu; i++)); do echo "-- GPU $i"; cat "$OUT/rtt-gpu$i.txt"; done
	for b in print file; do
		step "gpusys-bench $b, GPU 0 alone, then every GPU at once"
		mkdir -p /dev/shm/gpusys-multi-0
		CUDA_VISIBLE_DEVICES=0 limited 120 $b-alone $B/bench/gpusys-bench $b --runtime-dir "$run" $([[ $b == file ]] && echo --dir /dev/shm/gpusys-multi-0) \
			> "$OUT/$b-alone.txt" 2>&1
		cat "$OUT/$b-alone.txt"
		pids=()
		for ((i = 0; i < ngpu; i++)); do
			mkdir -p /dev/shm/gpusys-multi-$i
			CUDA_VISIBLE_DEVICES=$i limited 120 $b-gpu$i $B/bench/gpusys-bench $b --runtime-dir "$run" \
				$([[ $b == file ]] && echo --dir /dev/shm/gpusys-multi-$i) > "$OUT/$b-gpu$i.txt" 2>&1 &
			pids+=($!)
		done
		wait "${pids[@]}"
		for ((i = 0; i < ngpu; i++)); do echo "-- GPU $i"; cat "$OUT/$b-gpu$i.txt"; done
		rm -rf /dev/shm/gpusys-multi-*
	done
fi

$B/tools/gpusysctl --runtime-dir "$run" status > "$OUT/gpusysctl-end.txt" 2>&1
kill $dpid; wait $dpid
echo "daemon exit: $?" >> "$OUT/daemon.log"
grep -E 'gpu [0-9]+:|refused|error' "$OUT/daemon.log" | head -20
rm -rf "$run"
echo; echo "multi-gpu.sh: status $status"
exit $status
