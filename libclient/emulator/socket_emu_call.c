/* SPDX-License-Identifier: MIT */
/* The general socket call of the host-lane emulator: every lane's request
 * packed and sent as one warp's (device/sock_client.h). Apart from the
 * one-lane wrappers (socket_emu.c) so that the service's in-process tests
 * can put their own transport under those. */
#include <errno.h>
#include <stdlib.h>

#include "gpusys/emulator.h"
#include "gpusys/emulator/socket.h"
#include "../device/sock_client.h"

#define L GPUSYS_WARP_LANES

int gpusys_emu_sock_call(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, struct gpusys_emu_sock_lane *lanes)
{
	uint8_t *scratch[L] = { 0 };
	uint32_t req_len[L] = { 0 }, cap[L] = { 0 };
	void *out[L] = { 0 };
	int64_t ret[L] = { 0 };
	uint64_t send = mask;

	if (!mask || (mask >> L))
		return -EINVAL;
	for (uint32_t l = 0; l < L; l++) {
		if (!(mask >> l & 1))
			continue;
		struct gpusys_emu_sock_lane *a = &lanes[l];
		if (a->q.addr_len > GPUSYS_SOCK_ADDR_MAX || a->body_len > GPUSYS_SOCK_LANE_MAX) {
			a->ret = -EINVAL;
			send &= ~((uint64_t)1 << l);
			continue;
		}
		scratch[l] = malloc(GPUSYS_SOCK_REQ_BYTES + (uint64_t)a->q.addr_len + a->body_len);
		if (!scratch[l]) {
			a->ret = -ENOMEM;
			send &= ~((uint64_t)1 << l);
			continue;
		}
		req_len[l] = gpusys_sock_pack(scratch[l], &a->q, a->addr, a->q.addr_len, a->body, a->body_len);
		out[l] = a->out;
		cap[l] = a->out_cap;
	}
	if (send)
		gpusys_sock_rpc(dev, op, send, (const uint8_t *const *)scratch, req_len, out, cap, ret);
	int first = 0;
	for (uint32_t l = 0; l < L; l++) {
		free(scratch[l]);
		if (!(mask >> l & 1))
			continue;
		if (send >> l & 1)
			lanes[l].ret = ret[l];
		if (!first && lanes[l].ret < 0)
			first = (int)lanes[l].ret;
	}
	return first;
}
