/* SPDX-License-Identifier: MIT */
/* Channel memory as a sealed memfd: works without a GPU, and a CUDA client
 * can cuMemHostRegister its mapping. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpusys/wire.h"
#include "core/channel.h"

static int memfd_alloc(struct channel *ch, uint32_t num_ports, uint64_t bulk_bytes)
{
	struct gpusys_channel_layout l = gpusys_channel_layout(num_ports, bulk_bytes, 0);
	int r;

	int fd = memfd_create("gpusys-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)l.total_bytes) < 0)
		goto fail;
	/* The client must not be able to shrink the file under our mapping
	 * (our next access would be SIGBUS) or grow it (it is accounted to
	 * us). */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		goto fail;
	void *base = mmap(NULL, l.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		goto fail;

	ch->layout = l;
	ch->base = base;
	ch->bytes = l.total_bytes;
	ch->fd = fd;
	return 0;
fail:
	r = -errno;
	close(fd);
	return r;
}

static void memfd_free(struct channel *ch)
{
	if (ch->base)
		munmap(ch->base, ch->bytes);
	if (ch->fd >= 0)
		close(ch->fd);
	ch->base = NULL;
	ch->fd = -1;
}

const struct channel_ops channel_memfd_ops = {
	.name = "memfd",
	.memory_kind = GPUSYS_MEMORY_MEMFD,
	.alloc = memfd_alloc,
	.free = memfd_free,
};
