/* SPDX-License-Identifier: MIT */
/*
 * perf (issue 14): one emulated warp's NOOP round trip through the real
 * gpusysd stays within 2x its floor, p50 against p50.
 *
 * gpusys-bench ($GPUSYS_BENCH_BIN) measures both in one run: the floor
 * first (two processes ping-ponging a word through a shared page,
 * bench/floor_cpu.c), then NOOPs through the gpusysd ($GPUSYSD_BIN) it
 * starts on a private runtime directory, and prints their "ratio". Both in
 * one run so that the bound is relative to this machine.
 *
 * NOTE: relative, not independent of it. On the 2-vCPU development VM
 * (2026-11-25) the floor is 0.4-0.6 us most of the time and the ratio
 * 1.3-2.1. But for minutes at a time the floor drops to 0.11-0.17 us (why
 * is not established; the host's placement of the two vCPUs would fit)
 * while the NOOP drops only to 0.30-0.45 us: its 0.2-0.3 us of protocol
 * work above the floor does not shrink with it, and the ratio is 2.1-3.2,
 * with this code and with the code of 2026-11-21 whose 1.60-1.88x set the
 * target. A floor that fast is two vCPUs placed so that a cache line
 * crosses between them in ~60 ns, a state the 2x bound was never measured
 * in and cannot hold in (the NOOP moves more than one line each way). So an
 * attempt whose floor is under MIN_FLOOR_NS is reported as not comparable
 * and counts neither way; if no attempt was comparable the test is
 * skipped (exit 77) with that reason. Before this rule, 3 of 32 runs there
 * failed, every attempt at 2.08-2.94.
 *
 * A 2-core CI machine is noisy: a job beside us can take a core for a
 * while. So up to ATTEMPTS runs, and the test passes on the first within
 * the bound; a real regression fails all of them. Every attempt's figures
 * go to stdout, for the CI log.
 *
 * GPUSYS_PERF_MAX_RATIO (default 2.0) lowers the bound, to see that the
 * test can fail (1.0 did in every run here). It cannot raise it: a value
 * above 2.0 fails the test, so nothing loosens the bound silently.
 * scripts/test does not set it.
 *
 * Sanitized builds (meson defines GPUSYS_PERF_SANITIZED) skip, exit 77 with
 * the reason: the protocol code slows down under them, the floor's bare
 * loop hardly (ASan+UBSan: ratio 3.8 on the VM).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "../daemon/harness.h"

#define MAX_RATIO 2.0
/* 10, not 5: on 2026-11-29 the VM's NOOP p50 was bimodal, 330-600 ns or
 * 770-900 ns, switching between attempts, for this tree and for 0f95f9d's
 * alike (floors 320-400 ns), so an attempt's ratio was 1.0-1.5 or
 * 2.2-2.7; with 5 attempts 2 of 5 runs there found none in the fast state
 * (one of them a full local CI run). A real regression still fails every
 * attempt; the bound is unchanged. */
#define ATTEMPTS 10
/* Below this floor p50 an attempt is not comparable (see above). */
#define MIN_FLOOR_NS 250
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Set when the test skips for the machine's state: main says why. */
static const char *skip_reason;
/* 100 000 calls after 10 001 warm-up calls, as in bench/RESULTS.md: ~0.3 s
 * a run on the quiet 2-vCPU VM. Not fewer: there a session's
 * first calls are at times ~0.3 ms each, for up to several seconds, and
 * only this many keep them out of the p50 (at 10 000, one run in six had a
 * p50 of 0.3 ms). */
#define ITERS "100000"
/* Past this a run is a failed attempt: the machine is too busy to time. */
#define RUN_MS 10000

static double max_ratio(void)
{
	const char *v = getenv("GPUSYS_PERF_MAX_RATIO");
	if (!v || !*v)
		return MAX_RATIO;
	char *end;
	errno = 0;
	double r = strtod(v, &end);
	if (errno || *end || !(r > 0 && r <= MAX_RATIO))
		fail_msg("GPUSYS_PERF_MAX_RATIO=%s: must be a number in (0, %.1f]; it can only tighten the bound",
			 v, MAX_RATIO);
	return r;
}

/* The bench's JSON line (the daemon's log goes to stderr, but look for it
 * rather than trust that). Fails the test if there is none. */
static json_t *bench_json(const char *out, const char *err)
{
	for (const char *line = out; *line;) {
		size_t n = strcspn(line, "\n");
		json_error_t je;
		json_t *j = *line == '{' ? json_loadb(line, n, 0, &je) : NULL;
		if (j)
			return j;
		line += n;
		line += *line == '\n';
	}
	fail_msg("no JSON line from gpusys-bench:\n%s\n%s", out, err);
	return NULL;
}

static void noop_within_2x_floor(void **state)
{
	(void)state;
#ifdef GPUSYS_PERF_SANITIZED
	skip(); /* main says why */
#endif
	const char *bench = test_env("GPUSYS_BENCH_BIN");
	const char *gpusysd = test_env("GPUSYSD_BIN");
	const char *argv[] = { bench, "rtt", "--emulate", "--daemon", gpusysd, "--warps", "1", "--lanes", "32",
			       "--iters", ITERS, "--json", NULL };
	double bound = max_ratio();
	int compared = 0, timed_out = 0;

	for (int a = 1; a <= ATTEMPTS; a++) {
		char *out, *err;
		long t0 = now_ms();
		int st = run_capture_ms(argv, RUN_MS, &out, &err);
		long ms = now_ms() - t0;
		if (st < 0) {
			printf("attempt %d/%d: not done within %d ms: failed\n", a, ATTEMPTS, RUN_MS);
			timed_out++;
		} else {
			/* A bench that cannot run is broken, not slow. */
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
				fail_msg("gpusys-bench failed (status 0x%x):\n%s", st, err);
			json_t *j = bench_json(out, err);
			json_int_t floor_ns = 0, p50_ns = 0;
			double ratio = 0;
			if (json_unpack(j, "{s:I, s:I, s:F}", "floor_p50_ns", &floor_ns, "p50_ns", &p50_ns, "ratio",
					&ratio))
				fail_msg("gpusys-bench JSON lacks floor_p50_ns, p50_ns or ratio: %s", out);
			json_decref(j);
			/* A bench that reports nothing measured is broken; it
			 * must not read as a fast floor and skip. */
			if (floor_ns <= 0 || p50_ns <= 0)
				fail_msg("gpusys-bench measured nothing (floor %lld ns, NOOP %lld ns): %s", (long long)floor_ns,
					 (long long)p50_ns, out);
			if (floor_ns < MIN_FLOOR_NS) {
				printf("attempt %d/%d: floor p50 %lld ns, NOOP p50 %lld ns, ratio %.3f: floor under %d ns, "
				       "not comparable\n",
				       a, ATTEMPTS, (long long)floor_ns, (long long)p50_ns, ratio, MIN_FLOOR_NS);
				fflush(stdout);
				free(out);
				free(err);
				if (a < ATTEMPTS)
					sleep(1);
				continue;
			}
			compared++;
			bool ok = ratio <= bound;
			printf("attempt %d/%d: floor p50 %lld ns, NOOP p50 %lld ns, ratio %.3f (bound %.2f), %ld ms: %s\n",
			       a, ATTEMPTS, (long long)floor_ns, (long long)p50_ns, ratio, bound, ms,
			       ok ? "ok" : "over");
			fflush(stdout);
			if (ok) {
				free(out);
				free(err);
				return;
			}
		}
		free(out);
		free(err);
		/* A burst of load beside us may pass in the meantime. */
		if (a < ATTEMPTS)
			sleep(1);
	}
	/* Skipped only when every attempt ran and none was comparable: an
	 * attempt that ran out of time is a failure (a hung or very slow
	 * daemon), not a machine state. */
	if (!compared && !timed_out) {
		skip_reason = "every attempt's floor was under " STRINGIFY(MIN_FLOOR_NS) " ns: not comparable on this machine now";
		skip();
	}
	fail_msg("NOOP p50 over %.2fx its floor in all %d comparable attempts, %d attempts out of time (each one's "
		 "figures on stdout)",
		 bound, compared, timed_out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(noop_within_2x_floor),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (!rc && skip_reason) {
		fprintf(stderr, "SKIP: %s\n", skip_reason);
		return 77;
	}
#ifdef GPUSYS_PERF_SANITIZED
	/* Exit 77, so that meson counts it as skipped, not passed; scripts/test
	 * lists it with this line, the last one that mentions skipping. */
	fprintf(stderr, "SKIP: built with -Db_sanitize=%s: sanitized code is too slow for a timing bound\n",
		GPUSYS_PERF_SANITIZED);
	return rc ? rc : 77;
#else
	return rc;
#endif
}
