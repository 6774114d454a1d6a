#!/usr/bin/env bash
# bench/device-multigpu.sh: issue 34's figures on the two-GPU machine, in one
# run of under 8 minutes. The measurement comes first (so a run cut short
# still has it): one gpusysd (default settings: pollers per GPU chosen by the
# daemon), `gpusys-bench multigpu` against it (each GPU alone and all at
# once, with the client + minimal server floor of each GPU in the same
# table), then `gpusysctl pollers` and `status` (which poller served which
# GPU). Then the gpu suite on each GPU alone. Few files under $OUT: the
# device tool returns a limited number.
#   OUT=/tmp/out bench/device-multigpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$SECONDS
bash scripts/device-build > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
echo "== built ($((SECONDS - t0)) s)"
eval "$(bash scripts/device-build --env 2>/dev/null)"
B=build-gpu
{ nvidia-smi -L; nvidia-smi topo -m; lscpu | grep -i -E 'numa|^cpu\(s\)'; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
status=0

run=$(mktemp -d /tmp/gpusys-mg.XXXXXX)
$B/daemon/gpusysd --foreground --runtime-dir "$run" > "$OUT/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do [[ -S $run/gpusysd.sock ]] && break; sleep 0.1; done
echo "== gpusys-bench multigpu"
timeout 120 $B/bench/gpusys-bench multigpu --runtime-dir "$run" 2>&1 | tee "$OUT/multigpu.txt"
((PIPESTATUS[0] == 0)) || status=1
{
	$B/tools/gpusysctl --runtime-dir "$run" pollers
	echo
	$B/tools/gpusysctl --runtime-dir "$run" status
} > "$OUT/pollers.txt" 2>&1
cat "$OUT/pollers.txt"
kill "$dpid"
wait "$dpid"
echo "daemon exit: $?" >> "$OUT/daemon.log"
rm -rf "$run"

for ((i = 0; i < ngpu; i++)); do
	CUDA_VISIBLE_DEVICES=$i timeout 170 meson test -C $B --suite gpu --num-processes 1 --print-errorlogs \
		> "$OUT/suite-gpu$i.log" 2>&1 || status=1
	echo "== gpu suite on GPU $i ($((SECONDS - t0)) s)"
	grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):' "$OUT/suite-gpu$i.log"
done
echo "device-multigpu.sh: status $status ($((SECONDS - t0)) s)"
exit $status
