/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <limits.h>
#include <stdio.h>
#include <time.h>

#include "core/accounts.h"
#include "core/service.h"
#include "core/client.h"
#include "services/file/file_table.h"

struct file_table *file_table_new(uint32_t max)
{
	struct file_table *ft = calloc(1, sizeof(*ft));
	if (!ft)
		return NULL;
	pthread_mutex_init(&ft->lock, NULL);
	ft->max = max < 1 ? 1 : max > GPUSYS_FILE_HANDLES_LIMIT ? GPUSYS_FILE_HANDLES_LIMIT : max;
	ft->gen_start = ft->gen_next = 1;
	return ft;
}

/* The entry at idx, or NULL where no chunk holds it yet. */
static struct file_entry *entry_at(struct file_table *ft, uint32_t idx)
{
	uint32_t c = idx / FILE_CHUNK;
	return c < ft->nchunks ? &ft->chunk[c][idx % FILE_CHUNK] : NULL;
}

/* One more chunk of free entries; with ft->lock held. */
static int grow_locked(struct file_table *ft)
{
	if (ft->nchunks == FILE_CHUNKS)
		return -EMFILE;
	struct file_entry *c = calloc(FILE_CHUNK, sizeof(*c));
	if (!c)
		return -EMFILE;
	for (uint32_t i = 0; i < FILE_CHUNK; i++) {
		c[i].fd = -1;
		c[i].gen = ft->gen_start;
		pthread_mutex_init(&c[i].dir_lock, NULL);
	}
	ft->chunk[ft->nchunks++] = c;
	return 0;
}

/* The descriptor of an entry nobody uses any more; called with ft->lock
 * held (close() of a regular file, directory or non-blocking socket does
 * not block for long). */
static void entry_release(struct file_table *ft, struct file_entry *e)
{
	if (e->ops)
		e->ops->release(e->fd, e->obj);
	else if (e->dir)
		closedir(e->dir);
	else if (e->fd >= 0)
		close(e->fd);
	e->dir = NULL;
	e->obj = NULL;
	e->ops = NULL;
	e->fd = -1;
	e->kind = FILE_KIND_FREE;
	e->closing = false;
	e->oflags = 0;
	ft->count--;
	account_uncharge(ft->account, ACCOUNT_HANDLES, 1);
}

unsigned file_table_free(struct file_table *ft)
{
	unsigned closed = 0;
	if (!ft)
		return 0;
	for (uint32_t i = 0; i < ft->nchunks * FILE_CHUNK; i++) {
		struct file_entry *e = entry_at(ft, i);
		if (e->kind != FILE_KIND_FREE) {
			entry_release(ft, e);
			closed++;
		}
		pthread_mutex_destroy(&e->dir_lock);
	}
	for (uint32_t c = 0; c < ft->nchunks; c++)
		free(ft->chunk[c]);
	pthread_mutex_destroy(&ft->lock);
	free(ft);
	return closed;
}

static struct {
	pthread_mutex_t lock;
	struct file_table *head;
	uint32_t max; /* for new tables */
} file_tables = { .lock = PTHREAD_MUTEX_INITIALIZER, .max = GPUSYS_FILE_DEFAULT_MAX_HANDLES };

void file_table_set_max(uint32_t max)
{
	pthread_mutex_lock(&file_tables.lock);
	file_tables.max = max;
	pthread_mutex_unlock(&file_tables.lock);
}

struct file_table *file_table_acquire(const struct client *owner)
{
	pthread_mutex_lock(&file_tables.lock);
	struct file_table *ft = file_tables.head;
	while (ft && ft->owner != owner)
		ft = ft->next;
	if (!ft && (ft = file_table_new(file_tables.max))) {
		ft->owner = owner;
		ft->account = owner ? owner->account : NULL;
		if (owner && owner->handle_gen_start >= 1 && owner->handle_gen_start <= FILE_GEN_MAX)
			ft->gen_start = ft->gen_next = owner->handle_gen_start;
		ft->gen_floor = owner ? owner->handle_gen_floor : NULL;
		if (ft->gen_floor)
			*ft->gen_floor = ft->gen_next;
		ft->next = file_tables.head;
		file_tables.head = ft;
	}
	if (ft)
		ft->users++;
	pthread_mutex_unlock(&file_tables.lock);
	return ft;
}

unsigned file_table_release(struct file_table *ft)
{
	if (!ft)
		return 0;
	pthread_mutex_lock(&file_tables.lock);
	bool last = --ft->users == 0;
	if (last) {
		struct file_table **pp = &file_tables.head;
		while (*pp != ft)
			pp = &(*pp)->next;
		*pp = ft->next;
	}
	pthread_mutex_unlock(&file_tables.lock);
	return last ? file_table_free(ft) : 0;
}

static int32_t make_handle(uint32_t idx, uint32_t gen)
{
	return (int32_t)(gen << FILE_INDEX_BITS | idx);
}

int file_table_insert(struct file_table *ft, int fd, enum file_kind kind, int oflags, DIR *dir)
{
	int h = file_table_insert_obj(ft, fd, kind, oflags, NULL, NULL);
	if (h > 0) {
		pthread_mutex_lock(&ft->lock);
		entry_at(ft, (uint32_t)h & ((1u << FILE_INDEX_BITS) - 1))->dir = dir; /* only we know the handle yet */
		pthread_mutex_unlock(&ft->lock);
	}
	return h;
}

int file_table_insert_obj(struct file_table *ft, int fd, enum file_kind kind, int oflags, void *obj,
			  const struct file_entry_ops *ops)
{
	pthread_mutex_lock(&ft->lock);
	uint32_t slots = ft->nchunks * FILE_CHUNK;
	if (ft->count >= ft->max || (ft->count == slots && grow_locked(ft) < 0) ||
	    !account_charge(ft->account, ACCOUNT_HANDLES, 1)) {
		pthread_mutex_unlock(&ft->lock);
		return -EMFILE;
	}
	/* A free entry exists among the allocated ones: from the hint on. */
	slots = ft->nchunks * FILE_CHUNK;
	uint32_t i = ft->hint < slots ? ft->hint : 0;
	while (entry_at(ft, i)->kind != FILE_KIND_FREE)
		i = (i + 1) % slots;
	ft->hint = (i + 1) % slots;
	struct file_entry *e = entry_at(ft, i);
	e->fd = fd;
	e->kind = (uint8_t)kind;
	e->closing = false;
	e->refs = 1;
	e->oflags = oflags;
	e->dir = NULL;
	e->obj = obj;
	e->ops = ops;
	atomic_store_explicit(&e->bulk_read, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_written, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_first_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bulk_last_ns, 0, memory_order_relaxed);
	ft->count++;
	int32_t h = make_handle(i, e->gen);
	if (e->gen >= ft->gen_next) {
		/* A generation past the wrap starts over at 1, as close does. */
		ft->gen_next = e->gen == FILE_GEN_MAX ? 1 : e->gen + 1;
		if (ft->gen_floor)
			*ft->gen_floor = ft->gen_next;
	}
	pthread_mutex_unlock(&ft->lock);
	return h;
}

struct file_entry *file_table_get(struct file_table *ft, int32_t handle, enum file_kind kind)
{
	if (handle <= 0)
		return NULL;
	uint32_t idx = (uint32_t)handle & ((1u << FILE_INDEX_BITS) - 1);
	uint32_t gen = (uint32_t)handle >> FILE_INDEX_BITS;
	pthread_mutex_lock(&ft->lock);
	struct file_entry *e = entry_at(ft, idx);
	if (!e || e->kind != kind || e->closing || e->gen != gen) {
		pthread_mutex_unlock(&ft->lock);
		return NULL;
	}
	e->refs++;
	pthread_mutex_unlock(&ft->lock);
	return e;
}

static void put_locked(struct file_table *ft, struct file_entry *e)
{
	if (--e->refs == 0)
		entry_release(ft, e);
}

void file_table_put(struct file_table *ft, struct file_entry *e)
{
	pthread_mutex_lock(&ft->lock);
	put_locked(ft, e);
	pthread_mutex_unlock(&ft->lock);
}

static int close_entry(struct file_table *ft, struct file_entry *e)
{
	pthread_mutex_lock(&ft->lock);
	if (e->closing) { /* another close won the race */
		put_locked(ft, e);
		pthread_mutex_unlock(&ft->lock);
		return -EBADF;
	}
	e->closing = true;
	e->gen = e->gen == FILE_GEN_MAX ? 1 : e->gen + 1;
	put_locked(ft, e); /* the open reference; our lookup keeps e */
	pthread_mutex_unlock(&ft->lock);
	/* Later lookups fail now; wake whatever still waits on it. */
	if (e->ops && e->ops->closed)
		e->ops->closed(e);
	file_table_put(ft, e);
	return 0;
}

int file_table_close(struct file_table *ft, int32_t handle, enum file_kind kind)
{
	struct file_entry *e = file_table_get(ft, handle, kind);
	return e ? close_entry(ft, e) : -EBADF;
}

int file_table_close_any(struct file_table *ft, int32_t handle)
{
	struct file_entry *e = file_table_get(ft, handle, FILE_KIND_FILE);
	if (!e)
		e = file_table_get(ft, handle, FILE_KIND_SOCKET);
	return e ? close_entry(ft, e) : -EBADF;
}

void file_entry_count_bulk(struct file_entry *e, bool write_op, uint64_t n, uint64_t start_ns)
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

void file_table_transfers(struct file_table *ft, uint64_t since_ns,
			  void (*emit)(void *arg, const struct service_transfer *t), void *arg)
{
	pthread_mutex_lock(&ft->lock);
	for (uint32_t i = 0; i < ft->nchunks * FILE_CHUNK; i++) {
		struct file_entry *e = entry_at(ft, i);
		uint64_t last = atomic_load_explicit(&e->bulk_last_ns, memory_order_relaxed);
		if (e->kind == FILE_KIND_FREE || e->closing || !last || last < since_ns)
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
	pthread_mutex_unlock(&ft->lock);
}
