/* SPDX-License-Identifier: MIT */
/*
 * Opcode -> service. Each service file exports its table; this file is the
 * only place that knows them all. Lookup is on every request: the group
 * (high byte) picks a short table.
 */
#include <stddef.h>

#include "core/port_server.h"
#include "services/file/service_file.h"
#include "services/print/service_print.h"
#include "services/basic/services.h"
#include "services/alloc/service_alloc.h"

static const struct service *const *const groups[] = {
	[0] = service_basic_table, /* 0x00xx */
	[1] = service_print_table, /* 0x01xx */
	[2] = service_file_table,  /* 0x02xx */
	[4] = service_alloc_table, /* 0x04xx */
};

const struct service *service_find(uint16_t opcode)
{
	unsigned group = opcode >> 8;

	if (group >= sizeof(groups) / sizeof(groups[0]) || !groups[group])
		return NULL;
	const struct service *const *table = groups[group];
	for (size_t i = 0; table[i]; i++) {
		if (table[i]->opcode == opcode)
			return table[i];
	}
	return NULL;
}

void service_client_fini(struct port_table *t)
{
	/* Services add their teardown here, in the order output must be
	 * flushed: print before files. */
	print_client_fini(t);
	service_file_client_fini(t);
	service_alloc_client_fini(t);
}
