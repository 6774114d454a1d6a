/* SPDX-License-Identifier: MIT */
/* NOOP and ECHO: the protocol's own test services, served on the poller. */
#include <errno.h>
#include <stddef.h>

#include "services/basic/services.h"

static void noop_handle(struct port_call *call)
{
	(void)call; /* statuses and lengths are already zero */
}

static void echo_handle(struct port_call *call)
{
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		if (call->len[l] > call->cap[l]) {
			call->lane_status[l] = -EMSGSIZE;
			continue;
		}
		call->resp_len[l] = call->len[l];
		call->resp_data[l] = call->data[l];
	}
}

static const struct service noop = { GPUSYS_OP_NOOP, SERVICE_INLINE, "noop", noop_handle };
static const struct service echo = { GPUSYS_OP_ECHO, SERVICE_INLINE, "echo", echo_handle };

const struct service *const service_basic_table[] = { &noop, &echo, NULL };
