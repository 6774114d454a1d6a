/* SPDX-License-Identifier: MIT */
/*
 * Name lookups: getaddrinfo and getnameinfo. The first try checks the
 * request (and answers what needs no server: .invalid names, unknown
 * services, NI_NUMERICHOST); the rest goes to libevent's evdns on the main
 * loop (name servers from /etc/resolv.conf, names from /etc/hosts).
 */
#include <errno.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "services/socket/sock_call.h"
#include "services/socket/sock_policy.h"

/* ---------------------------------------------------- name resolution */

static int eai_from_evutil(int r)
{
	switch (r) {
	case 0:
		return 0;
	case EVUTIL_EAI_ADDRFAMILY:
	case EVUTIL_EAI_FAMILY:
		return EAI_FAMILY;
	case EVUTIL_EAI_AGAIN:
		return EAI_AGAIN;
	case EVUTIL_EAI_BADFLAGS:
		return EAI_BADFLAGS;
	case EVUTIL_EAI_FAIL:
		return EAI_FAIL;
	case EVUTIL_EAI_MEMORY:
		return EAI_MEMORY;
	case EVUTIL_EAI_NODATA:
	case EVUTIL_EAI_NONAME:
		return EAI_NONAME;
	case EVUTIL_EAI_SERVICE:
		return EAI_SERVICE;
	case EVUTIL_EAI_SOCKTYPE:
		return EAI_SOCKTYPE;
	default:
		return EAI_FAIL;
	}
}

/* RFC 6761 6.4: resolvers should answer names under .invalid with
 * NXDOMAIN themselves; we do, without asking a server. */
static bool name_is_invalid(const char *host)
{
	size_t n = strlen(host);
	while (n && host[n - 1] == '.')
		n--;
	if (n == 7 && strncasecmp(host, "invalid", 7) == 0)
		return true;
	return n > 8 && strncasecmp(host + n - 8, ".invalid", 8) == 0;
}

/* --------------------------------------------------------------- DNS */

static void dns_fill(struct sock_lane *l, int result, struct evutil_addrinfo *res);

static void dns_answer(int result, struct evutil_addrinfo *res, void *arg)
{
	struct dns_ticket *t = arg;
	struct sock_lane *l = t->lane;
	if (!l) { /* the lane went away: cancelled */
		if (res)
			evutil_freeaddrinfo(res);
		free(t);
		return;
	}
	free(t);
	struct sock_call *sc = l->sc;
	if (!sock_call_enter(sc)) {
		if (res)
			evutil_freeaddrinfo(res);
		return;
	}
	l->dns = NULL;
	dns_fill(l, result, res);
	sock_call_leave(sc);
}

static void dns_fill(struct sock_lane *l, int result, struct evutil_addrinfo *res)
{
	if (result != 0) {
		sock_lane_finish(l, eai_from_evutil(result));
		return;
	}
	uint32_t n = 0, max = l->room / sizeof(struct gpusys_addrinfo);
	for (struct evutil_addrinfo *ai = res; ai && n < max; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(((struct gpusys_addrinfo *)0)->addr))
			continue;
		struct gpusys_addrinfo a;
		memset(&a, 0, sizeof(a));
		a.family = ai->ai_family;
		a.socktype = ai->ai_socktype;
		a.protocol = ai->ai_protocol;
		a.addr_len = (uint32_t)ai->ai_addrlen;
		memcpy(a.addr, ai->ai_addr, ai->ai_addrlen);
		memcpy(l->out + n * sizeof(a), &a, sizeof(a));
		n++;
	}
	evutil_freeaddrinfo(res);
	l->out_len = n * (uint32_t)sizeof(struct gpusys_addrinfo);
	sock_lane_finish(l, n ? 0 : EAI_NONAME);
}

/* A new ticket linking lane l to its evdns request; NULL when there is no
 * memory or no resolver, and then l is finished with EAI_MEMORY. */
static struct dns_ticket *ticket_for(struct sock_lane *l)
{
	struct dns_ticket *t = calloc(1, sizeof(*t));
	if (!t || !sock_g.dns) {
		free(t);
		sock_lane_finish(l, EAI_MEMORY);
		return NULL;
	}
	t->lane = l;
	l->dns = t;
	return t;
}

static void dns_lookup(struct sock_lane *l)
{
	const char *host = (const char *)l->body;
	const char *serv = host + strlen(host) + 1;
	struct evutil_addrinfo hints;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = l->q.a;
	hints.ai_socktype = l->q.b;
	hints.ai_protocol = l->q.c;
	hints.ai_flags = l->q.flags;
	struct dns_ticket *t = ticket_for(l);
	if (!t)
		return;
	/* The answer may come at once (a number, /etc/hosts): then l is
	 * already finished when this returns. */
	evdns_getaddrinfo(sock_g.dns, *host ? host : NULL, *serv ? serv : NULL, &hints, dns_answer, t);
}

static void rdns_fill(struct sock_lane *l, int result, char type, int count, int ttl, void *addresses);

static void rdns_answer(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	struct dns_ticket *t = arg;
	struct sock_lane *l = t->lane;
	free(t);
	if (!l)
		return;
	struct sock_call *sc = l->sc;
	if (!sock_call_enter(sc))
		return;
	l->dns = NULL;
	rdns_fill(l, result, type, count, ttl, addresses);
	sock_call_leave(sc);
}

static void rdns_fill(struct sock_lane *l, int result, char type, int count, int ttl, void *addresses)
{
	(void)ttl;
	char *host = (char *)l->out;
	size_t room = l->room;
	if (result == DNS_ERR_NONE && type == DNS_PTR && count > 0 && addresses) {
		snprintf(host, room, "%s", *(char **)addresses);
	} else if (l->q.flags & NI_NAMEREQD) {
		sock_lane_finish(l, result == DNS_ERR_NOTEXIST ? EAI_NONAME : EAI_AGAIN);
		return;
	} else if (getnameinfo((const struct sockaddr *)(const void *)l->addr, l->addr_len, host, (socklen_t)room, NULL,
			       0, NI_NUMERICHOST) != 0) {
		sock_lane_finish(l, EAI_FAIL);
		return;
	}
	/* The service follows the host: asked for again, numerically or by
	 * name from /etc/services. */
	size_t hl = strlen(host) + 1;
	char serv[GPUSYS_SOCK_SERV_MAX];
	int r = getnameinfo((const struct sockaddr *)(const void *)l->addr, l->addr_len, NULL, 0, serv, sizeof(serv),
			    NI_NUMERICHOST | (l->q.flags & (NI_NUMERICSERV | NI_DGRAM)));
	if (r != 0) {
		sock_lane_finish(l, r);
		return;
	}
	snprintf(host + hl, room - hl, "%s", serv);
	l->out_len = (uint32_t)(hl + strlen(serv) + 1);
	sock_lane_finish(l, 0);
}

static void rdns_lookup(struct sock_lane *l)
{
	struct dns_ticket *t = ticket_for(l);
	if (!t)
		return;
	struct sockaddr_storage ss;
	memcpy(&ss, l->addr, l->addr_len);
	struct evdns_request *rq;
	if (ss.ss_family == AF_INET)
		rq = evdns_base_resolve_reverse(sock_g.dns, &((struct sockaddr_in *)&ss)->sin_addr, 0, rdns_answer, t);
	else
		rq = evdns_base_resolve_reverse_ipv6(sock_g.dns, &((struct sockaddr_in6 *)&ss)->sin6_addr, 0, rdns_answer, t);
	if (!rq && l->dns == t) {
		l->dns = NULL;
		free(t);
		sock_lane_finish(l, EAI_FAIL);
	}
}

static bool service_known(const char *serv, int socktype)
{
	struct servent se, *res = NULL;
	char buf[1024];
	const char *proto = socktype == SOCK_DGRAM ? "udp" : socktype == SOCK_STREAM ? "tcp" : NULL;
	if (getservbyname_r(serv, proto, &se, buf, sizeof(buf), &res) == 0 && res)
		return true;
	return !proto && getservbyname_r(serv, "udp", &se, buf, sizeof(buf), &res) == 0 && res;
}

int sock_first_getaddrinfo(struct sock_lane *l)
{
	/* host NUL service NUL, nothing else */
	const uint8_t *nul = l->body_len ? memchr(l->body, 0, l->body_len) : NULL;
	if (!nul || nul == l->body + l->body_len - 1 || l->body[l->body_len - 1] != 0)
		return -EINVAL;
	const char *host = (const char *)l->body;
	const char *serv = (const char *)nul + 1;
	if (strlen(serv) != l->body_len - (uint32_t)(nul - l->body) - 2u || strlen(host) >= GPUSYS_SOCK_HOST_MAX ||
	    strlen(serv) >= GPUSYS_SOCK_SERV_MAX)
		return -EINVAL;
	if (!*host && !*serv)
		return EAI_NONAME;
	if (*host && name_is_invalid(host))
		return EAI_NONAME;
	if (l->q.a != AF_UNSPEC && l->q.a != AF_INET && l->q.a != AF_INET6)
		return EAI_FAMILY;
	if (l->room < sizeof(struct gpusys_addrinfo))
		return -EMSGSIZE;
	/* A service name libevent does not know is EAI_NONAME there;
	 * POSIX says EAI_SERVICE. /etc/services is a local file. */
	if (*serv && strspn(serv, "0123456789") != strlen(serv) && !service_known(serv, l->q.b))
		return EAI_SERVICE;
	l->wait = WAIT_DNS; /* evdns runs on the main loop: always there */
	l->start_lookup = dns_lookup;
	return LANE_WAIT;
}

int sock_first_getnameinfo(struct sock_lane *l)
{
	if (l->addr_len < sizeof(sa_family_t))
		return EAI_FAMILY;
	sa_family_t fam;
	memcpy(&fam, l->addr, sizeof(fam));
	if ((fam != AF_INET && fam != AF_INET6) || sock_addr_check(fam, l->addr, l->addr_len) < 0)
		return EAI_FAMILY;
	if (l->room < 2)
		return -EMSGSIZE;
	if (!(l->q.flags & NI_NUMERICHOST)) {
		l->wait = WAIT_RDNS;
		l->start_lookup = rdns_lookup;
		return LANE_WAIT;
	}
	char *host = (char *)l->out;
	char serv[GPUSYS_SOCK_SERV_MAX];
	int r = getnameinfo((const struct sockaddr *)(const void *)l->addr, l->addr_len, host, l->room, serv,
			    sizeof(serv), l->q.flags & (NI_NUMERICHOST | NI_NUMERICSERV | NI_DGRAM));
	if (r != 0)
		return r;
	size_t hl = strlen(host) + 1;
	if (hl + strlen(serv) + 1 > l->room)
		return -EMSGSIZE;
	memcpy(host + hl, serv, strlen(serv) + 1);
	l->out_len = (uint32_t)(hl + strlen(serv) + 1);
	return 0;
}

/* Lane l's first try, on the worker. */
