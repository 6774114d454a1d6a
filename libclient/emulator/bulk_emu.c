/* SPDX-License-Identifier: MIT */
/* The emulator's bulk loop: device/bulk_client.h compiled for the CPU, the
 * calling thread being the whole block (bulk_emu.h). */
#include <string.h>

#include "bulk_emu.h"

int64_t gpusys_bulk_emu_move(const gpusys_dev_t *dev, gpusys_bulk_ask_fn ask, const struct gpusys_bulk_ask *a,
			     uint8_t *buf, uint64_t len, int to_daemon)
{
	uint32_t s = gpusys_bulk_slot_lock(dev, gpusys_emu_port_hint);
	uint64_t slot_off = (uint64_t)s * dev->bulk_slot_bytes;
	uint8_t *slot = dev->bulk + slot_off;
	uint64_t done = 0;
	int64_t rc = 0;

	while (done < len) {
		uint64_t want = len - done < dev->bulk_slot_bytes ? len - done : dev->bulk_slot_bytes;
		if (to_daemon)
			memcpy(slot, buf + done, want);
		int64_t r = ask(dev, a, done, want, slot_off);
		if (r < 0) {
			rc = done ? 0 : r;
			break;
		}
		if ((uint64_t)r > want)
			r = (int64_t)want; /* never trust a count beyond the ask */
		if (!to_daemon)
			memcpy(buf + done, slot, (size_t)r);
		done += (uint64_t)r;
		if ((uint64_t)r < want)
			break;
	}
	gpusys_bulk_slot_unlock(dev, s);
	return rc < 0 ? rc : (int64_t)done;
}
