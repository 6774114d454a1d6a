# bench/socket-daemon.sh, sourced by socket-bench.sh and socket-echo.sh with
# $B (the build) and $work (a fresh directory) set: starts gpusysd in the
# foreground on $work/run with the socket benchmarks' configuration, points
# GPUSYS_RUNTIME_DIR at it, and stops it (and any job left) on exit.
#
# Room for every lane's request in flight at once: 160 warps x 32 lanes,
# each with up to 64 KiB of pread or 8 KiB of receive room.
# max_handles_per_uid: the 10,000-connection row is one client of one user;
# by default a user gets a quarter of gpusysd's descriptor limit (4,960 on a
# machine whose limit is 20,000), and accept answers EMFILE past it.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
mkdir -p "$work/run"
printf 'channel_bulk_bytes = 256M\nclient_mem_budget = 1G\nmax_handles_per_uid = 12000\n' > "$work/gpusysd.conf"
"$B/daemon/gpusysd" --foreground --runtime-dir "$work/run" --config "$work/gpusysd.conf" > "$work/daemon.log" 2>&1 &
daemon=$!
export GPUSYS_RUNTIME_DIR=$work/run
for _ in $(seq 200); do [[ -S $work/run/gpusysd.sock ]] && break; sleep 0.05; done
trap 'kill $daemon 2>/dev/null; kill $(jobs -p) 2>/dev/null' EXIT
grep -m1 'descriptor limit' "$work/daemon.log"
