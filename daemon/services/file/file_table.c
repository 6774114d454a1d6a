/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "services/file/file_table.h"

struct file_table *file_table_new(void)
{
	struct file_table *ft = calloc(1, sizeof(*ft));
	if (!ft)
		return NULL;
	pthread_mutex_init(&ft->lock, NULL);
	for (uint32_t i = 0; i < GPUSYS_FILE_MAX_HANDLES; i++) {
		ft->e[i].fd = -1;
		ft->e[i].gen = 1;
		pthread_mutex_init(&ft->e[i].dir_lock, NULL);
	}
	return ft;
}

/* The descriptor of an entry nobody uses any more; called with ft->lock
 * held (close() of a regular file or directory does not block for long). */
static void entry_release(struct file_table *ft, struct file_entry *e)
{
	if (e->dir)
		closedir(e->dir);
	else if (e->fd >= 0)
		close(e->fd);
	e->dir = NULL;
	e->fd = -1;
	e->kind = FILE_KIND_FREE;
	e->closing = false;
	e->oflags = 0;
	ft->count--;
}

unsigned file_table_free(struct file_table *ft)
{
	unsigned closed = 0;
	if (!ft)
		return 0;
	for (uint32_t i = 0; i < GPUSYS_FILE_MAX_HANDLES; i++) {
		struct file_entry *e = &ft->e[i];
		if (e->kind != FILE_KIND_FREE) {
			entry_release(ft, e);
			closed++;
		}
		pthread_mutex_destroy(&e->dir_lock);
	}
	pthread_mutex_destroy(&ft->lock);
	free(ft);
	return closed;
}

static int32_t make_handle(uint32_t idx, uint32_t gen)
{
	return (int32_t)(gen << FILE_INDEX_BITS | idx);
}

int file_table_insert(struct file_table *ft, int fd, enum file_kind kind, int oflags, DIR *dir)
{
	pthread_mutex_lock(&ft->lock);
	if (ft->count >= GPUSYS_FILE_MAX_HANDLES) {
		pthread_mutex_unlock(&ft->lock);
		return -EMFILE;
	}
	uint32_t i = ft->hint;
	while (ft->e[i].kind != FILE_KIND_FREE)
		i = (i + 1) % GPUSYS_FILE_MAX_HANDLES;
	ft->hint = (i + 1) % GPUSYS_FILE_MAX_HANDLES;
	struct file_entry *e = &ft->e[i];
	e->fd = fd;
	e->kind = (uint8_t)kind;
	e->closing = false;
	e->refs = 1;
	e->oflags = oflags;
	e->dir = dir;
	ft->count++;
	int32_t h = make_handle(i, e->gen);
	pthread_mutex_unlock(&ft->lock);
	return h;
}

struct file_entry *file_table_get(struct file_table *ft, int32_t handle, enum file_kind kind)
{
	if (handle <= 0)
		return NULL;
	uint32_t idx = (uint32_t)handle & ((1u << FILE_INDEX_BITS) - 1);
	uint32_t gen = (uint32_t)handle >> FILE_INDEX_BITS;
	if (idx >= GPUSYS_FILE_MAX_HANDLES)
		return NULL;
	struct file_entry *e = &ft->e[idx];
	pthread_mutex_lock(&ft->lock);
	if (e->kind != kind || e->closing || e->gen != gen) {
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

int file_table_close(struct file_table *ft, int32_t handle, enum file_kind kind)
{
	struct file_entry *e = file_table_get(ft, handle, kind);
	if (!e)
		return -EBADF;
	pthread_mutex_lock(&ft->lock);
	if (e->closing) { /* another close won the race */
		put_locked(ft, e);
		pthread_mutex_unlock(&ft->lock);
		return -EBADF;
	}
	e->closing = true;
	e->gen = e->gen == FILE_GEN_MAX ? 1 : e->gen + 1;
	put_locked(ft, e); /* our lookup */
	put_locked(ft, e); /* the open reference */
	pthread_mutex_unlock(&ft->lock);
	return 0;
}
