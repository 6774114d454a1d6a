/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "services/socket/sock_policy.h"

#define CAP_NET_BIND_SERVICE_BIT 10

int sock_unprivileged_port_start(void)
{
	int port = 1024;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "re");
	if (f) {
		if (fscanf(f, "%d", &port) != 1 || port < 0 || port > 65536)
			port = 1024;
		fclose(f);
	}
	return port;
}

bool sock_pid_can_bind_low(pid_t pid)
{
	char path[64], line[256];
	bool yes = false;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "CapEff:", 7) == 0) {
			unsigned long long caps = strtoull(line + 7, NULL, 16);
			yes = caps >> CAP_NET_BIND_SERVICE_BIT & 1;
			break;
		}
	}
	fclose(f);
	return yes;
}

int sock_addr_check(int domain, const void *addr, uint32_t len)
{
	sa_family_t fam;
	if (len < sizeof(fam) || len > sizeof(struct sockaddr_storage))
		return -EINVAL;
	memcpy(&fam, addr, sizeof(fam));
	if (fam != domain)
		return fam == AF_UNSPEC ? -EINVAL : -EAFNOSUPPORT;
	switch (fam) {
	case AF_INET:
		return len >= sizeof(struct sockaddr_in) ? 0 : -EINVAL;
	case AF_INET6:
		return len >= sizeof(struct sockaddr_in6) ? 0 : -EINVAL;
	case AF_UNIX: {
		const char *path = (const char *)addr + offsetof(struct sockaddr_un, sun_path);
		size_t room = len - offsetof(struct sockaddr_un, sun_path);
		if (len <= offsetof(struct sockaddr_un, sun_path))
			return -EINVAL; /* unnamed: only autobind, which bind() with no path does */
		if (path[0] == 0)
			return 0; /* abstract: a name, not a file */
		if (!memchr(path, 0, room))
			return -EINVAL; /* the kernel would take the unterminated bytes; we insist */
		return path[0] == '/' ? 0 : -EINVAL;
	}
	default:
		return -EAFNOSUPPORT;
	}
}

int sock_bind_check(const struct sock_policy *p, pid_t pid, const void *addr, uint32_t len)
{
	sa_family_t fam;
	uint16_t port_be = 0;
	memcpy(&fam, addr, sizeof(fam));
	if (fam == AF_INET && len >= sizeof(struct sockaddr_in))
		memcpy(&port_be, (const uint8_t *)addr + offsetof(struct sockaddr_in, sin_port), 2);
	else if (fam == AF_INET6 && len >= sizeof(struct sockaddr_in6))
		memcpy(&port_be, (const uint8_t *)addr + offsetof(struct sockaddr_in6, sin6_port), 2);
	else
		return 0;
	int port = ntohs(port_be);
	if (port == 0 || port >= p->unprivileged_port_start)
		return 0;
	return sock_pid_can_bind_low(pid) ? 0 : -EACCES;
}
