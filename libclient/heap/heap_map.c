/* SPDX-License-Identifier: MIT */
/* The mapping thread's decisions (heap_map.h). */
#include <errno.h>

#include "gpusys/alloc.h"
#include "heap_map.h"

void heap_map_init(struct heap_map *m, const struct heap_map_ops *ops, void *arg, uint64_t reserve,
		   uint64_t granularity, uint64_t mapped, bool unmap_now)
{
	*m = (struct heap_map){
		.ops = ops,
		.arg = arg,
		.reserve = reserve,
		.granularity = granularity,
		.unmap_now = unmap_now,
		.mapped = mapped,
	};
	pthread_mutex_init(&m->lock, NULL);
}

void heap_map_fini(struct heap_map *m)
{
	pthread_mutex_destroy(&m->lock);
}

static uint64_t shrink_to(struct heap_map *m, uint64_t keep)
{
	keep = gpusys_align_up(keep, m->granularity);
	if (keep >= m->mapped)
		return 0;
	uint64_t was = m->mapped;
	__atomic_store_n(&m->mapped, m->ops->unmap_above(m->arg, keep, m->mapped), __ATOMIC_RELAXED);
	return was - m->mapped;
}

int heap_map_step(struct heap_map *m, uint64_t want_word, uint64_t *ret_word)
{
	uint32_t epoch = gpusys_alloc_word_epoch(want_word);
	uint64_t want = gpusys_alloc_word_bytes(want_word);
	int r = 0;
	if (want > m->reserve)
		want = m->reserve;
	pthread_mutex_lock(&m->lock);
	if (epoch > m->epoch) {
		/* A shrink, or one more while one waits: the newest counts. */
		if (m->unmap_now) {
			shrink_to(m, want);
			m->epoch = epoch;
			m->pending = false;
			r = 1;
			goto out;
		}
		/* Kept mapped, but reported in the new epoch only as far as
		 * the shrink keeps: gpusysd then hands out nothing above it,
		 * and a warp that waits on an older epoch's grant wakes, asks
		 * again and gets one of this epoch (which it could not write
		 * over this one's want). */
		m->pending = true;
		m->pending_keep = want;
		m->epoch = epoch;
		uint64_t kept = gpusys_align_up(want, m->granularity);
		*ret_word = gpusys_alloc_word(epoch, kept < m->mapped ? kept : m->mapped);
		pthread_mutex_unlock(&m->lock);
		return 1;
	}
	if (m->pending) {
		if (epoch < m->epoch || want <= m->pending_keep) {
			pthread_mutex_unlock(&m->lock);
			return 0; /* waits for heap_map_release; nothing new to say */
		}
		/* A kernel needs more than the shrink kept: keep it all. */
		m->pending = false;
		m->epoch = epoch;
		r = 1;
	}
	want -= want % m->granularity;
	if (epoch == m->epoch && want > m->mapped) {
		int e = m->ops->map(m->arg, m->mapped, want);
		if (e < 0) {
			r = e;
			goto out;
		}
		__atomic_store_n(&m->mapped, want, __ATOMIC_RELAXED);
		r = 1;
	}
out:
	*ret_word = gpusys_alloc_word(m->epoch, m->mapped);
	pthread_mutex_unlock(&m->lock);
	return r;
}

uint64_t heap_map_release(struct heap_map *m, uint64_t *ret_word)
{
	uint64_t bytes = 0;
	pthread_mutex_lock(&m->lock);
	if (m->pending) {
		bytes = shrink_to(m, m->pending_keep);
		m->pending = false;
	}
	*ret_word = gpusys_alloc_word(m->epoch, m->mapped);
	pthread_mutex_unlock(&m->lock);
	return bytes;
}

/* Without the lock: the thread holds it through a mapping (milliseconds)
 * or an unmap (as long as a kernel runs), and a figure must not wait. */
uint64_t heap_map_mapped(struct heap_map *m)
{
	return __atomic_load_n(&m->mapped, __ATOMIC_RELAXED);
}
