/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/accounts.h"
#include "util/log.h"

struct account {
	uid_t uid;
	unsigned refs;          /* under accounts_lock */
	struct account *next;
	_Atomic uint64_t used[ACCOUNT_NRESOURCES];
	/* The last charge of each resource was refused: logged already. One
	 * flag per resource, so that a successful charge of another (a
	 * channel at attach) does not start a new run of log lines. */
	atomic_bool refusing[ACCOUNT_NRESOURCES];
	bool exempt;            /* root or gpusysd's own uid: outside the others' total */
};

static pthread_mutex_t accounts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct account *accounts; /* one per uid with clients; few, so a list */
static _Atomic uint64_t limits[ACCOUNT_NRESOURCES] = { UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX };

/* All users but the exempt ones together (accounts_set_others_limit);
 * a limit of 0 is none, so that resources added later start unbounded. */
static _Atomic uint64_t others_used[ACCOUNT_NRESOURCES];
static _Atomic uint64_t others_limits[ACCOUNT_NRESOURCES];
static atomic_bool others_refusing[ACCOUNT_NRESOURCES];

static const char *const resource_name[ACCOUNT_NRESOURCES] = {
	[ACCOUNT_MEMORY] = "request memory (user_mem_budget)",
	[ACCOUNT_HANDLES] = "open handles (max_handles_per_uid)",
	[ACCOUNT_PENDING] = "pending calls (max_pending_calls_per_uid)",
	[ACCOUNT_CHANNEL] = "channel memory (user_channel_bytes)",
};

void accounts_set_limits(uint64_t memory, uint64_t handles, uint64_t pending)
{
	atomic_store(&limits[ACCOUNT_MEMORY], memory);
	atomic_store(&limits[ACCOUNT_HANDLES], handles);
	atomic_store(&limits[ACCOUNT_PENDING], pending);
}

void account_set_limit(enum account_resource r, uint64_t limit)
{
	atomic_store(&limits[r], limit);
}

void accounts_set_others_limit(enum account_resource r, uint64_t limit)
{
	atomic_store(&others_limits[r], limit == UINT64_MAX ? 0 : limit);
}

struct account *account_get(uid_t uid)
{
	pthread_mutex_lock(&accounts_lock);
	struct account *a = accounts;
	while (a && a->uid != uid)
		a = a->next;
	if (!a && (a = calloc(1, sizeof(*a)))) {
		a->uid = uid;
		a->exempt = uid == 0 || uid == geteuid();
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

/* Add n to *used unless that passes limit: true, or false with nothing
 * added (an add taken back at once, so a refusal never lets another
 * charge through). */
static bool charge_one(_Atomic uint64_t *used, uint64_t limit, uint64_t n)
{
	uint64_t now = atomic_fetch_add_explicit(used, n, memory_order_relaxed) + n;
	if (now <= limit && now >= n)
		return true;
	atomic_fetch_sub_explicit(used, n, memory_order_relaxed);
	return false;
}

bool account_charge(struct account *a, enum account_resource r, uint64_t n)
{
	if (!a)
		return true;
	uint64_t limit = atomic_load_explicit(&limits[r], memory_order_relaxed);
	if (charge_one(&a->used[r], limit, n)) {
		uint64_t others = atomic_load_explicit(&others_limits[r], memory_order_relaxed);
		if (!others)
			others = UINT64_MAX;
		if (a->exempt || charge_one(&others_used[r], others, n)) {
			if (atomic_load_explicit(&a->refusing[r], memory_order_relaxed))
				atomic_store_explicit(&a->refusing[r], false, memory_order_relaxed);
			if (!a->exempt && atomic_load_explicit(&others_refusing[r], memory_order_relaxed))
				atomic_store_explicit(&others_refusing[r], false, memory_order_relaxed);
			return true;
		}
		atomic_fetch_sub_explicit(&a->used[r], n, memory_order_relaxed);
		if (!atomic_exchange_explicit(&others_refusing[r], true, memory_order_relaxed))
			log_warn("users other than root together are at their limit of %s: %llu (the rest is kept for "
				 "root and gpusysd itself); uid %u refused",
				 resource_name[r], (unsigned long long)others, (unsigned)a->uid);
		return false;
	}
	if (!atomic_exchange_explicit(&a->refusing[r], true, memory_order_relaxed))
		log_warn("uid %u is at its limit of %s: %llu; its clients' requests fail until some is freed",
			 (unsigned)a->uid, resource_name[r], (unsigned long long)limit);
	return false;
}

void account_uncharge(struct account *a, enum account_resource r, uint64_t n)
{
	if (!a)
		return;
	atomic_fetch_sub_explicit(&a->used[r], n, memory_order_relaxed);
	if (!a->exempt)
		atomic_fetch_sub_explicit(&others_used[r], n, memory_order_relaxed);
}
