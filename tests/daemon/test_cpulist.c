/* SPDX-License-Identifier: MIT */
/* CPU lists as sysfs writes them (poller_groups.c pins threads with them). */
#include <errno.h>
#include <sched.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "util/cpulist.h"

static void test_parse(void **state)
{
	cpu_set_t s;
	(void)state;
	assert_int_equal(cpulist_parse("0-3,8,10-11\n", &s), 0);
	assert_int_equal(CPU_COUNT(&s), 7);
	assert_true(CPU_ISSET(0, &s) && CPU_ISSET(3, &s) && CPU_ISSET(8, &s) && CPU_ISSET(11, &s));
	assert_false(CPU_ISSET(4, &s) || CPU_ISSET(9, &s));
	assert_int_equal(cpulist_parse("5", &s), 0);
	assert_int_equal(CPU_COUNT(&s), 1);
	assert_int_equal(cpulist_parse("", &s), 0); /* a node without CPUs */
	assert_int_equal(CPU_COUNT(&s), 0);
	assert_int_equal(cpulist_parse("3-1", &s), -EINVAL);
	assert_int_equal(cpulist_parse("1,,2", &s), -EINVAL);
	assert_int_equal(cpulist_parse("a", &s), -EINVAL);
	assert_int_equal(cpulist_parse("1-", &s), -EINVAL);
	assert_int_equal(cpulist_parse("99999", &s), -EINVAL);
	assert_int_equal(cpulist_parse("1\n2", &s), -EINVAL);
}

/* Node 0 exists on every Linux host with sysfs: its list parses and is
 * not empty. */
static void test_node0(void **state)
{
	cpu_set_t s;
	(void)state;
	int r = cpulist_of_node(0, &s);
	if (r == -ENOENT)
		skip(); /* no /sys/devices/system/node here */
	assert_int_equal(r, 0);
	assert_true(CPU_COUNT(&s) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_parse), cmocka_unit_test(test_node0) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
