/* SPDX-License-Identifier: MIT */
/* The Prometheus endpoint (metrics_listen): parsed as text format 0.0.4. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/emulator.h"
#include "gpusys/gpusys.h"
#include "../daemon/harness.h"

/* GET path from 127.0.0.1:port; the whole response (malloc'd). */
static char *http_get(int port, const char *path)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	char req[128];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
	assert_int_equal(write(fd, req, (size_t)n), n);
	size_t cap = 1 << 20, got = 0;
	char *buf = malloc(cap);
	ssize_t r;
	while ((r = read(fd, buf + got, cap - 1 - got)) > 0)
		got += (size_t)r;
	buf[got] = 0;
	close(fd);
	return buf;
}

/* The value of the sample line that starts with prefix (then a space). */
static double sample(const char *body, const char *prefix)
{
	size_t n = strlen(prefix);
	for (const char *p = body; (p = strstr(p, prefix)); p++)
		if ((p == body || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	fail_msg("no sample %s", prefix);
	return -1;
}

static void test_metrics(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "metrics_listen = 127.0.0.1:0\nstats = 1\npollers = 1\n");
	/* The port it took, from its log. */
	int port = 0;
	for (int i = 0; i < 200 && !port; i++) {
		char *log = gd_log(&d), *p = strstr(log, "http://127.0.0.1:");
		if (p)
			port = atoi(p + strlen("http://127.0.0.1:"));
		free(log);
		if (!port)
			usleep(10000);
	}
	assert_true(port > 0);

	gpusys_t *c;
	struct gpusys_emu *emu;
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 2,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	for (int i = 0; i < 40; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);

	char *resp = http_get(port, "/metrics");
	assert_true(!strncmp(resp, "HTTP/1.0 200", 12) || !strncmp(resp, "HTTP/1.1 200", 12));
	assert_non_null(strstr(resp, "Content-Type: text/plain; version=0.0.4"));
	char *body = strstr(resp, "\r\n\r\n");
	assert_non_null(body);
	body += 4;
	assert_true(sample(body, "gpusysd_requests_total{opcode=\"0x0001\",name=\"noop\"}") == 40);
	assert_true(sample(body, "gpusysd_clients") == 1);
	assert_non_null(strstr(body, "# TYPE gpusysd_request_latency_seconds histogram"));
	/* Every line is a comment or NAME{LABELS} VALUE, no pid label; each
	 * histogram's buckets are cumulative and +Inf equals _count. */
	double last = -1;
	char *save = NULL, *copy = strdup(body);
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (l[0] == '#')
			continue;
		assert_null(strstr(l, "pid"));
		char *sp = strrchr(l, ' ');
		assert_non_null(sp);
		char *end;
		double v = strtod(sp + 1, &end);
		assert_true(*end == 0);
		if (strstr(l, "_bucket{")) {
			if (strstr(l, "le=\"+Inf\"")) {
				char name[256];
				snprintf(name, sizeof(name), "%.*s", (int)(strstr(l, ",le=") - l), l);
				char *b = strstr(name, "_bucket{");
				memmove(b + strlen("_count{") - 1, b + strlen("_bucket{") - 1, strlen(b + strlen("_bucket{") - 1) + 1);
				memcpy(b, "_count{", strlen("_count{"));
				strcat(name, "}");
				assert_true(sample(body, name) == v);
				assert_true(v >= last);
				last = -1;
			} else {
				assert_true(v >= last);
				last = v;
			}
		}
	}
	free(copy);
	free(resp);

	resp = http_get(port, "/other");
	assert_non_null(strstr(resp, "404"));
	free(resp);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_metrics) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
