/* SPDX-License-Identifier: MIT */
/*
 * The socket service's shared state: one call's lanes as they wait and
 * finish (struct sock_call, struct sock_lane), the client's state, the
 * daemon-wide settings, and what each file of the service offers the
 * others. How the pieces fit (service_socket.c's header comment):
 *
 *   service_socket.c  the ops table, parsing, each lane's first try, the hand-off
 *   sock_steps.c      one non-blocking attempt of a lane (send, recv, accept...)
 *   sock_wait.c       waiting lanes on their loop: events, retries, finishing, cancel
 *   sock_loops.c      the event loops calls wait on (threads of their own)
 *   sock_room.c       a call's response room, let go while its receives wait
 *   sock_errors.c     errors counted by opcode and errno
 *   sock_dns.c        getaddrinfo / getnameinfo through evdns
 *   sock_options.c    setsockopt / getsockopt
 *   sock_objects.c    the socket object in the handle table, address records
 */
#ifndef GPUSYSD_SOCK_CALL_H
#define GPUSYSD_SOCK_CALL_H

#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/handles.h"
#include "core/service.h"
#include "gpusys/socket.h"
#include "services/socket/sock_obj.h"
#include "services/socket/sock_policy.h"

struct sock_global {
	struct event_base *base;
	pthread_t main_thread; /* the loop's: start() runs on it */
	struct evdns_base *dns;
	struct sock_policy pol;
};

extern struct sock_global sock_g; /* sock_global.c; set by the service's start() */

#define SEND_FLAGS (MSG_DONTWAIT | MSG_MORE | MSG_OOB | MSG_EOR | MSG_NOSIGNAL | MSG_CONFIRM)
#define RECV_FLAGS (MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_TRUNC | MSG_OOB)

#define LANE_WAIT 1 /* lane_try: not done, wait for l->wait */

enum lane_wait {
	WAIT_NONE,
	WAIT_READ,
	WAIT_WRITE,
	WAIT_POLL,
	WAIT_DNS,
	WAIT_RDNS,
};

struct sock_call;

/* A DNS request's link to its lane: the lane may go (cancel) while libevent
 * still holds the request; the callback then only frees this. */
struct dns_ticket {
	struct sock_lane *lane;
};

struct sock_lane {
	struct sock_call *sc;
	uint8_t idx;
	uint8_t wait;          /* enum lane_wait while waiting, WAIT_NONE when done */
	/* WAIT_DNS, WAIT_RDNS: how the hand-off starts the lookup (set by
	 * sock_dns.c with the wait, so the waits need not know DNS) */
	void (*start_lookup)(struct sock_lane *l);
	bool connecting;       /* CONNECT: in progress, SO_ERROR tells */
	bool with_creds;       /* retries act as the client (a Unix path is named) */
	bool value_op;         /* the answer is an int64_t value */
	struct gpusys_sock_req q;
	const uint8_t *body;   /* data to send, poll list, host and service */
	uint32_t body_len;
	const uint8_t *addr;   /* address argument (in the request) */
	uint32_t addr_len;
	struct handle_entry *e;  /* with a reference while the lane works */
	struct sock *s;
	uint8_t *out;          /* response room: sc->resp + off (NULL while the room is let go) */
	uint32_t off;
	uint32_t room;
	bool lazy;             /* a receive (or a poll asking for bytes): its room is in the part
				* let go while it waits */
	uint32_t out_len;
	int64_t val;
	uint64_t done;         /* bytes so far (send all, MSG_WAITALL, bulk) */
	uint64_t deadline_ns;  /* CLOCK_MONOTONIC; 0: none */
	struct event *ev;      /* the descriptor (or, for a poll, the timer) */
	struct event **pev;    /* POLL: one persistent event per descriptor */
	struct handle_entry **pe;
	struct pollfd *pfd;    /* events without GPUSYS_POLL_RECV */
	uint32_t npoll;
	uint64_t poll_ask;     /* POLL: bit i, pollfd i carries GPUSYS_POLL_RECV (q.count bytes each) */
	struct dns_ticket *dns;
	struct sock_lane *wnext; /* in s->waiters */
};

struct sock_call {
	pthread_mutex_t lock;      /* recursive: a DNS answer may come inside arming */
	pthread_cond_t finished;   /* finishing went back to false, or cleaned became true (cancel waits) */
	struct event_base *base;   /* the loop it waits on (sock_loops.c) */
	pthread_t loop_thread;     /* that loop's thread */
	struct port_call *call;    /* NULL once cancelled */
	struct sock_client *cl;
	struct event *ev_arm;      /* its loop: arm the lanes, or clean up after a cancel */
	unsigned waiting;          /* lanes not done */
	bool holding;              /* arming: do not complete yet */
	bool cancelled;
	bool cleaned;              /* cancelled: its loop let go of everything (the canceller frees sc) */
	bool finishing;            /* call_complete is under way (on the call's loop) */
	/* The response room (sock_room.c): call->resp_buf, the lanes' rooms
	 * at their l->off, receives' last. */
	uint8_t *resp;
	uint64_t fixed_bytes;      /* every other lane's room */
	uint64_t lazy_bytes;       /* the receiving lanes' room */
	bool lazy_out;             /* not held (or charged) now: they wait with nothing */
	struct sock_lane lane[GPUSYS_WARP_LANES];
};

struct sock_client {
	const struct client *c;
	struct handle_table *ht;
};

/* sock_room.c: the response room of a call. A lane receiving (RECV,
 * RECVFROM, a POLL with GPUSYS_POLL_RECV) may wait long for data (an idle
 * keep-alive connection); while every receiving lane of the call waits
 * with nothing received, the call holds (and is charged for) no room for
 * them, and takes it back when data is there. Room for thousands of idle connections' receives would
 * otherwise exhaust the client's memory budget (client_mem_budget), and
 * their calls fail with -ENOMEM. All under sc->lock (or before the call is
 * shared). */
int sock_room_alloc(struct sock_call *sc, uint64_t fixed, uint64_t lazy); /* 0 or -ENOMEM */
void sock_room_shrink(struct sock_call *sc); /* let the receives' room go, if none holds data */
int sock_room_grow(struct sock_call *sc);    /* take it back: 0, GPUSYS_STATUS_NO_ROOM or -ENOMEM (nothing received) */

/* sock_objects.c: enter a new descriptor; the handle, or -errno with fd
 * closed. */
int sock_insert(struct sock_client *cl, int fd, int domain, int type, bool nonblock);
/* Whether the client has max_handles_per_client handles open (a new one
 * would be -EMFILE). The user's quota (max_handles_per_uid) is known only
 * when a handle is entered: past it an accepted connection is closed. */
bool sock_table_full(struct sock_client *cl);
void sock_addr_record(struct gpusys_sock_addr *r, const struct sockaddr_storage *ss, socklen_t len);

/* sock_options.c: 0 or -errno. */
int sock_setsockopt(struct sock_lane *l);
int sock_getsockopt(struct sock_lane *l);

/* sock_steps.c: one attempt of lane l's call. 0 or -errno: done (value in
 * l->val, data in l->out, l->out_len); LANE_WAIT: l->wait says on what. */
int sock_lane_try(struct sock_lane *l);
int sock_step_connect(struct sock_lane *l);
int sock_step_poll(struct sock_lane *l);
/* A poll's answer when its time is up: nothing ready (and nothing
 * received). 0, or -ENOMEM when its room cannot be taken back. */
int sock_poll_timed_out(struct sock_lane *l);

/* sock_dns.c: the first try of a lookup (checks; LANE_WAIT, with
 * l->start_lookup set, to go to evdns on the main loop), and evdns itself. */
int sock_first_getaddrinfo(struct sock_lane *l);
int sock_first_getnameinfo(struct sock_lane *l);

/* sock_loops.c: n event loops of their own threads (0: none, the main
 * loop only), each polling without sleeping for spin_us after an event; a
 * call's loop (main_loop: the main one, for name lookups); and the note each
 * event's callback leaves that its loop had work. */
int sock_loops_start(unsigned n, unsigned spin_us);
void sock_loop_worked(void);
void sock_loops_stop(void);
void sock_loop_pick(struct sock_call *sc, bool main_loop);

/* sock_errors.c: count an answer r of opcode (an error when < 0). */
void sock_error_count(uint16_t opcode, int32_t r);
void sock_errors_report(void (*emit)(void *arg, uint16_t opcode, int err, uint64_t count), void *arg);

/* sock_wait.c */
void sock_lane_drop(struct sock_lane *l);        /* let go of its events and descriptors */
void sock_lane_answer(struct sock_lane *l, int r); /* write its answer into the call */
void sock_lane_finish(struct sock_lane *l, int r); /* a waiting lane is done (its loop, sc locked) */
void sock_call_free(struct sock_call *sc);
bool sock_call_enter(struct sock_call *sc); /* its loop: false when cancelled */
void sock_call_leave(struct sock_call *sc); /* completes the call when every lane is done */
void sock_call_arm(evutil_socket_t fd, short what, void *arg); /* sc->ev_arm's callback */
extern const struct call_later_ops sock_later_ops;

#endif
