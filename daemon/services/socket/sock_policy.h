/* SPDX-License-Identifier: MIT */
/*
 * What a client may do with sockets, decided from its own credentials and
 * the daemon's settings, never from the daemon's privileges: which address
 * families it may use, whether it may bind a port below the unprivileged
 * start (1024 unless net.ipv4.ip_unprivileged_port_start says otherwise),
 * and which addresses are well formed.
 */
#ifndef GPUSYSD_SOCK_POLICY_H
#define GPUSYSD_SOCK_POLICY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Families allowed by configuration (bit 1 << AF_*). */
struct sock_policy {
	uint32_t families;
	int unprivileged_port_start; /* from /proc/sys, read at start */
};

#define SOCK_FAMILY_BIT(af) (UINT32_C(1) << (af))

/* The first port anyone may bind (1024 when /proc cannot tell). */
int sock_unprivileged_port_start(void);

/* Whether process pid holds CAP_NET_BIND_SERVICE in its effective set
 * (the CapEff line of /proc/PID/status). false when it cannot be read. */
bool sock_pid_can_bind_low(pid_t pid);

/* Check an address the client passed for a socket of family domain: its
 * length and family (-EINVAL, -EAFNOSUPPORT), a Unix path that is NUL
 * terminated inside the structure or abstract (-EINVAL; relative paths are
 * refused: the daemon has no business resolving them). */
int sock_addr_check(int domain, const void *addr, uint32_t len);

/* For bind: a port below the unprivileged start needs the client's own
 * CAP_NET_BIND_SERVICE. 0 or -EACCES. */
int sock_bind_check(const struct sock_policy *p, pid_t pid, const void *addr, uint32_t len);

#endif
