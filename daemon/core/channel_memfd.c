/* SPDX-License-Identifier: MIT */
/* Channel memory as a sealed memfd: works without a GPU, and a CUDA client
 * can cuMemHostRegister its mapping. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

#include "common/wire.h"
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

/*
 * Take back a channel a client re-offers after a restart (docs/RESTART.md).
 * Everything about it is the client's word until checked here: the
 * descriptor could be any file, the header anything. We read the header
 * with pread (a copy, before mapping), check it against the layout we
 * compute ourselves, and only then map it.
 */
int channel_memfd_adopt(struct channel *ch, int fd, uint32_t max_ports, uint64_t max_bulk, uint32_t old_id,
			char *msg, size_t msglen)
{
	struct gpusys_channel_header h;
	struct stat st;

	/* Sealing works on memfds only: F_GET_SEALS fails on anything else. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		snprintf(msg, msglen, "the re-offered channel is not a memfd");
		return -EINVAL;
	}
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
		/* Unsealed, the client could shrink it under our mapping. */
		snprintf(msg, msglen, "the re-offered channel is not sealed against shrinking and growing");
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < GPUSYS_HEADER_BYTES) {
		snprintf(msg, msglen, "the re-offered channel is too small for a header");
		return -EINVAL;
	}
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(msg, msglen, "cannot read the re-offered channel's header");
		return -EINVAL;
	}
	if (h.magic != GPUSYS_CHANNEL_MAGIC || h.abi_version != GPUSYS_ABI_VERSION ||
	    h.header_bytes != GPUSYS_HEADER_BYTES) {
		snprintf(msg, msglen, "the re-offered channel has magic 0x%x ABI %u (this daemon speaks ABI %u)",
			 h.magic, h.abi_version, GPUSYS_ABI_VERSION);
		return -EPROTO;
	}
	if (h.num_ports < GPUSYS_MIN_PORTS || h.num_ports > max_ports || h.bulk_bytes > max_bulk) {
		snprintf(msg, msglen, "the re-offered channel has %u ports and %llu bulk bytes, more than this daemon grants",
			 h.num_ports, (unsigned long long)h.bulk_bytes);
		return -EINVAL;
	}
	struct gpusys_channel_layout l = gpusys_channel_layout(h.num_ports, h.bulk_bytes, 0);
	if (h.client_word_offset != l.client_word_offset || h.server_word_offset != l.server_word_offset ||
	    h.ports_offset != l.ports_offset || h.bulk_offset != l.bulk_offset || h.bulk_bytes != l.bulk_bytes ||
	    h.total_bytes != l.total_bytes || (uint64_t)st.st_size != l.total_bytes) {
		snprintf(msg, msglen, "the re-offered channel is %llu bytes, its layout does not match %u ports",
			 (unsigned long long)st.st_size, h.num_ports);
		return -EINVAL;
	}
	if (h.client_id != old_id) {
		snprintf(msg, msglen, "the re-offered channel belonged to client %u, not %u", h.client_id, old_id);
		return -EINVAL;
	}
	if (h.server_state != GPUSYS_SERVER_HANDOVER) {
		/* RUNNING: its daemon died without draining (kill -9, crash),
		 * or it is another live client's; STOPPED: it was ended. Either
		 * way no port can be served safely from the words alone. */
		snprintf(msg, msglen, "the re-offered channel was not handed over (server state %u)", h.server_state);
		return -EINVAL;
	}
	void *base = mmap(NULL, l.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		int e = errno;
		snprintf(msg, msglen, "cannot map the re-offered channel: %s", strerror(e));
		return -e;
	}
	/* Every other field zero (not handed over, no CUDA state), as a
	 * channel fresh from channel_create would have them. */
	*ch = (struct channel){ .ops = &channel_memfd_ops,
				.layout = l,
				.base = base,
				.bytes = l.total_bytes,
				.fd = fd,
				.num_ports = h.num_ports,
				.numa_node = -1 };
	return 0;
}
