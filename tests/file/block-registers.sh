#!/bin/sh
# The block calls' registers per thread (include/gpusys/file.cuh, "Blocks of
# 1024 threads"), read from ptxas -v for the kernels of
# block_registers.cu: a kernel declared __launch_bounds__(1024, 1) must take
# 64 at most (else blocks of 1024 would not launch), one declared with
# nothing 128 at most (else blocks of 512, which the headers say need
# nothing, would not launch). The figures are printed either way.
# Compiled as a program is: SASS for the build's architecture (sm_NN for a
# gpu_arch of compute_NN), with full optimization: the plain build's
# -Xcicc=-O1 where no GPU is (scripts/test) is left out, since registers
# are what ptxas gives the optimized code. No cuobjdump is needed.
# usage: block-registers.sh NVCC GPU_ARCH SOURCE_ROOT BUILD_ROOT
# NVCC empty (a build without nvcc) or not there: exit 77 (skipped).
set -u
nvcc=$1 arch=$2 src=$3 build=$4
[ -n "$nvcc" ] || { echo "SKIP: built without nvcc"; exit 77; }
command -v "$nvcc" >/dev/null 2>&1 || { echo "SKIP: no nvcc at $nvcc"; exit 77; }
case $arch in
compute_*) arch=sm_${arch#compute_} ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpusys-regs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! "$nvcc" -arch="$arch" -lineinfo -I"$src/include" -I"$src/device" -I"$src" -I"$build" -cubin \
	-Xptxas -v -o "$tmp/k.cubin" "$src/tests/file/block_registers.cu" >"$tmp/ptxas.txt" 2>&1; then
	cat "$tmp/ptxas.txt"
	echo "FAIL: block_registers.cu did not compile"
	exit 1
fi
# "Compiling entry function 'NAME'", then (after the properties of the
# functions it calls) "Used N registers" for it.
awk '
/Compiling entry function/ { n = $0; sub(/.*function \047/, "", n); sub(/\047.*/, "", n); next }
n != "" && /Used [0-9]+ registers/ { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); print n, r; n = "" }
' "$tmp/ptxas.txt" | sort >"$tmp/regs.txt"
fail=0 seen=0
for form in plain declared; do
	limit=128 threads=512
	[ $form = declared ] && limit=64 threads=1024
	for call in pread pwrite both pread_pwrite send recv; do
		r=$(awk -v k="${form}_$call" '$1 == k { print $2 }' "$tmp/regs.txt")
		if [ -z "$r" ]; then
			echo "FAIL: ${form}_$call: no register count in ptxas's output"
			fail=1
			continue
		fi
		seen=$((seen + 1))
		if [ "$r" -gt $limit ]; then
			echo "FAIL: ${form}_$call: $r registers per thread, over $limit: blocks of $threads would not launch"
			fail=1
		else
			echo "ok: ${form}_$call: $r registers per thread ($limit at most: blocks of $threads launch)"
		fi
	done
done
[ $fail = 0 ] || { grep -E "Compiling entry|Used|spill" "$tmp/ptxas.txt"; exit 1; }
echo "$seen kernels within their limits ($arch)"
