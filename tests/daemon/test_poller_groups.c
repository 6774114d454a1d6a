/* SPDX-License-Identifier: MIT */
/* Poller groups' automatic counts per GPU (pollers_per_gpu = 0,
 * workers_per_gpu = 0): the CPUs' share per GPU, and what still fits the
 * progress slots. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <setjmp.h>
#include <cmocka.h>

#include "poller_groups.h"
#include "util/config_file.h"

static void test_auto_per_gpu(void **state)
{
	(void)state;
	/* Three quarters of each GPU's share of the CPUs. */
	assert_int_equal(groups_auto_per_gpu(16, 1), 12);
	assert_int_equal(groups_auto_per_gpu(16, 2), 6);
	assert_int_equal(groups_auto_per_gpu(32, 2), 12);
	assert_int_equal(groups_auto_per_gpu(128, 8), 12);
	assert_int_equal(groups_auto_per_gpu(4, 1), 3);
	/* Fewer CPUs than that makes whole pollers, or no GPU counted yet:
	 * still one each, or the share of all CPUs. */
	assert_int_equal(groups_auto_per_gpu(2, 2), 1);
	assert_int_equal(groups_auto_per_gpu(1, 4), 1);
	assert_int_equal(groups_auto_per_gpu(2, 1), 1);
	assert_int_equal(groups_auto_per_gpu(8, 0), 6);
}

/* fit(p, w, auto_p, auto_w, gpus, slots) as "pollers,workers". */
static const char *fit(unsigned p, unsigned w, bool ap, bool aw, unsigned gpus, unsigned slots)
{
	static char buf[32];
	struct group_size s = groups_fit_per_gpu((struct group_size){ p, w }, ap, aw, gpus, slots);
	snprintf(buf, sizeof(buf), "%u,%u", s.pollers, s.workers);
	return buf;
}

static void test_fit_per_gpu(void **state)
{
	(void)state;
	/* All fit: unchanged, automatic or not. */
	assert_string_equal(fit(4, 4, true, true, 2, 16), "4,4");
	assert_string_equal(fit(4, 4, false, false, 2, 50), "4,4");
	assert_string_equal(fit(4, 1, true, false, 2, 10), "4,1");
	/* Too few slots, both automatic: an even share of those left, a
	 * quarter of it (at most the workers wanted) for workers. */
	assert_string_equal(fit(8, 4, true, true, 2, 20), "8,2"); /* share 10 */
	assert_string_equal(fit(12, 4, true, true, 8, 51), "5,1"); /* share 6: eight GPUs after 8 + 4 */
	assert_string_equal(fit(12, 4, true, true, 2, 31), "12,3"); /* share 15 */
	assert_string_equal(fit(16, 8, true, true, 2, 31), "12,3"); /* share 15 */
	/* One count asked for: it stays, the automatic one takes the rest. */
	assert_string_equal(fit(8, 4, false, true, 2, 20), "8,2");
	assert_string_equal(fit(8, 4, true, false, 2, 20), "6,4");
	assert_string_equal(fit(8, 4, false, false, 2, 20), "8,4"); /* does not fit: the group says so */
	/* Fewer slots than that, or none: 1 each, which then does not fit
	 * (the GPU has no pollers and its clients are told why), never 0. */
	assert_string_equal(fit(8, 4, true, true, 4, 3), "1,1");
	assert_string_equal(fit(8, 4, true, true, 2, 0), "1,1");
	assert_string_equal(fit(8, 4, true, false, 2, 4), "1,4");
	assert_string_equal(fit(8, 4, false, true, 2, 4), "8,1");
	/* The last GPU gets what is left. */
	assert_string_equal(fit(8, 4, true, true, 1, 5), "4,1");
	assert_string_equal(fit(8, 4, true, false, 1, 9), "5,4");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auto_per_gpu),
		cmocka_unit_test(test_fit_per_gpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
