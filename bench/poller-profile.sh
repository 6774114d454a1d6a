#!/usr/bin/env bash
# bench/poller-profile.sh: issue 14's daemon-side profile on the GPU machine.
# `gpusys-bench rtt --breakdown` ROUNDS times, alternating pollers left to the
# scheduler and pollers pinned one per physical core (poller_cpus, the last
# cores of the machine, one hardware thread each), so that drift of the
# machine hits both alike. Each run's table goes to $OUT/VARIANT-R.txt.
#   bash scripts/device-build; eval "$(scripts/device-build --env)"
#   OUT=/tmp/out ROUNDS=2 bench/poller-profile.sh
# VARIANTS (default "free pinned") may also name old (the gpusysd built in
# $OLD/build-gpu, a checkout of an older tree: an A/B of a change) and
# stats-off (this tree's gpusysd with GPUSYSD_STATS=0: no per-opcode counting,
# so no sampled times either), and pollersN (this tree's gpusysd with N pollers,
# e.g. pollers12: what the knob buys where the pollers' CPU is the bound).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}
B=build-gpu/bench/gpusys-bench D=build-gpu/daemon/gpusysd
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
lscpu > "$OUT/lscpu.txt"
grep -m1 "model name" /proc/cpuinfo
# One hardware thread per core (the first of its siblings), the last 8 cores.
cpus=$(for c in /sys/devices/system/cpu/cpu[0-9]*; do
	n=${c##*cpu}
	first=$(sed 's/[,-].*//' "$c/topology/thread_siblings_list")
	[[ $first == "$n" ]] && echo "$n"
done | sort -n | tail -8 | paste -sd,)
echo "cpus $(nproc), pinned pollers on: $cpus"
printf 'poller_cpus = %s\n' "$cpus" > /tmp/poller-pin.conf
for r in $(seq "$ROUNDS"); do
	for v in ${VARIANTS:-free pinned}; do
		args=() env=() d=$D
		case $v in
		pinned) args=(--daemon-args "--config /tmp/poller-pin.conf") ;;
		old) d=${OLD:?OLD=checkout}/build-gpu/daemon/gpusysd ;;
		stats-off) env=(GPUSYSD_STATS=0) ;;
		pollers[0-9]*) args=(--daemon-args "--pollers ${v#pollers}") ;;
		esac
		s=$SECONDS
		env "${env[@]}" timeout 150 "$B" rtt --breakdown --daemon "$d" "${args[@]}" > "$OUT/$v-$r.txt" 2> "$OUT/$v-$r.err"
		echo "== $v round $r: rc $?, $((SECONDS - s)) s: $(grep '^best one-warp' "$OUT/$v-$r.txt")"
	done
done
