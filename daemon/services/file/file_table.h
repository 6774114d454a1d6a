/* SPDX-License-Identifier: MIT */
/*
 * A client's open files and directories: small handles, never the daemon's
 * descriptors. A handle is (generation << GPUSYS_FILE_INDEX_BITS | index);
 * closing an entry bumps its generation, so a closed, stale or invented
 * handle finds no entry and gives -EBADF. Lookups take a reference: the
 * descriptor is closed only when the last user of a closed entry lets go,
 * so a close racing a read never makes the read use a reused descriptor.
 */
#ifndef GPUSYSD_FILE_TABLE_H
#define GPUSYSD_FILE_TABLE_H

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpusys/file.h"

struct client;
struct account;

#define FILE_INDEX_BITS 16u
#define FILE_GEN_MAX ((UINT32_C(1) << (31 - FILE_INDEX_BITS)) - 1)
/* Entries come in chunks allocated as a client opens more, and never move
 * (lookups hold pointers to them). */
#define FILE_CHUNK 1024u
#define FILE_CHUNKS ((1u << FILE_INDEX_BITS) / FILE_CHUNK)

_Static_assert((1u << FILE_INDEX_BITS) >= GPUSYS_FILE_HANDLES_LIMIT, "index bits cover the table");

enum file_kind {
	FILE_KIND_FREE = 0,
	FILE_KIND_FILE = 1,
	FILE_KIND_DIR = 2,
	FILE_KIND_SOCKET = 3, /* the socket service's (daemon/services/socket/) */
};

struct file_entry;

/* What a kind other than files and directories needs from the table: a
 * word when the client closes the handle (wake whatever waits on it; the
 * entry may still be referenced) and the last release (close the
 * descriptor, free obj). Called without the table lock. */
struct file_entry_ops {
	void (*closed)(struct file_entry *e);
	void (*release)(int fd, void *obj);
};

struct file_entry {
	int fd;
	uint32_t gen;       /* of the current or next occupant */
	uint8_t kind;       /* enum file_kind */
	bool closing;       /* closed by the client; freed when refs reach 0 */
	uint32_t refs;      /* lookups in progress, +1 while open */
	int oflags;         /* what the client asked for (O_APPEND, O_NONBLOCK...) */
	DIR *dir;           /* FILE_KIND_DIR: owns fd */
	void *obj;          /* FILE_KIND_SOCKET: the service's object */
	const struct file_entry_ops *ops; /* NULL for files and directories */
	pthread_mutex_t dir_lock; /* readdir on one DIR at a time */
	/* Bulk calls through this handle (gpusysctl transfers): bytes read and
	 * written, and when the first and the latest were (CLOCK_MONOTONIC). */
	_Atomic uint64_t bulk_read, bulk_written, bulk_first_ns, bulk_last_ns;
	_Atomic bool bulk_last_write;
};

struct file_table {
	pthread_mutex_t lock;
	const struct client *owner; /* file_table_acquire's key */
	uint32_t users;     /* file_table_acquire references */
	struct file_table *next;
	uint32_t count;
	uint32_t hint;
	uint32_t max;       /* handles at most (EMFILE past it) */
	struct account *account; /* the user's quota of handles, or NULL */
	/* Generations: new entries start at gen_start (1, or where the
	 * daemon before a restart stopped, client.handle_gen_start); every
	 * handle handed out moves gen_floor (the channel header's
	 * handle_gen_floor, or NULL) past its generation, for the next
	 * daemon (docs/RESTART.md). */
	uint32_t gen_start;
	uint32_t gen_next;
	volatile uint32_t *gen_floor;
	uint32_t nchunks;   /* chunk[0..nchunks) are allocated */
	struct file_entry *chunk[FILE_CHUNKS];
};

/* A table for at most max handles (1..GPUSYS_FILE_HANDLES_LIMIT). */
struct file_table *file_table_new(uint32_t max);

/* The bound of the tables file_table_acquire makes from now on (the
 * max_handles_per_client setting; the file service sets it at start). */
void file_table_set_max(uint32_t max);

/* Close everything still open and free the table. No other thread may use
 * it. Returns how many descriptors it closed. */
unsigned file_table_free(struct file_table *ft);

/* One table per client, shared by the services whose handles live in one
 * space (files and sockets): the first call for owner makes it, each call
 * takes a reference. NULL when out of memory. */
struct file_table *file_table_acquire(const struct client *owner);

/* Drop a reference of file_table_acquire; the last one frees the table
 * (file_table_free). Returns how many descriptors that closed. */
unsigned file_table_release(struct file_table *ft);

/* Enter fd (and dir, which owns it, for a directory). The handle (> 0), or
 * -EMFILE when the client has its maximum open (or no memory for more
 * entries): then fd/dir
 * are still the caller's. */
int file_table_insert(struct file_table *ft, int fd, enum file_kind kind, int oflags, DIR *dir);

/* Enter an entry of another kind (FILE_KIND_SOCKET) with its object and
 * hooks. The handle or -EMFILE (then fd and obj are still the caller's). */
int file_table_insert_obj(struct file_table *ft, int fd, enum file_kind kind, int oflags, void *obj,
			  const struct file_entry_ops *ops);

/* The entry of handle if it is open and of this kind, with a reference;
 * NULL for anything else (-EBADF for the caller). */
struct file_entry *file_table_get(struct file_table *ft, int32_t handle, enum file_kind kind);

/* Drop a reference from file_table_get. */
void file_table_put(struct file_table *ft, struct file_entry *e);

/* Close handle: later lookups fail at once; the descriptor goes when its
 * last user is done. 0 or -EBADF. */
int file_table_close(struct file_table *ft, int32_t handle, enum file_kind kind);

/* Count a bulk call of n bytes through e that started at start_ns. */
void file_entry_count_bulk(struct file_entry *e, bool write_op, uint64_t n, uint64_t start_ns);

/* For each entry whose latest bulk call ended at since_ns or later: emit
 * its handle, path (from /proc/self/fd) and counts. */
struct service_transfer;
void file_table_transfers(struct file_table *ft, uint64_t since_ns,
			  void (*emit)(void *arg, const struct service_transfer *t), void *arg);

/* close(2) of a handle that may be a file or a socket (not a directory:
 * closedir). 0 or -EBADF. */
int file_table_close_any(struct file_table *ft, int32_t handle);

#endif
