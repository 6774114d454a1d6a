/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "control/control.h"
#include "util/log.h"

/* Stop reading requests while this much reply is unsent: a client that
 * writes but never reads cannot make us buffer without bound. */
#define OUT_HIGH (256 * 1024)

/* Root may open this many connections beyond the total, so it can always
 * look (gpusysctl status) however many others are open. */
#define ROOT_RESERVE 8

struct conn {
	struct control *c;
	struct bufferevent *bev;
	struct control_peer who;
	bool discarding; /* inside a line that was too long: skip to its end */
	bool eof;        /* the peer is done sending: answer what came, then close */
	struct conn *prev, *next;
};

struct control {
	struct event_base *base;
	struct event *ev;
	struct event *resume; /* re-arms ev after running out of descriptors */
	struct control_limits lim;
	control_cmd_fn handler;
	void *arg;
	struct conn *conns;
	unsigned nconns;
};

static json_t *error_reply(const char *msg)
{
	return json_pack("{s:s}", "error", msg);
}

#define LINE_TOO_LONG "line longer than 65536 bytes"
_Static_assert(CONTROL_MAX_LINE == 65536, "LINE_TOO_LONG says the limit");

json_t *control_handle_line(const char *line, size_t len, const struct control_peer *who,
			    control_cmd_fn handler, void *arg)
{
	json_error_t jerr;
	json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *reply;

	char msg[256];

	if (!req) {
		snprintf(msg, sizeof(msg), "bad JSON: %s", jerr.text);
		/* jansson quotes the bytes near the error, which may be half
		 * a UTF-8 character: no JSON string, and the reply would be
		 * lost (found by tests/fuzz/fuzz_control). ASCII only. */
		for (char *c = msg; *c; c++)
			if ((unsigned char)*c >= 0x80 || (unsigned char)*c < 0x20)
				*c = '?';
		return error_reply(msg);
	}
	if (!json_is_object(req)) {
		reply = error_reply("expected a JSON object");
		goto out;
	}
	const char *cmd = json_string_value(json_object_get(req, "cmd"));
	if (!cmd) {
		reply = error_reply("missing \"cmd\" string");
	} else if (handler(arg, who, cmd, req, &reply) == -ENOENT) {
		/* At most 64 bytes of it, cut between UTF-8 characters:
		 * half a character is no JSON string, and the reply would
		 * be lost (found by tests/fuzz/fuzz_control). */
		int n = (int)strnlen(cmd, 64);
		while (n > 0 && cmd[n] && ((unsigned char)cmd[n] & 0xc0) == 0x80)
			n--;
		snprintf(msg, sizeof(msg), "unknown command '%.*s'", n, cmd);
		reply = error_reply(msg);
	}
out:
	json_decref(req);
	return reply;
}

static void conn_free(struct conn *k)
{
	struct control *c = k->c;

	if (k->prev)
		k->prev->next = k->next;
	else
		c->conns = k->next;
	if (k->next)
		k->next->prev = k->prev;
	c->nconns--;
	bufferevent_free(k->bev); /* closes the socket (BEV_OPT_CLOSE_ON_FREE) */
	free(k);
}

static void send_reply(struct conn *k, json_t *reply)
{
	struct evbuffer *out = bufferevent_get_output(k->bev);
	char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;

	if (text) {
		evbuffer_add(out, text, strlen(text));
		free(text);
	} else {
		static const char oom[] = "{\"error\":\"out of memory\"}";
		evbuffer_add(out, oom, sizeof(oom) - 1);
	}
	evbuffer_add(out, "\n", 1);
	json_decref(reply);
}

/* Answer the complete lines that have arrived, as long as the client reads
 * its replies; close once a peer that is done sending has all its answers.
 * May free k. */
static void serve(struct conn *k)
{
	struct evbuffer *in = bufferevent_get_input(k->bev);
	struct evbuffer *out = bufferevent_get_output(k->bev);

	while (evbuffer_get_length(out) < OUT_HIGH) {
		if (k->discarding) {
			struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
			if (nl.pos < 0) {
				evbuffer_drain(in, evbuffer_get_length(in));
				break;
			}
			evbuffer_drain(in, (size_t)nl.pos + 1);
			k->discarding = false;
			send_reply(k, error_reply(LINE_TOO_LONG));
			continue;
		}
		size_t len;
		char *line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF);
		if (!line) {
			size_t left = evbuffer_get_length(in);
			if (left > CONTROL_MAX_LINE) {
				k->discarding = true;
				continue;
			}
			/* The last line of a peer that is done sending
			 * needs no newline. */
			if (!k->eof || left == 0)
				break;
			line = malloc(left + 1);
			if (!line)
				break;
			evbuffer_remove(in, line, left);
			line[left] = 0;
			len = left;
		}
		if (len > CONTROL_MAX_LINE)
			send_reply(k, error_reply(LINE_TOO_LONG));
		else if (len > 0)
			send_reply(k, control_handle_line(line, len, &k->who, k->c->handler, k->c->arg));
		free(line);
	}
	if (evbuffer_get_length(out) >= OUT_HIGH) {
		/* Too much unread reply: wait for the client to read
		 * (on_write), then take requests again. */
		bufferevent_disable(k->bev, EV_READ);
		return;
	}
	if (k->eof) {
		/* Every reply queued is sent before the close (on_write
		 * comes back when the output has drained). */
		if (evbuffer_get_length(out) == 0)
			conn_free(k);
		return;
	}
	bufferevent_enable(k->bev, EV_READ);
}

static void on_read(struct bufferevent *bev, void *arg)
{
	(void)bev;
	serve(arg);
}

static void on_write(struct bufferevent *bev, void *arg)
{
	(void)bev;
	/* The output drained (low watermark 0): take requests again,
	 * including any that arrived while reading was off. */
	serve(arg);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *k = arg;

	(void)bev;
	if (what & BEV_EVENT_TIMEOUT) {
		log_info("control: connection of uid %u (pid %d) idle for %u ms, closed", (unsigned)k->who.uid,
			 (int)k->who.pid, k->c->lim.idle_timeout_ms);
		conn_free(k);
	} else if (what & BEV_EVENT_ERROR) {
		conn_free(k);
	} else if (what & BEV_EVENT_EOF) {
		/* Half-close: the peer may still read what it asked for. */
		k->eof = true;
		serve(k);
	}
}

bool control_is_admin(uid_t uid, gid_t gid, const gid_t *groups, unsigned ngroups, long long admin_gid)
{
	if (uid == 0 || uid == geteuid())
		return true;
	if (admin_gid < 0)
		return false;
	if ((long long)gid == admin_gid)
		return true;
	for (unsigned i = 0; i < ngroups; i++)
		if ((long long)groups[i] == admin_gid)
			return true;
	return false;
}

/* SO_PEERCRED and, when an admin group is configured, the peer's
 * supplementary groups (SO_PEERGROUPS). */
static int peer_of(int fd, long long admin_gid, struct control_peer *who)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);
	gid_t groups[256];
	unsigned ngroups = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (admin_gid >= 0 && uc.uid != 0) {
		socklen_t glen = sizeof(groups);
		/* More than 256 groups (ERANGE): judged by the primary one. */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
			ngroups = glen / sizeof(gid_t);
	}
	who->pid = uc.pid;
	who->uid = uc.uid;
	who->gid = uc.gid;
	who->admin = control_is_admin(uc.uid, uc.gid, groups, ngroups, admin_gid);
	return 0;
}

/* A refusal the client can read (best effort: the socket is new, its
 * buffer empty), then the close. */
static void refuse(int fd, const char *why)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "{\"error\":\"%s\"}\n", why);
	if (send(fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
	}
	close(fd);
}

static unsigned conns_of(const struct control *c, uid_t uid)
{
	unsigned n = 0;
	for (const struct conn *k = c->conns; k; k = k->next)
		n += k->who.uid == uid;
	return n;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct control *c = arg;
	char why[160];

	(void)what;
	for (int i = 0; i < 16; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* The connection stays queued and the socket
				 * readable: pause rather than spin on it. */
				event_del(c->ev);
				event_add(c->resume, &(struct timeval){ .tv_usec = 100000 });
			}
			return;
		}
		struct control_peer who;
		if (peer_of(fd, c->lim.admin_gid, &who) < 0) {
			close(fd);
			continue;
		}
		unsigned mine = conns_of(c, who.uid);
		if (who.uid != 0 && mine >= c->lim.conns_per_uid) {
			snprintf(why, sizeof(why), "uid %u has %u control connections open, the most allowed",
				 (unsigned)who.uid, mine);
			log_warn("control: pid %d refused: %s", (int)who.pid, why);
			refuse(fd, why);
			continue;
		}
		if (c->nconns >= CONTROL_MAX_CONNS + (who.uid == 0 ? ROOT_RESERVE : 0)) {
			snprintf(why, sizeof(why), "%u control connections open, the most allowed", c->nconns);
			log_warn("control: pid %d uid %u refused: %s", (int)who.pid, (unsigned)who.uid, why);
			refuse(fd, why);
			continue;
		}
		struct conn *k = calloc(1, sizeof(*k));
		struct bufferevent *bev = bufferevent_socket_new(c->base, fd, BEV_OPT_CLOSE_ON_FREE);
		if (!k || !bev) {
			free(k);
			if (bev)
				bufferevent_free(bev);
			else
				close(fd);
			continue;
		}
		k->c = c;
		k->bev = bev;
		k->who = who;
		bufferevent_setcb(bev, on_read, on_write, on_event, k);
		/* Idle: nothing arrives while reading, or nothing leaves while
		 * replies wait. Either way the slot goes back. */
		struct timeval idle = { .tv_sec = c->lim.idle_timeout_ms / 1000,
					.tv_usec = (c->lim.idle_timeout_ms % 1000) * 1000 };
		bufferevent_set_timeouts(bev, &idle, &idle);
		bufferevent_enable(bev, EV_READ | EV_WRITE);
		k->next = c->conns;
		if (k->next)
			k->next->prev = k;
		c->conns = k;
		c->nconns++;
	}
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct control *c = arg;

	(void)fd;
	(void)what;
	event_add(c->ev, NULL);
}

int control_new(struct event_base *base, int listen_fd, const struct control_limits *lim,
		control_cmd_fn handler, void *arg, struct control **ret)
{
	struct control *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base = base;
	c->lim = *lim;
	c->handler = handler;
	c->arg = arg;
	c->ev = event_new(base, listen_fd, EV_READ | EV_PERSIST, on_accept, c);
	c->resume = evtimer_new(base, on_resume, c);
	if (!c->ev || !c->resume || event_add(c->ev, NULL) < 0) {
		if (c->ev)
			event_free(c->ev);
		if (c->resume)
			event_free(c->resume);
		free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	event_free(c->ev);
	event_free(c->resume);
	while (c->conns)
		conn_free(c->conns);
	free(c);
}
