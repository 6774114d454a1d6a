#!/usr/bin/env bash
# bench/httpd-profile.sh [BUILD]: where gpu_httpd's time under wrk goes (issue
# 28), on the GPU machine. For each line of VARIANTS ("WARPS [gpusysd
# configuration line, \n between lines]"), a fresh gpusysd with the socket
# benchmarks' configuration (and that line), gpu_httpd with WARPS warps,
# checked with curl first (bodies of 6 B, 4 KiB and 200 KiB compared, HEAD,
# 404 for a missing file and a directory), then wrk -t8 for WRK_SECS s at
# each of CONNS connections on each of FILES, and http_load at 100
# connections (every body checked); around each wrk run the CPU time of
# every gpusysd thread (by name), of gpu_httpd, and the machine's busy share
# (/proc/stat); after the variant, gpusysctl latency's file and socket rows
# (the daemon's time from taking a request to answering it). Last, http_cpu
# under the same loads, for the ratio (CPU_PEER=0 leaves it out). STATS=1:
# gpu_httpd's own view (GPU_HTTPD_STATS) after each wrk row: its readfiles',
# sends' and whole requests' mean time from the warp's side. POLLERS=1:
# gpusysctl pollers after the first wrk row (the counters since the start:
# that row's, but for the curl checks). HTTPD_ENV: words put before
# gpu_httpd's command (GPUSYS_DMA=0, say).
#   VARIANTS=$'160\n160 pollers_per_gpu = 4' bench/httpd-profile.sh build-gpu
set -u
B=${1:-build-gpu}
WRK_SECS=${WRK_SECS:-4}
CONNS=${CONNS:-"100 1000"}
FILES=${FILES:-"/6b.txt /4k.bin"}
VARIANTS=${VARIANTS:-160}
deps=${GPUSYS_DEPS:-/tmp/deps}
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
WRK=$(command -v wrk || echo "$deps/usr/bin/wrk")
[[ -x $WRK ]] || { echo "httpd-profile: no wrk (scripts/fetch-device-debs)"; exit 1; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d /tmp/gpusys-httpd.XXXXXX)
mkdir -p "$work/www"
printf 'hello\n' > "$work/www/6b.txt"
head -c 4096 /dev/urandom > "$work/www/4k.bin"
head -c 204800 /dev/urandom > "$work/www/200k.bin"
mkdir -p "$work/www/dir"
trap 'kill $(jobs -p) 2>/dev/null' EXIT

# thread_cpu PID: "name ticks" for every thread of PID (utime + stime)
thread_cpu() {
	local t
	local -a f
	for t in /proc/$1/task/*; do
		read -r -a f < "$t/stat" 2>/dev/null || continue
		echo "$(cat "$t/comm" 2>/dev/null | tr ' ' _) $((f[13] + f[14]))"
	done
}
# busy_ticks: the machine's busy and total ticks
busy_ticks() { awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t-$5-$6, t}' /proc/stat; }
# cpu_delta BEFORE AFTER SECS: seconds of CPU per thread name, summed
cpu_delta() {
	awk -v s="$3" 'FNR==NR {b[$1]+=$2; next} {a[$1]+=$2; n[$1]++}
		END {for (k in a) if (a[k]-b[k] > 0) printf "      %-16s x%-3d %6.2f cores\n", k, n[k], (a[k]-b[k])/100/s}' "$1" "$2" | sort -k3 -nr
}
row() { # $1 port, $2 who, $3 conns, $4 file, $5 pid of the daemon (or 0), $6 pid of the server
	[[ $5 != 0 ]] && thread_cpu "$5" > "$work/d0"
	thread_cpu "$6" > "$work/s0"
	read -r b0 t0 < <(busy_ticks)
	printf '  %s wrk -c%s %s: ' "$2" "$3" "$4"
	"$WRK" -t8 -c"$3" -d"${WRK_SECS}s" --latency "http://127.0.0.1:$1$4" > "$work/wrk.out"
	read -r b1 t1 < <(busy_ticks)
	grep -E 'Requests/sec' "$work/wrk.out" | tr -s ' ' | tr '\n' ' '
	grep -E '^ +(50|99)%' "$work/wrk.out" | tr -s ' ' | tr '\n' ' '
	grep -E 'Non-2xx|Socket errors' "$work/wrk.out" | tr '\n' ' '
	echo
	echo "    machine busy $(( (b1 - b0) * 100 / (t1 - t0) ))%"
	if [[ $5 != 0 ]]; then
		thread_cpu "$5" > "$work/d1"
		echo "    gpusysd:"
		cpu_delta "$work/d0" "$work/d1" "$WRK_SECS"
	fi
	thread_cpu "$6" > "$work/s1"
	echo "    $2:"
	cpu_delta "$work/s0" "$work/s1" "$WRK_SECS" | head -6
	[[ $2 == gpu_httpd && ${STATS:-0} == 1 ]] && grep 'stats:' "$work/httpd.log" | tail -2 | head -1 | sed 's/^/    /'
}
# curl_checks PORT: what gpu_httpd answers, against the files
curl_checks() {
	local u=http://127.0.0.1:$1 f bad=0
	for f in 6b.txt 4k.bin 200k.bin; do
		curl -s "$u/$f" | cmp -s - "$work/www/$f" || { echo "  curl: /$f differs"; bad=1; }
	done
	[[ $(curl -s -o /dev/null -w '%{http_code}' "$u/missing") == 404 ]] || { echo "  curl: /missing not 404"; bad=1; }
	[[ $(curl -s -o /dev/null -w '%{http_code}' "$u/dir") == 404 ]] || { echo "  curl: /dir not 404"; bad=1; }
	[[ $(curl -sI "$u/4k.bin" | tr -d '\r' | grep -i '^content-length') == "Content-Length: 4096" ]] ||
		{ echo "  curl: HEAD /4k.bin"; bad=1; }
	[[ $(curl -s "$u/6b.txt" "$u/6b.txt" "$u/200k.bin" | wc -c) == 204812 ]] || { echo "  curl: keep-alive"; bad=1; }
	echo "  curl checks: $([[ $bad == 0 ]] && echo ok || echo FAILED)"
}
http_load_rows() { # $1 port, $2 who
	local f
	for f in $FILES; do
		printf '  %s http_load 100 %s: ' "$2" "$f"
		"$B/bench/http_load" 127.0.0.1 "$1" "$f" 100 "$WRK_SECS"
	done
}

nproc
while read -r warps conf; do
	[[ -n $warps ]] || continue
	echo "== gpu_httpd, $warps warps, configuration: ${conf:--}"
	rm -rf "$work/run"
	mkdir -p "$work/run"
	printf 'channel_bulk_bytes = 256M\nclient_mem_budget = 1G\nmax_handles_per_uid = 12000\n' > "$work/gpusysd.conf"
	[[ -z $conf ]] || printf '%b\n' "$conf" >> "$work/gpusysd.conf" # \n: more lines
	"$B/daemon/gpusysd" --foreground --runtime-dir "$work/run" --config "$work/gpusysd.conf" > "$work/daemon.log" 2>&1 &
	daemon=$!
	export GPUSYS_RUNTIME_DIR=$work/run
	for _ in $(seq 200); do [[ -S $work/run/control.sock ]] && break; sleep 0.05; done
	env ${HTTPD_ENV:-} GPU_HTTPD_STATS=${STATS:-0} "$B/examples/gpu_httpd" "$work/www" 18080 "$warps" 2> "$work/httpd.log" &
	httpd=$!
	for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18080/6b.txt && break; sleep 0.1; done
	curl_checks 18080
	first=1
	for f in $FILES; do
		for c in $CONNS; do
			row 18080 gpu_httpd "$c" "$f" "$daemon" "$httpd"
			[[ ${POLLERS:-0} == 1 && $first == 1 ]] && "$B/tools/gpusysctl" pollers | sed 's/^/    /'
			first=0
		done
	done
	http_load_rows 18080 gpu_httpd
	"$B/tools/gpusysctl" latency | grep -E 'OPCODE|socket\.|file\.' | sed 's/^/    /'
	grep -v -E 'serving|stats:|^$' "$work/httpd.log" | sort | uniq -c | sort -nr | head -5 | sed 's/^/    httpd: /'
	kill $httpd
	wait $httpd 2>/dev/null
	kill $daemon
	wait $daemon 2>/dev/null
done <<< "$VARIANTS"

[[ ${CPU_PEER:-1} == 1 ]] || exit 0 # CPU_PEER=0: gpu_httpd only
echo "== http_cpu, 128 threads"
"$B/bench/http_cpu" "$work/www" 18081 128 &
cpu=$!
sleep 0.5
curl_checks 18081
for f in $FILES; do
	for c in $CONNS; do row 18081 http_cpu "$c" "$f" 0 "$cpu"; done
done
http_load_rows 18081 http_cpu
kill $cpu
wait 2>/dev/null
