/* SPDX-License-Identifier: MIT */
/*
 * The main thread: a libevent loop over the listening sockets, handshakes,
 * attached clients' connections (their closing is the detach), control
 * connections, signals and a once-a-second status update. It never touches
 * ports; pollers and workers do.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "common/cache_push.h"
#include "config.h" /* generated: GPUSYS_VERSION */
#include "control/control.h"
#include "daemon.h"
#include "core/accounts.h"
#include "core/channel.h"
#include "core/gpus.h"
#include "gpu_health.h"
#include "handover.h"
#include "metrics.h"
#include "poller_groups.h"
#include "quotas.h"
#include "reload.h"
#include "core/later.h"
#include "core/service.h"
#include "core/stats.h"
#include "core/listener.h"
#include "util/log.h"
#include "util/notify.h"
#include "core/poller.h"
#include "core/wake.h"

_Static_assert(CONTROL_MAX_CONNS == CONFIG_CONTROL_MAX_CONNS, "control_conns_per_uid's bound is the total");

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* A refusal in the version the hello spoke (an older client reads the
 * message only from a welcome of its own version). */
static void refuse(int fd, uint32_t version, int status, const char *why)
{
	struct gpusys_welcome w;

	welcome_refusal(&w, status, "%s", why);
	w.wire_version = version;
	welcome_send(fd, &w, -1);
	close(fd);
}

/* ---------------------------------------------------------------- detach */

static void detach(struct daemon *d, struct session *s, const char *why)
{
	log_context_set(s->peer.pid, s->id, -1);
	event_free(s->ev);
	s->ev = NULL;
	if (s->wake)
		wake_chan_unregister(s->wake, &s->wakec);
	/* After this no poller looks at the session; calls already in the
	 * pool hold their own references. */
	registry_remove(&d->reg, s);
	/* Calls pending later hold references too: nobody waits for them
	 * any more, so they are cancelled (their services let go). */
	unsigned cancelled = later_cancel_table(&s->ports);
	if (cancelled)
		log_info("client %u: %u pending calls cancelled", s->id, cancelled);
	log_info("client %u detached (%s): pid %d comm '%s', %llu requests", s->id, why, (int)s->peer.pid,
		 s->peer.comm, (unsigned long long)session_requests(s));
	session_unref(s);
	log_context_clear();
	notify_status(d->reg.count, daemon_requests_served(d));
}

/* End a client for a reason of the daemon's: the goodbye says why (wire.h),
 * then the hang-up, seen at once even while calls in the pool still hold
 * the session. */
static void end_session(struct daemon *d, struct session *s, int status, const char *bye_msg, const char *why)
{
	struct gpusys_welcome bye;
	welcome_refusal(&bye, status, "%s", bye_msg);
	bye.magic = GPUSYS_GOODBYE_MAGIC;
	bye.wire_version = s->wire_version;
	if (send(s->client.sock, &bye, sizeof(bye), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
	}
	channel_mark_stopped(&s->chan);
	shutdown(s->client.sock, SHUT_RDWR);
	detach(d, s, why);
}

static void fail_gpu(struct daemon *d, struct gpu *g, const char *why)
{
	if (g->failed)
		return;
	g->failed = true;
	snprintf(g->failure, sizeof(g->failure), "%s", why);
	unsigned ended = 0;
	struct session *next;
	for (struct session *s = d->reg.head; s; s = next) {
		next = s->next;
		if (s->client.gpu != g)
			continue;
		char bye[256]; /* a welcome's message */
		snprintf(bye, sizeof(bye), "GPU %s failed: %.160s", g->uuid_text, why);
		end_session(d, s, -ENODEV, bye, "its GPU failed");
		ended++;
	}
	log_err("GPU %s (%s) failed: %s: %u client%s ended, new ones refused; other GPUs' clients go on", g->uuid_text,
		g->name, why, ended, ended == 1 ? "" : "s");
}

/* Records read from one client per wake-up: a client that floods reports
 * waits for the next turn of the loop, behind everyone else. */
#define REPORTS_PER_EVENT 32

static void on_session_event(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	struct daemon *d = s->daemon;
	char why[200];

	(void)what;
	if (s->wire_version < GPUSYS_WIRE_REPORTS) {
		/* This session's connection carries nothing after the welcome:
		 * data is a protocol error, and ending the session is the
		 * only safe answer. */
		char byte;
		ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		detach(d, s, n == 0 ? "connection closed" : n < 0 ? strerror(errno) : "unexpected message");
		return;
	}
	for (int i = 0; i < REPORTS_PER_EVENT; i++) {
		struct gpusys_report r;
		int rc = report_read(fd, &s->reports, &r, why, sizeof(why));
		if (rc == -EAGAIN)
			return;
		if (rc == 1)
			copy_counts_add(&s->copies, &r);
		if (rc >= 0)
			continue; /* a report, or a piece of one */
		if (rc == -ECONNRESET) {
			detach(d, s, why);
			return;
		}
		log_context_set(s->peer.pid, s->id, -1);
		log_warn("client %u (pid %d comm '%s') sent a bad report: %s; ending it", s->id, (int)s->peer.pid,
			 s->peer.comm, why);
		log_context_clear();
		char bye[256];
		snprintf(bye, sizeof(bye), "protocol error: %.200s", why);
		end_session(d, s, -EPROTO, bye, "protocol error");
		return;
	}
}

/* ---------------------------------------------------------------- attach */

/* A hello refused for why: said in the log, its descriptors closed, the
 * refusal sent in the hello's version. */
static void refuse_hello(int fd, const struct gpusys_hello *h, int fds[HELLO_NFDS], const struct peer *peer,
			 int status, const char *why)
{
	log_warn("pid %d comm '%s' refused: %s", (int)peer->pid, peer->comm, why);
	close_fds(fds, HELLO_NFDS);
	refuse(fd, h->wire_version, status, why);
}

static void serve_hello(void *arg, int fd, const struct gpusys_hello *h, int fds[HELLO_NFDS], const struct peer *peer)
{
	struct daemon *d = arg;
	char why[256]; /* as much as a welcome carries */

	if (registry_full(&d->reg)) {
		snprintf(why, sizeof(why), "gpusysd already serves its maximum of %u clients", d->cfg.max_clients);
		refuse_hello(fd, h, fds, peer, -EUSERS, why);
		return;
	}
	/* One user cannot take every slot from the others. */
	unsigned mine = 0;
	registry_for_each(&d->reg, o) mine += o->peer.uid == peer->uid;
	if (mine >= d->cfg.max_clients_per_uid) {
		snprintf(why, sizeof(why), "uid %u already has %u clients attached, the most gpusysd allows one user",
			 (unsigned)peer->uid, mine);
		refuse_hello(fd, h, fds, peer, -EUSERS, why);
		return;
	}
	/* The client's GPU, by UUID: its ordinal is in its own numbering. A
	 * CUDA client must name one; the daemon's ordinal for it is what the
	 * channel and the doorbell watch use. */
	struct gpu *gpu = NULL;
	int32_t device = -1;
	if (h->cuda_device >= 0 || !gpu_uuid_is_zero(h->gpu_uuid)) {
		if (gpu_uuid_is_zero(h->gpu_uuid)) {
			snprintf(why, sizeof(why), "a CUDA client must name its GPU by UUID");
			refuse_hello(fd, h, fds, peer, -EPROTO, why);
			return;
		}
		gpu = gpus_find(h->gpu_uuid, why, sizeof(why));
		if (gpu && gpu->failed) {
			snprintf(why, sizeof(why), "GPU %s failed: %.160s", gpu->uuid_text, gpu->failure);
			gpu = NULL;
		}
		if (!gpu) {
			refuse_hello(fd, h, fds, peer, -ENODEV, why);
			return;
		}
		/* An emulated GPU (tests) has no ordinal here: its clients get
		 * memfd channels and timed naps, whatever they run on. */
		if (h->cuda_device >= 0)
			device = gpu->ordinal;
		if (gpu->ordinal >= 0) {
			/* Once: the table is complete now. */
			gpu_health_watch(d);
			groups_add_gpus(d);
		}
	}
	/* Served by its GPU's pollers (or the default group's). */
	struct poller_group *group = groups_of(d, gpu, why, sizeof(why));
	if (!group) {
		refuse_hello(fd, h, fds, peer, -ENOSPC, why);
		return;
	}
	const struct channel_ops *ops = channel_pick(device, h->memory_kinds);
	if (!ops) {
		snprintf(why, sizeof(why), "client can import no memory kind this daemon offers (kinds 0x%x)",
			 h->memory_kinds);
		refuse_hello(fd, h, fds, peer, -EPROTO, why);
		return;
	}

	uint32_t max_ports = d->cfg.max_ports < GPUSYS_MAX_PORTS ? d->cfg.max_ports : GPUSYS_MAX_PORTS;
	uint32_t num_ports = h->num_ports < 1 ? 1 : h->num_ports > max_ports ? max_ports : h->num_ports;
	uint64_t bulk = h->bulk_bytes < d->cfg.channel_bulk_bytes ? h->bulk_bytes : d->cfg.channel_bulk_bytes;
	/* A channel re-offered after a restart (docs/RESTART.md): served as
	 * it is if it passes channel_memfd_adopt's checks; its port count and
	 * bulk area are the ones it has, within this daemon's bounds. The
	 * identity is this connection's (SO_PEERCRED), never the channel's. */
	struct channel adopted;
	bool adopt = h->fd_mask & GPUSYS_HELLO_FD_CHANNEL;
	if (adopt) {
		int r = channel_memfd_adopt(&adopted, fds[HELLO_FD_CHANNEL], max_ports, d->cfg.channel_bulk_bytes,
					    h->reserved, why, sizeof(why));
		if (r < 0) {
			refuse_hello(fd, h, fds, peer, r, why);
			return;
		}
		fds[HELLO_FD_CHANNEL] = -1; /* the channel's now */
		ops = &channel_memfd_ops;
		num_ports = adopted.num_ports;
		bulk = adopted.layout.bulk_bytes;
	}
	struct session_params prm = {
		.id = registry_new_id(&d->reg),
		.peer = peer,
		.ops = ops,
		.num_ports = num_ports,
		.bulk_bytes = bulk,
		.mem_budget = d->cfg.client_mem_budget,
		.sock = fd,
		.fds = { fds[0], fds[1], fds[2] },
		.max_pending_calls = d->cfg.max_pending_calls,
		.retired_requests = &d->retired_requests,
		.wake = group->wake,
		.pollers = group->pollers,
		.cuda_device = device,
		.client_ordinal = h->cuda_device,
		.gpu = gpu,
		.adopted = adopt ? &adopted : NULL,
		.why = why,
		.why_len = sizeof(why),
	};
	struct session *s;
	why[0] = 0;
	int r = session_create(&prm, &s);
	if (r < 0) {
		if (!why[0] && (r == -EMFILE || r == -ENFILE)) /* say so, not a bare strerror */
			snprintf(why, sizeof(why), "gpusysd is out of file descriptors (%s); try again later",
				 strerror(-r));
		else if (!why[0]) /* else the session said why (a quota) */
			snprintf(why, sizeof(why), "cannot create the channel: %s", strerror(-r));
		log_err("pid %d comm '%s' refused: %s", (int)peer->pid, peer->comm, why);
		close_fds(fds, HELLO_NFDS);
		refuse(fd, h->wire_version, r, why);
		return;
	}
	s->daemon = d;
	s->wire_version = h->wire_version;
	s->ev = event_new(d->base, fd, EV_READ | EV_PERSIST, on_session_event, s);
	if (!s->ev || event_add(s->ev, NULL) < 0) {
		log_err("pid %d comm '%s' refused: out of memory", (int)peer->pid, peer->comm);
		if (s->ev)
			event_free(s->ev);
		s->client.sock = -1; /* the refusal goes over it */
		session_unref(s);
		refuse(fd, h->wire_version, -ENOMEM, "out of memory");
		return;
	}

	/* Serve first, then welcome: a client may send its first request the
	 * moment it has the welcome. An adopted channel's warps are already
	 * waiting: RUNNING once the pollers have it. */
	registry_add(&d->reg, s);
	if (adopt)
		channel_mark_running(&s->chan);

	struct gpusys_welcome w = {
		.magic = GPUSYS_WELCOME_MAGIC,
		.wire_version = h->wire_version, /* the session's: reports or not */
		.status = 0,
		.client_id = s->id,
		.memory_kind = ops->memory_kind,
		.num_ports = num_ports,
		.channel_bytes = s->chan.bytes,
		.bulk_bytes = s->chan.layout.bulk_bytes,
	};
	snprintf(w.message, sizeof(w.message), "attached as client %u", s->id);
	int wfds[2] = { s->chan.fd, s->wake_wfd };
	r = welcome_send_fds(fd, &w, wfds, 2);
	/* The client has its end now (or never will): ours only kept it. */
	close(s->wake_wfd);
	s->wake_wfd = -1;
	if (r < 0) {
		detach(d, s, "welcome not delivered");
		return;
	}
	if (adopt)
		log_info("client %u attached: pid %d uid %d comm '%s' took back its channel (client %u before the "
			 "restart), %u ports, %llu KiB", s->id, (int)peer->pid, (int)peer->uid, peer->comm, h->reserved,
			 num_ports, (unsigned long long)(s->chan.bytes >> 10));
	else
		log_info("client %u attached: pid %d uid %d comm '%s', %u ports, %llu KiB %s channel%s%s%s", s->id,
			 (int)peer->pid, (int)peer->uid, peer->comm, num_ports, (unsigned long long)(s->chan.bytes >> 10),
			 ops->name, gpu ? ", GPU " : "", gpu ? gpu->uuid_text : "",
			 gpu && gpu->ordinal < 0 ? " (emulated)" : "");
	notify_status(d->reg.count, daemon_requests_served(d));
}

/* A hello: what is logged while serving it is about that process. */
static void on_hello(void *arg, int fd, const struct gpusys_hello *h, int fds[HELLO_NFDS], const struct peer *peer)
{
	log_context_set(peer->pid, 0, -1);
	serve_hello(arg, fd, h, fds, peer);
	log_context_clear();
}

/* ---------------------------------------------------------------- events */

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct daemon *d = arg;

	(void)what;
	d->handover = sig == SIGTERM && d->cfg.restart_grace_ms > 0;
	log_info("%s: stopping%s", strsignal((int)sig), d->handover ? ", handing clients over to the next gpusysd" : "");
	event_base_loopbreak(d->base);
}

/* SIGHUP (systemctl reload): read the configuration again; never ends the
 * daemon, whatever the file says. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	daemon_reload(arg);
}

static void on_status_timer(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	notify_status(d->reg.count, daemon_requests_served(d));
	notify_watchdog();
}

/* ------------------------------------------------------------- lifecycle */

/* Each client holds a socket, a channel descriptor and up to three passed
 * ones: max_clients of them need more than the usual 1024. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int start(struct daemon *d, const char *runtime_dir)
{
	char err[256];
	int r;

	r = runtime_open(&d->rt, runtime_dir, err, sizeof(err));
	if (r < 0) {
		log_err("%s", err);
		return r;
	}
	r = registry_init(&d->reg, d->cfg.max_clients);
	if (r < 0) {
		log_err("out of memory");
		return r;
	}

	/* No cached time: pollers and workers add timers to this loop
	 * (call_later's deadlines, SLEEP) while it may be running a batch of
	 * callbacks, and libevent then counts a new timer from the time
	 * cached when that batch began: a deadline fired early by as long as
	 * the batch had run (a 150 ms deadline in 148 ms, seen under
	 * ThreadSanitizer, where batches run slower). */
	struct event_config *ecfg = event_config_new();
	if (ecfg) {
		event_config_set_flag(ecfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
		d->base = event_base_new_with_config(ecfg);
		event_config_free(ecfg);
	}
	if (!d->base) {
		log_err("cannot create the event loop");
		return -ENOMEM;
	}
	stats_set_enabled(d->cfg.stats);
	wake_gpu_configure(d->cfg.gpu_watch != 0);
	channel_cuda_prefer(strcmp(d->cfg.cuda_memory, "vmm") ? GPUSYS_MEMORY_MEMFD : GPUSYS_MEMORY_CUDA_VMM);
	later_setup(d->base, (uint64_t)d->cfg.call_timeout_ms * 1000000u);
	r = session_reaper_start(d->base);
	if (r < 0) {
		log_err("out of memory");
		return r;
	}
	struct service_env env = { .cfg = &d->cfg, .base = d->base };
	r = services_start(&env, err, sizeof(err));
	if (r < 0) {
		log_err("%s", err);
		return r;
	}
	r = listener_new(d->base, d->rt.client_fd, d->cfg.handshake_timeout_ms, on_hello, d, &d->listener);
	if (r >= 0)
		r = control_new(d->base, d->rt.control_fd,
				&(struct control_limits){ .conns_per_uid = d->cfg.control_conns_per_uid,
							  .idle_timeout_ms = d->cfg.control_idle_timeout_ms,
							  .admin_gid = d->cfg.admin_gid },
				daemon_control, d, &d->control);
	if (r < 0) {
		log_err("cannot set up the listeners: %s", strerror(-r));
		return r;
	}
	r = metrics_start(d, &d->metrics); /* says why itself, with FILE:LINE */
	if (r < 0)
		return r;
	d->ev_sigterm = evsignal_new(d->base, SIGTERM, on_signal, d);
	d->ev_sigint = evsignal_new(d->base, SIGINT, on_signal, d);
	d->ev_sighup = evsignal_new(d->base, SIGHUP, on_reload, d);
	d->ev_status = event_new(d->base, -1, EV_PERSIST, on_status_timer, d);
	if (!d->ev_sigterm || !d->ev_sigint || !d->ev_sighup || !d->ev_status || evsignal_add(d->ev_sighup, NULL) < 0 ||
	    evsignal_add(d->ev_sigterm, NULL) < 0 ||
	    evsignal_add(d->ev_sigint, NULL) < 0 || event_add(d->ev_status, &(struct timeval){ .tv_sec = 1 }) < 0) {
		log_err("cannot set up signal handling");
		return -ENOMEM;
	}
	/* main() held SIGHUP blocked until now: one sent meanwhile is
	 * delivered here, to the handler just added, and reloads. Threads
	 * started before keep it blocked; this one takes it. */
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_UNBLOCK, &hup, NULL);

	/* The default group's pollers and workers and each emulated GPU's
	 * (the driver's GPUs get theirs once a client names one). */
	r = groups_start(d);
	if (r < 0)
		return r;
	clock_gettime(CLOCK_MONOTONIC, &d->started);
	return 0;
}

static void stop(struct daemon *d)
{
	notify_stopping();
	/* A restart: drain, and leave each channel that drained in HANDOVER
	 * for the next daemon (handover.c); it stops the pollers and the
	 * workers. */
	if (d->handover && groups_at(d, 0))
		daemon_handover(d);
	/* Clients first learn that nothing more will be served, so their
	 * warps stop waiting while we wind down (a handed-over channel stays
	 * HANDOVER). Hanging up their connections also tells a worker
	 * blocked on a client's behalf to give up (the file service polls
	 * the connection for that), so the pools below drain promptly. */
	registry_for_each(&d->reg, s)
	{
		channel_mark_stopped(&s->chan);
		shutdown(s->client.sock, SHUT_RDWR);
	}

	gpu_health_stop();
	metrics_stop(d->metrics);
	d->metrics = NULL;
	listener_free(d->listener);
	d->listener = NULL;
	control_free(d->control);
	d->control = NULL;
	if (d->groups) {
		groups_stop(d);
		/* Runs what is queued, so every deferred call drops its
		 * reference, before the sessions are detached below. */
		groups_stop_workers(d);
	}
	while (d->reg.head)
		detach(d, d->reg.head, "gpusysd stopping");
	registry_fini(&d->reg);
	/* Sessions whose last reference a worker dropped, then the services
	 * (no client is left). */
	session_reaper_stop();
	services_stop();
	groups_destroy(d);

	if (d->ev_sigterm)
		event_free(d->ev_sigterm);
	if (d->ev_sighup)
		event_free(d->ev_sighup);
	if (d->ev_sigint)
		event_free(d->ev_sigint);
	if (d->ev_status)
		event_free(d->ev_status);
	if (d->base)
		event_base_free(d->base);
	d->base = NULL;
	runtime_close(&d->rt);
}

int daemon_run(const struct gpusysd_config *cfg, const struct gpusysd_config *as_read, const char *config_path,
	       const char *runtime_dir)
{
	struct daemon *d = calloc(1, sizeof(*d));
	char err[256];
	int status = 1;

	if (!d) {
		log_err("out of memory");
		return 1;
	}
	d->cfg = *cfg;
	d->fail_gpu = fail_gpu;
	d->cfg_read = *as_read;
	d->config_path = config_path;
	/* max_handles_per_uid and the bounds on connections before their
	 * hello are set once the listener is up (quotas_start, below). */
	accounts_set_limits(d->cfg.user_mem_budget, UINT64_MAX, d->cfg.max_pending_calls_per_uid);
	account_set_limit(ACCOUNT_CHANNEL, d->cfg.user_channel_bytes);
	int push = gpusys_cache_push_init();
	if (getenv("GPUSYS_ANSWER_PUSH"))
		log_info("answers: GPUSYS_ANSWER_PUSH=%s: %s (the default is cldemote)", getenv("GPUSYS_ANSWER_PUSH"),
			 gpusys_cache_push_name(push));
	if (d->cfg.pollers == 0) {
		cpu_set_t set;
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		if (sched_getaffinity(0, sizeof(set), &set) == 0)
			n = CPU_COUNT(&set);
		d->cfg.pollers = config_auto_pollers(n > 0 ? (unsigned)n : 1);
	}
	if (config_check(&d->cfg, err, sizeof(err)) < 0 ||
	    gpus_add_emulated(d->cfg.emulated_gpus, err, sizeof(err)) < 0) {
		log_err("%s", err);
		free(d);
		return 1;
	}
	d->rt = (struct runtime){ .lock_fd = -1, .client_fd = -1, .control_fd = -1 };
	atomic_init(&d->retired_requests, 0);

	/* A client that vanishes while we write to it must cost an EPIPE,
	 * not the daemon. */
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	if (evthread_use_pthreads() < 0) {
		log_err("libevent has no pthreads support");
		free(d);
		return 1;
	}

	bool served = false;
	if (start(d, runtime_dir) == 0) {
		served = true;
		/* Before the first client: the quotas fit what is left once
		 * the daemon's own descriptors are open. */
		quotas_start(&d->cfg, d->listener);
		struct group_size all = groups_total(d);
		log_info("serving %s (version %s, pid %d, %u pollers, %u workers; %u and %u of them for clients "
			 "that name no GPU)", d->rt.dir, GPUSYS_VERSION, (int)getpid(), all.pollers, all.workers,
			 d->cfg.pollers, d->cfg.workers);
		notify_ready();
		notify_status(0, 0);
		if (event_base_dispatch(d->base) < 0)
			log_err("event loop failed");
		else
			status = 0;
	}
	stop(d);
	if (served) {
		uint64_t dropped = log_dropped_total();
		if (dropped)
			log_msg(LOG_INFO, "stopped (%llu log lines suppressed by the rate limit)",
				(unsigned long long)dropped);
		else
			log_msg(LOG_INFO, "stopped");
	}
	free(d);
	return status;
}
