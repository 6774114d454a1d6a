/* SPDX-License-Identifier: MIT */
/*
 * The callback server's own state (callback_server.c: threads, claims, the
 * API; callback_steps.c: one port's message, a step at a time). Private to
 * libgpusys.
 */
#ifndef GPUSYS_CALLBACK_INTERNAL_H
#define GPUSYS_CALLBACK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "gpusys/abi.h"
#include "gpusys/callback.h"
#include "gpusys/dev.h"

#define MAX_THREADS 32u
/* A call of heads whose heads have not landed this long after its word
 * never will: its kernel scribbled the word or died (the heads are stored
 * before the word, and land within the bus's latency, microseconds). It is
 * answered -EPROTO, so that its port is not looked at for ever. */
#define HEADS_LATE_MAX_NS (1000u * 1000u * 1000u)
#define USER_OPS (0x10000u - GPUSYS_OP_USER_FIRST)

/* Where a port's message stands between steps. */
enum cb_phase {
	CB_IDLE, /* the next client word starts a message (packet 0) */
	CB_RECV, /* request stream packets are arriving */
	CB_SEND, /* response stream packets are being asked for */
};

/* A port's message, kept between steps (each step is one worker's, under
 * the port's claim). Lengths are the copies taken out of packet 0 once. */
struct cb_msg {
	uint8_t phase; /* enum cb_phase */
	bool noreply, heads;
	uint16_t opcode;
	uint64_t mask;
	int32_t status;     /* the request failed as a whole (it still takes its stream) */
	uint32_t seq;       /* the last packet taken or sent */
	uint32_t chunk, chunks; /* stream packets done, and in all */
	uint64_t late_since; /* a call of heads whose heads have not landed: first look */
	uint32_t len[GPUSYS_WARP_LANES], cap[GPUSYS_WARP_LANES];
	uint32_t off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES]; /* the stream's layout */
	uint32_t res_len[GPUSYS_WARP_LANES];
	int32_t lane_status[GPUSYS_WARP_LANES];
	uint8_t *arg[GPUSYS_WARP_LANES], *res[GPUSYS_WARP_LANES];
	uint8_t *req_buf, *res_buf;
	/* Packet-0-sized messages (the common case) need no allocation. */
	uint8_t small_req[GPUSYS_PACKET_BYTES], small_res[GPUSYS_PACKET_BYTES];
};

struct cb_entry {
	struct gpusys_callback_desc d; /* name copied */
	atomic_uint_fast64_t calls;
};

struct gpusys_callbacks {
	/* The channel, host view. */
	uint8_t *base;
	size_t bytes;
	struct gpusys_channel_header *hdr;
	volatile uint64_t *client_word;
	volatile uint64_t *server_word;
	struct gpusys_port *ports;
	uint32_t num_ports;
	uint8_t *windows; /* the last num_windows ports' stream packets (abi.h) */
	uint32_t num_windows;

	/* Private server state per port. */
	uint16_t *seen;       /* the sequence we last acknowledged; workers write it */
	atomic_uchar *claim;  /* 1 from a claim to the end of that thread's step */
	struct cb_msg **msg;  /* each port's, from its first message on */
	/* The spinning worker (its slot + 1; 0: none) that left the port's
	 * message part way and watches for its next packet: other spinners
	 * leave the port to it, so that a message's steps stay on one core
	 * (12 workers racing for one warp's 32 x 4 KiB callback made it 27%
	 * slower than 4, bench/RESULTS.md "Tenth session"). The poller's
	 * passes do not look: a worker that stops watching clears it. */
	atomic_uchar *watched_by;

	_Atomic(struct cb_entry *) *ops; /* USER_OPS entries, published once */
	pthread_mutex_t reg_lock;
	struct cb_entry **list; /* registration order, for info */
	unsigned nlist, caplist;

	/* Job queue: ports claimed by the poller, for the workers. */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	uint32_t *queue; /* num_ports entries, ring */
	uint32_t q_head, q_len;
	atomic_uint q_count;    /* q_len, readable without the lock */
	atomic_uint spinning;   /* workers spinning for a job */
	atomic_uint running;    /* callbacks running now */

	pthread_t poller;
	pthread_t workers[MAX_THREADS];
	unsigned nworkers;
	int efd;    /* the wake pipe's read end (a pipe, not an eventfd: emulated
		       warps write one byte, device/lane.h gpusys_wake_daemon) */
	int efd_w;  /* its write end: emulated warps' wake_fd */
	atomic_int stop;
	_Atomic uint64_t expect_until;

	/* For emulated warps: a handle over the host view. */
	gpusys_dev_t emu_dev;
	struct gpusys_port_lock *emu_locks;
	unsigned long long emu_submitted;
	uint32_t *emu_warp_futures;
};

/* Do what port p's client word allows now (the caller holds the port's
 * claim), counting a message that ends in progress slot slot. */
void cb_step(struct gpusys_callbacks *cb, uint32_t p, unsigned slot);

/* Free a port's message record and what it holds. */
void cb_msg_free(struct cb_msg *m);

#endif /* GPUSYS_CALLBACK_INTERNAL_H */
