/* SPDX-License-Identifier: MIT */
/*
 * A socket call's response room (sock_call.h): one buffer, call->resp_buf
 * (the core frees it with the call), each lane's room at its l->off; the
 * receiving lanes' rooms come last so that they can be let go while those
 * lanes wait with nothing received, and taken back when data comes. A poll
 * whose pollfds ask for the bytes (GPUSYS_POLL_RECV) is a receive here: its
 * whole room (revents, lengths and data) is let go while it waits, and
 * taken back by the step that answers it (sock_steps.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "core/pending.h"
#include "services/socket/sock_call.h"

/* Point every lane (and every answer already written) at the current
 * buffer. */
static void repoint(struct sock_call *sc)
{
	struct port_call *call = sc->call;
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		struct sock_lane *l = &sc->lane[i];
		if (!l->sc)
			continue;
		l->out = l->lazy && sc->lazy_out ? NULL : sc->resp + l->off;
		if (call->resp_data[i])
			call->resp_data[i] = l->out;
	}
	call->resp_buf = sc->resp;
}

int sock_room_alloc(struct sock_call *sc, uint64_t fixed, uint64_t lazy)
{
	sc->fixed_bytes = fixed;
	sc->lazy_bytes = lazy;
	sc->resp = malloc(fixed + lazy ? fixed + lazy : 1);
	if (!sc->resp)
		return -ENOMEM;
	sc->call->resp_buf = sc->resp;
	return 0;
}

void sock_room_shrink(struct sock_call *sc)
{
	struct port_call *call = sc->call;
	if (sc->lazy_out || !sc->lazy_bytes || !call)
		return;
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		const struct sock_lane *l = &sc->lane[i];
		if (!l->sc || !l->lazy)
			continue;
		/* A poll asking for bytes receives only in the step that
		 * answers it: while it waits it holds nothing. */
		bool idle = (l->wait == WAIT_READ || l->wait == WAIT_POLL) && l->done == 0;
		bool empty = l->wait == WAIT_NONE && call->lane_status[i] < 0;
		if (!idle && !empty)
			return; /* data in its room: keep it all */
	}
	uint8_t *p = realloc(sc->resp, sc->fixed_bytes ? sc->fixed_bytes : 1);
	if (!p)
		return; /* keeps the larger buffer: still correct */
	sc->resp = p;
	sc->lazy_out = true;
	port_uncharge(call->table, sc->lazy_bytes);
	call->charged -= sc->lazy_bytes;
	repoint(sc);
}

int sock_room_grow(struct sock_call *sc)
{
	struct port_call *call = sc->call;
	if (!sc->lazy_out)
		return 0;
	/* Other calls' answers may hold the budget for a moment (a burst of
	 * receives whose data came at once): GPUSYS_STATUS_NO_ROOM then, and
	 * the device side sends the lane again. The lane has received nothing
	 * yet, so nothing is lost; -ENOMEM only past the whole budget. */
	int r = port_call_charge_or_later(call, sc->lazy_bytes);
	if (r < 0)
		return r;
	uint8_t *p = realloc(sc->resp, sc->fixed_bytes + sc->lazy_bytes);
	if (!p) {
		port_uncharge(call->table, sc->lazy_bytes);
		call->charged -= sc->lazy_bytes;
		return -ENOMEM;
	}
	sc->resp = p;
	sc->lazy_out = false;
	repoint(sc);
	return 0;
}
