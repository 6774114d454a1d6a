/* SPDX-License-Identifier: MIT */
/*
 * The HTTP/1.x request head parser of examples/gpu_httpd.cu, shared with its
 * CPU peer (bench/http_cpu.c) so that both answer every request alike, and
 * tested on the host (tests/socket/test_http_request.c). Plain C without the
 * C library, compiled for the device by nvcc and for the host by any C
 * compiler.
 *
 * The path is percent-decoded (RFC 3986 2.1) before it is checked, and then
 * checked segment by segment as the file system will read it: an encoded
 * "/" (%2F) becomes a separator like any other, so "..%2F" or "%2e%2e" is a
 * ".." segment and refused (403) like a literal one; an encoded NUL (%00)
 * would cut the path short in open(2) and is refused (400), as is a "%"
 * not followed by two hex digits. What follows "?" or "#" is not part of the
 * path.
 */
#ifndef GPUSYS_EXAMPLES_HTTP_REQUEST_H
#define GPUSYS_EXAMPLES_HTTP_REQUEST_H

#include <stdbool.h>

#ifdef __CUDACC__
#define HTTP_FN static __host__ __device__ inline
#else
#define HTTP_FN static inline
#endif

#define HTTP_HEAD_MAX 8192u /* a longer head is 400 */

enum http_method { HTTP_GET, HTTP_HEAD, HTTP_OTHER };

struct http_request {
	enum http_method method;
	bool keep_alive; /* HTTP/1.1 unless "Connection: close"; 1.0 with "Connection: keep-alive" */
	unsigned path_len; /* of the decoded path (from "/", "index.html" added to a directory), NUL-terminated */
};

/* The length of the head in buf[0..n) (through its blank line), or 0 while
 * it is incomplete. */
HTTP_FN unsigned http_head_end(const char *buf, unsigned n)
{
	for (unsigned i = 3; i < n; i++)
		if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
			return i + 1;
	return 0;
}

HTTP_FN char http_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Whether s[0..n) starts with p (lower case), ignoring case. */
HTTP_FN bool http_starts_ci(const char *s, unsigned n, const char *p)
{
	unsigned i = 0;
	for (; p[i]; i++)
		if (i >= n || http_lower(s[i]) != p[i])
			return false;
	return true;
}

HTTP_FN int http_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = http_lower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decode target[0..n) into path (room bytes, NUL-terminated), with
 * "index.html" after a final "/". 0 or the HTTP status to answer. */
HTTP_FN int http_decode_path(const char *target, unsigned n, char *path, unsigned room, unsigned *ret_len)
{
	static const char index_html[] = "index.html";
	if (n == 0 || target[0] != '/')
		return 400;
	unsigned o = 0;
	for (unsigned i = 0; i < n && target[i] != '?' && target[i] != '#'; i++) {
		char c = target[i];
		if (c == '%') {
			int hi = i + 2 < n ? http_hex(target[i + 1]) : -1;
			int lo = hi >= 0 ? http_hex(target[i + 2]) : -1;
			if (lo < 0)
				return 400;
			c = (char)(hi << 4 | lo);
			i += 2;
			if (c == 0)
				return 400;
		}
		if (o + 1 >= room)
			return 414;
		path[o++] = c;
	}
	/* Segments as open(2) will see them: no "..". */
	for (unsigned i = 0; i + 2 < o; i++)
		if (path[i] == '/' && path[i + 1] == '.' && path[i + 2] == '.' && (i + 3 == o || path[i + 3] == '/'))
			return 403;
	if (path[o - 1] == '/') {
		if (o + sizeof(index_html) > room)
			return 414;
		for (unsigned i = 0; i < sizeof(index_html); i++)
			path[o + i] = index_html[i];
		o += sizeof(index_html) - 1;
	}
	path[o] = 0;
	*ret_len = o;
	return 0;
}

/* Parse the head buf[0..head_len) (http_head_end's length) into r, the
 * decoded path into path (room bytes). 0, or the status to answer (400,
 * 403, 414; 501 for a method other than GET and HEAD, with r->keep_alive
 * set). After a 400 the connection should close. */
HTTP_FN int http_parse_request(const char *buf, unsigned head_len, struct http_request *r, char *path, unsigned room)
{
	r->method = HTTP_OTHER;
	r->keep_alive = false;
	r->path_len = 0;
	/* Request line: METHOD SP target SP HTTP/1.x CRLF */
	unsigned eol = 0, sp1 = 0, sp2 = 0;
	while (eol < head_len && buf[eol] != '\r')
		eol++;
	for (unsigned i = 0; i < eol; i++) {
		if (buf[i] != ' ')
			continue;
		if (!sp1)
			sp1 = i;
		else if (!sp2)
			sp2 = i;
		else
			return 400; /* a space in the target */
	}
	if (!sp1 || !sp2 || sp2 == sp1 + 1 || eol - sp2 - 1 != 8 || !http_starts_ci(buf + sp2 + 1, 8, "http/1.") ||
	    (buf[sp2 + 8] != '0' && buf[sp2 + 8] != '1'))
		return 400;
	r->keep_alive = buf[sp2 + 8] == '1';
	/* Connection: close / keep-alive, in any header line. */
	for (unsigned i = eol + 2; i + 11 < head_len; i++) {
		if (buf[i - 1] != '\n' || !http_starts_ci(buf + i, head_len - i, "connection:"))
			continue;
		unsigned j = i + 11;
		while (j < head_len && (buf[j] == ' ' || buf[j] == '\t'))
			j++;
		if (http_starts_ci(buf + j, head_len - j, "close"))
			r->keep_alive = false;
		else if (http_starts_ci(buf + j, head_len - j, "keep-alive"))
			r->keep_alive = true;
	}
	if (sp1 == 3 && buf[0] == 'G' && buf[1] == 'E' && buf[2] == 'T')
		r->method = HTTP_GET;
	else if (sp1 == 4 && buf[0] == 'H' && buf[1] == 'E' && buf[2] == 'A' && buf[3] == 'D')
		r->method = HTTP_HEAD;
	else
		r->method = HTTP_OTHER;
	if (r->method == HTTP_OTHER)
		return 501;
	return http_decode_path(buf + sp1 + 1, sp2 - sp1 - 1, path, room, &r->path_len);
}

/* The status line's text for a status http_parse_request returns (400,
 * 403, 414; anything else is 501), as both servers answer it. */
HTTP_FN const char *http_status_text(int status)
{
	switch (status) {
	case 400:
		return "400 Bad Request";
	case 403:
		return "403 Forbidden";
	case 414:
		return "414 URI Too Long";
	default:
		return "501 Not Implemented";
	}
}

#endif
