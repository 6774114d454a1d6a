/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/listen_addr.h"

int listen_addr_parse(const char *spec, char *host, size_t hostlen, unsigned *port, char *err, size_t errlen)
{
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec) {
		snprintf(err, errlen, "'%s': expected HOST:PORT (127.0.0.1:9464, [::1]:9464) or none", spec);
		return -EINVAL;
	}
	/* Digits only, at most five: strtol would take "+1", " 1" and
	 * 99999999999999999999 (as LONG_MAX). */
	const char *p = colon + 1;
	size_t nd = strspn(p, "0123456789");
	if (nd == 0 || p[nd] || nd > 5) {
		snprintf(err, errlen, "'%s': the port '%s' is not a number 0..65535", spec, p);
		return -EINVAL;
	}
	unsigned long v = 0;
	for (size_t i = 0; i < nd; i++)
		v = v * 10 + (unsigned long)(p[i] - '0');
	if (v > 65535) {
		snprintf(err, errlen, "'%s': port %lu is past 65535", spec, v);
		return -EINVAL;
	}
	const char *h = spec;
	size_t hl = (size_t)(colon - spec);
	if (h[0] == '[') { /* [::1]:9464 */
		if (hl < 3 || h[hl - 1] != ']') {
			snprintf(err, errlen, "'%s': expected [IPv6]:PORT", spec);
			return -EINVAL;
		}
		h++;
		hl -= 2;
	}
	for (size_t i = 0; i < hl; i++) {
		if (isspace((unsigned char)h[i]) || h[i] == '[' || h[i] == ']' || h[i] == '/') {
			snprintf(err, errlen, "'%s': '%.*s' is no host name or address", spec, (int)hl, h);
			return -EINVAL;
		}
	}
	if (host) {
		if (hl >= hostlen) {
			snprintf(err, errlen, "'%s': host name too long", spec);
			return -EINVAL;
		}
		memcpy(host, h, hl);
		host[hl] = 0;
	}
	if (port)
		*port = (unsigned)v;
	return 0;
}

int listen_addr_open(const char *spec, char *err, size_t errlen)
{
	char host[128], port_text[8];
	unsigned port;
	int r = listen_addr_parse(spec, host, sizeof(host), &port, err, errlen);
	if (r < 0)
		return r;
	snprintf(port_text, sizeof(port_text), "%u", port);
	/* Our own socket rather than evhttp_bind_socket's: that one keeps
	 * no errno, and "cannot listen" without why is what admins got. */
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV },
			*res = NULL;
	int g = getaddrinfo(host, port_text, &hints, &res);
	if (g != 0) {
		snprintf(err, errlen, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
		return g == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	}
	/* The first address that binds; the error reported is the first
	 * one's (the address a reader of the file thinks of). */
	int fd = -1, first = 0;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			first = first ? first : errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 128) < 0) {
			first = first ? first : errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "%s", strerror(first ? first : EADDRNOTAVAIL));
		return -(first ? first : EADDRNOTAVAIL);
	}
	return fd;
}
