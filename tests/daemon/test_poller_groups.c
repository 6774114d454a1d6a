/* SPDX-License-Identifier: MIT */
/* Poller groups' automatic count per GPU (pollers_per_gpu = 0): the CPUs'
 * share per GPU, at most pollers, and what still fits the progress slots. */
#include <stdarg.h>
#include <stddef.h>
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

static void test_fit_per_gpu(void **state)
{
	(void)state;
	/* All fit: unchanged. */
	assert_int_equal(groups_fit_per_gpu(4, 2, 8), 4);
	assert_int_equal(groups_fit_per_gpu(4, 2, 50), 4);
	/* Too few slots: an even share of those left. */
	assert_int_equal(groups_fit_per_gpu(8, 2, 9), 4);
	assert_int_equal(groups_fit_per_gpu(8, 3, 10), 3);
	assert_int_equal(groups_fit_per_gpu(8, 8, 16), 2);
	/* Fewer slots than GPUs, or none: 1, which then does not fit (the GPU
	 * has no pollers and its clients are told why), never 0. */
	assert_int_equal(groups_fit_per_gpu(8, 4, 3), 1);
	assert_int_equal(groups_fit_per_gpu(8, 2, 0), 1);
	/* The last GPU gets what is left. */
	assert_int_equal(groups_fit_per_gpu(8, 1, 5), 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auto_per_gpu),
		cmocka_unit_test(test_fit_per_gpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
