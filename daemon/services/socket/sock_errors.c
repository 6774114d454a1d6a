/* SPDX-License-Identifier: MIT */
/*
 * Socket errors counted by opcode and errno, daemon-wide (gpusysctl latency,
 * the metrics): which errors a server's connections met (ECONNRESET from
 * peers, EMFILE at the handle quota, ENOMEM at the memory budget...), not
 * only how many.
 */
#include <stdatomic.h>
#include <stdint.h>

#include "services/socket/sock_call.h"

#define ERRNO_MAX 134 /* Linux's errno values are below; others count as 0 ("other") */
#define OPS 0x22      /* opcodes' low bytes: up to GPUSYS_OP_SOCK_BULK_RECV */

static _Atomic uint64_t counts[OPS][ERRNO_MAX];

void sock_error_count(uint16_t opcode, int32_t r)
{
	unsigned op = opcode & 0xffu;
	if (r >= 0 || op >= OPS)
		return; /* getaddrinfo's EAI_* values are positive: not errno */
	int err = -r < ERRNO_MAX ? -r : 0;
	atomic_fetch_add_explicit(&counts[op][err], 1, memory_order_relaxed);
}

void sock_errors_report(void (*emit)(void *arg, uint16_t opcode, int err, uint64_t count), void *arg)
{
	for (unsigned op = 0; op < OPS; op++)
		for (int err = 0; err < ERRNO_MAX; err++) {
			uint64_t n = atomic_load_explicit(&counts[op][err], memory_order_relaxed);
			if (n)
				emit(arg, (uint16_t)(GPUSYS_OP_SOCK_FIRST | op), err, n);
		}
}
