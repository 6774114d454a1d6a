/* SPDX-License-Identifier: MIT */
/*
 * The HTTP request parser gpu_httpd and its CPU peer share
 * (examples/http_request.h), on the host: request lines, keep-alive, and
 * percent-decoding that never lets a path leave the served directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../examples/http_request.h"

/* Parse head (complete) into *r and path; the status. */
static int parse(const char *head, struct http_request *r, char *path, unsigned room)
{
	unsigned n = (unsigned)strlen(head);
	unsigned end = http_head_end(head, n);
	assert_int_equal(end, n);
	memset(r, 0, sizeof(*r));
	memset(path, 'x', room);
	return http_parse_request(head, end, r, path, room);
}

/* The status for a GET of target over HTTP/1.1, and the decoded path. */
static int get(const char *target, char *path, unsigned room)
{
	char head[1024];
	snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
	struct http_request r;
	return parse(head, &r, path, room);
}

static void test_head_end(void **s)
{
	(void)s;
	const char *h = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next";
	assert_int_equal(http_head_end(h, (unsigned)strlen(h)), strlen("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
	assert_int_equal(http_head_end(h, 20), 0);
	assert_int_equal(http_head_end("GET / HTTP/1.1\r\n\n", 17), 0);
	assert_int_equal(http_head_end("", 0), 0);
}

static void test_request_line(void **s)
{
	(void)s;
	struct http_request r;
	char path[256];
	assert_int_equal(parse("GET /a.txt HTTP/1.1\r\n\r\n", &r, path, sizeof(path)), 0);
	assert_int_equal(r.method, HTTP_GET);
	assert_true(r.keep_alive);
	assert_string_equal(path, "/a.txt");
	assert_int_equal(r.path_len, 6);
	assert_int_equal(parse("HEAD /a HTTP/1.0\r\n\r\n", &r, path, sizeof(path)), 0);
	assert_int_equal(r.method, HTTP_HEAD);
	assert_false(r.keep_alive);
	assert_int_equal(parse("POST /a HTTP/1.1\r\n\r\n", &r, path, sizeof(path)), 501);
	assert_true(r.keep_alive);
	assert_int_equal(parse("get /a HTTP/1.1\r\n\r\n", &r, path, sizeof(path)), 501); /* methods are case-sensitive */
	assert_int_equal(parse("GET /a HTTP/2.0\r\n\r\n", &r, path, sizeof(path)), 400);
	assert_int_equal(parse("GET /a\r\n\r\n", &r, path, sizeof(path)), 400);
	assert_int_equal(parse("GET  /a HTTP/1.1\r\n\r\n", &r, path, sizeof(path)), 400);
	assert_int_equal(parse("GET /a b HTTP/1.1\r\n\r\n", &r, path, sizeof(path)), 400);
	assert_int_equal(parse("GET a HTTP/1.1\r\n\r\n", &r, path, sizeof(path)), 400);
	assert_int_equal(parse("\r\n\r\n", &r, path, sizeof(path)), 400);
}

static void test_keep_alive(void **s)
{
	(void)s;
	struct http_request r;
	char path[256];
	assert_int_equal(parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &r, path, sizeof(path)), 0);
	assert_false(r.keep_alive);
	assert_int_equal(parse("GET / HTTP/1.1\r\nconnection:Close\r\n\r\n", &r, path, sizeof(path)), 0);
	assert_false(r.keep_alive);
	assert_int_equal(parse("GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", &r, path, sizeof(path)), 0);
	assert_true(r.keep_alive);
	/* a header value that only mentions it is not the header */
	assert_int_equal(parse("GET / HTTP/1.1\r\nX-Note: connection: close\r\n\r\n", &r, path, sizeof(path)), 0);
	assert_true(r.keep_alive);
}

static void test_paths(void **s)
{
	(void)s;
	char path[256];
	assert_int_equal(get("/", path, sizeof(path)), 0);
	assert_string_equal(path, "/index.html");
	assert_int_equal(get("/docs/", path, sizeof(path)), 0);
	assert_string_equal(path, "/docs/index.html");
	assert_int_equal(get("/a.txt?x=1&y=%00", path, sizeof(path)), 0); /* the query is not the path */
	assert_string_equal(path, "/a.txt");
	assert_int_equal(get("/a.txt#frag", path, sizeof(path)), 0);
	assert_string_equal(path, "/a.txt");
	assert_int_equal(get("/a..b/c..", path, sizeof(path)), 0); /* ".." inside a name is a name */
	assert_string_equal(path, "/a..b/c..");
	assert_int_equal(get("/..", path, sizeof(path)), 403);
	assert_int_equal(get("/../etc/passwd", path, sizeof(path)), 403);
	assert_int_equal(get("/a/../../b", path, sizeof(path)), 403);
}

static void test_percent_decoding(void **s)
{
	(void)s;
	char path[256];
	assert_int_equal(get("/with%20space.txt", path, sizeof(path)), 0);
	assert_string_equal(path, "/with space.txt");
	assert_int_equal(get("/%41%62%63", path, sizeof(path)), 0);
	assert_string_equal(path, "/Abc");
	assert_int_equal(get("/caf%C3%A9", path, sizeof(path)), 0);
	assert_string_equal(path, "/caf\xc3\xa9");
	assert_int_equal(get("/100%25", path, sizeof(path)), 0);
	assert_string_equal(path, "/100%");
	assert_int_equal(get("/q%3Fx", path, sizeof(path)), 0); /* an encoded "?" is part of the name */
	assert_string_equal(path, "/q?x");
	/* an encoded "/" is a separator once decoded: within DIR it is fine */
	assert_int_equal(get("/a%2Fb", path, sizeof(path)), 0);
	assert_string_equal(path, "/a/b");
	/* and never escapes it */
	assert_int_equal(get("/..%2F..%2Fetc%2Fpasswd", path, sizeof(path)), 403);
	assert_int_equal(get("/a%2F..%2F..%2Fx", path, sizeof(path)), 403);
	assert_int_equal(get("/%2e%2e/x", path, sizeof(path)), 403);
	assert_int_equal(get("/%2E%2E", path, sizeof(path)), 403);
	assert_int_equal(get("/.%2e/x", path, sizeof(path)), 403);
	/* NUL would cut the path short: refused, also inside a segment */
	assert_int_equal(get("/%00", path, sizeof(path)), 400);
	assert_int_equal(get("/a.txt%00.html", path, sizeof(path)), 400);
	assert_int_equal(get("/..%00/x", path, sizeof(path)), 400);
	/* malformed escapes */
	assert_int_equal(get("/a%", path, sizeof(path)), 400);
	assert_int_equal(get("/a%2", path, sizeof(path)), 400);
	assert_int_equal(get("/a%zz", path, sizeof(path)), 400);
	assert_int_equal(get("/a%2g", path, sizeof(path)), 400);
}

static void test_room(void **s)
{
	(void)s;
	char path[16];
	assert_int_equal(get("/0123456789abcd", path, sizeof(path)), 0); /* 15 bytes and the NUL */
	assert_string_equal(path, "/0123456789abcd");
	assert_int_equal(get("/0123456789abcde", path, sizeof(path)), 414);
	assert_int_equal(get("/012/", path, sizeof(path)), 0); /* "/012/index.html" is 16 with its NUL */
	assert_string_equal(path, "/012/index.html");
	assert_int_equal(get("/0123/", path, sizeof(path)), 414);
	/* decoding shrinks: what counts is the decoded length */
	assert_int_equal(get("/%41%41%41%41%41%41%41%41%41%41%41%41%41%41", path, sizeof(path)), 0);
	assert_int_equal(strlen(path), 15);
	assert_int_equal(path[15], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_head_end),
		cmocka_unit_test(test_request_line),
		cmocka_unit_test(test_keep_alive),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_percent_decoding),
		cmocka_unit_test(test_room),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
