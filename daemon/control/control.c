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

struct conn {
	struct control *c;
	struct bufferevent *bev;
	bool discarding; /* inside a line that was too long: skip to its end */
	struct conn *prev, *next;
};

struct control {
	struct event_base *base;
	struct event *ev;
	struct event *resume; /* re-arms ev after running out of descriptors */
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

json_t *control_handle_line(const char *line, size_t len, control_cmd_fn handler, void *arg)
{
	json_error_t jerr;
	json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *reply;

	char msg[256];

	if (!req) {
		snprintf(msg, sizeof(msg), "bad JSON: %s", jerr.text);
		return error_reply(msg);
	}
	if (!json_is_object(req)) {
		reply = error_reply("expected a JSON object");
		goto out;
	}
	const char *cmd = json_string_value(json_object_get(req, "cmd"));
	if (!cmd) {
		reply = error_reply("missing \"cmd\" string");
	} else if (handler(arg, cmd, req, &reply) == -ENOENT) {
		snprintf(msg, sizeof(msg), "unknown command '%.64s'", cmd);
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

static void on_read(struct bufferevent *bev, void *arg)
{
	struct conn *k = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer *out = bufferevent_get_output(bev);

	while (evbuffer_get_length(out) < OUT_HIGH) {
		if (k->discarding) {
			struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
			if (nl.pos < 0) {
				evbuffer_drain(in, evbuffer_get_length(in));
				return;
			}
			evbuffer_drain(in, (size_t)nl.pos + 1);
			k->discarding = false;
			send_reply(k, error_reply(LINE_TOO_LONG));
			continue;
		}
		size_t len;
		char *line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF);
		if (!line) {
			if (evbuffer_get_length(in) > CONTROL_MAX_LINE)
				k->discarding = true;
			else
				return;
			continue;
		}
		if (len > CONTROL_MAX_LINE)
			send_reply(k, error_reply(LINE_TOO_LONG));
		else if (len > 0)
			send_reply(k, control_handle_line(line, len, k->c->handler, k->c->arg));
		free(line);
	}
	/* Too much unread reply: wait for the client to read (on_write). */
	bufferevent_disable(bev, EV_READ);
}

static void on_write(struct bufferevent *bev, void *arg)
{
	struct conn *k = arg;

	/* Called when the output drained (low watermark 0): take requests
	 * again, including any that arrived while reading was off. */
	if (!(bufferevent_get_enabled(bev) & EV_READ)) {
		bufferevent_enable(bev, EV_READ);
		on_read(bev, k);
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_free(arg);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct control *c = arg;

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
		if (c->nconns >= CONTROL_MAX_CONNS) {
			log_warn("control: %u connections open, refusing another", c->nconns);
			close(fd);
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
		bufferevent_setcb(bev, on_read, on_write, on_event, k);
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

int control_new(struct event_base *base, int listen_fd, control_cmd_fn handler, void *arg,
		struct control **ret)
{
	struct control *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base = base;
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
