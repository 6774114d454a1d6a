/* SPDX-License-Identifier: MIT */
/*
 * The socket service in one process, without gpusysd: the core's side of
 * calls that complete later (call_later, call_complete, deadlines and the
 * cancel hook), a libevent main loop on its own thread, and the emulator's
 * general socket call (gpusys_emu_sock_call) replaced by a direct call of
 * the service's handler. The one-lane wrappers of libclient/emulator/socket_emu.c
 * run on top unchanged, so test_socket.c is the same test as the one that
 * goes through the real daemon.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/call.h"
#include "core/pending.h"
#include "core/service.h"
#include "gpusys/emulator.h"
#include "services/socket/service_socket.h"
#include "../device/sock_client.h"
#include "fake_core.h"

struct fake_call {
	struct port_call call; /* first: call_later/call_complete get it */
	const struct call_later_ops *ops;
	struct event *deadline;
	bool later;
	bool done;
};

static struct {
	struct event_base *base;
	pthread_t loop;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct client client;
	void *state;
	unsigned pending;
} fk = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

uint64_t config_value(const struct gpusysd_config *cfg, const char *key)
{
	(void)cfg;
	for (const struct config_key *k = service_socket.settings; k && k->key; k++)
		if (strcmp(k->key, key) == 0)
			return k->def;
	return 0;
}

int port_call_charge(struct port_call *call, uint64_t bytes)
{
	(void)call;
	(void)bytes;
	return 0;
}

int port_call_charge_or_later(struct port_call *call, uint64_t bytes)
{
	return port_call_charge(call, bytes);
}

void port_uncharge(struct port_table *t, uint64_t bytes)
{
	(void)t;
	(void)bytes;
}

static void deadline(evutil_socket_t fd, short what, void *arg)
{
	struct fake_call *fc = arg;
	(void)fd;
	(void)what;
	pthread_mutex_lock(&fk.lock);
	if (fc->done) {
		pthread_mutex_unlock(&fk.lock);
		return;
	}
	fc->done = true;
	pthread_mutex_unlock(&fk.lock);
	bool answered = fc->ops->cancel(&fc->call, CALL_CANCEL_DEADLINE);
	pthread_mutex_lock(&fk.lock);
	if (!answered)
		fc->call.status = -ETIMEDOUT;
	fk.pending--;
	pthread_cond_broadcast(&fk.cv);
	pthread_mutex_unlock(&fk.lock);
}

int call_later(struct port_call *call, uint64_t timeout_ns, const struct call_later_ops *ops)
{
	struct fake_call *fc = (struct fake_call *)call;
	if (timeout_ns == 0)
		timeout_ns = UINT64_C(30) * 1000000000u;
	pthread_mutex_lock(&fk.lock);
	fc->later = true;
	fc->ops = ops;
	fk.pending++;
	struct timeval tv = { .tv_sec = (time_t)(timeout_ns / 1000000000u),
			      .tv_usec = (suseconds_t)(timeout_ns % 1000000000u / 1000u) };
	fc->deadline = evtimer_new(fk.base, deadline, fc);
	evtimer_add(fc->deadline, &tv);
	pthread_mutex_unlock(&fk.lock);
	return 0;
}

bool call_complete(struct port_call *call)
{
	struct fake_call *fc = (struct fake_call *)call;
	pthread_mutex_lock(&fk.lock);
	if (fc->done) {
		pthread_mutex_unlock(&fk.lock);
		return false;
	}
	fc->done = true;
	fk.pending--;
	pthread_cond_broadcast(&fk.cv);
	pthread_mutex_unlock(&fk.lock);
	return true;
}

unsigned fake_pending(void)
{
	pthread_mutex_lock(&fk.lock);
	unsigned n = fk.pending;
	pthread_mutex_unlock(&fk.lock);
	return n;
}

/* The main loop's thread: the service starts on it, as in gpusysd. */
static void *loop(void *arg)
{
	int *started = arg;
	struct service_env env = { .cfg = NULL, .base = fk.base };
	int r = service_socket.start(&env);
	pthread_mutex_lock(&fk.lock);
	*started = r < 0 ? r : 1;
	pthread_cond_broadcast(&fk.cv);
	pthread_mutex_unlock(&fk.lock);
	if (r == 0)
		event_base_loop(fk.base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

int fake_start(void)
{
	evthread_use_pthreads();
	fk.base = event_base_new();
	if (!fk.base)
		return -ENOMEM;
	static int started;
	if (pthread_create(&fk.loop, NULL, loop, &started) != 0)
		return -EAGAIN;
	pthread_mutex_lock(&fk.lock);
	while (!started)
		pthread_cond_wait(&fk.cv, &fk.lock);
	pthread_mutex_unlock(&fk.lock);
	if (started < 0)
		return started;
	fk.client.pid = getpid();
	fk.client.creds.uid = getuid();
	fk.client.creds.gid = getgid();
	fk.client.creds.groups_known = true;
	fk.client.umask = 022;
	fk.client.cwd_fd = -1;
	fk.client.stdout_fd = -1;
	fk.client.stderr_fd = -1;
	fk.client.sock = -1;
	fk.client.cuda_device = -1;
	return service_socket.client_init(&fk.client, &fk.state);
}

static const struct service_op *op_of(uint16_t opcode)
{
	for (unsigned i = 0; i < service_socket.nops; i++)
		if (service_socket.ops[i].opcode == opcode)
			return &service_socket.ops[i];
	return NULL;
}

/* The transport: a port_call made from the lanes, the handler run on this
 * thread (a worker's part), the completion waited for. */
int gpusys_emu_sock_call(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, struct gpusys_emu_sock_lane *lanes)
{
	(void)dev;
	const struct service_op *sop = op_of(op);
	struct fake_call *fc = calloc(1, sizeof(*fc));
	int data = gpusys_sock_op_returns_data(op);
	int64_t val[GPUSYS_WARP_LANES] = { 0 };
	if (!fc)
		return -ENOMEM;
	struct port_call *c = &fc->call;
	c->client = &fk.client;
	c->state = fk.state;
	c->opcode = op;
	c->lane_mask = mask;
	for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		struct gpusys_emu_sock_lane *a = &lanes[l];
		c->data[l] = malloc(GPUSYS_SOCK_REQ_BYTES + a->q.addr_len + a->body_len);
		c->len[l] = gpusys_sock_pack(c->data[l], &a->q, a->addr, a->q.addr_len, a->body, a->body_len);
		c->cap[l] = data ? a->out_cap : sizeof(int64_t);
	}
	if (!sop)
		c->status = -ENOSYS;
	else
		sop->handle(c);
	pthread_mutex_lock(&fk.lock);
	while (fc->later && !fc->done)
		pthread_cond_wait(&fk.cv, &fk.lock);
	pthread_mutex_unlock(&fk.lock);
	if (fc->deadline) {
		/* The loop may still be inside deadline(): wait for it. */
		event_del_block(fc->deadline);
		event_free(fc->deadline);
	}
	int first = 0;
	for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		struct gpusys_emu_sock_lane *a = &lanes[l];
		if (c->status < 0) {
			a->ret = c->status;
		} else if (c->lane_status[l] < 0) {
			a->ret = c->lane_status[l];
		} else if (c->resp_len[l] > c->cap[l]) {
			a->ret = -EMSGSIZE;
		} else if (data) {
			if (c->resp_len[l]) /* an answer of no bytes may have no data (a poll that timed out) */
				memcpy(a->out, c->resp_data[l], c->resp_len[l]);
			a->ret = c->resp_len[l];
		} else {
			memcpy(&val[l], c->resp_data[l], sizeof(int64_t));
			a->ret = val[l];
		}
		if (!first && a->ret < 0)
			first = (int)a->ret;
		free(c->data[l]);
	}
	free(c->resp_buf);
	free(fc);
	return first;
}

void fake_set_client(pid_t pid, uid_t uid, gid_t gid)
{
	fk.client.pid = pid;
	fk.client.creds.uid = uid;
	fk.client.creds.gid = gid;
	fk.client.creds.ngroups = 0;
}

/* The emulator's per-thread port hint (libclient/emulator/emulator.c), which the
 * one-lane wrappers' bulk path reads. */
__thread uint32_t gpusys_emu_port_hint;
int gpusys_emu_heads_late;
__thread struct gpusys_emu_late_heads gpusys_emu_late;
