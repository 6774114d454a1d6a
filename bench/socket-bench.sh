#!/usr/bin/env bash
# The socket examples and benchmarks on the GPU machine, after
# scripts/device-build: starts its own gpusysd, runs callback_tcp and
# tcp_echo, serves a directory with gpu_httpd and checks it with curl (GET,
# HEAD, keep-alive, 404, 400, a path escaping the directory), then measures:
# gpusys-bench-sock (TCP echo round trip and bulk send, kernel vs CPU) and
# gpu_httpd vs http_cpu under http_load with 100 connections.
#   bench/socket-bench.sh [BUILD_DIR]
set -u
B=${1:-build-gpu}
ulimit -n 65536
work=$(mktemp -d /tmp/gpusys-sockbench.XXXXXX)
mkdir -p "$work/run" "$work/www/sub"
echo "channel_bulk_bytes = 256M" > "$work/gpusysd.conf"
"$B/daemon/gpusysd" --foreground --runtime-dir "$work/run" --config "$work/gpusysd.conf" > "$work/daemon.log" 2>&1 &
daemon=$!
export GPUSYS_RUNTIME_DIR=$work/run
for _ in $(seq 200); do [[ -S $work/run/gpusysd.sock ]] && break; sleep 0.05; done
ls "$work/run"
trap 'kill $daemon 2>/dev/null; kill $(jobs -p) 2>/dev/null' EXIT

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
head -c 1048576 /dev/urandom > "$work/www/sub/1m.bin"
"$B/examples/gpu_httpd" "$work/www" 18080 128 &
httpd=$!
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.1; done
curl -s -i http://127.0.0.1:18080/ | tr -d '\r'
echo "HEAD: $(curl -s -I http://127.0.0.1:18080/4k.bin | tr -d '\r' | grep -E 'HTTP|Content-Length' | tr '\n' ' ')"
echo "1m.bin: $(curl -s http://127.0.0.1:18080/sub/1m.bin | cmp - "$work/www/sub/1m.bin" && echo identical)"
echo "404: $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18080/nothing)"
echo "escape: $(curl -s --path-as-is -o /dev/null -w '%{http_code}' 'http://127.0.0.1:18080/../../etc/passwd')"
echo "400: $( (exec 3<>/dev/tcp/127.0.0.1/18080; printf 'garbage\r\n\r\n' >&3; timeout 5 head -1 <&3) | tr -d '\r')"
echo "keep-alive: $(curl -sv http://127.0.0.1:18080/ http://127.0.0.1:18080/4k.bin -o /dev/null -o /dev/null 2>&1 | grep -ci 're-using\|reusing')"
"$B/bench/http_load" 127.0.0.1 18080 /index.html 100 5
"$B/bench/http_load" 127.0.0.1 18080 /4k.bin 100 5
kill $httpd; wait $httpd 2>/dev/null

echo "== http_cpu (the CPU peer: 128 threads)"
"$B/bench/http_cpu" "$work/www" 18081 128 &
cpu=$!
sleep 0.5
"$B/bench/http_load" 127.0.0.1 18081 /index.html 100 5
"$B/bench/http_load" 127.0.0.1 18081 /4k.bin 100 5
kill $cpu

echo "== gpusys-bench-sock"
timeout 120 "$B/bench/gpusys-bench-sock" 20000 1024
echo "== daemon log (tail)"
tail -5 "$work/daemon.log"
