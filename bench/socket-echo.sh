#!/usr/bin/env bash
# bench/socket-echo.sh [BUILD]: the echo rows of bench/socket-bench.sh and a
# gpu_httpd smoke check, about a minute on the GPU machine (issue 28):
#   - one connection's 64 B round trips for 5 s against tcp_echo with 1 and
#     with 1056 warps, and against bench/echo_cpu (the CPU peer);
#   - 1000 and 10,000 connections echoing 1 B-64 KiB for 10 s through
#     tcp_echo (every byte checked: 0 dropped, 0 wrong), and with
#     ECHO_CPU_ROWS=1 through echo_cpu too;
#   - gpu_httpd: a file, a 404, an encoded escape and keep-alive under curl.
# gpusysd runs with the socket benchmarks' configuration
# (bench/socket-daemon.sh: handle quota raised for 10,000 connections).
set -u
B=${1:-build-gpu}
work=$(mktemp -d /tmp/gpusys-sockecho.XXXXXX)
mkdir -p "$work/www"
# shellcheck source=bench/socket-daemon.sh
. "$(dirname "$0")/socket-daemon.sh"

echo "== one connection, 64 B round trips, 5 s"
for w in 1 1056; do
	"$B/examples/tcp_echo" 17780 0 "$w" 2> "$work/tcp_echo-$w.log" &
	te=$!
	sleep 2
	printf 'tcp_echo, %s warps: ' "$w"; "$B/bench/echo_load" 127.0.0.1 17780 1 5 1 64
	kill $te; wait $te 2>/dev/null
done
"$B/bench/echo_cpu" 17781 16 &
ec=$!
sleep 0.5
printf 'echo_cpu: '; "$B/bench/echo_load" 127.0.0.1 17781 1 5 1 64
kill $ec; wait $ec 2>/dev/null

echo "== 1000 and 10,000 connections echoing 1 B-64 KiB for 10 s (0 dropped, 0 wrong)"
"$B/examples/tcp_echo" 17778 2> "$work/tcp_echo.log" &
te=$!
sleep 2
[[ ${ECHO_CPU_ROWS:-0} == 1 ]] && { "$B/bench/echo_cpu" 17779 16 & ec=$!; }
for conns in 1000 10000; do
	printf 'tcp_echo %s: ' "$conns"; "$B/bench/echo_load" 127.0.0.1 17778 "$conns" 10 16; echo "rc=$?"
	if [[ ${ECHO_CPU_ROWS:-0} == 1 ]]; then
		printf 'echo_cpu %s: ' "$conns"; "$B/bench/echo_load" 127.0.0.1 17779 "$conns" 10 16; echo "rc=$?"
	fi
done
kill $te; wait $te 2>/dev/null
[[ ${ECHO_CPU_ROWS:-0} == 1 ]] && { kill $ec; wait $ec 2>/dev/null; }
echo "tcp_echo's error lines: $(grep -c errno "$work/tcp_echo.log")"; grep -m3 errno "$work/tcp_echo.log"

echo "== gpu_httpd under curl"
printf 'hello\n' > "$work/www/6b.txt"
printf 'spaced\n' > "$work/www/with space.txt"
"$B/examples/gpu_httpd" "$work/www" 18080 2> "$work/httpd.log" &
httpd=$!
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.1; done
echo "6b.txt: $(curl -s -w ' %{http_code}' http://127.0.0.1:18080/6b.txt | tr -d '\n')"
echo "with%20space.txt: $(curl -s -w ' %{http_code}' 'http://127.0.0.1:18080/with%20space.txt' | tr -d '\n')"
echo "404: $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18080/nothing)"
echo "escape encoded: $(curl -s --path-as-is -o /dev/null -w '%{http_code}' 'http://127.0.0.1:18080/..%2F..%2Fetc%2Fpasswd')"
echo "keep-alive: $(curl -sv http://127.0.0.1:18080/6b.txt http://127.0.0.1:18080/6b.txt -o /dev/null -o /dev/null 2>&1 | grep -ci 're-using\|reusing')"
kill $httpd; wait $httpd 2>/dev/null
echo "== gpusysctl latency (socket)"
"$B/tools/gpusysctl" latency | grep -E 'OPCODE|socket\.(send|recv|poll|accept)|errors:'
