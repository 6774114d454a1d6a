/* SPDX-License-Identifier: MIT */
/*
 * Per-user quotas: what all the clients of one uid hold together (daemon
 * memory, open handles, calls pending, channel memory), against limits set
 * from the configuration (user_mem_budget, max_handles_per_uid,
 * max_pending_calls_per_uid, user_channel_bytes). Each client's own limits
 * still apply first; these keep one user's many clients from taking what
 * others need.
 *
 * An account lives while a client of its uid is attached (one reference
 * per session) or something it charged outlives its session (a print
 * writer left to finish holds a reference of its own). Charges are lock-free: add, and take back at once when
 * over the limit, so a refused charge never lets another one through.
 */
#ifndef GPUSYSD_CORE_ACCOUNTS_H
#define GPUSYSD_CORE_ACCOUNTS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum account_resource {
	ACCOUNT_MEMORY,  /* bytes of daemon memory: requests, responses, pending calls, print buffers */
	ACCOUNT_HANDLES, /* open files, directories and sockets */
	ACCOUNT_PENDING, /* calls that complete later, waiting */
	ACCOUNT_CHANNEL, /* bytes of channel memory (ports and bulk areas) mapped for its clients */
	ACCOUNT_NRESOURCES
};

struct account;

/* The limits, from the configuration (at start and on reload: they apply
 * to every charge after the call, existing clients included). */
void accounts_set_limits(uint64_t memory, uint64_t handles, uint64_t pending);
/* One limit, for resources set apart from those three (user_channel_bytes). */
void account_set_limit(enum account_resource r, uint64_t limit);

/* What all users together hold, root and gpusysd's own uid left out, at
 * most (UINT64_MAX: no bound, the default): the rest of the descriptor
 * budget stays for those two however many users fill their own quotas
 * (quotas.h). Applies like accounts_set_limits. */
void accounts_set_others_limit(enum account_resource r, uint64_t limit);

/* uid's account, made if none; one reference. NULL only out of memory. */
struct account *account_get(uid_t uid);
void account_put(struct account *a);

/* Charge n of r: true, or false when that would pass the user's limit
 * (nothing charged then). A NULL account (in-process tests) always
 * succeeds. The first refusal of a user in a run of them logs one line. */
bool account_charge(struct account *a, enum account_resource r, uint64_t n);
void account_uncharge(struct account *a, enum account_resource r, uint64_t n);


#endif
