/* SPDX-License-Identifier: MIT */
/*
 * gpusys_printf from CUDA kernels through the real gpusysd. Each scenario
 * runs in a child process whose stdout/stderr are files; the parent (which
 * never initialises CUDA) checks what reached them.
 *
 *  1. conformance: every case of tests/print/cases.c printed from a kernel,
 *     one lane at a time and then warp-aggregated (32 lanes per request),
 *     alternating stdout/stderr: both files equal the host's snprintf output
 *     byte for byte, and each lane's return value is its byte count
 *  2. typed: gpusys_printf with C++ argument types (char, short, long,
 *     float, unsigned long long, pointers, device strings, NULL, enums...)
 *  3. while running: a kernel prints, then waits for the host to see the
 *     line in the file before it ends (CUDA printf shows it only at sync)
 *  4. every SM: numbered lines from all threads: each once, whole, in order
 *     per thread
 *  5. trap: a kernel prints, then __trap()s: every line it printed is in the
 *     file (CUDA printf loses them)
 */
#include <fcntl.h>

#include "gpu_test.h"
#include "gpusys/device.cuh"
#include "gpusys/print.cuh"
#include "../print/cases.h"

static FILE *diag; /* the test's own stderr, in children */

/* ----------------------------------------------------------- helpers */

static char out_path[PATH_MAX], err_path[PATH_MAX], ret_path[PATH_MAX + 8];

static int open_out(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		gt_fail("open %s: %s", path, strerror(errno));
	return fd;
}

/* Run fn in a child with stdout -> out_path, stderr -> err_path. Its exit
 * status (128 + signal when killed). */
static int run_child(int (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		gt_fail("fork: %s", strerror(errno));
	if (pid == 0) {
		int o = open_out(out_path), e = open_out(err_path);
		diag = fdopen(dup(2), "w");
		setvbuf(diag, NULL, _IONBF, 0);
		if (dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(98);
		int rc = fn(arg);
		fflush(NULL);
		_exit(rc);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path, size_t *len)
{
	char *b = cases_read_file(path, len);
	if (!b)
		gt_fail("open %s: %s", path, strerror(errno));
	return b;
}

/* Wait until path stops growing (the daemon flushes at client teardown). */
static void wait_settled(const char *path, size_t want)
{
	double t0 = gt_now();
	size_t last = (size_t)-1, now;
	while (gt_now() - t0 < 20) {
		now = cases_file_size(path);
		if (now >= want && want)
			return;
		if (!want && now == last)
			return;
		last = now;
		usleep(50000);
	}
}

static void expect_file(const char *path, const char *want, size_t want_len, const char *what)
{
	wait_settled(path, want_len);
	size_t len;
	char *got = slurp(path, &len);
	size_t k = cases_mismatch(got, len, want, want_len);
	if (k != SIZE_MAX)
		gt_fail("%s: %s has %zu bytes, want %zu; first difference at byte %zu: got \"%.40s\" want \"%.40s\"",
			what, path, len, want_len, k, got + (k < len ? k : len), want + (k < want_len ? k : want_len));
	free(got);
}

static gpusys_t *child_attach(void)
{
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	gpusys_t *g = NULL;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(diag, "gpusys_attach: %s\n", gpusys_last_error());
		_exit(2);
	}
	return g;
}

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(diag, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			_exit(3);                                                                          \
		}                                                                                          \
	} while (0)

static __global__ void k_flush(gpusys_dev_t dev, int *rc)
{
	*rc = gpusys_print_flush(dev);
}

static int child_flush(gpusys_t *g)
{
	int *d, h = -1;
	CK(cudaMalloc(&d, sizeof(int)));
	k_flush<<<1, 1>>>(gpusys_device(g), d);
	CK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
	CK(cudaFree(d));
	return h;
}

/* ------------------------------------------------------- 1. conformance */

struct dcase {
	const char *fmt;
	gpusys_print_arg args[CASE_MAX_ARGS];
	uint32_t nargs;
	uint32_t stream;
};

static struct case_set cases;

/* lanes: 1 = one lane prints every case in turn (launched with one thread);
 * 32 = each call is a whole warp's, 32 cases at once. */
static __global__ void k_cases(gpusys_dev_t dev, const dcase *c, int n, int lanes, int *ret)
{
	if (lanes == 1) {
		for (int i = 0; i < n; i++)
			ret[i] = gpusys_print_args(dev, (int)c[i].stream, c[i].fmt, c[i].args, c[i].nargs);
		return;
	}
	for (int base = 0; base < n; base += 32) {
		int i = base + (int)threadIdx.x;
		__syncwarp();
		if (i < n)
			ret[i] = gpusys_print_args(dev, (int)c[i].stream, c[i].fmt, c[i].args, c[i].nargs);
	}
}

/* Copy the cases to the device: formats and %s strings into one arena. */
static dcase *cases_to_device(char **arena_ret)
{
	size_t bytes = 0;
	for (size_t i = 0; i < cases.n; i++) {
		bytes += strlen(cases.c[i].fmt) + 1;
		for (uint32_t a = 0; a < cases.c[i].nargs; a++)
			if (cases.c[i].args[a].tag == GPUSYS_PRINT_STR && cases.c[i].args[a].v.s &&
			    strchr(cases.c[i].fmt, 's'))
				bytes += strnlen(cases.c[i].args[a].v.s, GPUSYS_PRINT_MAX_STR + 8) + 1;
	}
	char *host = (char *)malloc(bytes), *dev;
	CK(cudaMalloc(&dev, bytes));
	dcase *hc = (dcase *)calloc(cases.n, sizeof(dcase)), *dc;
	size_t at = 0;
	for (size_t i = 0; i < cases.n; i++) {
		const print_case *c = &cases.c[i];
		size_t fl = strlen(c->fmt) + 1;
		memcpy(host + at, c->fmt, fl);
		hc[i].fmt = dev + at;
		at += fl;
		hc[i].nargs = c->nargs;
		hc[i].stream = i % 2 ? GPUSYS_PRINT_STDERR : GPUSYS_PRINT_STDOUT;
		for (uint32_t a = 0; a < c->nargs; a++) {
			hc[i].args[a] = c->args[a];
			if (c->args[a].tag == GPUSYS_PRINT_STR && c->args[a].v.s && strchr(c->fmt, 's')) {
				size_t sl = strnlen(c->args[a].v.s, GPUSYS_PRINT_MAX_STR + 8);
				memcpy(host + at, c->args[a].v.s, sl);
				host[at + sl] = 0;
				hc[i].args[a].v.s = dev + at;
				at += sl + 1;
			}
		}
	}
	CK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&dc, cases.n * sizeof(dcase)));
	CK(cudaMemcpy(dc, hc, cases.n * sizeof(dcase), cudaMemcpyHostToDevice));
	free(host);
	free(hc);
	*arena_ret = dev;
	return dc;
}

static int conformance_child(void *arg)
{
	int lanes = (int)(intptr_t)arg;
	gpusys_t *g = child_attach();
	char *arena;
	dcase *dc = cases_to_device(&arena);
	int *dret, n = (int)cases.n;
	CK(cudaMalloc(&dret, sizeof(int) * cases.n));
	CK(cudaMemset(dret, 0xff, sizeof(int) * cases.n));
	CK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64u << 20));
	double t0 = gt_now();
	k_cases<<<1, lanes == 1 ? 1 : 32>>>(gpusys_device(g), dc, n, lanes, dret);
	CK(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 120000);
	if (rc) {
		fprintf(diag, "synchronize: %s\n", gpusys_strerror(rc));
		return 4;
	}
	double t1 = gt_now();
	int *ret = (int *)malloc(sizeof(int) * cases.n), bad = 0;
	CK(cudaMemcpy(ret, dret, sizeof(int) * cases.n, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < cases.n; i++)
		if (ret[i] != (int)cases.c[i].expected_len && bad++ < 10)
			fprintf(diag, "case %zu \"%s\": returned %d, want %zu\n", i, cases.c[i].fmt, ret[i],
				cases.c[i].expected_len);
	rc = child_flush(g);
	fprintf(diag, "test_gpu_print: %d cases, %d lane(s) per call: kernel %.1f ms, flush %d\n", n, lanes,
		(t1 - t0) * 1e3, rc);
	gpusys_detach(g);
	return bad || rc ? 1 : 0;
}

static void check_conformance(int lanes)
{
	GT_CHECK(run_child(conformance_child, (void *)(intptr_t)lanes) == 0, "conformance child (%d lanes) failed",
		 lanes);
	for (int s = 0; s < 2; s++) {
		size_t total = 0, n = 0;
		for (size_t i = (size_t)s; i < cases.n; i += 2)
			total += cases.c[i].expected_len;
		char *want = (char *)malloc(total + 1);
		for (size_t i = (size_t)s; i < cases.n; i += 2) {
			memcpy(want + n, cases.c[i].expected, cases.c[i].expected_len);
			n += cases.c[i].expected_len;
		}
		char what[64];
		snprintf(what, sizeof(what), "conformance, %d lane(s) per call, %s", lanes, s ? "stderr" : "stdout");
		expect_file(s ? err_path : out_path, want, n, what);
		free(want);
	}
	printf("ok %zu conformance cases from a kernel (%d lane(s) per call), stdout and stderr identical to "
	       "snprintf\n",
	       cases.n, lanes);
}

/* ------------------------------------------------------------- 2. typed */

enum color { RED = 1, GREEN = 7 };

static __global__ void k_typed(gpusys_dev_t dev, const char *dstr, int *ret)
{
	const char *null_str = NULL;
	int i = 0;
	ret[i++] = gpusys_printf(dev, "%d %i %u %ld %lu %lld %llu|\n", -5, (short)-300, 7u, -9L, 10UL,
				 -9223372036854775807LL - 1, 18446744073709551615ULL);
	ret[i++] = gpusys_printf(dev, "%hhd %hhu %hd %hu %c %d|\n", (signed char)-3, (unsigned char)250, (short)-2,
				 (unsigned short)65535, 'Z', (char)65);
	ret[i++] = gpusys_printf(dev, "%f %e %g %a %.3f %10.4e|\n", 1.5f, 2.5, 1e-10, 0.1, -0.0f, 123456.789);
	ret[i++] = gpusys_printf(dev, "[%s] [%-12s] [%.3s] [%s]\n", dstr, "literal", dstr, null_str);
	ret[i++] = gpusys_printf(dev, "%p %p %p\n", (void *)0x1234, (const int *)0, (float *)0xdeadbeef0ull);
	ret[i++] = gpusys_printf(dev, "%d %d %x\n", RED, GREEN, true);
	ret[i++] = gpusys_fprintf(dev, GPUSYS_PRINT_STDERR, "to stderr %s %d\n", "ok", 42);
	ret[i++] = gpusys_puts(dev, "puts line");
	ret[i++] = gpusys_printf(dev, "no arguments at all\n");
	ret[i++] = gpusys_printf(dev, "%*d|%-*.*f|%.*s\n", 6, 42, 10, 2, 3.14159, 2, dstr);
	ret[i++] = gpusys_printf(dev, "refused %n\n", (int *)0);
	ret[i++] = gpusys_printf(dev, "wrong type %d\n", 1.0);
	ret[i++] = gpusys_printf(dev, "%zu %jd %td\n", (size_t)123, (long long)-4, (long)-5);
}

static int typed_child(void *)
{
	gpusys_t *g = child_attach();
	const char s[] = "device string";
	char *dstr;
	int *dret, ret[16];
	CK(cudaMalloc(&dstr, sizeof(s)));
	CK(cudaMemcpy(dstr, s, sizeof(s), cudaMemcpyHostToDevice));
	CK(cudaMalloc(&dret, sizeof(ret)));
	k_typed<<<1, 1>>>(gpusys_device(g), dstr, dret);
	CK(cudaGetLastError());
	if (gpusys_synchronize(g, NULL, 30000) != 0)
		return 4;
	CK(cudaMemcpy(ret, dret, sizeof(ret), cudaMemcpyDeviceToHost));
	if (child_flush(g) != 0)
		return 5;
	/* Return values, as bytes, into the error file's neighbour. */
	FILE *f = fopen(ret_path, "w");
	for (int i = 0; i < 13; i++)
		fprintf(f, "%d\n", ret[i]);
	fclose(f);
	gpusys_detach(g);
	return 0;
}

static void check_typed(void)
{
	GT_CHECK(run_child(typed_child, NULL) == 0, "typed child failed");
	char want[4096], line[512];
	size_t n = 0;
	int lens[16], k = 0;
	const char *s = "device string";
#define ADD(...)                                                                 \
	do {                                                                     \
		lens[k++] = snprintf(line, sizeof(line), __VA_ARGS__);           \
		n += (size_t)snprintf(want + n, sizeof(want) - n, "%s", line);   \
	} while (0)
	ADD("%d %i %u %ld %lu %lld %llu|\n", -5, -300, 7u, -9L, 10UL, -9223372036854775807LL - 1,
	    18446744073709551615ULL);
	ADD("%hhd %hhu %hd %hu %c %d|\n", -3, 250, -2, 65535, 'Z', 65);
	ADD("%f %e %g %a %.3f %10.4e|\n", 1.5, 2.5, 1e-10, 0.1, -0.0, 123456.789);
	const char *volatile null_str = NULL; /* glibc prints "(null)", as the daemon's does */
	ADD("[%s] [%-12s] [%.3s] [%s]\n", s, "literal", s, null_str);
	ADD("%p %p %p\n", (void *)0x1234, (void *)0, (void *)0xdeadbeef0ull);
	ADD("%d %d %x\n", 1, 7, 1);
	lens[k++] = (int)strlen("to stderr ok 42\n");
	ADD("puts line\n");
	ADD("no arguments at all\n");
	ADD("%*d|%-*.*f|%.*s\n", 6, 42, 10, 2, 3.14159, 2, s);
	lens[k++] = -EINVAL;
	lens[k++] = -EINVAL;
	ADD("%zu %jd %td\n", (size_t)123, (intmax_t)-4, (ptrdiff_t)-5);
#undef ADD
	expect_file(out_path, want, n, "typed calls, stdout");
	expect_file(err_path, "to stderr ok 42\n", 16, "typed calls, stderr");
	size_t rl;
	char *rets = slurp(ret_path, &rl);
	char *p = rets;
	for (int i = 0; i < k; i++) {
		int v = (int)strtol(p, &p, 10);
		GT_CHECK(v == lens[i], "typed call %d returned %d, want %d", i, v, lens[i]);
	}
	free(rets);
	printf("ok typed gpusys_printf/fprintf/puts calls: output and return values as printf's (%%n and a "
	       "double for %%d refused)\n");
}

/* ----------------------------------------------------- 3. while running */

static __global__ void k_wait_seen(gpusys_dev_t dev, volatile int *seen, int *rc)
{
	*rc = gpusys_printf(dev, "printed while the kernel runs\n");
	long long t0 = clock64();
	while (*seen == 0) {
		if (clock64() - t0 > 20000000000ll) { /* ~10 s: give up */
			*rc = -1;
			return;
		}
	}
}

static int running_child(void *)
{
	gpusys_t *g = child_attach();
	int *seen, *dseen, *drc, rc = -2;
	CK(cudaHostAlloc(&seen, sizeof(int), cudaHostAllocMapped));
	*seen = 0;
	CK(cudaHostGetDevicePointer(&dseen, seen, 0));
	CK(cudaMalloc(&drc, sizeof(int)));
	k_wait_seen<<<1, 1>>>(gpusys_device(g), dseen, drc);
	CK(cudaGetLastError());
	double t0 = gt_now();
	while (cases_file_size(out_path) < 30 && gt_now() - t0 < 10)
		usleep(1000);
	double ms = (gt_now() - t0) * 1e3;
	int seen_in_time = cases_file_size(out_path) == 30;
	*(volatile int *)seen = 1;
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(&rc, drc, sizeof(int), cudaMemcpyDeviceToHost));
	fprintf(diag, "test_gpu_print: line in the file %.2f ms after launch, before the kernel ended\n", ms);
	gpusys_detach(g);
	return seen_in_time && rc == 30 ? 0 : 1;
}

/* ----------------------------------------------------------- 4. all SMs */

#define SM_LINES 10

static __global__ void k_numbered(gpusys_dev_t dev, const char *pad, int *errors)
{
	for (int n = 0; n < SM_LINES; n++) {
		int padn = (int)((blockIdx.x + threadIdx.x + n) % 100);
		if (gpusys_printf(dev, "b%u t%u n%d %.*s|\n", blockIdx.x, threadIdx.x, n, padn, pad) <= 0)
			atomicAdd(errors, 1);
	}
}

struct grid_shape {
	int blocks, threads;
};

static int numbered_child(void *arg)
{
	grid_shape *gs = (grid_shape *)arg;
	gpusys_t *g = child_attach();
	char hpad[128], *pad;
	memset(hpad, '.', sizeof(hpad));
	hpad[127] = 0;
	int *derr, errors = 0;
	CK(cudaMalloc(&pad, sizeof(hpad)));
	CK(cudaMemcpy(pad, hpad, sizeof(hpad), cudaMemcpyHostToDevice));
	CK(cudaMalloc(&derr, sizeof(int)));
	CK(cudaMemset(derr, 0, sizeof(int)));
	double t0 = gt_now();
	k_numbered<<<gs->blocks, gs->threads>>>(gpusys_device(g), pad, derr);
	CK(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 120000);
	double t1 = gt_now();
	CK(cudaMemcpy(&errors, derr, sizeof(int), cudaMemcpyDeviceToHost));
	int frc = child_flush(g);
	double t2 = gt_now();
	double lines = (double)gs->blocks * gs->threads * SM_LINES;
	fprintf(diag, "test_gpu_print: %.0f lines from %d blocks x %d threads: kernel %.1f ms, written %.1f ms (%.2f M "
		      "lines/s)\n",
		lines, gs->blocks, gs->threads, (t1 - t0) * 1e3, (t2 - t0) * 1e3, lines / (t2 - t0) / 1e6);
	gpusys_detach(g);
	return rc || errors || frc ? 1 : 0;
}

static void check_numbered(int blocks, int threads)
{
	size_t len;
	char *buf = slurp(out_path, &len);
	GT_CHECK(blocks > 0 && threads > 0, "no threads");
	int *next = (int *)calloc((size_t)(unsigned)blocks * (unsigned)threads, sizeof(int));
	size_t lines = 0;
	for (size_t at = 0; at < len;) {
		const char *nl = (const char *)memchr(buf + at, '\n', len - at);
		GT_CHECK(nl, "torn last line at byte %zu", at);
		unsigned b, t;
		int n, off = 0;
		char line[256];
		size_t ll = (size_t)(nl - (buf + at));
		GT_CHECK(ll < sizeof(line), "line too long at byte %zu", at);
		memcpy(line, buf + at, ll);
		line[ll] = 0;
		GT_CHECK(sscanf(line, "b%u t%u n%d %n", &b, &t, &n, &off) == 3 && b < (unsigned)blocks &&
				 t < (unsigned)threads,
			 "bad line \"%s\"", line);
		size_t padn = (b + t + (unsigned)n) % 100;
		int *nx = &next[(size_t)b * threads + t];
		GT_CHECK(n == *nx && strlen(line + off) == padn + 1 && strspn(line + off, ".") == padn &&
				 line[off + padn] == '|',
			 "line out of order or torn: \"%s\" (want n=%d)", line, *nx);
		(*nx)++;
		lines++;
		at += ll + 1;
	}
	for (size_t i = 0; i < (size_t)blocks * threads; i++)
		GT_CHECK(next[i] == SM_LINES, "thread %zu: %d lines", i, next[i]);
	printf("ok %zu numbered lines from %d blocks x %d threads: each once, whole, in order per thread\n", lines,
	       blocks, threads);
	free(next);
	free(buf);
}

/* --------------------------------------------------------------- 5. trap */

#define TRAP_LINES 5

static __global__ void k_print_then_trap(gpusys_dev_t dev, unsigned *done, unsigned total)
{
	for (int n = 0; n < TRAP_LINES; n++)
		gpusys_printf(dev, "before the trap: block %u thread %u line %d\n", blockIdx.x, threadIdx.x, n);
	__threadfence();
	atomicAdd(done, 1u);
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		/* every thread has had its lines accepted: now die */
		while (atomicAdd(done, 0u) < total)
			;
		__trap();
	}
}

static int trap_child(void *arg)
{
	grid_shape *gs = (grid_shape *)arg;
	gpusys_t *g = child_attach();
	unsigned *done;
	CK(cudaMalloc(&done, sizeof(unsigned)));
	CK(cudaMemset(done, 0, sizeof(unsigned)));
	k_print_then_trap<<<gs->blocks, gs->threads>>>(gpusys_device(g), done,
						       (unsigned)(gs->blocks * gs->threads));
	int rc = gpusys_synchronize(g, NULL, 60000);
	fprintf(diag, "test_gpu_print: after __trap: gpusys_synchronize says %s\n", gpusys_strerror(rc));
	/* Die without detaching or flushing, as a crashed program does. */
	_exit(rc == -EIO ? 0 : 3);
}

static void check_trap(int blocks, int threads)
{
	size_t want = 0;
	char line[128];
	for (int b = 0; b < blocks; b++)
		for (int t = 0; t < threads; t++)
			for (int n = 0; n < TRAP_LINES; n++)
				want += (size_t)snprintf(line, sizeof(line),
							 "before the trap: block %d thread %d line %d\n", b, t, n);
	wait_settled(out_path, want);
	size_t len;
	char *buf = slurp(out_path, &len);
	GT_CHECK(len == want, "after the trap: %zu bytes in the file, want %zu", len, want);
	/* each thread's lines present, in order */
	GT_CHECK(blocks > 0 && threads > 0, "no threads");
	int *next = (int *)calloc((size_t)(unsigned)blocks * (unsigned)threads, sizeof(int));
	for (size_t at = 0; at < len;) {
		unsigned b, t;
		int n;
		GT_CHECK(sscanf(buf + at, "before the trap: block %u thread %u line %d\n", &b, &t, &n) == 3 &&
				 b < (unsigned)blocks && t < (unsigned)threads && next[b * threads + t] == n,
			 "bad line at byte %zu", at);
		next[b * threads + t]++;
		at = (size_t)((const char *)memchr(buf + at, '\n', len - at) - buf) + 1;
	}
	free(next);
	free(buf);
	printf("ok a kernel that printed %d lines and trapped: every line is in the file\n",
	       blocks * threads * TRAP_LINES);
}

int main(void)
{
	gt_name = "test_gpu_print";
	gt_require_gpu_forked();
	gt_start_daemon(NULL);
	snprintf(out_path, sizeof(out_path), "%.200s/print.out", gt_dir);
	snprintf(err_path, sizeof(err_path), "%.200s/print.err", gt_dir);
	snprintf(ret_path, sizeof(ret_path), "%.200s/print.ret", gt_dir);

	cases_build(&cases);
	check_conformance(1);
	check_conformance(32);
	check_typed();

	GT_CHECK(run_child(running_child, NULL) == 0, "the line did not reach the file while the kernel ran");
	printf("ok a line printed by a running kernel reached the file before the kernel ended\n");

	grid_shape gs = { 132 * 2, 128 };
	GT_CHECK(run_child(numbered_child, &gs) == 0, "numbered child failed");
	check_numbered(gs.blocks, gs.threads);

	grid_shape ts = { 16, 64 };
	GT_CHECK(run_child(trap_child, &ts) == 0, "trap child failed");
	check_trap(ts.blocks, ts.threads);

	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	cases_free(&cases);
	unlink(out_path);
	unlink(err_path);
	unlink(ret_path);
	gt_stop_daemon();
	printf("test_gpu_print: all passed\n");
	return 0;
}
