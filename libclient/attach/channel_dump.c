/* SPDX-License-Identifier: MIT */
/* The GPUSYS_DEBUG dump of a channel's unanswered ports (channel_dump.h). */
#include <stdint.h>

#include "libclient/attach/channel_dump.h"

void channel_dump_waiting(FILE *f, const char *what, const struct gpusys_channel_header *hdr)
{
	const uint8_t *b = (const uint8_t *)hdr;
	const volatile uint64_t *cw = (const volatile uint64_t *)(b + hdr->client_word_offset);
	const volatile uint64_t *sw = (const volatile uint64_t *)(b + hdr->server_word_offset);
	unsigned n = 0;
	for (uint32_t p = 0; p < hdr->num_ports; p++) {
		uint64_t c = __atomic_load_n(&cw[p], __ATOMIC_RELAXED), s = __atomic_load_n(&sw[p], __ATOMIC_RELAXED);
		if (GPUSYS_WORD_SEQ(c) == GPUSYS_WORD_SEQ(s))
			continue;
		if (n++ < CHANNEL_DUMP_LINES)
			fprintf(f, "gpusys: %s port %u: client seq %u flags 0x%x opcode 0x%04x mask 0x%08x; server seq %u flags 0x%x\n",
				what, p, GPUSYS_WORD_SEQ(c), GPUSYS_WORD_FLAGS(c), GPUSYS_CW_OPCODE(c), GPUSYS_CW_MASK(c),
				GPUSYS_WORD_SEQ(s), GPUSYS_WORD_FLAGS(s));
	}
	fprintf(f, "gpusys: %s: %u of %u ports with a request not answered\n", what, n, hdr->num_ports);
}
