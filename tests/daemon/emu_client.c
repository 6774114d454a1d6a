/* SPDX-License-Identifier: MIT */
/* An emulated client of the real gpusysd (emu_client.h). */
#include "emu_client.h"

int emu_client_attach(struct emu_client *k, const char *runtime_dir, uint32_t num_ports, uint64_t bulk_bytes,
		      uint32_t flags)
{
	struct gpusys_options o = {
		.runtime_dir = runtime_dir,
		.num_ports = num_ports,
		.bulk_bytes = bulk_bytes,
		.flags = GPUSYS_ATTACH_EMULATED | flags | (bulk_bytes ? 0 : GPUSYS_ATTACH_NO_BULK),
	};
	int r = gpusys_attach(&o, &k->c);
	if (r < 0)
		return r;
	r = gpusys_emu_open(gpusys_host_channel(k->c), &k->emu);
	if (r < 0) {
		gpusys_detach(k->c);
		return r;
	}
	k->dev = gpusys_emu_dev(k->emu);
	return 0;
}

void emu_client_detach(struct emu_client *k)
{
	gpusys_emu_close(k->emu);
	gpusys_detach(k->c);
}
