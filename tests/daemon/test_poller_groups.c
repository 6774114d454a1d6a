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
	/* One GPU: config_auto_pollers of every CPU, as a one-GPU daemon. */
	assert_int_equal(groups_auto_per_gpu(16, 1, 8), config_auto_pollers(16));
	assert_int_equal(groups_auto_per_gpu(16, 1, 8), 8);
	/* Two GPUs share the CPUs: 8 each, so 4 pollers each. */
	assert_int_equal(groups_auto_per_gpu(16, 2, 8), 4);
	assert_int_equal(groups_auto_per_gpu(32, 2, 8), 8);
	assert_int_equal(groups_auto_per_gpu(128, 8, 8), 8);
	/* Never more than pollers, the default group's count. */
	assert_int_equal(groups_auto_per_gpu(32, 2, 3), 3);
	assert_int_equal(groups_auto_per_gpu(128, 1, 2), 2);
	/* Fewer CPUs than GPUs, or no GPU counted yet: still one each. */
	assert_int_equal(groups_auto_per_gpu(2, 2, 8), 1);
	assert_int_equal(groups_auto_per_gpu(1, 4, 8), 1);
	assert_int_equal(groups_auto_per_gpu(8, 0, 8), config_auto_pollers(8));
	assert_int_equal(groups_auto_per_gpu(8, 0, 8), 4);
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
