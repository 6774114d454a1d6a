/* SPDX-License-Identifier: MIT */
/*
 * include/gpusys/gpusys.h in a libgpusys built without cuda.h (no CUDA
 * toolkit headers): emulated handles only (GPUSYS_ATTACH_EMULATED), so the
 * host-lane emulator, its tests and examples work on any machine; a GPU
 * attach says the build has no CUDA. With cuda.h, cuda.c is this file.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpusys/emulator.h" /* gpusys_channel_progress */
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "client.h"

struct gpusys {
	struct gpusys_client *client;
	void *host;
};

int gpusys_attach(const struct gpusys_options *opts, gpusys_t **ret)
{
	gpusys_clear_last_error();
	if (!opts || !(opts->flags & GPUSYS_ATTACH_EMULATED))
		return gpusys_set_last_error(-ENODEV, "no usable GPU: libgpusys was built without CUDA (no cuda.h); "
						      "only GPUSYS_ATTACH_EMULATED handles");
	struct gpusys_attach_opts ao = {
		.runtime_dir = opts->runtime_dir,
		.num_ports = opts->num_ports,
		.bulk_bytes = opts->flags & GPUSYS_ATTACH_NO_BULK ? 0
			      : opts->bulk_bytes		    ? opts->bulk_bytes
								    : GPUSYS_DEFAULT_BULK_BYTES,
		.cuda_device = -1,
		.pass_stdio = !(opts->flags & GPUSYS_ATTACH_NO_STDIO),
		.pass_cwd = !(opts->flags & GPUSYS_ATTACH_NO_CWD),
		.memory_kinds = 1u << GPUSYS_MEMORY_MEMFD,
	};
	gpusys_t *g = calloc(1, sizeof(*g));
	if (!g)
		return gpusys_set_last_error(-ENOMEM, "out of memory");
	int rc = gpusys_client_attach(&ao, &g->client);
	if (rc < 0) {
		free(g);
		return rc;
	}
	g->host = gpusys_client_channel(g->client);
	*ret = g;
	return 0;
}

void gpusys_detach(gpusys_t *g)
{
	if (!g)
		return;
	gpusys_client_detach(g->client);
	free(g);
}

static int no_gpu(const char *fn)
{
	return gpusys_set_last_error(-ENODEV, "%s: libgpusys was built without CUDA (no cuda.h)", fn);
}

gpusys_dev_t gpusys_device(const gpusys_t *g)
{
	(void)g;
	gpusys_dev_t none;
	memset(&none, 0, sizeof(none));
	return none;
}

gpusys_dev_t gpusys_device_on(gpusys_t *g, void *stream)
{
	(void)stream;
	return gpusys_device(g);
}

int gpusys_synchronize(gpusys_t *g, void *stream, int timeout_ms)
{
	(void)g, (void)stream, (void)timeout_ms;
	return no_gpu("gpusys_synchronize");
}

int gpusys_query(gpusys_t *g, void *stream)
{
	(void)g, (void)stream;
	return no_gpu("gpusys_query");
}

struct gpusys_callbacks *gpusys_callbacks_of(gpusys_t *g)
{
	(void)g;
	no_gpu("gpusys_callbacks_of");
	return NULL;
}

int gpusys_register_callback(gpusys_t *g, const struct gpusys_callback_desc *d)
{
	(void)g, (void)d;
	return no_gpu("gpusys_register_callback");
}

int gpusys_dma_info(const gpusys_t *g, struct gpusys_dma_info *info)
{
	(void)g;
	memset(info, 0, sizeof(*info));
	return -ENOTSUP; /* no GPU: no copy engine */
}

uint32_t gpusys_num_ports(const gpusys_t *g)
{
	return gpusys_client_num_ports(g->client);
}

uint32_t gpusys_client_id(const gpusys_t *g)
{
	return gpusys_client_conn_id(g->client);
}

uint32_t gpusys_memory_kind(const gpusys_t *g)
{
	return gpusys_client_memory_kind(g->client);
}

uint64_t gpusys_progress(const gpusys_t *g)
{
	return gpusys_channel_progress(g->host);
}

void *gpusys_host_channel(const gpusys_t *g)
{
	return g->host;
}

uint64_t gpusys_channel_bytes(const gpusys_t *g)
{
	return gpusys_client_channel_bytes(g->client);
}
