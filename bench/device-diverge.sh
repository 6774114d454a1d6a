#!/usr/bin/env bash
# bench/device-diverge.sh: bench/diverge_gpu.cu on the GPU machine, built
# with ptxas's default optimisation and with -Xptxas -O0, each mode at one
# warp per SM and at 8 warps per SM. Under a minute; no daemon.
#   OUT=/tmp/out bench/device-diverge.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvcc -O3 -arch=sm_90 -Iinclude -Idevice bench/diverge_gpu.cu -o /tmp/diverge_opt &
nvcc -O3 -arch=sm_90 -Xptxas -O0 -Iinclude -Idevice bench/diverge_gpu.cu -o /tmp/diverge_o0 &
wait
for b in opt o0; do
	for mode in lock trylock atomic wide; do
		for shape in "1 32" "2 256"; do
			# shellcheck disable=SC2086
			timeout 60 /tmp/diverge_$b $mode $shape 2000 2>&1 | sed "s/^/$b: /" | tee -a "$OUT/diverge.txt"
		done
	done
done
