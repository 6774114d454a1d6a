/* SPDX-License-Identifier: MIT */
/* Channel memory as a sealed memfd: works without a GPU, and a CUDA client
 * can cuMemHostRegister its mapping. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

#include "gpusys/wire.h"
#include "core/channel.h"

/* Prefer the GPU's host node for the pages (shared memory keeps the policy
 * with the file): each request crosses PCIe from there. mbind(2) through
 * syscall(2): no libnuma needed. A host with one node, or a refusal, just
 * leaves the kernel's default. */
static void prefer_node(void *base, uint64_t bytes, int node)
{
	enum { MPOL_PREFERRED_ = 1 };
	unsigned long mask[4] = { 0 };
	if (node < 0 || node >= (int)(8 * sizeof(mask)))
		return;
	mask[node / (8 * sizeof(long))] = 1ul << (node % (8 * sizeof(long)));
	if (syscall(SYS_mbind, base, bytes, MPOL_PREFERRED_, mask, 8 * sizeof(mask), 0) < 0)
		log_debug("channel: mbind to NUMA node %d: %m (memory stays where the kernel puts it)", node);
}

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
	prefer_node(base, l.total_bytes, ch->numa_node); /* before the first touch */

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
