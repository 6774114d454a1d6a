#!/usr/bin/env bash
# bench/socket-matrix.sh [BUILD]: where issue 28's socket time goes, on the
# GPU machine, as a matrix of short runs (about 80 s a configuration): for each
# gpusysd configuration of CONFS (lines added to the socket benchmarks'
# configuration, bench/socket-daemon.sh; "-" adds none):
#   - one connection's 64 B round trips for SECS s against tcp_echo with 1
#     warp (then gpusysctl latency's socket rows: that load alone), and with
#     1056 warps whose quiet polls time out after each of POLLS ms
#     (bench/echo_load, every byte checked);
# and for each configuration gpu_httpd under wrk (100 and
# 1000 connections, 6 B and 4 KiB, WRK_SECS s each), then gpusysctl
# latency's socket rows and the daemon's threads' CPU time. Last, the CPU
# peers: echo_cpu and http_cpu under the same loads, after gpusys-bench-sock
# (bulk TCP from device memory against cudaMemcpy + send). Defaults: CONFS "-",
# POLLS "200 1000 10000", HTTP_LOAD=1 adds http_load (bodies checked).
#   CONFS=$'-\npollers_per_gpu = 4' POLLS="200 1000" bench/socket-matrix.sh build-gpu
set -u
B=${1:-build-gpu}
SECS=${SECS:-3}
WRK_SECS=${WRK_SECS:-4}
POLLS=${POLLS:-"200 1000 10000"}
CONFS=${CONFS:--}
deps=${GPUSYS_DEPS:-/tmp/deps}
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
WRK=$(command -v wrk || echo "$deps/usr/bin/wrk")
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d /tmp/gpusys-sockmatrix.XXXXXX)
mkdir -p "$work/www"
printf 'hello\n' > "$work/www/6b.txt"
head -c 4096 /dev/urandom > "$work/www/4k.bin"
trap 'kill $(jobs -p) 2>/dev/null' EXIT

daemon=
start_daemon() { # $1: extra configuration line ("-": none)
	rm -rf "$work/run"
	mkdir -p "$work/run"
	printf 'channel_bulk_bytes = 256M\nclient_mem_budget = 1G\nmax_handles_per_uid = 12000\n' > "$work/gpusysd.conf"
	[[ $1 == - ]] || printf '%s\n' "$1" >> "$work/gpusysd.conf"
	"$B/daemon/gpusysd" --foreground --runtime-dir "$work/run" --config "$work/gpusysd.conf" > "$work/daemon.log" 2>&1 &
	daemon=$!
	export GPUSYS_RUNTIME_DIR=$work/run
	for _ in $(seq 200); do [[ -S $work/run/control.sock ]] && break; sleep 0.05; done
}
latency() {
	"$B/tools/gpusysctl" latency | grep -E 'OPCODE|socket\.(send|recv|poll|accept)' | sed 's/^/    /'
}
stop_daemon() {
	latency
	# The daemon's CPU time by thread name (utime+stime, clock ticks).
	for t in /proc/$daemon/task/*; do
		read -r -a f < "$t/stat"
		echo "$(cat "$t/comm") $((f[13] + f[14]))"
	done | awk '{c[$1]+=$2; n[$1]++} END {for (k in c) printf "    cpu %s x%d: %.2f s\n", k, n[k], c[k]/100}' | sort
	kill $daemon
	wait $daemon 2>/dev/null
}
echo_row() { # $1 warps, $2 quiet polls' timeout (ms)
	"$B/examples/tcp_echo" 17780 0 "$1" "$2" 2> "$work/tcp_echo.log" &
	local te=$!
	for _ in $(seq 100); do grep -q serving "$work/tcp_echo.log" && break; sleep 0.05; done
	sleep 0.3
	printf '  %s warps, polls %s ms: ' "$1" "$2"
	"$B/bench/echo_load" 127.0.0.1 17780 1 "$SECS" 1 64
	kill $te
	wait $te 2>/dev/null
}
wrk_rows() { # $1 port, $2 who; then http_load (bodies checked) with HTTP_LOAD=1
	for f in /6b.txt /4k.bin; do
		for c in 100 1000; do
			printf '  %s wrk -c%s %s: ' "$2" "$c" "$f"
			"$WRK" -t8 -c"$c" -d"${WRK_SECS}s" "http://127.0.0.1:$1$f" | grep -E 'Requests/sec|Non-2xx|Socket errors' | tr '\n' ' '
			echo
		done
		if [[ ${HTTP_LOAD:-0} == 1 ]]; then
			printf '  %s http_load 100 %s: ' "$2" "$f"
			"$B/bench/http_load" 127.0.0.1 "$1" "$f" 100 "$WRK_SECS"
		fi
	done
}

nproc
while IFS= read -r conf; do
	echo "== config: $conf"
	start_daemon "$conf"
	grep -m2 -E 'descriptor limit|pollers' "$work/daemon.log" | sed 's/^/    /'
	echo_row 1 1000
	echo "    (gpusysctl latency after that row alone)"
	latency
	for ms in $POLLS; do echo_row 1056 "$ms"; done
	if [[ -x $WRK ]]; then
		"$B/examples/gpu_httpd" "$work/www" 18080 2> "$work/httpd.log" &
		httpd=$!
		for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18080/6b.txt && break; sleep 0.1; done
		wrk_rows 18080 gpu_httpd
		kill $httpd
		wait $httpd 2>/dev/null
	fi
	stop_daemon
done <<< "$CONFS"

# Bulk TCP from device memory against cudaMemcpy + send (issue 28's 2x
# target), and the 64 B echo from a kernel thread, on main's configuration.
echo "== gpusys-bench-sock (bulk TCP from device memory)"
start_daemon -
timeout -k 5 90 "$B/bench/gpusys-bench-sock" 20000 1024 2>&1 | tail -12
stop_daemon > /dev/null

echo "== the CPU peers"
"$B/bench/echo_cpu" 17781 16 &
ec=$!
sleep 0.5
printf '  echo_cpu: '
"$B/bench/echo_load" 127.0.0.1 17781 1 "$SECS" 1 64
kill $ec
if [[ -x $WRK ]]; then
	"$B/bench/http_cpu" "$work/www" 18081 128 &
	cpu=$!
	sleep 0.5
	wrk_rows 18081 http_cpu
	kill $cpu
fi
wait 2>/dev/null
