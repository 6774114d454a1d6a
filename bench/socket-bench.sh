#!/usr/bin/env bash
# The socket examples and benchmarks on the GPU machine, after
# scripts/device-build: starts its own gpusysd, runs callback_tcp and
# tcp_echo, serves a directory with gpu_httpd and checks it with curl (GET,
# HEAD, keep-alive, 404, 400, paths escaping the directory, plain and
# percent-encoded, a percent-encoded name), then measures, each against its
# CPU peer in the same run:
# - (bench/socket-echo.sh) one connection's 64 B round trip against tcp_echo
#   with 1 and 1056 warps; 1000 and 10,000 connections echoing 1 B-64 KiB for 10 s
#   (bench/echo_load, every byte checked) against tcp_echo (one kernel of the
#   default size) and bench/echo_cpu;
# - gpu_httpd vs http_cpu under wrk (Debian's, carried in .debs/ by
#   scripts/fetch-device-debs) at 100 and 1000 connections, 6 B and 4 KiB
#   files, and under http_load (100 connections, bodies read);
# - gpusys-bench-sock (TCP echo round trip and bulk send, kernel vs CPU);
# and ends with gpusysctl latency (socket errors by errno).
#   bench/socket-bench.sh [BUILD_DIR]
set -u
B=${1:-build-gpu}
work=$(mktemp -d /tmp/gpusys-sockbench.XXXXXX)
mkdir -p "$work/www/sub"
# shellcheck source=bench/socket-daemon.sh
. "$(dirname "$0")/socket-daemon.sh"
# wrk and its libluajit, unpacked from .debs/ by scripts/device-build
deps=${GPUSYS_DEPS:-/tmp/deps}
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
WRK=$(command -v wrk || echo "$deps/usr/bin/wrk")
[[ -x $WRK ]] || echo "no wrk (run scripts/fetch-device-debs here, carry .debs/): wrk runs left out"

echo "== callback_tcp"
timeout 30 "$B/examples/callback_tcp"; echo "rc=$?"

echo "== tcp_echo (3 connections)"
timeout 30 "$B/examples/tcp_echo" 17777 3 4 &
te=$!
sleep 1
for i in 1 2 3; do
	exec 3<>/dev/tcp/127.0.0.1/17777 && printf 'echo %s\n' "$i" >&3 && timeout 5 head -c 7 <&3; echo; exec 3<&-
done
wait $te; echo "tcp_echo rc=$?"

echo "== gpu_httpd"
printf '<html><body>gpu_httpd works</body></html>\n' > "$work/www/index.html"
head -c 4096 /dev/urandom > "$work/www/4k.bin"
printf 'hello\n' > "$work/www/6b.txt"
printf 'spaced\n' > "$work/www/with space.txt"
head -c 1048576 /dev/urandom > "$work/www/sub/1m.bin"
"$B/examples/gpu_httpd" "$work/www" 18080 &
httpd=$!
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.1; done
curl -s -i http://127.0.0.1:18080/ | tr -d '\r'
echo "HEAD: $(curl -s -I http://127.0.0.1:18080/4k.bin | tr -d '\r' | grep -E 'HTTP|Content-Length' | tr '\n' ' ')"
echo "1m.bin: $(curl -s http://127.0.0.1:18080/sub/1m.bin | cmp - "$work/www/sub/1m.bin" && echo identical)"
echo "404: $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18080/nothing)"
echo "escape: $(curl -s --path-as-is -o /dev/null -w '%{http_code}' 'http://127.0.0.1:18080/../../etc/passwd')"
echo "escape encoded: $(curl -s --path-as-is -o /dev/null -w '%{http_code}' 'http://127.0.0.1:18080/..%2F..%2Fetc%2Fpasswd') $(curl -s --path-as-is -o /dev/null -w '%{http_code}' 'http://127.0.0.1:18080/%2e%2e/%2e%2e/etc/passwd')"
echo "%00: $(curl -s --path-as-is -o /dev/null -w '%{http_code}' 'http://127.0.0.1:18080/6b.txt%00.html')"
echo "with%20space.txt: $(curl -s -w ' %{http_code}' 'http://127.0.0.1:18080/with%20space.txt')"
echo "400: $( (exec 3<>/dev/tcp/127.0.0.1/18080; printf 'garbage\r\n\r\n' >&3; timeout 5 head -1 <&3) | tr -d '\r')"
echo "keep-alive: $(curl -sv http://127.0.0.1:18080/ http://127.0.0.1:18080/4k.bin -o /dev/null -o /dev/null 2>&1 | grep -ci 're-using\|reusing')"

echo "== http_cpu (the CPU peer: 128 threads)"
"$B/bench/http_cpu" "$work/www" 18081 128 &
cpu=$!
sleep 0.5

# The same loads on both servers, alternately, in one run.
for port in 18080 18081; do
	who=$([[ $port == 18080 ]] && echo gpu_httpd || echo http_cpu)
	for f in /6b.txt /4k.bin; do
		for c in 100 1000; do
			if [[ -x $WRK ]]; then
				printf '%s wrk -c%s %s: ' "$who" "$c" "$f"
				"$WRK" -t8 -c"$c" -d8s "http://127.0.0.1:$port$f" | grep -E 'Requests/sec|Non-2xx|Socket errors' | tr '\n' ' '
				echo
			fi
		done
		printf '%s http_load 100 %s: ' "$who" "$f"
		"$B/bench/http_load" 127.0.0.1 "$port" "$f" 100 5
	done
done
kill $httpd $cpu; wait $httpd 2>/dev/null

# The echo rows (one connection's 64 B round trip with 1 and 1056 warps,
# 1000 and 10,000 connections) and their CPU peers: bench/socket-echo.sh,
# with a daemon of its own.
ECHO_CPU_ROWS=1 bash "$(dirname "$0")/socket-echo.sh" "$B"

echo "== gpusys-bench-sock"
timeout 120 "$B/bench/gpusys-bench-sock" 20000 1024
echo "== gpusysctl latency (socket errors by errno)"
"$B/tools/gpusysctl" latency | grep -E 'OPCODE|socket|errors:'
echo "== daemon log (tail)"
tail -5 "$work/daemon.log"
