#!/bin/sh
# tests/ops: `meson install` into a DESTDIR, then build programs against the
# installed tree only (gpusys.pc's flags, run from a scratch directory with
# copies of the examples: nothing of the source tree on the include path),
# and run the host example against the installed gpusysd.
#   install-test.sh BUILD SRC PREFIX BINDIR SBINDIR LIBDIR INCLUDEDIR SYSCONFDIR MANDIR SANITIZE ARCH
set -eu
build=$1 src=$2 prefix=$3 bindir=$4 sbindir=$5 libdir=$6 includedir=$7 sysconfdir=$8 mandir=$9
shift 9
sanitize=$1 arch=$2

abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$prefix" "$1" ;; esac; }
bindir=$(abs "$bindir") sbindir=$(abs "$sbindir") libdir=$(abs "$libdir")
includedir=$(abs "$includedir") sysconfdir=$(abs "$sysconfdir") mandir=$(abs "$mandir")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpusys-ops.XXXXXX")
daemon=''
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
root=$tmp/root

meson install -C "$build" --no-rebuild --quiet --destdir "$root" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log" >&2; fail "meson install"; }

# What is installed, and what is not.
for f in "$sbindir/gpusysd" "$bindir/gpusysctl" "$libdir/pkgconfig/gpusys.pc" "$includedir/gpusys/gpusys.h" \
	"$includedir/gpusys/gpusys.cuh" "$includedir/gpusys/emulator.h" "$includedir/gpusys/emulator/file.h" \
	"$includedir/gpusys/device.cuh" "$includedir/gpusys/device/port_client.h" \
	"$sysconfdir/gpusysd/gpusysd.conf" "$mandir/man3/libgpusys.3"; do
	[ -e "$root$f" ] || fail "not installed: $f"
done
ls "$root$libdir"/libgpusys.so.* >/dev/null 2>&1 || fail "libgpusys.so not installed in $libdir"
[ ! -e "$root$bindir/gpusys-bench" ] || fail "gpusys-bench is installed by default (-Dbench=true only)"
[ ! -e "$root$includedir/gpusys/client.h" ] || fail "the private handshake header is installed"
# The attach handshake's wire format is the daemon's and the library's only.
find "$root$includedir" -name 'wire.h' | grep . && fail "the attach handshake (wire.h) is installed"
for unit in gpusysd.service gpusysd.socket; do
	if [ -e "$src/systemd/$unit" ]; then
		find "$root" -name "$unit" -path '*systemd/system/*' | grep -q . || fail "systemd/$unit not installed"
	fi
done
for page in gpusysd.8 gpusysctl.1 gpusysd.conf.5; do
	sect=${page##*.}
	if [ -e "$src/man/$page" ]; then
		[ -e "$root$mandir/man$sect/$page" ] || fail "man/$page not installed"
	fi
done

# Every installed header includes only installed headers (or the system's):
# each one alone, in C (the .h) or CUDA (the .cuh, when nvcc is here).
export PKG_CONFIG_LIBDIR="$root$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
unset PKG_CONFIG_PATH
cflags=$(pkg-config --cflags gpusys) || fail "pkg-config --cflags gpusys"
libs=$(pkg-config --libs gpusys) || fail "pkg-config --libs gpusys"
case " $cflags $libs " in *"$src"*) fail "gpusys.pc points into the source tree: $cflags $libs" ;; esac
case " $cflags " in *" -I$root$includedir "*) ;; *) fail "gpusys.pc --cflags lacks -I$includedir: $cflags" ;; esac
san=''
[ "$sanitize" = none ] || san="-fsanitize=$sanitize"
cd "$tmp"
nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
n=0
for h in "$root$includedir"/gpusys/*.h "$root$includedir"/gpusys/device/*.h "$root$includedir"/gpusys/emulator/*.h; do
	rel=${h#"$root$includedir"/}
	printf '#include "%s"\n' "$rel" >one.c
	# shellcheck disable=SC2086
	cc -std=c11 -D_GNU_SOURCE -fsyntax-only $cflags one.c 2>err.txt || { cat err.txt >&2; fail "$rel does not compile alone"; }
	n=$((n + 1))
done
if [ -n "$nvcc" ]; then
	for h in "$root$includedir"/gpusys/*.cuh; do
		rel=${h#"$root$includedir"/}
		printf '#include "%s"\n' "$rel" >one.cu
		# shellcheck disable=SC2086
		"$nvcc" -std=c++17 -arch="$arch" -E $cflags one.cu -o /dev/null 2>err.txt ||
			{ cat err.txt >&2; fail "$rel does not preprocess alone with nvcc"; }
		n=$((n + 1))
	done
fi
echo "ok $n installed headers stand alone"

# One include per side (issue 31): gpusys/gpusys.h alone declares the whole
# host API (attach, callbacks, heap, copies) and not the emulator's, which
# gpusys/emulator.h declares; gpusys/gpusys.cuh alone gives kernels every
# service. An undeclared function is an error here, not a warning.
cat >host_api.c <<'PROG'
#include <gpusys/gpusys.h>
int main(void)
{
	gpusys_t *g;
	struct gpusys_heap *h;
	gpusys_copy_t *c;
	struct gpusys_callbacks *cb;
	int r = gpusys_attach(NULL, &g);
	r |= gpusys_heap_open(g, NULL, &h);
	r |= gpusys_copy_open(NULL, &c);
	r |= gpusys_callbacks_create(NULL, &cb);
	gpusys_detach(g);
	return r;
}
PROG
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -Werror=implicit-function-declaration -c $cflags host_api.c -o host_api.o 2>err.txt ||
	{ cat err.txt >&2; fail "gpusys/gpusys.h alone does not declare the host API"; }
printf '#include <gpusys/gpusys.h>\nint main(void) { return gpusys_emu_open == 0; }\n' >no_emu.c
# shellcheck disable=SC2086
if cc -std=c11 -D_GNU_SOURCE -c $cflags no_emu.c -o no_emu.o 2>/dev/null; then
	fail "gpusys/gpusys.h declares the emulator's API (gpusys_emu_open)"
fi
printf '#include <gpusys/emulator.h>\nint main(void) { return gpusys_emu_open == 0 || gpusys_emu_file_open == 0; }\n' >emu.c
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -c $cflags emu.c -o emu.o 2>err.txt ||
	{ cat err.txt >&2; fail "gpusys/emulator.h alone does not declare the emulator's API"; }
echo "ok gpusys/gpusys.h declares the host API and leaves the emulator to gpusys/emulator.h"
if [ -n "$nvcc" ]; then
	cat >device_api.cu <<'PROG'
#include <gpusys/gpusys.h>
#include <gpusys/gpusys.cuh>
__global__ void k(gpusys_dev_t dev, gpusys_heap_t heap)
{
	gpusys_printf(dev, "%d\n", (int)threadIdx.x);
	long long fd = gpusys_open(dev, "/dev/null", O_RDONLY);
	long long s = gpusys_socket(dev, AF_INET, SOCK_STREAM);
	void *p = gpusys_malloc(heap, 64);
	gpusys_free(heap, p);
	(void)fd;
	(void)s;
	(void)gpusys_heap_mapped_bytes(heap);
}
PROG
	# shellcheck disable=SC2086
	"$nvcc" -std=c++17 -arch="$arch" -c $cflags device_api.cu -o device_api.o 2>err.txt ||
		{ cat err.txt >&2; fail "gpusys/gpusys.cuh alone does not give kernels the device API"; }
	echo "ok gpusys/gpusys.cuh gives kernels print, files, sockets and the heap"
fi

# The host example, built against the installed library only.
cp "$src/examples/gpusys_example.c" "$tmp/"
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE $san -o example gpusys_example.c $cflags $libs -pthread 2>err.txt ||
	{ cat err.txt >&2; fail "gpusys_example.c does not build with gpusys.pc"; }
echo "ok gpusys_example.c builds with: cc gpusys_example.c $cflags $libs"

# No daemon: the example says which socket it tried.
mkdir "$tmp/run"
export LD_LIBRARY_PATH="$root$libdir"
if GPUSYS_RUNTIME_DIR="$tmp/none" ./example >out.txt 2>err.txt; then fail "example attached to no daemon"; fi
grep -q "$tmp/none/gpusysd.sock" err.txt || { cat err.txt >&2; fail "the example does not name the socket it tried"; }
echo "ok without a daemon: $(cat err.txt)"

# The installed daemon, its installed configuration, the example.
"$root$sbindir/gpusysd" --runtime-dir "$tmp/run" --config "$root$sysconfdir/gpusysd/gpusysd.conf" \
	>daemon.log 2>&1 &
daemon=$!
i=0
while [ ! -S "$tmp/run/gpusysd.sock" ]; do
	kill -0 "$daemon" 2>/dev/null || { cat daemon.log >&2; fail "installed gpusysd exited"; }
	i=$((i + 1))
	[ $i -lt 200 ] || fail "installed gpusysd made no socket in 20 s"
	sleep 0.1
done
GPUSYS_RUNTIME_DIR="$tmp/run" ./example >out.txt 2>err.txt ||
	{ cat out.txt err.txt >&2; fail "the example failed against the installed gpusysd"; }
grep -q "NOOP from a full warp: ok" out.txt || { cat out.txt >&2; fail "unexpected example output"; }
echo "ok the example ran against the installed gpusysd"

# A CUDA example, built with nvcc and the installed gpusys.pc only. Run where
# a GPU is; elsewhere it must say there is none (not "No such device").
if [ -z "$nvcc" ]; then
	echo "note: no nvcc: the CUDA example is not built"
	exit 0
fi
if [ -n "$san" ]; then
	echo "note: sanitized library: the CUDA example is compiled, not linked"
	cp "$src/examples/gpu_cat.cu" .
	# shellcheck disable=SC2086
	"$nvcc" -arch="$arch" -c gpu_cat.cu $cflags -o gpu_cat.o 2>err.txt || { cat err.txt >&2; fail "gpu_cat.cu does not compile"; }
	exit 0
fi
cp "$src/examples/gpu_cat.cu" .
# shellcheck disable=SC2086
"$nvcc" -arch="$arch" gpu_cat.cu $cflags $libs -o gpu_cat 2>err.txt ||
	{ cat err.txt >&2; fail "gpu_cat.cu does not build with nvcc \$(pkg-config --cflags --libs gpusys)"; }
echo "ok gpu_cat.cu builds with: nvcc gpu_cat.cu $cflags $libs"
printf 'hello from the installed tree\n' >in.txt
if GPUSYS_RUNTIME_DIR="$tmp/run" ./gpu_cat in.txt >out.txt 2>err.txt; then
	cmp -s in.txt out.txt || fail "gpu_cat printed something else"
	echo "ok gpu_cat ran on the GPU"
else
	grep -q "no usable GPU" err.txt || { cat err.txt >&2; fail "gpu_cat failed without saying there is no usable GPU"; }
	echo "ok no GPU here, and gpu_cat says so: $(cat err.txt)"
fi
