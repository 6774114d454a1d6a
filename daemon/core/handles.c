/* SPDX-License-Identifier: MIT */
/* The per-client handle table (handles.h): entries, generations, references,
 * the one table each client's services share, and bulk counters. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <limits.h>
#include <stdio.h>
#include <time.h>

#include "core/accounts.h"
#include "core/client.h"
#include "core/handles.h"
#include "core/service.h" /* struct service_transfer */

struct handle_table *handle_table_new(uint32_t max)
{
	struct handle_table *ht = calloc(1, sizeof(*ht));
	if (!ht)
		return NULL;
	pthread_mutex_init(&ht->lock, NULL);
	ht->max = max < 1 ? 1 : max > GPUSYS_FILE_HANDLES_LIMIT ? GPUSYS_FILE_HANDLES_LIMIT : max;
	ht->gen_start = ht->gen_next = 1;
	return ht;
}

/* The entry at idx, or NULL where no chunk holds it yet. */
static struct handle_entry *entry_at(struct handle_table *ht, uint32_t idx)
{
	uint32_t c = idx / HANDLE_CHUNK;
	return c < ht->nchunks ? &ht->chunk[c][idx % HANDLE_CHUNK] : NULL;
}

/* One more chunk of free entries; with ht->lock held. */
static int grow_locked(struct handle_table *ht)
{
	if (ht->nchunks == HANDLE_CHUNKS)
		return -EMFILE;
	struct handle_entry *c = calloc(HANDLE_CHUNK, sizeof(*c));
	if (!c)
		return -EMFILE;
	for (uint32_t i = 0; i < HANDLE_CHUNK; i++) {
		c[i].fd = -1;
		c[i].gen = ht->gen_start;
		pthread_mutex_init(&c[i].obj_lock, NULL);
	}
	ht->chunk[ht->nchunks++] = c;
	return 0;
}

/* The descriptor of an entry nobody uses any more; called with ht->lock
 * held (close() of a regular file, directory or non-blocking socket does
 * not block for long): the service's release where it has an object. */
static void entry_release(struct handle_table *ht, struct handle_entry *e)
{
	if (e->ops)
		e->ops->release(e->fd, e->obj);
	else if (e->fd >= 0)
		close(e->fd);
	e->obj = NULL;
	e->ops = NULL;
	e->fd = -1;
	e->kind = HANDLE_KIND_FREE;
	e->closing = false;
	e->oflags = 0;
	ht->count--;
	account_uncharge(ht->account, ACCOUNT_HANDLES, 1);
}

unsigned handle_table_free(struct handle_table *ht)
{
	unsigned closed = 0;
	if (!ht)
		return 0;
	for (uint32_t i = 0; i < ht->nchunks * HANDLE_CHUNK; i++) {
		struct handle_entry *e = entry_at(ht, i);
		if (e->kind != HANDLE_KIND_FREE) {
			entry_release(ht, e);
			closed++;
		}
		pthread_mutex_destroy(&e->obj_lock);
	}
	for (uint32_t c = 0; c < ht->nchunks; c++)
		free(ht->chunk[c]);
	pthread_mutex_destroy(&ht->lock);
	free(ht);
	return closed;
}

static struct {
	pthread_mutex_t lock;
	struct handle_table *head;
	uint32_t max; /* for new tables */
} handle_tables = { .lock = PTHREAD_MUTEX_INITIALIZER, .max = GPUSYS_FILE_DEFAULT_MAX_HANDLES };

void handle_table_set_max(uint32_t max)
{
	pthread_mutex_lock(&handle_tables.lock);
	handle_tables.max = max;
	pthread_mutex_unlock(&handle_tables.lock);
}

struct handle_table *handle_table_acquire(const struct client *owner)
{
	return handle_table_open(owner, 1, NULL);
}

struct handle_table *handle_table_open(const struct client *owner, uint32_t gen_start,
				       volatile uint32_t *gen_floor)
{
	pthread_mutex_lock(&handle_tables.lock);
	struct handle_table *ht = handle_tables.head;
	while (ht && ht->owner != owner)
		ht = ht->next;
	if (!ht && (ht = handle_table_new(handle_tables.max))) {
		ht->owner = owner;
		ht->account = owner ? owner->account : NULL;
		if (gen_start >= 1 && gen_start <= HANDLE_GEN_MAX)
			ht->gen_start = ht->gen_next = gen_start;
		ht->gen_floor = gen_floor;
		if (ht->gen_floor)
			*ht->gen_floor = ht->gen_next;
		ht->next = handle_tables.head;
		handle_tables.head = ht;
	}
	if (ht)
		ht->users++;
	pthread_mutex_unlock(&handle_tables.lock);
	return ht;
}

unsigned handle_table_release(struct handle_table *ht)
{
	if (!ht)
		return 0;
	pthread_mutex_lock(&handle_tables.lock);
	bool last = --ht->users == 0;
	if (last) {
		struct handle_table **pp = &handle_tables.head;
		while (*pp != ht)
			pp = &(*pp)->next;
		*pp = ht->next;
	}
	pthread_mutex_unlock(&handle_tables.lock);
	return last ? handle_table_free(ht) : 0;
}

static int32_t make_handle(uint32_t idx, uint32_t gen)
{
	return (int32_t)(gen << HANDLE_INDEX_BITS | idx);
}

int handle_table_insert(struct handle_table *ht, int fd, enum handle_kind kind, int oflags)
{
	return handle_table_insert_obj(ht, fd, kind, oflags, NULL, NULL);
}

int handle_table_insert_obj(struct handle_table *ht, int fd, enum handle_kind kind, int oflags, void *obj,
			    const struct handle_entry_ops *ops)
{
	pthread_mutex_lock(&ht->lock);
	uint32_t slots = ht->nchunks * HANDLE_CHUNK;
	if (ht->count >= ht->max || (ht->count == slots && grow_locked(ht) < 0) ||
	    !account_charge(ht->account, ACCOUNT_HANDLES, 1)) {
		pthread_mutex_unlock(&ht->lock);
		return -EMFILE;
	}
	/* A free entry exists among the allocated ones: from the hint on. */
	slots = ht->nchunks * HANDLE_CHUNK;
	uint32_t i = ht->hint < slots ? ht->hint : 0;
	while (entry_at(ht, i)->kind != HANDLE_KIND_FREE)
		i = (i + 1) % slots;
	ht->hint = (i + 1) % slots;
	struct handle_entry *e = entry_at(ht, i);
	e->fd = fd;
	e->kind = (uint8_t)kind;
	e->closing = false;
	e->refs = 1;
	e->oflags = oflags;
	e->obj = obj;
	e->ops = ops;
	atomic_store_explicit(&e->bulk_read, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_written, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_first_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_last_ns, 0, memory_order_relaxed);
	ht->count++;
	int32_t h = make_handle(i, e->gen);
	if (e->gen >= ht->gen_next) {
		/* A generation past the wrap starts over at 1, as close does. */
		ht->gen_next = e->gen == HANDLE_GEN_MAX ? 1 : e->gen + 1;
		if (ht->gen_floor)
			*ht->gen_floor = ht->gen_next;
	}
	pthread_mutex_unlock(&ht->lock);
	return h;
}

/* handle's entry, with a reference, if it is open as one of kinds (bit
 * 1 << kind each); NULL otherwise. ht->lock held. */
static struct handle_entry *get_locked(struct handle_table *ht, int32_t handle, unsigned kinds)
{
	if (handle <= 0)
		return NULL;
	uint32_t idx = (uint32_t)handle & ((1u << HANDLE_INDEX_BITS) - 1);
	uint32_t gen = (uint32_t)handle >> HANDLE_INDEX_BITS;
	struct handle_entry *e = entry_at(ht, idx);
	if (!e || !(kinds >> e->kind & 1) || e->closing || e->gen != gen)
		return NULL;
	e->refs++;
	return e;
}

struct handle_entry *handle_table_get(struct handle_table *ht, int32_t handle, enum handle_kind kind)
{
	pthread_mutex_lock(&ht->lock);
	struct handle_entry *e = get_locked(ht, handle, 1u << kind);
	pthread_mutex_unlock(&ht->lock);
	return e;
}

static void put_locked(struct handle_table *ht, struct handle_entry *e)
{
	if (--e->refs == 0)
		entry_release(ht, e);
}

void handle_table_put(struct handle_table *ht, struct handle_entry *e)
{
	pthread_mutex_lock(&ht->lock);
	put_locked(ht, e);
	pthread_mutex_unlock(&ht->lock);
}

/* Why under one lock: a gpu_httpd warp polls its listener and up to 63
 * connections at a time, or sends on 32, and every poller serving the
 * client takes this lock; one hold per handle was 128 lock pairs per poll. */
void handle_table_get_many(struct handle_table *ht, const int32_t *handles, uint32_t n, struct handle_entry **out)
{
	pthread_mutex_lock(&ht->lock);
	for (uint32_t i = 0; i < n; i++)
		out[i] = get_locked(ht, handles[i], 1u << HANDLE_KIND_SOCKET | 1u << HANDLE_KIND_FILE);
	pthread_mutex_unlock(&ht->lock);
}

void handle_table_put_many(struct handle_table *ht, struct handle_entry *const *es, uint32_t n)
{
	pthread_mutex_lock(&ht->lock);
	for (uint32_t i = 0; i < n; i++)
		if (es[i])
			put_locked(ht, es[i]);
	pthread_mutex_unlock(&ht->lock);
}

static int close_entry(struct handle_table *ht, struct handle_entry *e)
{
	pthread_mutex_lock(&ht->lock);
	if (e->closing) { /* another close won the race */
		put_locked(ht, e);
		pthread_mutex_unlock(&ht->lock);
		return -EBADF;
	}
	e->closing = true;
	e->gen = e->gen == HANDLE_GEN_MAX ? 1 : e->gen + 1;
	put_locked(ht, e); /* the open reference; our lookup keeps e */
	pthread_mutex_unlock(&ht->lock);
	/* Later lookups fail now; wake whatever still waits on it. */
	if (e->ops && e->ops->closed)
		e->ops->closed(e);
	handle_table_put(ht, e);
	return 0;
}

int handle_table_close(struct handle_table *ht, int32_t handle, enum handle_kind kind)
{
	struct handle_entry *e = handle_table_get(ht, handle, kind);
	return e ? close_entry(ht, e) : -EBADF;
}

int handle_table_close_any(struct handle_table *ht, int32_t handle)
{
	struct handle_entry *e = handle_table_get(ht, handle, HANDLE_KIND_FILE);
	if (!e)
		e = handle_table_get(ht, handle, HANDLE_KIND_SOCKET);
	return e ? close_entry(ht, e) : -EBADF;
}

void handle_entry_count_bulk(struct handle_entry *e, bool write_op, uint64_t n, uint64_t start_ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t zero = 0;
	atomic_fetch_add_explicit(write_op ? &e->bulk_written : &e->bulk_read, n, memory_order_relaxed);
	atomic_compare_exchange_strong_explicit(&e->bulk_first_ns, &zero, start_ns, memory_order_relaxed,
						memory_order_relaxed);
	atomic_store_explicit(&e->bulk_last_write, write_op, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_last_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
			      memory_order_relaxed);
}

void handle_table_transfers(struct handle_table *ht, uint64_t since_ns,
			    void (*emit)(void *arg, const struct service_transfer *t), void *arg)
{
	pthread_mutex_lock(&ht->lock);
	for (uint32_t i = 0; i < ht->nchunks * HANDLE_CHUNK; i++) {
		struct handle_entry *e = entry_at(ht, i);
		uint64_t last = atomic_load_explicit(&e->bulk_last_ns, memory_order_relaxed);
		if (e->kind == HANDLE_KIND_FREE || e->closing || !last || last < since_ns)
			continue;
		char link[64], path[PATH_MAX];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", e->fd);
		ssize_t n = e->fd >= 0 ? readlink(link, path, sizeof(path) - 1) : -1;
		path[n > 0 ? n : 0] = 0;
		bool w = atomic_load_explicit(&e->bulk_last_write, memory_order_relaxed);
		struct service_transfer t = {
			.handle = make_handle(i, e->gen),
			.path = path,
			.write = w,
			.bytes = atomic_load_explicit(w ? &e->bulk_written : &e->bulk_read, memory_order_relaxed),
			.first_ns = atomic_load_explicit(&e->bulk_first_ns, memory_order_relaxed),
			.last_ns = last,
		};
		emit(arg, &t);
	}
	pthread_mutex_unlock(&ht->lock);
}
