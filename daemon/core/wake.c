/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/log.h"
#include "core/wake.h"

struct wake {
	int epfd;
	int efd; /* ours: kicks and CUDA callbacks */
};

int wake_eventfd(const struct wake *w)
{
	return w->efd;
}

int wake_create(struct wake **ret)
{
	struct wake *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->epfd < 0 || w->efd < 0)
		goto fail;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->efd, &ev) < 0)
		goto fail;
	*ret = w;
	return 0;
fail:
	r = -errno;
	if (w->epfd >= 0)
		close(w->epfd);
	if (w->efd >= 0)
		close(w->efd);
	free(w);
	return r;
}

void wake_destroy(struct wake *w)
{
	if (!w)
		return;
	close(w->epfd);
	close(w->efd);
	free(w);
}

void wake_kick(struct wake *w)
{
	uint64_t one = 1;
	/* EAGAIN only when the counter is near 2^64: it is readable then. */
	if (write(w->efd, &one, sizeof(one)) < 0) {
	}
}

int wake_chan_open(struct wake *w, struct wake_chan *c, uint64_t tag, int *ret_wfd)
{
	int p[2];

	c->tag = tag;
	c->rfd = -1;
	atomic_init(&c->hup, false);
	c->registered = false;
	c->gpu = NULL;
	c->needs_timer = false;
	/* Both ends non-blocking: ours so that draining never blocks, the
	 * client's so that a full pipe never stops a warp (the client may
	 * change its own end; only it is affected). */
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, p[0], &ev) < 0) {
		int r = -errno;
		close(p[0]);
		close(p[1]);
		return r;
	}
	c->rfd = p[0];
	c->registered = true;
	*ret_wfd = p[1];
	return 0;
}

void wake_chan_unregister(struct wake *w, struct wake_chan *c)
{
	if (c->registered && c->rfd >= 0)
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
	c->registered = false;
}

void wake_chan_close(struct wake *w, struct wake_chan *c)
{
	wake_chan_unregister(w, c);
	if (c->rfd >= 0)
		close(c->rfd);
	c->rfd = -1;
}

/* Read what a client wrote. At EOF (it closed its end, or exited) the pipe
 * would stay readable forever: take it out of the set. */
static void drain_pipe(struct wake *w, struct wake_chan *c)
{
	char buf[256];

	if (c->rfd < 0 || atomic_load_explicit(&c->hup, memory_order_relaxed))
		return;
	for (;;) {
		ssize_t n = read(c->rfd, buf, sizeof(buf));
		if (n > 0 && n == (ssize_t)sizeof(buf))
			continue;
		if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
			return;
		/* EOF or an error: no more host wake-ups from this client. Only
		 * this thread removes it here; the main thread's later DEL
		 * then fails harmlessly. */
		atomic_store_explicit(&c->hup, true, memory_order_relaxed);
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->rfd, NULL);
		return;
	}
}

int wake_sleep(struct wake *w, int timeout_ms, struct wake_events *ev)
{
	struct epoll_event e[32];
	int n;

	do
		n = epoll_wait(w->epfd, e, 32, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		log_err("epoll_wait: %s", strerror(errno));
		n = 0;
		e[n++].data.u64 = 0; /* go back to polling rather than spin on an error */
	}
	ev->n = n;
	for (int i = 0; i < n; i++)
		ev->tag[i] = e[i].data.u64;
	return n;
}

void wake_drain(struct wake *w, const struct wake_events *ev, struct wake_chan *(*find)(void *arg, uint64_t tag),
		void *arg)
{
	for (int i = 0; i < ev->n; i++) {
		if (ev->tag[i] == 0) {
			uint64_t v;
			if (read(w->efd, &v, sizeof(v)) < 0) {
			}
			continue;
		}
		struct wake_chan *c = find(arg, ev->tag[i]);
		if (c)
			drain_pipe(w, c);
	}
}

#ifndef GPUSYSD_WAKE_CUDA
/* Built without the CUDA backend: a GPU client's doorbell cannot be
 * watched, so poller 0 keeps to timed naps while one is attached. */
void wake_gpu_configure(bool watch)
{
	(void)watch;
}

void wake_gpu_open(struct wake *w, struct wake_chan *c, const struct channel *ch, int32_t cuda_device)
{
	(void)w;
	(void)ch;
	(void)cuda_device;
	c->needs_timer = true;
}

bool wake_gpu_arm(struct wake_chan *c, uint64_t seen)
{
	(void)c;
	(void)seen;
	return false;
}

bool wake_gpu_close(struct wake_chan *c, const struct channel *ch)
{
	(void)c;
	(void)ch;
	return true;
}

void wake_gpu_hold(void)
{
}

void wake_gpu_unhold(void)
{
}
#endif
