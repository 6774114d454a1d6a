#!/usr/bin/env bash
# bench/device-file-halves.sh: `gpusys-bench file --halves 8,16` against a
# gpusysd of its own (--verbose, the file bench's settings), and, when the
# bench is still running after WAIT seconds, every thread's stack of both
# processes (cuda-gdb attaches: the GPU machine has no gdb) and the
# kernel's view of each thread (wchan, syscall). On 2026-11-28 and
# 2026-11-29 the 16 MiB-halves client's attach got no welcome within 10 s
# and the bench then hung at exit (bench/RESULTS.md, "Twelfth session").
#   OUT=/tmp/out WAIT=60 bench/device-file-halves.sh   (after scripts/device-build)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
WAIT=${WAIT:-60}
mkdir -p "$OUT"
B=${B:-build-gpu}
rt=$(mktemp -d /tmp/gpusys-halves.XXXXXX)
printf 'channel_bulk_bytes = 4G\nworkers = 16\n' > "$rt/gpusysd.conf"
$B/daemon/gpusysd --runtime-dir "$rt" --config "$rt/gpusysd.conf" --foreground --verbose > "$OUT/gpusysd.log" 2>&1 &
dpid=$!
for _ in $(seq 50); do [ -S "$rt/gpusysd.sock" ] && break; sleep 0.1; done

$B/bench/gpusys-bench file --reads-only --no-floors --reps 1 --size 268435456 --halves "${HALVES:-8,16}" \
	--runtime-dir "$rt" > "$OUT/bench.log" 2>&1 &
bpid=$!
for _ in $(seq "$WAIT"); do kill -0 $bpid 2>/dev/null || break; sleep 1; done

threads() { # pid: each thread's name, state, wchan and syscall
	for t in /proc/"$1"/task/*; do
		printf '%s %s state=%s wchan=%s syscall=%s\n' "${t##*/}" "$(cat "$t/comm")" \
			"$(awk '{print $3}' "$t/stat")" "$(cat "$t/wchan" 2>/dev/null)" "$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
	done
}
if kill -0 $bpid 2>/dev/null; then
	echo "bench still running after $WAIT s: dumping"
	for p in $dpid $bpid; do
		echo "== pid $p ($(cat /proc/$p/comm))"
		threads $p
		timeout 60 cuda-gdb -q -p $p -batch -ex "set pagination off" -ex "thread apply all bt 12" 2>&1 |
			grep -v "^\[New LWP\|^warning: \|^$" | head -400
	done > "$OUT/stacks.txt" 2>&1
	kill -9 $bpid 2>/dev/null
else
	wait $bpid
	echo "bench ended: rc=$?"
	# Its handles are gone: gpusysd logs each detach unless its main
	# thread is stuck, whose stacks then say where.
	for _ in $(seq 50); do
		[ "$(grep -c ' detached ' "$OUT/gpusysd.log")" -ge "$(grep -c ' attached: ' "$OUT/gpusysd.log")" ] && break
		sleep 0.1
	done
	if [ "$(grep -c ' detached ' "$OUT/gpusysd.log")" -lt "$(grep -c ' attached: ' "$OUT/gpusysd.log")" ]; then
		echo "gpusysd has not logged every detach 5 s after the bench ended: dumping its stacks"
		{
			threads $dpid
			timeout 60 cuda-gdb -q -p $dpid -batch -ex "set pagination off" -ex "thread apply all bt 12" 2>&1 |
				grep -v "^\[New LWP\|^warning: \|^$" | head -400
		} > "$OUT/stacks.txt" 2>&1
	fi
fi
kill $dpid 2>/dev/null
sleep 1
kill -9 $dpid 2>/dev/null
grep -v "^ *$" "$OUT/bench.log" | grep -E "halves|attach|welcome|error|GB/s|filling" | head -30
grep -E "client|refus|warn|error|wake|hold" "$OUT/gpusysd.log" | tail -30
rm -rf "$rt"
