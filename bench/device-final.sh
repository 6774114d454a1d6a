#!/usr/bin/env bash
# bench/device-final.sh: one device call's worth of checks on the final tree
# (bench/RESULTS.md, "The final tree on the H200 pair"): build, the gpu suite
# on GPU 0, trace with each GPUSYS_ANSWER_PUSH mode twice, idle_gpu with and
# without a quiet client on a second GPU, print and file from GPU 0 alone and
# from two GPUs at once. Needs .debs/ (scripts/fetch-device-debs) and $OUT.
# It ran past 600 s in the two-GPU print rows: run those apart.
set -o pipefail; t0=$SECONDS; bash scripts/device-build > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }; echo "built $((SECONDS-t0)) s"
eval "$(scripts/device-build --env)" >/dev/null 2>&1; B=build-gpu/bench/gpusys-bench; D=build-gpu/daemon/gpusysd; nvidia-smi -L
CUDA_VISIBLE_DEVICES=0 timeout 150 meson test -C build-gpu --suite gpu --num-processes 1 > $OUT/suite.log 2>&1; grep -E "^ *[0-9]+/|^Ok|^Fail" $OUT/suite.log; echo "suite $((SECONDS-t0)) s"
for r in 1 2; do for m in none cldemote clwb clflushopt; do echo "== $m $r"; CUDA_VISIBLE_DEVICES=0 GPUSYS_ANSWER_PUSH=$m timeout 40 $B trace --iters 5000 --daemon $D 2>&1 | grep -E "^  (NOOP|ECHO|bytes)"; done; done > $OUT/push.txt; cat $OUT/push.txt; echo "push $((SECONDS-t0)) s"
nvcc -O2 -arch=sm_90 -I. -Iinclude -Ibuild-gpu bench/idle_gpu.cu bench/spawn.c bench/stats.c -o /tmp/idle_gpu -Lbuild-gpu/libclient -lgpusys -Xlinker -rpath=$PWD/build-gpu/libclient > $OUT/idle.txt 2>&1
for a in 0 1; do echo "== IDLE_ALL_GPUS=$a" >> $OUT/idle.txt; IDLE_ALL_GPUS=$a IDLE_SPREAD=1 timeout 60 /tmp/idle_gpu $D >> $OUT/idle.txt 2>&1; done; grep -v "^gpusysd:" $OUT/idle.txt; echo "idle $((SECONDS-t0)) s"
run=$(mktemp -d); $D --foreground --runtime-dir $run > /tmp/d.log 2>&1 & dp=$!; for _ in $(seq 100); do [[ -S $run/gpusysd.sock ]] && break; sleep 0.1; done
for b in print file; do rm -rf /dev/shm/g*; mkdir -p /dev/shm/g0 /dev/shm/g1; f() { [[ $b == file ]] && echo --dir /dev/shm/g$1; }
 echo "== $b GPU 0 alone"; CUDA_VISIBLE_DEVICES=0 timeout 90 $B $b --runtime-dir $run $(f 0) 2>&1 | grep -v "^gpusysd:" | tail -25
 for i in 0 1; do CUDA_VISIBLE_DEVICES=$i timeout 90 $B $b --runtime-dir $run $(f $i) > /tmp/$b-$i.txt 2>&1 & done; wait
 for i in 0 1; do echo "== $b GPU $i, both at once"; grep -v "^gpusysd:" /tmp/$b-$i.txt | tail -25; done; done > $OUT/two.txt 2>&1
kill $dp; wait $dp; cp /tmp/d.log $OUT/daemon.log; cat $OUT/two.txt | head -120; echo "all $((SECONDS-t0)) s"
