/* SPDX-License-Identifier: MIT */
/*
 * A client's handles: small numbers for what its services opened for it
 * (files, directories, sockets: one space, as a process's descriptors are),
 * never the daemon's descriptors. The table is the core's so that no
 * service depends on another for it; what a kind of entry means beyond a
 * descriptor is its service's (the entry's obj and ops).
 *
 * A handle is (generation << HANDLE_INDEX_BITS | index); closing an entry
 * bumps its generation, so a closed, stale or invented handle finds no entry
 * and gives -EBADF. Lookups take a reference: the descriptor is closed only
 * when the last user of a closed entry lets go, so a close racing a read
 * never makes the read use a reused descriptor.
 */
#ifndef GPUSYSD_CORE_HANDLES_H
#define GPUSYSD_CORE_HANDLES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The handle type and its limits are the ABI's (gpusys_fd_t: one space for
 * files, directories and sockets). */
#include "gpusys/file.h"

struct client;
struct account;
struct service_transfer;

#define HANDLE_INDEX_BITS 16u
#define HANDLE_GEN_MAX ((UINT32_C(1) << (31 - HANDLE_INDEX_BITS)) - 1)
/* Entries come in chunks allocated as a client opens more, and never move
 * (lookups hold pointers to them). */
#define HANDLE_CHUNK 1024u
#define HANDLE_CHUNKS ((1u << HANDLE_INDEX_BITS) / HANDLE_CHUNK)

_Static_assert((1u << HANDLE_INDEX_BITS) >= GPUSYS_FILE_HANDLES_LIMIT, "index bits cover the table");

/* What an entry holds. A lookup names the kind it wants, so a handle of one
 * kind is -EBADF to calls on another. */
enum handle_kind {
	HANDLE_KIND_FREE = 0,
	HANDLE_KIND_FILE = 1,
	HANDLE_KIND_DIR = 2,
	HANDLE_KIND_SOCKET = 3,
};

struct handle_entry;

/* What an entry with an object needs from the table: a word when the client
 * closes the handle (wake whatever waits on it; the entry may still be
 * referenced) and the last release (close the descriptor, free obj).
 * closed may be NULL. Called without the table lock. */
struct handle_entry_ops {
	void (*closed)(struct handle_entry *e);
	void (*release)(int fd, void *obj);
};

struct handle_entry {
	int fd;
	uint32_t gen;       /* of the current or next occupant */
	uint8_t kind;       /* enum handle_kind */
	bool closing;       /* closed by the client; freed when refs reach 0 */
	uint32_t refs;      /* lookups in progress, +1 while open */
	int oflags;         /* what the client asked for (O_APPEND, O_NONBLOCK...) */
	void *obj;          /* the service's object (a DIR, a socket), or NULL */
	const struct handle_entry_ops *ops; /* with obj; NULL: the table closes fd */
	/* For the service's uses of obj that must not overlap (readdir on
	 * one DIR at a time). */
	pthread_mutex_t obj_lock;
	/* Bulk calls through this handle (gpusysctl transfers): bytes read and
	 * written, and when the first and the latest were (CLOCK_MONOTONIC). */
	_Atomic uint64_t bulk_read, bulk_written, bulk_first_ns, bulk_last_ns;
	_Atomic bool bulk_last_write;
};

struct handle_table {
	pthread_mutex_t lock;
	const struct client *owner; /* handle_table_acquire's key */
	uint32_t users;     /* handle_table_acquire references */
	struct handle_table *next;
	uint32_t count;
	uint32_t hint;
	uint32_t max;       /* handles at most (EMFILE past it) */
	struct account *account; /* the user's quota of handles, or NULL */
	/* Generations: new entries start at gen_start (1, or where the
	 * daemon before a restart stopped: handle_table_open); every handle
	 * handed out moves gen_floor (the channel header's handle_gen_floor,
	 * or NULL) past its generation, for the next daemon
	 * (docs/RESTART.md). */
	uint32_t gen_start;
	uint32_t gen_next;
	volatile uint32_t *gen_floor;
	uint32_t nchunks;   /* chunk[0..nchunks) are allocated */
	struct handle_entry *chunk[HANDLE_CHUNKS];
};

/* A table for at most max handles (1..GPUSYS_FILE_HANDLES_LIMIT). */
struct handle_table *handle_table_new(uint32_t max);

/* The bound of the tables handle_table_acquire makes from now on (the
 * max_handles_per_client setting; the file service sets it at start). */
void handle_table_set_max(uint32_t max);

/* Close everything still open and free the table. No other thread may use
 * it. Returns how many descriptors it closed. */
unsigned handle_table_free(struct handle_table *ht);

/* One table per client, shared by the services whose handles live in one
 * space (files and sockets): the first call for owner makes it, each call
 * takes a reference. NULL when out of memory. */
struct handle_table *handle_table_acquire(const struct client *owner);

/* The same, for the session at attach, before any service acquires the
 * table: a table made now hands out generations from gen_start (1: a new
 * client; past 1: a channel adopted after a restart, from the old daemon's
 * header.handle_gen_floor, so the old handles fail -EBADF; out of range:
 * 1) and keeps *gen_floor (that header word, or NULL) past every
 * generation it hands out. A table that exists already keeps its own. */
struct handle_table *handle_table_open(const struct client *owner, uint32_t gen_start,
				       volatile uint32_t *gen_floor);

/* Drop a reference of handle_table_acquire; the last one frees the table
 * (handle_table_free). Returns how many descriptors that closed. */
unsigned handle_table_release(struct handle_table *ht);

/* Enter fd, which the table closes at the last release. The handle (> 0),
 * or -EMFILE when the client has its maximum open (or no memory for more
 * entries): then fd is still the caller's. */
int handle_table_insert(struct handle_table *ht, int fd, enum handle_kind kind, int oflags);

/* Enter fd with the service's object and hooks (ops->release closes both).
 * The handle or -EMFILE (then fd and obj are still the caller's). */
int handle_table_insert_obj(struct handle_table *ht, int fd, enum handle_kind kind, int oflags, void *obj,
			    const struct handle_entry_ops *ops);

/* The entry of handle if it is open and of this kind, with a reference;
 * NULL for anything else (-EBADF for the caller). */
struct handle_entry *handle_table_get(struct handle_table *ht, int32_t handle, enum handle_kind kind);

/* Drop a reference from handle_table_get. */
void handle_table_put(struct handle_table *ht, struct handle_entry *e);

/* handle_table_get of n handles under one hold of the table's lock (a
 * poll's list, a call's lanes; pollers share one client's table): out[i]
 * is handles[i]'s entry if it is open as a socket or a file, with a
 * reference, else NULL (handles of 0 or less are never looked up). */
void handle_table_get_many(struct handle_table *ht, const int32_t *handles, uint32_t n, struct handle_entry **out);

/* handle_table_put of every non-NULL es[i], under one hold of the lock. */
void handle_table_put_many(struct handle_table *ht, struct handle_entry *const *es, uint32_t n);

/* Close handle: later lookups fail at once; the descriptor goes when its
 * last user is done. 0 or -EBADF. */
int handle_table_close(struct handle_table *ht, int32_t handle, enum handle_kind kind);

/* close(2) of a handle that may be a file or a socket (not a directory:
 * closedir). 0 or -EBADF. */
int handle_table_close_any(struct handle_table *ht, int32_t handle);

/* Count a bulk call of n bytes through e that started at start_ns. */
void handle_entry_count_bulk(struct handle_entry *e, bool write_op, uint64_t n, uint64_t start_ns);

/* For each entry whose latest bulk call ended at since_ns or later: emit
 * its handle, path (from /proc/self/fd) and counts. */
void handle_table_transfers(struct handle_table *ht, uint64_t since_ns,
			    void (*emit)(void *arg, const struct service_transfer *t), void *arg);

#endif
