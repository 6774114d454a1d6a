/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/accounts.h"
#include "util/log.h"

struct account {
	uid_t uid;
	unsigned refs;          /* under accounts_lock */
	struct account *next;
	_Atomic uint64_t used[ACCOUNT_NRESOURCES];
	atomic_bool refusing;   /* the last charge was refused: logged already */
};

static pthread_mutex_t accounts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct account *accounts; /* one per uid with clients; few, so a list */
static _Atomic uint64_t limits[ACCOUNT_NRESOURCES] = { UINT64_MAX, UINT64_MAX, UINT64_MAX };

static const char *const resource_name[ACCOUNT_NRESOURCES] = {
	[ACCOUNT_MEMORY] = "request memory (user_mem_budget)",
	[ACCOUNT_HANDLES] = "open handles (max_handles_per_uid)",
	[ACCOUNT_PENDING] = "pending calls (max_pending_calls_per_uid)",
};

void accounts_set_limits(uint64_t memory, uint64_t handles, uint64_t pending)
{
	atomic_store(&limits[ACCOUNT_MEMORY], memory);
	atomic_store(&limits[ACCOUNT_HANDLES], handles);
	atomic_store(&limits[ACCOUNT_PENDING], pending);
}

struct account *account_get(uid_t uid)
{
	pthread_mutex_lock(&accounts_lock);
	struct account *a = accounts;
	while (a && a->uid != uid)
		a = a->next;
	if (!a && (a = calloc(1, sizeof(*a)))) {
		a->uid = uid;
		a->next = accounts;
		accounts = a;
	}
	if (a)
		a->refs++;
	pthread_mutex_unlock(&accounts_lock);
	return a;
}

void account_put(struct account *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&accounts_lock);
	if (--a->refs == 0) {
		struct account **pp = &accounts;
		while (*pp != a)
			pp = &(*pp)->next;
		*pp = a->next;
		free(a);
	}
	pthread_mutex_unlock(&accounts_lock);
}

bool account_charge(struct account *a, enum account_resource r, uint64_t n)
{
	if (!a)
		return true;
	uint64_t limit = atomic_load_explicit(&limits[r], memory_order_relaxed);
	uint64_t now = atomic_fetch_add_explicit(&a->used[r], n, memory_order_relaxed) + n;
	if (now <= limit && now >= n) {
		if (atomic_load_explicit(&a->refusing, memory_order_relaxed))
			atomic_store_explicit(&a->refusing, false, memory_order_relaxed);
		return true;
	}
	atomic_fetch_sub_explicit(&a->used[r], n, memory_order_relaxed);
	if (!atomic_exchange_explicit(&a->refusing, true, memory_order_relaxed))
		log_warn("uid %u is at its limit of %s: %llu; its clients' requests fail until some is freed",
			 (unsigned)a->uid, resource_name[r], (unsigned long long)limit);
	return false;
}

void account_uncharge(struct account *a, enum account_resource r, uint64_t n)
{
	if (a)
		atomic_fetch_sub_explicit(&a->used[r], n, memory_order_relaxed);
}
