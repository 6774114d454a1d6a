#!/bin/sh
# gpu suite: examples/tcp_echo (one kernel of the default size: 160 warps,
# many connections each) holds 1000 connections at once, each echoing
# payloads of 1 B to 64 KiB for 8 s, every byte checked by bench/echo_load:
# 0 dropped, 0 wrong (issue 28). Exits 77 (skipped) without a GPU.
#   gpu_tcp_echo_1000.sh GPUSYSD TCP_ECHO ECHO_LOAD
gpusysd=$1 tcp_echo=$2 echo_load=$3
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "SKIP: no GPU (nvidia-smi -L)" >&2
	exit 77
fi
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" -lt 2400 ]; then
	echo "SKIP: $(ulimit -n) descriptors: too few for 1000 connections, both ends" >&2
	exit 77
fi
work=$(mktemp -d /tmp/gpusys-echo1000.XXXXXX)
mkdir "$work/run"
: > "$work/gpusysd.conf"
"$gpusysd" --foreground --runtime-dir "$work/run" --config "$work/gpusysd.conf" > "$work/daemon.log" 2>&1 &
daemon=$!
te=
cleanup() {
	[ -n "$te" ] && kill "$te" 2>/dev/null
	kill "$daemon" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
i=0
while [ ! -S "$work/run/gpusysd.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
port=$((20000 + $$ % 20000))
GPUSYS_RUNTIME_DIR=$work/run "$tcp_echo" "$port" > "$work/tcp_echo.log" 2>&1 &
te=$!
i=0
while ! grep -q serving "$work/tcp_echo.log" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
sleep 1
"$echo_load" 127.0.0.1 "$port" 1000 8 16
rc=$?
echo "tcp_echo said:"
cat "$work/tcp_echo.log"
exit $rc
